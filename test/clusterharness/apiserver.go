package clusterharness

import (
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

var quietOnce sync.Once

// APIServer is envtest's kube-apiserver and etcd, holding the slot Leases,
// reached by each broker through a proxy of its own so that a test can cut
// one broker from the apiserver and nothing else.
type APIServer struct {
	env    *envtest.Environment
	cfg    *rest.Config
	host   string // the apiserver's host:port
	dir    string
	mu     sync.Mutex
	links  []*Proxy
	client *kubernetes.Clientset
}

// StartAPIServer starts envtest's control plane (binaries from
// KUBEBUILDER_ASSETS, as `make test` sets it) with n proxies in front of
// it, one per broker, and a kubeconfig file for each that names its
// proxy. Everything stops at t's cleanup.
func StartAPIServer(t testing.TB, n int) *APIServer {
	t.Helper()
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run `make test`, or export KUBEBUILDER_ASSETS=$(hack/envtest-assets.sh)")
	}
	// controller-runtime prints a stack trace when envtest logs before a
	// logger was set: give it one that writes nowhere.
	quietOnce.Do(func() { crlog.SetLogger(zap.New(zap.WriteTo(io.Discard))) })
	a := &APIServer{env: &envtest.Environment{}, dir: t.TempDir()}
	cfg, err := a.env.Start()
	if err != nil {
		t.Fatalf("starting envtest: %v", err)
	}
	t.Cleanup(func() {
		a.mu.Lock()
		for _, p := range a.links {
			p.Close()
		}
		a.mu.Unlock()
		if err := a.env.Stop(); err != nil {
			t.Errorf("stopping envtest: %v", err)
		}
	})
	a.cfg = cfg
	u, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatalf("envtest host %q: %v", cfg.Host, err)
	}
	a.host = u.Host
	direct := rest.CopyConfig(cfg)
	direct.QPS, direct.Burst = 200, 400
	if a.client, err = kubernetes.NewForConfig(direct); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		p, err := NewProxy(fmt.Sprintf("%s→apiserver", brokerName(i)), a.host)
		if err != nil {
			t.Fatal(err)
		}
		a.links = append(a.links, p)
		if err := a.writeKubeconfig(i); err != nil {
			t.Fatal(err)
		}
	}
	return a
}

// Link is broker i's link to the apiserver.
func (a *APIServer) Link(i int) *Proxy {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.links[i]
}

// Kubeconfig is the path of broker i's kubeconfig, which reaches the
// apiserver through Link(i).
func (a *APIServer) Kubeconfig(i int) string {
	return filepath.Join(a.dir, brokerName(i)+".kubeconfig")
}

// Client is a client of the apiserver that goes around every proxy, for a
// test that looks at the Leases while it cuts brokers off.
func (a *APIServer) Client() *kubernetes.Clientset { return a.client }

// Config is the direct rest.Config, around every proxy.
func (a *APIServer) Config() *rest.Config { return rest.CopyConfig(a.cfg) }

// writeKubeconfig writes broker i's kubeconfig: envtest's admin
// credentials and CA, the server being broker i's proxy. TLS passes
// through the proxy untouched; envtest's serving certificate names
// 127.0.0.1, so the proxy's port changes nothing to its validity.
func (a *APIServer) writeKubeconfig(i int) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{
		Server:                   "https://" + a.links[i].Addr(),
		CertificateAuthorityData: a.cfg.CAData,
	}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{
		ClientCertificateData: a.cfg.CertData,
		ClientKeyData:         a.cfg.KeyData,
		Token:                 a.cfg.BearerToken,
	}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin", Namespace: "default"}
	kc.CurrentContext = "envtest"
	return clientcmd.WriteToFile(*kc, a.Kubeconfig(i))
}

// rebind replaces every broker's proxy with one on a new port, keeping
// its mode, and rewrites the kubeconfigs: RestartAll moves every address.
func (a *APIServer) rebind() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, old := range a.links {
		p, err := NewProxy(old.Name(), a.host)
		if err != nil {
			return err
		}
		p.set(old.Mode(), -1)
		old.Close()
		a.links[i] = p
		if err := a.writeKubeconfig(i); err != nil {
			return err
		}
	}
	return nil
}
