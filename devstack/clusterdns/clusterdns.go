// Package clusterdns is the local stack's stand-in for cluster DNS
// (CoreDNS/kube-dns). The local stack runs a real kube-apiserver but no
// kubelet and no CoreDNS: a node agent runs pods as local processes, each
// with its own non-loopback IP (198.18.x.y). The programs in it (brokers,
// the operator) still resolve Kubernetes names, exactly as they would in a
// cluster, and this package's DNS server answers them.
//
// It answers from in-memory views of Pods and Services (the agent's
// informers' listers in the stack, fakes in tests) and derives every
// record from those two kinds alone; no Endpoints or EndpointSlices are
// needed. The names it answers follow the Kubernetes DNS specification
// (https://github.com/kubernetes/dns/blob/master/docs/specification.md),
// each with or without the cluster domain (default "cluster.local"), so
// that both search-domain lookups and absolute names such as
// "broker-0.picomq-headless.default.svc." work:
//
//   - <svc>.<ns>.svc: a Service with a ClusterIP answers its ClusterIP(s).
//     A headless Service (ClusterIP "None") answers the IPs of the pods in
//     <ns> that its spec.selector selects: every such pod with an IP when
//     spec.publishNotReadyAddresses is set, otherwise only pods whose Ready
//     condition is True and that are not terminating (as the endpoints
//     controller would publish them). A headless Service without a selector
//     answers nothing (its endpoints would be managed by hand, and are not
//     read here). An ExternalName Service answers a CNAME to its
//     spec.externalName (not followed).
//   - <hostname>.<subdomain>.<ns>.svc: the pods in <ns> whose spec.hostname
//     (or metadata.name, when spec.hostname is empty) and spec.subdomain
//     match, e.g. StatefulSet pods behind their governing headless Service.
//     Unlike kube-dns, which publishes these names from Endpoints, this
//     server publishes every such pod that has an IP, whether ready or not
//     and whether terminating or not (a StatefulSet pod being deleted stops
//     resolving once it is gone), and it does not require a headless Service
//     named <subdomain> to exist. That is what kube-dns does for headless
//     Services with publishNotReadyAddresses, which the operator's are.
//   - <a-b-c-d>.<ns>.pod (or a dashed IPv6 address): that address, whether or
//     not a pod has it (CoreDNS's "pods insecure", the kubeadm default).
//
// A records carry IPv4 addresses and AAAA records IPv6 ones; a query of
// type ANY gets both. Pods in phase Succeeded or Failed are never published
// (their IPs may be reused). Names are matched case-insensitively.
//
// Names inside the cluster domain or the svc and pod zones that do not
// exist get NXDOMAIN; names that exist but have no record of the asked type
// get an empty NOERROR answer (NODATA); both are authoritative. Names
// outside those zones get REFUSED: the local stack has no internet and
// there is no upstream to forward to. Only the first question of a message
// is answered, as most servers do.
package clusterdns

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"syscall"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
)

// Source is what the server answers from (the agent's informers' listers in
// the stack; fakes in tests). The server calls it on every query and does
// not modify what it returns.
type Source interface {
	Pods() []*corev1.Pod
	Services() []*corev1.Service
}

// Options configures a Server.
type Options struct {
	// Domain is the cluster domain; "cluster.local" when empty.
	Domain string
	// TTL is the TTL, in seconds, of every record served; 5 when zero.
	TTL uint32
}

// Server is a DNS server answering Kubernetes names from a Source.
type Server struct {
	src    Source
	domain string // lower case, no leading or trailing dot
	ttl    uint32
}

// New returns a server answering from src.
func New(src Source, opts Options) *Server {
	domain := strings.Trim(strings.ToLower(opts.Domain), ".")
	if domain == "" {
		domain = "cluster.local"
	}
	ttl := opts.TTL
	if ttl == 0 {
		ttl = 5
	}
	return &Server{src: src, domain: domain, ttl: ttl}
}

// Serve listens on addr (e.g. "198.18.0.2:53" or "127.0.0.1:0") over UDP
// and TCP, and serves DNS on both until ctx ends, when it closes both. It
// returns once both are listening, with the addresses they listen on. When
// addr's port is 0, it tries to give both the same port, so that a client
// retrying a truncated UDP answer over TCP finds the server at the same
// address; the returned addresses say which ports they got.
func (s *Server) Serve(ctx context.Context, addr string) (udp, tcp net.Addr, err error) {
	pc, ln, err := listen(addr)
	if err != nil {
		return nil, nil, err
	}
	servers := []*dns.Server{
		{PacketConn: pc, Net: "udp", Handler: s, MsgAcceptFunc: acceptMsg},
		{Listener: ln, Net: "tcp", Handler: s, MsgAcceptFunc: acceptMsg},
	}
	for i, srv := range servers {
		started := make(chan struct{})
		failed := make(chan error, 1)
		srv.NotifyStartedFunc = func() { close(started) }
		go func() { failed <- srv.ActivateAndServe() }()
		select {
		case <-started:
		case err := <-failed:
			for _, running := range servers[:i] {
				_ = running.Shutdown()
			}
			pc.Close()
			ln.Close()
			return nil, nil, fmt.Errorf("clusterdns: serve %s: %w", srv.Net, err)
		}
	}
	go func() {
		<-ctx.Done()
		for _, srv := range servers {
			_ = srv.Shutdown()
		}
	}()
	return pc.LocalAddr(), ln.Addr(), nil
}

// listen opens the UDP and TCP sockets for addr, on one port if it can.
func listen(addr string) (net.PacketConn, net.Listener, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, nil, fmt.Errorf("clusterdns: %w", err)
	}
	const attempts = 10
	for i := 0; ; i++ {
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			return nil, nil, fmt.Errorf("clusterdns: %w", err)
		}
		tcpAddr := addr
		if port == "0" || port == "" {
			tcpAddr = net.JoinHostPort(host, fmt.Sprint(pc.LocalAddr().(*net.UDPAddr).Port))
		}
		ln, err := net.Listen("tcp", tcpAddr)
		if err == nil {
			return pc, ln, nil
		}
		pc.Close()
		if tcpAddr == addr || !errors.Is(err, syscall.EADDRINUSE) || i == attempts-1 {
			return nil, nil, fmt.Errorf("clusterdns: %w", err)
		}
		// The UDP port we were given is taken over TCP: try another.
	}
}

// acceptMsg is dns.DefaultMsgAcceptFunc, except that it accepts queries with
// more than one question (the first is answered).
func acceptMsg(dh dns.Header) dns.MsgAcceptAction {
	const qr = 1 << 15
	if dh.Bits&qr != 0 {
		return dns.MsgIgnore
	}
	if opcode := int(dh.Bits>>11) & 0xF; opcode != dns.OpcodeQuery {
		return dns.MsgRejectNotImplemented
	}
	if dh.Qdcount == 0 || dh.Ancount > 0 || dh.Nscount > 0 || dh.Arcount > 2 {
		return dns.MsgReject
	}
	return dns.MsgAccept
}

// ednsUDPSize is the UDP payload size the server advertises (the DNS flag
// day 2020 recommendation).
const ednsUDPSize = 1232

// ServeDNS answers the first question of r.
func (s *Server) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(r) // keeps the first question only
	switch {
	case r.Opcode != dns.OpcodeQuery:
		m.Rcode = dns.RcodeNotImplemented
	case len(r.Question) == 0:
		m.Rcode = dns.RcodeFormatError
	default:
		m.Answer, m.Rcode = s.Answer(r.Question[0])
		m.Authoritative = m.Rcode != dns.RcodeRefused
	}
	size := dns.MinMsgSize
	if opt := r.IsEdns0(); opt != nil {
		size = max(int(opt.UDPSize()), dns.MinMsgSize)
		m.SetEdns0(ednsUDPSize, false)
	}
	if _, ok := w.RemoteAddr().(*net.UDPAddr); ok {
		m.Truncate(size)
	} else {
		m.Truncate(dns.MaxMsgSize)
	}
	_ = w.WriteMsg(m)
}

// Answer answers one question: the records to return and the response
// code. It only reads the Source. Questions of a class other than IN (or
// ANY) are refused.
func (s *Server) Answer(q dns.Question) (answers []dns.RR, rcode int) {
	if q.Qclass != dns.ClassINET && q.Qclass != dns.ClassANY {
		return nil, dns.RcodeRefused
	}
	rel, ok := s.relative(q.Name)
	if !ok {
		return nil, dns.RcodeRefused
	}
	r, exists := s.lookup(rel)
	if !exists {
		return nil, dns.RcodeNameError
	}
	return r.rrs(dns.Fqdn(q.Name), q.Qtype, s.ttl), dns.RcodeSuccess
}

// relative returns name's labels below the cluster domain, lower case and
// most significant first ("svc", ns, svc): nil for the cluster domain
// itself. Names without the domain count when they end in "svc" or "pod";
// ok is false for names outside the server's zones.
func (s *Server) relative(name string) (labels []string, ok bool) {
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	switch {
	case name == s.domain:
		return nil, true
	case strings.HasSuffix(name, "."+s.domain):
		name = strings.TrimSuffix(name, "."+s.domain)
		ok = true
	}
	if name == "" {
		return nil, ok
	}
	labels = strings.Split(name, ".")
	slices.Reverse(labels)
	if !ok && labels[0] != "svc" && labels[0] != "pod" {
		return nil, false
	}
	return labels, true
}

// records is what a name that exists has.
type records struct {
	addrs []netip.Addr
	cname string
}

func (r records) rrs(name string, qtype uint16, ttl uint32) []dns.RR {
	if r.cname != "" {
		return []dns.RR{&dns.CNAME{
			Hdr:    dns.RR_Header{Name: name, Rrtype: dns.TypeCNAME, Class: dns.ClassINET, Ttl: ttl},
			Target: r.cname,
		}}
	}
	var rrs []dns.RR
	for _, a := range r.addrs {
		switch {
		case a.Is4() && (qtype == dns.TypeA || qtype == dns.TypeANY):
			rrs = append(rrs, &dns.A{
				Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: ttl},
				A:   a.AsSlice(),
			})
		case a.Is6() && (qtype == dns.TypeAAAA || qtype == dns.TypeANY):
			rrs = append(rrs, &dns.AAAA{
				Hdr:  dns.RR_Header{Name: name, Rrtype: dns.TypeAAAA, Class: dns.ClassINET, Ttl: ttl},
				AAAA: a.AsSlice(),
			})
		}
	}
	return rrs
}

// lookup finds the records of the name with the given relative labels, and
// whether the name exists (a name with no records but with names below it,
// such as "<ns>.svc", exists).
func (s *Server) lookup(labels []string) (records, bool) {
	if len(labels) == 0 {
		return records{}, true // the cluster domain
	}
	switch labels[0] {
	case "svc":
		return s.lookupSvc(labels[1:])
	case "pod":
		return s.lookupPod(labels[1:])
	}
	return records{}, false
}

func (s *Server) lookupSvc(labels []string) (records, bool) {
	switch len(labels) {
	case 0:
		return records{}, true
	case 1: // <ns>.svc
		return records{}, s.namespaceExists(labels[0])
	case 2: // <svc>.<ns>.svc
		ns, name := labels[0], labels[1]
		for _, svc := range s.src.Services() {
			if strings.EqualFold(svc.Namespace, ns) && strings.EqualFold(svc.Name, name) {
				return s.serviceRecords(svc), true
			}
		}
		// Pods with this subdomain make it an empty non-terminal.
		for _, pod := range s.src.Pods() {
			if strings.EqualFold(pod.Namespace, ns) && strings.EqualFold(pod.Spec.Subdomain, name) && published(pod) {
				return records{}, true
			}
		}
		return records{}, false
	case 3: // <hostname>.<subdomain>.<ns>.svc
		ns, subdomain, hostname := labels[0], labels[1], labels[2]
		var addrs []netip.Addr
		for _, pod := range s.src.Pods() {
			podHostname := cmp.Or(pod.Spec.Hostname, pod.Name)
			if strings.EqualFold(pod.Namespace, ns) && strings.EqualFold(pod.Spec.Subdomain, subdomain) &&
				strings.EqualFold(podHostname, hostname) && published(pod) {
				addrs = append(addrs, podAddrs(pod)...)
			}
		}
		if len(addrs) == 0 {
			return records{}, false
		}
		return records{addrs: sortAddrs(addrs)}, true
	}
	return records{}, false
}

func (s *Server) lookupPod(labels []string) (records, bool) {
	switch len(labels) {
	case 0:
		return records{}, true
	case 1: // <ns>.pod
		return records{}, s.namespaceExists(labels[0])
	case 2: // <dashed-ip>.<ns>.pod
		if a, ok := parseDashed(labels[1]); ok {
			return records{addrs: []netip.Addr{a}}, true
		}
	}
	return records{}, false
}

// namespaceExists reports whether any pod or service is in ns (the server
// does not see Namespaces).
func (s *Server) namespaceExists(ns string) bool {
	for _, svc := range s.src.Services() {
		if strings.EqualFold(svc.Namespace, ns) {
			return true
		}
	}
	for _, pod := range s.src.Pods() {
		if strings.EqualFold(pod.Namespace, ns) {
			return true
		}
	}
	return false
}

func (s *Server) serviceRecords(svc *corev1.Service) records {
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		if svc.Spec.ExternalName == "" {
			return records{}
		}
		return records{cname: dns.Fqdn(svc.Spec.ExternalName)}
	}
	if svc.Spec.ClusterIP != corev1.ClusterIPNone {
		ips := svc.Spec.ClusterIPs
		if len(ips) == 0 && svc.Spec.ClusterIP != "" {
			ips = []string{svc.Spec.ClusterIP}
		}
		return records{addrs: parseAddrs(ips)}
	}
	if len(svc.Spec.Selector) == 0 {
		return records{}
	}
	var addrs []netip.Addr
	for _, pod := range s.src.Pods() {
		if !strings.EqualFold(pod.Namespace, svc.Namespace) || !published(pod) || !selects(svc.Spec.Selector, pod.Labels) {
			continue
		}
		if !svc.Spec.PublishNotReadyAddresses && (pod.DeletionTimestamp != nil || !podReady(pod)) {
			continue
		}
		addrs = append(addrs, podAddrs(pod)...)
	}
	return records{addrs: sortAddrs(addrs)}
}

// published reports whether pod's addresses may be published at all: it
// has an IP and has not finished (a finished pod's IP may be reused).
func published(pod *corev1.Pod) bool {
	return pod.Status.PodIP != "" && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func selects(selector, labels map[string]string) bool {
	for k, v := range selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

func podAddrs(pod *corev1.Pod) []netip.Addr {
	ips := make([]string, 0, max(1, len(pod.Status.PodIPs)))
	for _, ip := range pod.Status.PodIPs {
		ips = append(ips, ip.IP)
	}
	if len(ips) == 0 {
		ips = append(ips, pod.Status.PodIP)
	}
	return parseAddrs(ips)
}

// parseAddrs parses ips, skipping any that do not parse.
func parseAddrs(ips []string) []netip.Addr {
	var addrs []netip.Addr
	for _, ip := range ips {
		if a, err := netip.ParseAddr(ip); err == nil && a.Zone() == "" {
			addrs = append(addrs, a.Unmap())
		}
	}
	return addrs
}

func sortAddrs(addrs []netip.Addr) []netip.Addr {
	slices.SortFunc(addrs, netip.Addr.Compare)
	return slices.Compact(addrs)
}

// parseDashed parses a pod DNS label: an IPv4 address with dashes for dots
// (198-18-1-5) or an IPv6 one with dashes for colons (fd00--1).
func parseDashed(label string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(strings.ReplaceAll(label, "-", ".")); err == nil && a.Is4() {
		return a, true
	}
	if a, err := netip.ParseAddr(strings.ReplaceAll(label, "-", ":")); err == nil && a.Is6() && !a.Is4In6() && a.Zone() == "" {
		return a, true
	}
	return netip.Addr{}, false
}
