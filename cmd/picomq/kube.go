package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
	"github.com/picomq/picomq/controllers/resources"
)

// PluginName is the base name kubectl looks for on $PATH to run
// `kubectl picomq`: a copy of (or a link to) this binary by that name runs
// in plugin mode.
const PluginName = "kubectl-picomq"

// pluginMode reports whether argv0 (os.Args[0]) names the kubectl plugin:
// kubectl-picomq, with any folder, and .exe on Windows.
func pluginMode(argv0 string) bool {
	base := filepath.Base(strings.ReplaceAll(argv0, `\`, "/"))
	base = strings.TrimSuffix(base, ".exe")
	return base == PluginName
}

// kubeFlags are kubectl's own flags for reaching a cluster, and the
// StreamCluster to resolve.
type kubeFlags struct {
	kubeconfig, context, namespace string
	cluster                        string
	forward                        bool
}

// kube is a StreamCluster resolved through the kubeconfig: its API
// clients, the object, and the credentials its brokers want.
type kube struct {
	rest   *rest.Config
	k      kubernetes.Interface
	c      ctrlclient.Client
	sc     *streamsv1alpha1.StreamCluster
	token  string      // bearer token to send ("" for none)
	tls    *tls.Config // nil: plain http
	errOut io.Writer
	// forward: reach brokers through port-forwards only (--port-forward).
	forward bool

	mu      sync.Mutex
	closers []func()
}

// usesKube reports whether the invocation resolves a StreamCluster
// through the kubeconfig rather than taking --server.
func (a *app) usesKube() bool { return a.plugin || a.kf.cluster != "" }

// kube resolves the invocation's StreamCluster once.
func (a *app) kube(ctx context.Context) (*kube, error) {
	if a.kubeResolved != nil {
		return a.kubeResolved, nil
	}
	kc, err := resolveKube(ctx, a.kf, a.token, a.errOut)
	if err != nil {
		return nil, err
	}
	a.kubeResolved = kc
	return kc, nil
}

// close stops the port-forwards the invocation opened.
func (k *kube) close() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, c := range k.closers {
		c()
	}
	k.closers = nil
}

func resolveKube(ctx context.Context, f kubeFlags, userToken string, errOut io.Writer) (*kube, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules() // honours $KUBECONFIG
	rules.ExplicitPath = f.kubeconfig
	overrides := &clientcmd.ConfigOverrides{CurrentContext: f.context}
	if f.namespace != "" {
		overrides.Context.Namespace = f.namespace
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, usagef("kubeconfig: %v", err)
	}
	ns, _, err := cc.Namespace()
	if err != nil {
		return nil, usagef("kubeconfig: %v", err)
	}
	cfg.QPS, cfg.Burst = 50, 100
	k, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	if err := streamsv1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	c, err := ctrlclient.New(cfg, ctrlclient.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	sc, err := findCluster(ctx, c, ns, f.cluster)
	if err != nil {
		return nil, err
	}
	kc := &kube{rest: cfg, k: k, c: c, sc: sc, token: userToken, errOut: errOut, forward: f.forward}
	if sc.Spec.TLS != nil {
		s, err := k.CoreV1().Secrets(ns).Get(ctx, sc.Spec.TLS.SecretName, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("StreamCluster %s/%s has TLS: reading its CA from Secret %s: %w", ns, sc.Name, sc.Spec.TLS.SecretName, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(s.Data[resources.CAKey]) {
			return nil, fmt.Errorf("Secret %s/%s has no PEM certificate in %s", ns, sc.Spec.TLS.SecretName, resources.CAKey)
		}
		kc.tls = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	if kc.token == "" && sc.Spec.Auth != nil {
		s, err := k.CoreV1().Secrets(ns).Get(ctx, resources.OperatorTokenSecretName(sc), metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("StreamCluster %s/%s checks tokens: reading the operator's admin token from Secret %s (or give --token): %w", ns, sc.Name, resources.OperatorTokenSecretName(sc), err)
		}
		admin, ok := strings.CutPrefix(strings.TrimSpace(string(s.Data[resources.OperatorTokenKey])), "admin:")
		if !ok || admin == "" {
			return nil, fmt.Errorf("Secret %s/%s has no admin token under %s", ns, resources.OperatorTokenSecretName(sc), resources.OperatorTokenKey)
		}
		kc.token = admin
	}
	return kc, nil
}

// findCluster is the StreamCluster named, or the namespace's only one.
func findCluster(ctx context.Context, c ctrlclient.Client, ns, name string) (*streamsv1alpha1.StreamCluster, error) {
	if name != "" {
		var sc streamsv1alpha1.StreamCluster
		if err := c.Get(ctx, ctrlclient.ObjectKey{Namespace: ns, Name: name}, &sc); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, exitError{code: exitNoInput, err: fmt.Errorf("no StreamCluster %s in namespace %s", name, ns)}
			}
			return nil, err
		}
		return &sc, nil
	}
	var list streamsv1alpha1.StreamClusterList
	if err := c.List(ctx, &list, ctrlclient.InNamespace(ns)); err != nil {
		return nil, err
	}
	switch len(list.Items) {
	case 1:
		return &list.Items[0], nil
	case 0:
		return nil, exitError{code: exitNoInput, err: fmt.Errorf("no StreamCluster in namespace %s (-n to choose another)", ns)}
	}
	names := make([]string, 0, len(list.Items))
	for _, s := range list.Items {
		names = append(names, s.Name)
	}
	return nil, usagef("namespace %s has %d StreamClusters (%s): name one with --cluster", ns, len(names), strings.Join(names, ", "))
}

// brokerPodName is the pod a BROKER argument names: a pod name of the
// cluster (demo-1), or its ordinal (1).
func brokerPodName(cluster, arg string) (string, error) {
	if n, err := strconv.Atoi(arg); err == nil {
		if n < 0 {
			return "", usagef("broker %q: an ordinal is 0 or more", arg)
		}
		return cluster + "-" + arg, nil
	}
	if rest, ok := strings.CutPrefix(arg, cluster+"-"); ok {
		if n, err := strconv.Atoi(rest); err == nil && n >= 0 && strconv.Itoa(n) == rest {
			return arg, nil
		}
	}
	return "", usagef("broker %q: want a pod of StreamCluster %s (%s-N) or its ordinal N", arg, cluster, cluster)
}

// brokerOrdinal orders pod names by ordinal.
var ordinalRE = regexp.MustCompile(`-(\d+)$`)

func brokerOrdinal(pod string) int {
	m := ordinalRE.FindStringSubmatch(pod)
	if m == nil {
		return -1
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// pods are the cluster's broker pods, by ordinal.
func (k *kube) pods(ctx context.Context) ([]corev1.Pod, error) {
	list, err := k.k.CoreV1().Pods(k.sc.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(resources.SelectorLabels(k.sc)).String(),
	})
	if err != nil {
		return nil, err
	}
	pods := list.Items
	slices.SortFunc(pods, func(a, b corev1.Pod) int { return brokerOrdinal(a.Name) - brokerOrdinal(b.Name) })
	return pods, nil
}

// endpoint is a broker reached: its base URL and how to talk to it.
type endpoint struct {
	URL   string
	Name  string // the host name its certificate covers
	Via   string // how it was reached: "direct" or "port-forward"
	tls   *tls.Config
	token string
}

// tlsConfig is the TLS configuration verifying the endpoint (nil: http).
func (e endpoint) tlsConfig() *tls.Config {
	if e.tls == nil {
		return nil
	}
	c := e.tls.Clone()
	c.ServerName = e.Name
	return c
}

// httpClient is a plain client of the endpoint (admin calls, /metrics).
func (e endpoint) httpClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		TLSClientConfig:   e.tlsConfig(),
		ForceAttemptHTTP2: e.tls != nil,
		DialContext:       (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
	}}
}

// do sends one request and returns the answer's status and body.
func (e endpoint) do(ctx context.Context, method, path string, body io.Reader) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, e.URL+path, body)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if e.token != "" {
		req.Header.Set("Authorization", "Bearer "+e.token)
	}
	hc := e.httpClient()
	defer hc.CloseIdleConnections()
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	return resp.StatusCode, data, err
}

// reachable reports whether a TCP connection to addr opens quickly.
func reachable(ctx context.Context, addr string) bool {
	d := net.Dialer{Timeout: 1500 * time.Millisecond}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}

func (k *kube) scheme() string {
	if k.tls != nil {
		return "https"
	}
	return "http"
}

// service reaches the cluster: the client Service's ClusterIP when this
// machine routes to it, else any ready broker pod.
func (k *kube) service(ctx context.Context) (endpoint, error) {
	name := resources.ClientServiceName(k.sc) + "." + k.sc.Namespace + ".svc"
	svc, err := k.k.CoreV1().Services(k.sc.Namespace).Get(ctx, resources.ClientServiceName(k.sc), metav1.GetOptions{})
	if err == nil && !k.forward && svc.Spec.ClusterIP != "" && svc.Spec.ClusterIP != corev1.ClusterIPNone {
		port := streamsv1alpha1.DefaultClientPort
		for _, p := range svc.Spec.Ports {
			if p.Name == resources.ClientPortName {
				port = p.Port
			}
		}
		addr := net.JoinHostPort(svc.Spec.ClusterIP, strconv.Itoa(int(port)))
		if reachable(ctx, addr) {
			return endpoint{URL: k.scheme() + "://" + addr, Name: name, Via: "direct", tls: k.tls, token: k.token}, nil
		}
	}
	pods, err := k.pods(ctx)
	if err != nil {
		return endpoint{}, err
	}
	// Ready pods first: a broker that is not ready may route nothing.
	slices.SortStableFunc(pods, func(a, b corev1.Pod) int {
		ra, rb := podIsReady(&a), podIsReady(&b)
		switch {
		case ra == rb:
			return 0
		case ra:
			return -1
		}
		return 1
	})
	var errs []string
	for i := range pods {
		e, err := k.pod(ctx, &pods[i])
		if err == nil {
			e.Name = name // every certificate covers the Service's name too
			return e, nil
		}
		errs = append(errs, err.Error())
	}
	if len(pods) == 0 {
		return endpoint{}, exitError{code: exitUnavailable, err: fmt.Errorf("StreamCluster %s/%s: its Service is not reachable from here and it has no broker pods", k.sc.Namespace, k.sc.Name)}
	}
	return endpoint{}, exitError{code: exitUnavailable, err: fmt.Errorf("StreamCluster %s/%s: no broker reachable: %s", k.sc.Namespace, k.sc.Name, strings.Join(errs, "; "))}
}

func podIsReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue && p.DeletionTimestamp == nil
		}
	}
	return false
}

// brokerPod is the broker pod named, reached.
func (k *kube) brokerPod(ctx context.Context, name string) (endpoint, error) {
	p, err := k.k.CoreV1().Pods(k.sc.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return endpoint{}, exitError{code: exitNoInput, err: fmt.Errorf("no broker pod %s in namespace %s", name, k.sc.Namespace)}
		}
		return endpoint{}, err
	}
	return k.pod(ctx, p)
}

// pod reaches one broker pod: at its address when this machine routes to
// the pod network (the dev stack, a flat network), else through a
// port-forward by the API server.
func (k *kube) pod(ctx context.Context, p *corev1.Pod) (endpoint, error) {
	name := p.Name + "." + resources.HeadlessServiceName(k.sc) + "." + k.sc.Namespace + ".svc"
	port := int(resources.ClientPort)
	if p.Status.PodIP != "" && !k.forward {
		addr := net.JoinHostPort(p.Status.PodIP, strconv.Itoa(port))
		if reachable(ctx, addr) {
			return endpoint{URL: k.scheme() + "://" + addr, Name: name, Via: "direct", tls: k.tls, token: k.token}, nil
		}
	}
	if p.Status.Phase != corev1.PodRunning {
		return endpoint{}, fmt.Errorf("pod %s is %s", p.Name, p.Status.Phase)
	}
	local, stop, err := k.portForward(ctx, k.sc.Namespace, p.Name, port)
	if err != nil {
		return endpoint{}, fmt.Errorf("pod %s: its address %s is not reachable from here and the port-forward failed (%v): a node agent without port-forward (the dev stack's) needs this machine to route to the pod network", p.Name, orDash(p.Status.PodIP), err)
	}
	k.mu.Lock()
	k.closers = append(k.closers, stop)
	k.mu.Unlock()
	return endpoint{URL: k.scheme() + "://127.0.0.1:" + strconv.Itoa(local), Name: name, Via: "port-forward", tls: k.tls, token: k.token}, nil
}

// portForward forwards a local port to the pod's port through the API
// server (websocket, falling back to SPDY), returning the local port.
func (k *kube) portForward(ctx context.Context, ns, pod string, port int) (int, func(), error) {
	u := k.k.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("portforward").URL()
	transport, upgrader, err := spdy.RoundTripperFor(k.rest)
	if err != nil {
		return 0, nil, err
	}
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, u)
	if ws, err := portforward.NewSPDYOverWebsocketDialer(u, k.rest); err == nil {
		dialer = portforward.NewFallbackDialer(ws, dialer, func(err error) bool { return true })
	}
	stop, ready := make(chan struct{}), make(chan struct{})
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{"0:" + strconv.Itoa(port)}, stop, ready, io.Discard, io.Discard)
	if err != nil {
		return 0, nil, err
	}
	done := make(chan error, 1)
	go func() { done <- fw.ForwardPorts() }()
	var once sync.Once
	closeIt := func() { once.Do(func() { close(stop) }) }
	select {
	case <-ready:
	case err := <-done:
		closeIt()
		if err == nil {
			err = fmt.Errorf("the port-forward ended at once")
		}
		return 0, nil, err
	case <-time.After(15 * time.Second):
		closeIt()
		return 0, nil, fmt.Errorf("no port-forward within 15s")
	case <-ctx.Done():
		closeIt()
		return 0, nil, ctx.Err()
	}
	ports, err := fw.GetPorts()
	if err != nil || len(ports) == 0 {
		closeIt()
		return 0, nil, fmt.Errorf("the port-forward has no local port: %v", err)
	}
	// The upgrade happens at the first connection: try one, so that a node
	// that does not forward is found now, not at the first request.
	if err := probeForward(ctx, int(ports[0].Local), done); err != nil {
		closeIt()
		return 0, nil, err
	}
	return int(ports[0].Local), closeIt, nil
}

// probeForward opens one connection through the forward and sends a
// request; a forward that does not work closes it without an answer.
func probeForward(ctx context.Context, local int, done <-chan error) error {
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:"+strconv.Itoa(local)+"/healthz", nil)
	resp, err := hc.Do(req)
	if err == nil {
		resp.Body.Close()
		return nil
	}
	select {
	case ferr := <-done:
		if ferr != nil {
			return ferr
		}
	default:
	}
	// A TLS broker answers a plain request with 400, not an error: an
	// error here is the forward's.
	var uerr *url.Error
	if ok := asURLError(err, &uerr); ok {
		return fmt.Errorf("the port-forward opened but carries nothing: %v", uerr.Err)
	}
	return err
}

func asURLError(err error, target **url.Error) bool {
	u, ok := err.(*url.Error)
	if ok {
		*target = u
	}
	return ok
}
