// Package controlplane runs a real Kubernetes control plane on this machine
// for the local stack (issue 20: `picomq dev`): etcd, kube-apiserver,
// kube-controller-manager and kube-scheduler as processes, from the
// binaries hack/controlplane-assets.sh builds, with the certificates,
// service-account keys and flags they need generated here.
//
// Every component listens on 127.0.0.1 only, but the API server, which
// listens on Options.Address (the pod network's host address in the stack). The components share one admin
// client certificate (system:masters), as a single-user development cluster
// may; the API server authorizes with Node and RBAC as a real one does.
package controlplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// DefaultServiceCIDR is the service range unless Options.ServiceCIDR
// says; its first address is the "kubernetes" Service.
const DefaultServiceCIDR = "10.0.0.0/24"

// Options configure Start.
type Options struct {
	// Dir holds the stack's state: certificates, etcd's data, kubeconfig,
	// and each component's log (Dir/logs/<component>.log).
	Dir string
	// BinDir holds etcd, kube-apiserver, kube-controller-manager and
	// kube-scheduler (what hack/controlplane-assets.sh prints).
	BinDir string
	// Address is the API server's address ("127.0.0.1" if empty): the
	// local stack's pods reach it on the pod network's host address.
	// etcd and the other components stay on 127.0.0.1.
	Address string
	// ServiceCIDR is the Services' ClusterIP range (DefaultServiceCIDR if
	// empty).
	ServiceCIDR string
	// ReadyTimeout bounds the wait for the API server's /readyz (default
	// one minute: it takes ~12 s here).
	ReadyTimeout time.Duration
}

// ControlPlane is a running control plane.
type ControlPlane struct {
	// Kubeconfig is the admin kubeconfig's path; Server the API server's URL.
	Kubeconfig string
	Server     string

	dir   string
	procs []*exec.Cmd // in start order
}

// Start generates what the components need in o.Dir and starts them, in
// dependency order, returning once the API server is ready and the
// controller manager and scheduler are running. On failure everything
// started is stopped, and the error names the component and its log.
func Start(ctx context.Context, o Options) (*ControlPlane, error) {
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = time.Minute
	}
	for _, bin := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		if _, err := os.Stat(filepath.Join(o.BinDir, bin)); err != nil {
			return nil, fmt.Errorf("controlplane: no %s in %q (hack/controlplane-assets.sh builds the four): %w", bin, o.BinDir, err)
		}
	}
	if err := os.MkdirAll(filepath.Join(o.Dir, "logs"), 0o700); err != nil {
		return nil, err
	}
	if o.Address == "" {
		o.Address = "127.0.0.1"
	}
	addr := net.ParseIP(o.Address)
	if addr == nil {
		return nil, fmt.Errorf("controlplane: address %q is not an IP address", o.Address)
	}
	if o.ServiceCIDR == "" {
		o.ServiceCIDR = DefaultServiceCIDR
	}
	services, err := netip.ParsePrefix(o.ServiceCIDR)
	if err != nil {
		return nil, fmt.Errorf("controlplane: service range: %w", err)
	}
	p, err := loadOrWritePKI(filepath.Join(o.Dir, "pki"), addr, net.IP(services.Masked().Addr().Next().AsSlice()))
	if err != nil {
		return nil, fmt.Errorf("controlplane: certificates: %w", err)
	}
	ports, err := freePorts(5)
	if err != nil {
		return nil, err
	}
	etcdClient, etcdPeer, apiPort, cmPort, schedPort := ports[0], ports[1], ports[2], ports[3], ports[4]
	cp := &ControlPlane{dir: o.Dir, Server: "https://" + net.JoinHostPort(o.Address, strconv.Itoa(apiPort))}
	cp.Kubeconfig = filepath.Join(o.Dir, "kubeconfig")
	if err := writeKubeconfig(cp.Kubeconfig, cp.Server, p); err != nil {
		return nil, err
	}
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(etcdClient)
	start := func(name string, args ...string) error {
		logf, err := os.OpenFile(filepath.Join(o.Dir, "logs", name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return err
		}
		cmd := exec.Command(filepath.Join(o.BinDir, name), args...)
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		err = cmd.Start()
		logf.Close()
		if err != nil {
			return fmt.Errorf("controlplane: start %s: %w", name, err)
		}
		cp.procs = append(cp.procs, cmd)
		return nil
	}
	fail := func(err error) (*ControlPlane, error) {
		cp.Stop()
		return nil, err
	}
	if err := start("etcd",
		"--data-dir", filepath.Join(o.Dir, "etcd"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", "http://127.0.0.1:"+strconv.Itoa(etcdPeer),
		"--initial-advertise-peer-urls", "http://127.0.0.1:"+strconv.Itoa(etcdPeer),
		"--initial-cluster", "default=http://127.0.0.1:"+strconv.Itoa(etcdPeer),
		"--unsafe-no-fsync", // a development stack: speed over surviving a power cut
	); err != nil {
		return fail(err)
	}
	if err := start("kube-apiserver",
		"--etcd-servers", etcdURL,
		"--bind-address", o.Address, "--advertise-address", o.Address,
		"--secure-port", strconv.Itoa(apiPort),
		"--tls-cert-file", p.path(serverCert), "--tls-private-key-file", p.path(serverKey),
		"--client-ca-file", p.path(caCert),
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", p.path(saPublicKey),
		"--service-account-signing-key-file", p.path(saKey),
		"--service-cluster-ip-range", o.ServiceCIDR,
		"--authorization-mode", "Node,RBAC",
		// A loopback advertise address makes the endpoint reconciler fail,
		// and the stack's pods reach the API server at its own address, not
		// through the kubernetes Service (no kube-proxy here).
		"--endpoint-reconciler-type", "none",
		"--allow-privileged",
	); err != nil {
		return fail(err)
	}
	if err := waitReady(ctx, cp.Server, p, o.ReadyTimeout); err != nil {
		return fail(fmt.Errorf("controlplane: kube-apiserver not ready (log %s): %w", filepath.Join(o.Dir, "logs", "kube-apiserver.log"), err))
	}
	if err := start("kube-controller-manager",
		"--kubeconfig", cp.Kubeconfig,
		"--authentication-kubeconfig", cp.Kubeconfig, "--authorization-kubeconfig", cp.Kubeconfig,
		"--bind-address", "127.0.0.1", "--secure-port", strconv.Itoa(cmPort),
		"--leader-elect=false", "--controllers", "*",
		"--use-service-account-credentials=false",
		"--service-account-private-key-file", p.path(saKey),
		"--root-ca-file", p.path(caCert),
		"--cluster-signing-cert-file", p.path(caCert), "--cluster-signing-key-file", p.path(caKey),
		"--service-cluster-ip-range", o.ServiceCIDR,
	); err != nil {
		return fail(err)
	}
	if err := start("kube-scheduler",
		"--kubeconfig", cp.Kubeconfig,
		"--authentication-kubeconfig", cp.Kubeconfig, "--authorization-kubeconfig", cp.Kubeconfig,
		"--bind-address", "127.0.0.1", "--secure-port", strconv.Itoa(schedPort),
		"--leader-elect=false",
	); err != nil {
		return fail(err)
	}
	return cp, nil
}

// Stop ends the components in reverse order: SIGTERM, then SIGKILL after
// ten seconds.
func (cp *ControlPlane) Stop() {
	for i := len(cp.procs) - 1; i >= 0; i-- {
		cmd := cp.procs[i]
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	}
	cp.procs = nil
}

// freePorts returns n loopback ports that were free a moment ago (the
// components bind them themselves).
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l) // held until all are chosen, so that none repeats
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// waitReady polls the API server's /readyz with the admin certificate.
func waitReady(ctx context.Context, server string, p pki, timeout time.Duration) error {
	cfg, err := p.clientTLS()
	if err != nil {
		return err
	}
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
	defer hc.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error = errors.New("no answer yet")
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, server+"/readyz", nil)
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Errorf("/readyz answered %s", resp.Status)
		} else {
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("after %s: %w", timeout, last)
		case <-time.After(250 * time.Millisecond): // the API server's readiness has no watch to wait on
		}
	}
}

func (p pki) clientTLS() (*tls.Config, error) {
	pair, err := tls.LoadX509KeyPair(p.path(adminCert), p.path(adminKey))
	if err != nil {
		return nil, err
	}
	caPEM, err := os.ReadFile(p.path(caCert))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	return &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// writeKubeconfig writes the admin kubeconfig every component and kubectl
// use.
func writeKubeconfig(path, server string, p pki) error {
	config := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: picomq-dev
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: admin
  user:
    client-certificate: %s
    client-key: %s
contexts:
- name: picomq-dev
  context: {cluster: picomq-dev, user: admin}
current-context: picomq-dev
`, server, p.path(caCert), p.path(adminCert), p.path(adminKey))
	return os.WriteFile(path, []byte(config), 0o600)
}
