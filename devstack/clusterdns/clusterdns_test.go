package clusterdns

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

type fakeSource struct {
	pods     []*corev1.Pod
	services []*corev1.Service
}

func (f *fakeSource) Pods() []*corev1.Pod         { return f.pods }
func (f *fakeSource) Services() []*corev1.Service { return f.services }

type podOpt func(*corev1.Pod)

func pod(ns, name string, ips []string, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if len(ips) > 0 {
		p.Status.PodIP = ips[0]
		for _, ip := range ips {
			p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
		}
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func hostname(h, subdomain string) podOpt {
	return func(p *corev1.Pod) { p.Spec.Hostname, p.Spec.Subdomain = h, subdomain }
}

func subdomain(sub string) podOpt { return func(p *corev1.Pod) { p.Spec.Subdomain = sub } }

func labels(kv ...string) podOpt {
	return func(p *corev1.Pod) {
		p.Labels = map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			p.Labels[kv[i]] = kv[i+1]
		}
	}
}

func ready(status corev1.ConditionStatus) podOpt {
	return func(p *corev1.Pod) {
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: status})
	}
}

func terminating(p *corev1.Pod) {
	now := metav1.Now()
	p.DeletionTimestamp = &now
}

func phase(ph corev1.PodPhase) podOpt { return func(p *corev1.Pod) { p.Status.Phase = ph } }

func headless(ns, name string, publishNotReady bool, selector map[string]string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{
			ClusterIP:                corev1.ClusterIPNone,
			ClusterIPs:               []string{corev1.ClusterIPNone},
			Selector:                 selector,
			PublishNotReadyAddresses: publishNotReady,
		},
	}
}

func clusterIP(ns, name string, ips ...string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.ServiceSpec{ClusterIP: ips[0], ClusterIPs: ips, Selector: map[string]string{"app": "picomq"}},
	}
}

func testSource() *fakeSource {
	app := labels("app", "picomq")
	return &fakeSource{
		pods: []*corev1.Pod{
			// StatefulSet pods behind the headless Service "headless".
			pod("default", "broker-0", []string{"198.18.1.5"}, hostname("broker-0", "headless"), app, ready(corev1.ConditionTrue)),
			pod("default", "broker-1", []string{"198.18.1.6"}, hostname("broker-1", "headless"), app, ready(corev1.ConditionFalse)),
			pod("default", "broker-2", []string{"198.18.1.7"}, hostname("broker-2", "headless"), app, ready(corev1.ConditionTrue), terminating),
			pod("default", "broker-3", nil, hostname("broker-3", "headless"), app), // no IP yet
			pod("default", "broker-4", []string{"198.18.1.9"}, hostname("broker-4", "headless"), app, phase(corev1.PodFailed)),
			// Hostname defaults to the pod name.
			pod("default", "noname", []string{"198.18.1.10"}, subdomain("headless")),
			// Dual-stack and IPv6-only pods.
			pod("default", "dual", []string{"198.18.1.11", "fd00::11"}, hostname("dual", "ipv6"), labels("app", "v6"), ready(corev1.ConditionTrue)),
			pod("default", "six", []string{"fd00::12"}, hostname("six", "ipv6"), labels("app", "v6"), ready(corev1.ConditionTrue)),
			// Same names in another namespace.
			pod("other", "broker-0", []string{"198.18.2.5"}, hostname("broker-0", "headless"), app, ready(corev1.ConditionTrue)),
		},
		services: []*corev1.Service{
			headless("default", "headless", true, map[string]string{"app": "picomq"}),
			headless("default", "headless-ready", false, map[string]string{"app": "picomq"}),
			headless("default", "ipv6", false, map[string]string{"app": "v6"}),
			headless("default", "nobody", true, map[string]string{"app": "nobody"}),
			headless("default", "noselector", true, nil),
			clusterIP("default", "picomq", "10.96.0.10"),
			clusterIP("default", "dualstack", "10.96.0.11", "fd00:96::11"),
			{
				ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "external"},
				Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "db.example.com"},
			},
			clusterIP("other", "picomq", "10.96.1.10"),
		},
	}
}

func TestAnswer(t *testing.T) {
	s := New(testSource(), Options{})
	const (
		ok     = dns.RcodeSuccess
		nx     = dns.RcodeNameError
		refuse = dns.RcodeRefused
	)
	A, AAAA := dns.TypeA, dns.TypeAAAA
	tests := []struct {
		name  string
		qtype uint16
		rcode int
		want  []string // addresses (or a CNAME target), in order
	}{
		// StatefulSet pod names, with and without the domain and trailing dot.
		{"broker-0.headless.default.svc.cluster.local.", A, ok, []string{"198.18.1.5"}},
		{"broker-0.headless.default.svc.cluster.local", A, ok, []string{"198.18.1.5"}},
		{"broker-0.headless.default.svc.", A, ok, []string{"198.18.1.5"}},
		{"broker-0.headless.default.svc", A, ok, []string{"198.18.1.5"}},
		{"broker-0.headless.other.svc.cluster.local.", A, ok, []string{"198.18.2.5"}},
		{"BROKER-0.Headless.DEFAULT.svc.Cluster.Local.", A, ok, []string{"198.18.1.5"}},
		// Not-ready and terminating pods are published under their own names.
		{"broker-1.headless.default.svc.cluster.local.", A, ok, []string{"198.18.1.6"}},
		{"broker-2.headless.default.svc.cluster.local.", A, ok, []string{"198.18.1.7"}},
		// No IP yet, finished, or no such pod: no such name.
		{"broker-3.headless.default.svc.cluster.local.", A, nx, nil},
		{"broker-4.headless.default.svc.cluster.local.", A, nx, nil},
		{"broker-9.headless.default.svc.cluster.local.", A, nx, nil},
		{"broker-0.headless.nowhere.svc.cluster.local.", A, nx, nil},
		{"broker-0.wrong.default.svc.cluster.local.", A, nx, nil},
		// An A-only name asked for AAAA: NODATA.
		{"broker-0.headless.default.svc.cluster.local.", AAAA, ok, nil},
		// Hostname defaults to the pod's name.
		{"noname.headless.default.svc.cluster.local.", A, ok, []string{"198.18.1.10"}},
		// IPv6.
		{"six.ipv6.default.svc.cluster.local.", AAAA, ok, []string{"fd00::12"}},
		{"six.ipv6.default.svc.cluster.local.", A, ok, nil},
		{"dual.ipv6.default.svc.cluster.local.", A, ok, []string{"198.18.1.11"}},
		{"dual.ipv6.default.svc.cluster.local.", AAAA, ok, []string{"fd00::11"}},
		{"dual.ipv6.default.svc.cluster.local.", dns.TypeANY, ok, []string{"198.18.1.11", "fd00::11"}},
		{"ipv6.default.svc.cluster.local.", AAAA, ok, []string{"fd00::11", "fd00::12"}},
		{"ipv6.default.svc.cluster.local.", A, ok, []string{"198.18.1.11"}},
		// Headless Service publishing not-ready addresses: every pod with an
		// IP that has not finished, terminating ones included.
		{"headless.default.svc.cluster.local.", A, ok, []string{"198.18.1.5", "198.18.1.6", "198.18.1.7"}},
		{"headless.default.svc.", A, ok, []string{"198.18.1.5", "198.18.1.6", "198.18.1.7"}},
		// A subdomain of pods without a Service: an empty non-terminal.
		{"headless.other.svc.cluster.local.", A, ok, nil},
		// Headless Service not publishing them: Ready, not terminating.
		{"headless-ready.default.svc.cluster.local.", A, ok, []string{"198.18.1.5"}},
		// Headless with no matching pods or no selector: NODATA.
		{"nobody.default.svc.cluster.local.", A, ok, nil},
		{"noselector.default.svc.cluster.local.", A, ok, nil},
		// ClusterIP Services.
		{"picomq.default.svc.cluster.local.", A, ok, []string{"10.96.0.10"}},
		{"picomq.default.svc", A, ok, []string{"10.96.0.10"}},
		{"PicoMQ.Default.SVC.", A, ok, []string{"10.96.0.10"}},
		{"picomq.other.svc.cluster.local.", A, ok, []string{"10.96.1.10"}},
		{"picomq.default.svc.cluster.local.", AAAA, ok, nil},
		{"dualstack.default.svc.cluster.local.", AAAA, ok, []string{"fd00:96::11"}},
		{"dualstack.default.svc.cluster.local.", A, ok, []string{"10.96.0.11"}},
		{"missing.default.svc.cluster.local.", A, nx, nil},
		// ExternalName: a CNAME, whatever the type.
		{"external.default.svc.cluster.local.", A, ok, []string{"db.example.com."}},
		// Pod DNS names.
		{"198-18-1-5.default.pod.cluster.local.", A, ok, []string{"198.18.1.5"}},
		{"198-18-1-5.default.pod", A, ok, []string{"198.18.1.5"}},
		{"198-18-1-5.default.pod.cluster.local.", AAAA, ok, nil},
		{"fd00--12.default.pod.cluster.local.", AAAA, ok, []string{"fd00::12"}},
		{"198-18-1-300.default.pod.cluster.local.", A, nx, nil},
		{"not-an-ip.default.pod.cluster.local.", A, nx, nil},
		// Empty non-terminals exist (NODATA); other names in the zones do not.
		{"cluster.local.", A, ok, nil},
		{"svc.cluster.local.", A, ok, nil},
		{"pod.cluster.local.", A, ok, nil},
		{"default.svc.cluster.local.", A, ok, nil},
		{"default.svc.", A, ok, nil},
		{"default.pod.cluster.local.", A, ok, nil},
		{"nowhere.svc.cluster.local.", A, nx, nil},
		{"foo.cluster.local.", A, nx, nil},
		{"a.b.c.d.default.svc.cluster.local.", A, nx, nil},
		{"x.198-18-1-5.default.pod.cluster.local.", A, nx, nil},
		// Outside the zones: refused.
		{"example.com.", A, refuse, nil},
		{"broker-0.headless.default.svc.example.com.", A, refuse, nil},
		{"cluster.local.example.com.", A, refuse, nil},
		{"local.", A, refuse, nil},
		{".", A, refuse, nil},
		{"5.1.18.198.in-addr.arpa.", dns.TypePTR, refuse, nil},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/%s", tt.name, dns.TypeToString[tt.qtype]), func(t *testing.T) {
			rrs, rcode := s.Answer(dns.Question{Name: tt.name, Qtype: tt.qtype, Qclass: dns.ClassINET})
			if rcode != tt.rcode {
				t.Errorf("rcode = %s, want %s", dns.RcodeToString[rcode], dns.RcodeToString[tt.rcode])
			}
			if got := values(t, rrs, dns.Fqdn(tt.name), 5); !slices.Equal(got, tt.want) {
				t.Errorf("answers = %q, want %q", got, tt.want)
			}
		})
	}
}

// values returns the addresses or CNAME targets of rrs, checking their
// owner name and TTL.
func values(t *testing.T, rrs []dns.RR, name string, ttl uint32) []string {
	t.Helper()
	var got []string
	for _, rr := range rrs {
		h := rr.Header()
		if h.Name != name || h.Ttl != ttl || h.Class != dns.ClassINET {
			t.Errorf("header %v: want name %q, ttl %d, class IN", h, name, ttl)
		}
		switch rr := rr.(type) {
		case *dns.A:
			got = append(got, rr.A.String())
		case *dns.AAAA:
			got = append(got, rr.AAAA.String())
		case *dns.CNAME:
			got = append(got, rr.Target)
		default:
			t.Errorf("unexpected record %v", rr)
		}
	}
	return got
}

func TestAnswerOptions(t *testing.T) {
	s := New(testSource(), Options{Domain: "Example.Internal.", TTL: 30})
	rrs, rcode := s.Answer(dns.Question{Name: "broker-0.headless.default.svc.example.internal.", Qtype: dns.TypeA, Qclass: dns.ClassINET})
	if rcode != dns.RcodeSuccess {
		t.Fatalf("rcode = %s", dns.RcodeToString[rcode])
	}
	if got := values(t, rrs, "broker-0.headless.default.svc.example.internal.", 30); !slices.Equal(got, []string{"198.18.1.5"}) {
		t.Errorf("answers = %q", got)
	}
	if _, rcode := s.Answer(dns.Question{Name: "broker-0.headless.default.svc.cluster.local.", Qtype: dns.TypeA, Qclass: dns.ClassINET}); rcode != dns.RcodeRefused {
		t.Errorf("cluster.local with another domain: rcode = %s, want REFUSED", dns.RcodeToString[rcode])
	}
	if _, rcode := s.Answer(dns.Question{Name: "broker-0.headless.default.svc.", Qtype: dns.TypeA, Qclass: dns.ClassCHAOS}); rcode != dns.RcodeRefused {
		t.Errorf("class CH: rcode = %s, want REFUSED", dns.RcodeToString[rcode])
	}
}

func TestServe(t *testing.T) {
	src := testSource()
	// A headless Service too big for a 512-byte UDP answer.
	for i := range 100 {
		src.pods = append(src.pods, pod("big", fmt.Sprintf("p-%d", i), []string{fmt.Sprintf("198.18.3.%d", i+1)},
			labels("app", "big"), ready(corev1.ConditionTrue)))
	}
	src.services = append(src.services, headless("big", "big", false, map[string]string{"app": "big"}))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	udpAddr, tcpAddr, err := New(src, Options{}).Serve(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("serving on udp %v, tcp %v", udpAddr, tcpAddr)

	exchange := func(t *testing.T, network string, m *dns.Msg) *dns.Msg {
		t.Helper()
		addr := udpAddr.String()
		if network == "tcp" {
			addr = tcpAddr.String()
		}
		c := &dns.Client{Net: network, Timeout: 5 * time.Second}
		r, _, err := c.Exchange(m, addr)
		if err != nil {
			t.Fatalf("%s exchange: %v", network, err)
		}
		return r
	}

	for _, network := range []string{"udp", "tcp"} {
		t.Run(network, func(t *testing.T) {
			m := new(dns.Msg).SetQuestion("broker-0.headless.default.svc.cluster.local.", dns.TypeA)
			r := exchange(t, network, m)
			if r.Rcode != dns.RcodeSuccess || !r.Authoritative || r.Truncated {
				t.Errorf("rcode %s, aa %v, tc %v; want NOERROR, aa, not truncated", dns.RcodeToString[r.Rcode], r.Authoritative, r.Truncated)
			}
			if got := values(t, r.Answer, "broker-0.headless.default.svc.cluster.local.", 5); !slices.Equal(got, []string{"198.18.1.5"}) {
				t.Errorf("answers = %q", got)
			}

			r = exchange(t, network, new(dns.Msg).SetQuestion("missing.default.svc.cluster.local.", dns.TypeA))
			if r.Rcode != dns.RcodeNameError || !r.Authoritative || len(r.Answer) != 0 {
				t.Errorf("missing: rcode %s, aa %v, %d answers; want NXDOMAIN, aa, none", dns.RcodeToString[r.Rcode], r.Authoritative, len(r.Answer))
			}

			r = exchange(t, network, new(dns.Msg).SetQuestion("example.com.", dns.TypeA))
			if r.Rcode != dns.RcodeRefused || r.Authoritative {
				t.Errorf("example.com: rcode %s, aa %v; want REFUSED, not aa", dns.RcodeToString[r.Rcode], r.Authoritative)
			}

			// Two questions: the first is answered.
			m = new(dns.Msg).SetQuestion("picomq.default.svc.cluster.local.", dns.TypeA)
			m.Question = append(m.Question, dns.Question{Name: "example.com.", Qtype: dns.TypeA, Qclass: dns.ClassINET})
			r = exchange(t, network, m)
			if r.Rcode != dns.RcodeSuccess || len(r.Question) != 1 {
				t.Errorf("two questions: rcode %s, %d questions; want NOERROR, 1", dns.RcodeToString[r.Rcode], len(r.Question))
			}
			if got := values(t, r.Answer, "picomq.default.svc.cluster.local.", 5); !slices.Equal(got, []string{"10.96.0.10"}) {
				t.Errorf("two questions: answers = %q", got)
			}

			// A big answer is truncated over UDP, whole over TCP.
			r = exchange(t, network, new(dns.Msg).SetQuestion("big.big.svc.cluster.local.", dns.TypeA))
			if network == "udp" {
				if !r.Truncated || len(r.Answer) >= 100 {
					t.Errorf("big over UDP: tc %v, %d answers; want truncated", r.Truncated, len(r.Answer))
				}
			} else if r.Truncated || len(r.Answer) != 100 {
				t.Errorf("big over TCP: tc %v, %d answers; want 100", r.Truncated, len(r.Answer))
			}
		})
	}

	t.Run("resolver", func(t *testing.T) {
		resolver := &net.Resolver{
			PreferGo: true,
			Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
				var d net.Dialer
				if strings.HasPrefix(network, "tcp") {
					return d.DialContext(ctx, "tcp", tcpAddr.String())
				}
				return d.DialContext(ctx, "udp", udpAddr.String())
			},
		}
		lctx, lcancel := context.WithTimeout(ctx, 10*time.Second)
		defer lcancel()
		for name, want := range map[string][]string{
			"broker-0.headless.default.svc.cluster.local":  {"198.18.1.5"},
			"broker-0.headless.default.svc.cluster.local.": {"198.18.1.5"},
			"six.ipv6.default.svc.cluster.local.":          {"fd00::12"},
			"big.big.svc.cluster.local.":                   nil, // 100 addresses, via TCP after truncation
		} {
			addrs, err := resolver.LookupHost(lctx, name)
			if err != nil {
				t.Errorf("LookupHost(%q): %v", name, err)
				continue
			}
			if want == nil {
				if len(addrs) != 100 {
					t.Errorf("LookupHost(%q): %d addresses, want 100", name, len(addrs))
				}
				continue
			}
			if !slices.Equal(addrs, want) {
				t.Errorf("LookupHost(%q) = %q, want %q", name, addrs, want)
			}
		}
		_, err := resolver.LookupHost(lctx, "missing.default.svc.cluster.local.")
		if dnsErr, ok := err.(*net.DNSError); !ok || !dnsErr.IsNotFound {
			t.Errorf("LookupHost(missing) error = %v, want not found", err)
		}
	})

	// Ending ctx stops both listeners.
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c := &dns.Client{Net: "tcp", Timeout: time.Second}
		_, _, err := c.Exchange(new(dns.Msg).SetQuestion("picomq.default.svc.", dns.TypeA), tcpAddr.String())
		if err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("TCP still answering after ctx ended")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
