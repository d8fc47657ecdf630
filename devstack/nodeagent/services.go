package nodeagent

import (
	"context"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/tools/cache"
)

// The agent serves every Service's ClusterIP as kube-proxy's old
// userspace mode did: the address on the router namespace's loopback
// (pods and the host route the service range there), a listener per TCP
// port, and each connection relayed to a ready endpoint of the Service's
// EndpointSlices, round robin.

const servicesResync = time.Second

type serviceKey struct {
	ns, name, port string
}

type serviceListener struct {
	ln  net.Listener
	key serviceKey
}

// runServices keeps a listener on every ClusterIP port until ctx ends.
func (a *Agent) runServices(ctx context.Context, services, slices cache.Indexer) {
	listening := map[string]*serviceListener{} // ip:port → listener
	defer func() {
		for _, l := range listening {
			l.ln.Close()
		}
	}()
	var next atomic.Uint64
	for ctx.Err() == nil {
		want := map[string]serviceKey{}
		for _, obj := range services.List() {
			svc := obj.(*corev1.Service)
			for _, ip := range svc.Spec.ClusterIPs {
				if ip == "" || ip == corev1.ClusterIPNone {
					continue
				}
				for _, p := range svc.Spec.Ports {
					if p.Protocol != "" && p.Protocol != corev1.ProtocolTCP {
						continue
					}
					want[net.JoinHostPort(ip, strconv.Itoa(int(p.Port)))] = serviceKey{svc.Namespace, svc.Name, p.Name}
				}
			}
		}
		for addr, l := range listening {
			if k, ok := want[addr]; !ok || k != l.key {
				l.ln.Close()
				delete(listening, addr)
			}
		}
		for addr, key := range want {
			if listening[addr] != nil {
				continue
			}
			host, _, _ := net.SplitHostPort(addr)
			ip, err := netip.ParseAddr(host)
			if err != nil {
				continue
			}
			if a.opts.AddServiceAddress != nil {
				if err := a.opts.AddServiceAddress(ip); err != nil {
					a.log.Error(err, "serve a ClusterIP", "service", key.ns+"/"+key.name, "addr", addr)
					continue
				}
			}
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				a.log.Error(err, "serve a ClusterIP", "service", key.ns+"/"+key.name, "addr", addr)
				continue
			}
			listening[addr] = &serviceListener{ln: ln, key: key}
			go func() {
				for {
					conn, err := ln.Accept()
					if err != nil {
						return
					}
					go relayTo(ctx, conn, func() []string { return readyEndpoints(slices, key) }, &next)
				}
			}()
		}
		sleep(ctx, servicesResync)
	}
}

// readyEndpoints are the ready addresses of a Service's port.
func readyEndpoints(slices cache.Indexer, key serviceKey) []string {
	var out []string
	for _, obj := range slices.List() {
		sl := obj.(*discoveryv1.EndpointSlice)
		if sl.Namespace != key.ns || sl.Labels[discoveryv1.LabelServiceName] != key.name {
			continue
		}
		port := int32(0)
		for _, p := range sl.Ports {
			if p.Port != nil && (p.Name == nil && key.port == "" || p.Name != nil && *p.Name == key.port) {
				port = *p.Port
			}
		}
		if port == 0 {
			continue
		}
		for _, ep := range sl.Endpoints {
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			for _, addr := range ep.Addresses {
				out = append(out, net.JoinHostPort(addr, strconv.Itoa(int(port))))
			}
		}
	}
	return out
}

// relayTo relays conn to the first of targets that answers, starting
// round robin; with none, the connection is closed, as a Service without
// endpoints refuses.
func relayTo(ctx context.Context, conn net.Conn, targets func() []string, next *atomic.Uint64) {
	defer conn.Close()
	ts := targets()
	if len(ts) == 0 {
		return
	}
	first := int(next.Add(1))
	for i := range ts {
		d := net.Dialer{Timeout: 2 * time.Second}
		up, err := d.DialContext(ctx, "tcp", ts[(first+i)%len(ts)])
		if err == nil {
			Relay(conn, up)
			up.Close()
			return
		}
	}
}

// Relay copies a to b and b to a until both directions end, passing each
// end's close on as a half-close.
func Relay(a, b net.Conn) {
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if c, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = c.CloseWrite()
		} else {
			dst.Close()
		}
		done <- struct{}{}
	}
	go pipe(a, b)
	go pipe(b, a)
	<-done
	<-done
}
