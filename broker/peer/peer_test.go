package peer

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/picomq/picomq/broker/certreload/certgen"
)

// TestMutualTLS: a peer port with TLS serves raft and HTTP to a dialer
// presenting a certificate of the cluster's CA, and refuses a dialer with
// none, one of another CA, or none of TLS at all.
func TestMutualTLS(t *testing.T) {
	ca, err := certgen.NewCA("cluster CA")
	if err != nil {
		t.Fatal(err)
	}
	pair := func(ca *certgen.CA) tls.Certificate {
		c, k, err := ca.Issue("broker", "127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		p, err := certgen.KeyPair(c, k)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	server := pair(ca)
	m, err := ListenTLS("127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{server}, ClientCAs: ca.Pool(), ClientAuth: tls.RequireAndVerifyClientCert})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	go func() {
		for {
			c, err := m.Raft().Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "peer ok") })}
	go func() { _ = srv.Serve(m.HTTP()) }()
	defer srv.Close()
	addr := m.Addr().String()
	static := Addresses{Static: map[string]Static{"b-0": {Peer: addr}}}

	good := Dialer{Addresses: static, TLS: &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{pair(ca)}}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rc, err := good.DialRaft(ctx, "b-0")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rc.Write([]byte("raft")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(rc, buf); err != nil || string(buf) != "raft" {
		t.Fatalf("raft echo %q %v", buf, err)
	}
	rc.Close()
	cl := NewClient(good)
	req, _ := http.NewRequestWithContext(ctx, "GET", cl.URL("b-0", "/x"), nil)
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "peer ok" {
		t.Fatalf("HTTP over the peer port: %q", body)
	}

	other, err := certgen.NewCA("other")
	if err != nil {
		t.Fatal(err)
	}
	for name, d := range map[string]Dialer{
		"no client certificate": {Addresses: static, TLS: &tls.Config{RootCAs: ca.Pool()}},
		"another CA's":          {Addresses: static, TLS: &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{pair(other)}}},
		"server of another CA":  {Addresses: static, TLS: &tls.Config{RootCAs: other.Pool(), Certificates: []tls.Certificate{pair(ca)}}},
	} {
		c, err := d.DialRaft(ctx, "b-0")
		if err == nil {
			// TLS 1.3 reports a refused client certificate at the first read.
			_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
			_, _ = c.Write([]byte("x"))
			_, err = c.Read(make([]byte, 1))
			c.Close()
		}
		if err == nil {
			t.Errorf("%s: connected", name)
		}
	}
	// Plain TCP gets no answer of the HTTP API.
	pc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	_ = pc.SetDeadline(time.Now().Add(20 * time.Second))
	_, _ = io.WriteString(pc, "GET /x HTTP/1.1\r\nHost: b\r\n\r\n")
	got, _ := io.ReadAll(pc)
	if len(got) > 0 && string(got[:4]) == "HTTP" && !(len(got) > 9 && got[9] == '4') {
		t.Fatalf("plain HTTP answered: %q", got)
	}
}
