package contracts_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/picomq/picomq/broker/auth"
	"github.com/picomq/picomq/broker/certreload/certgen"
	"github.com/picomq/picomq/broker/client"
	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/stream"
	"github.com/picomq/picomq/test/clusterharness"
)

// needBroker skips under -short: these run broker processes.
func needBroker(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("process tier: skipped under -short (runs broker processes with TLS and tokens); go test without -short runs it")
	}
}

const (
	readTok  = "contract-read-0123456789"
	writeTok = "contract-write-0123456789"
	adminTok = "contract-admin-0123456789"
)

func secured(t *testing.T, o clusterharness.Options) *clusterharness.Cluster {
	o.Security = &clusterharness.Security{TLS: true, Tokens: true}
	c := clusterharness.Start(t, o)
	c.SetToken("reader", "read", readTok)
	c.SetToken("writer", "write", writeTok)
	c.SetToken("admin", "admin", adminTok)
	return c
}

func clientOf(t *testing.T, c *clusterharness.Cluster, i int, token string) *client.Client {
	t.Helper()
	cl, err := client.New(c.URL(i), client.WithTLSConfig(c.TLSConfig()), client.WithToken(token))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// waitToken waits until token is in force on broker i (tokens are re-read
// every second).
func waitToken(t *testing.T, c *clusterharness.Cluster, i int, token string, inForce bool) {
	t.Helper()
	cl := clientOf(t, c, i, token)
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := cl.ListStreams(t.Context(), "")
		// In force: anything but UNAUTHENTICATED (a write token may not
		// list, FORBIDDEN); removed: UNAUTHENTICATED.
		if errors.Is(err, auth.Unauthenticated) != inForce && (err == nil || errors.Is(err, auth.Unauthenticated) || errors.Is(err, auth.Forbidden)) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("token in force %v not seen within 20s: %v", inForce, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestSecurityLoneBroker: plain HTTP and a client trusting another CA get
// nothing; each scope allows exactly what it names and a refused request
// writes nothing; a token removed stops working within seconds.
func TestSecurityLoneBroker(t *testing.T) {
	needBroker(t)
	c := secured(t, clusterharness.Options{Brokers: 1})
	ctx := t.Context()
	for _, tok := range []string{readTok, writeTok, adminTok} {
		waitToken(t, c, 0, tok, true)
	}
	base := c.URL(0)
	if !strings.HasPrefix(base, "https://") {
		t.Fatalf("URL %s", base)
	}
	plain := "http://" + strings.TrimPrefix(base, "https://")
	if resp, err := http.Get(plain + "/readyz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode < 400 {
			t.Fatalf("plain HTTP to a TLS broker answered %d", resp.StatusCode)
		}
	}
	other, err := certgen.NewCA("other")
	if err != nil {
		t.Fatal(err)
	}
	wrong, err := client.New(base, client.WithTLSConfig(&tls.Config{RootCAs: other.Pool()}), client.WithToken(adminTok))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wrong.ListStreams(ctx, ""); err == nil {
		t.Fatal("a client trusting another CA was served")
	}

	admin := clientOf(t, c, 0, adminTok)
	s, err := admin.Open(ctx, "sec/s", client.StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, []stream.RecordValue{{Payload: []byte("first")}}); err != nil {
		t.Fatal(err)
	}
	creates := 0
	ops := []struct {
		name string
		need string
		do   func(tok string) error
	}{
		{"list", "read", func(tok string) error { _, err := clientOf(t, c, 0, tok).ListStreams(ctx, ""); return err }},
		{"get", "read", func(tok string) error { _, err := clientOf(t, c, 0, tok).GetStream(ctx, "sec/s"); return err }},
		{"read", "read", func(tok string) error {
			return raw(ctx, c, tok, "GET", "/v1/log/sec/s?partition=0&from=0&max=10", "")
		}},
		{"append", "write", func(tok string) error {
			return raw(ctx, c, tok, "POST", "/v1/log/sec/s?partition=0", "appended")
		}},
		{"commit", "write", func(tok string) error {
			return raw(ctx, c, tok, "POST", "/v1/log/sec/s:commit?group=g&partition=0&next=1", "")
		}},
		{"create", "admin", func(tok string) error {
			creates++
			_, _, err := clientOf(t, c, 0, tok).CreateStream(ctx, fmt.Sprintf("sec/created-%d", creates), client.StreamConfig{})
			return err
		}},
		{"trim", "admin", func(tok string) error {
			return raw(ctx, c, tok, "POST", "/v1/log/sec/s:trim?partition=0&before=0", "")
		}},
	}
	scopes := map[string]string{readTok: "read", writeTok: "write", adminTok: "admin", "": "none", "wrong-token-0123456789": "wrong"}
	for tok, scope := range scopes {
		for _, o := range ops {
			err := o.do(tok)
			switch {
			case scope == "none" || scope == "wrong":
				if !errors.Is(err, auth.Unauthenticated) {
					t.Errorf("%s with no valid token: %v, want UNAUTHENTICATED", o.name, err)
				}
			case scope == "admin" || scope == o.need:
				if err != nil {
					t.Errorf("%s with the %s token: %v", o.name, scope, err)
				}
			default:
				if !errors.Is(err, auth.Forbidden) {
					t.Errorf("%s with the %s token: %v, want FORBIDDEN", o.name, scope, err)
				}
			}
		}
	}
	// Written: "first", and one append each by the write and admin tokens.
	b, err := s.Bounds(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if b.Next != 3 {
		t.Fatalf("after the refusals the stream ends at %d, want 3 (refused appends wrote)", b.Next)
	}
	list, err := admin.ListStreams(ctx, "sec/")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 {
		t.Fatalf("%d streams, want sec/s and the admin's: refused creates created", len(list))
	}

	// Removed, a token stops working within seconds, without a restart.
	c.RemoveToken("reader")
	waitToken(t, c, 0, readTok, false)
}

// raw sends one request of the partitioned-log API with token and returns
// the coded error it was refused with.
func raw(ctx context.Context, c *clusterharness.Cluster, token, method, path, body string) error {
	req, err := http.NewRequestWithContext(ctx, method, c.URL(0)+path, strings.NewReader(body))
	if err != nil {
		return err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: c.TLSConfig()}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode < 300 {
		return nil
	}
	if coded, err := errs.Unmarshal(data); err == nil {
		return coded
	}
	return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, data)
}

// TestSecurityCertRotationUnderLoad: the broker's certificate is replaced
// three times while a writer appends without pause over new and kept
// connections: every append is acknowledged, and all read back.
func TestSecurityCertRotationUnderLoad(t *testing.T) {
	needBroker(t)
	c := secured(t, clusterharness.Options{Brokers: 1})
	ctx := t.Context()
	waitToken(t, c, 0, adminTok, true)
	admin := clientOf(t, c, 0, adminTok)
	s, err := admin.Open(ctx, "rot/s", client.StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	serial := func() string {
		conn, err := tls.Dial("tcp", strings.TrimPrefix(c.URL(0), "https://"), c.TLSConfig())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	first := serial()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	acked := 0
	var failure error
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				if n%20 == 0 {
					admin.Close() // new connections, new handshakes
				}
				_, err := s.Append(ctx, []stream.RecordValue{{Payload: []byte(fmt.Sprintf("w%d-%d", w, n))}})
				mu.Lock()
				if err != nil && failure == nil {
					failure = err
				}
				if err == nil {
					acked++
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
	}
	for range 3 {
		time.Sleep(1500 * time.Millisecond)
		c.RotateCert(0)
	}
	// The broker serves the last certificate (looked at every second).
	deadline := time.Now().Add(20 * time.Second)
	for serial() == first {
		if time.Now().After(deadline) {
			t.Fatal("the rotated certificate was not taken up within 20s")
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(1500 * time.Millisecond)
	close(stop)
	wg.Wait()
	if failure != nil {
		t.Fatalf("an append failed during the rotations: %v", failure)
	}
	b, err := s.Bounds(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if int(b.Next) != acked || acked == 0 {
		t.Fatalf("%d appends acknowledged, the stream holds %d", acked, b.Next)
	}
	got := 0
	for from := stream.Offset(0); from < b.Next; {
		es, err := s.Read(ctx, 0, from, 1000)
		if err != nil {
			t.Fatal(err)
		}
		got += len(es)
		from = es[len(es)-1].Offset + 1
	}
	if got != acked {
		t.Fatalf("read back %d of %d", got, acked)
	}
}

// TestSecurityClusterRoutes: in a 3-broker cluster with TLS (mutual on the
// peer port) and tokens, appends sent to every broker reach each stream's
// owner, proxied when another owns it, and read back through any broker.
func TestSecurityClusterRoutes(t *testing.T) {
	needCluster(t)
	o := options()
	c := secured(t, o)
	ctx := t.Context()
	// A producer's token: a stream handle reads the stream's state first.
	const rwTok = "contract-readwrite-0123456789"
	c.SetToken("producer", "read,write", rwTok)
	for i := range 3 {
		waitToken(t, c, i, rwTok, true)
		waitToken(t, c, i, readTok, true)
	}
	admin := clientOf(t, c, 0, adminTok)
	names := make([]string, o.Slots)
	for i := range names {
		names[i] = fmt.Sprintf("route/s-%02d", i)
		if _, err := admin.Open(ctx, names[i], client.StreamConfig{}); err != nil {
			t.Fatal(err)
		}
	}
	proxied := 0
	for i := range 3 {
		w := clientOf(t, c, i, rwTok)
		for _, name := range names {
			s, err := w.Stream(ctx, name)
			if err != nil {
				t.Fatalf("stream %s through broker-%d: %v", name, i, err)
			}
			if _, err := s.Append(ctx, []stream.RecordValue{{Payload: []byte(fmt.Sprintf("via-%d", i))}}); err != nil {
				t.Fatalf("append to %s through broker-%d: %v", name, i, err)
			}
			if owner, err := c.Owner(ctx, name, 0); err == nil && owner != i {
				proxied++
			}
		}
	}
	if proxied == 0 {
		t.Fatal("no append was proxied: every stream is owned by the broker it was sent to")
	}
	for j, name := range names {
		r := clientOf(t, c, (j+1)%3, readTok)
		s, err := r.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		es, err := s.Read(ctx, 0, 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(es) != 3 {
			t.Fatalf("%s: %d records, want one through each broker", name, len(es))
		}
	}
}
