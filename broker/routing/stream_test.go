package routing

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/picomq/picomq/broker/node"
)

func send(t *testing.T, method, url string, h map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader("body"))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestRouterSendsStreamCreatesAndDeletesToTheOwner: a Durable Streams PUT
// or DELETE of a stream that exists goes to its owner, who alone knows
// whether a sliding TTL ran out (the accesses it served are in its memory
// only); a fork goes to its source's owner. Both brokers catch up with
// the leader first. A PUT of a new name is served where it arrives.
func TestRouterSendsStreamCreatesAndDeletesToTheOwner(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	for s := range 4 {
		w.set(s, "b")
	}
	var caught [2]atomic.Int32
	for i, m := range []string{"a", "b"} {
		w.routers[m].cfg.Catchup = func(context.Context) error { caught[i].Add(1); return nil }
	}
	a := w.servers["a"].URL
	for _, c := range []struct {
		method, path string
		h            map[string]string
		want         string
	}{
		{"PUT", "/v1/stream/one", nil, "b"},
		{"DELETE", "/v1/stream/one", nil, "b"},
		{"PUT", "/v1/stream/new", nil, "a"},
		{"DELETE", "/v1/stream/new", nil, "a"},
		{"PUT", "/v1/stream/new", map[string]string{"Stream-Forked-From": "/v1/stream/one"}, "b"},
		{"PUT", "/v1/stream/new", map[string]string{"Stream-Forked-From": "http://elsewhere:4437/v1/stream/one"}, "b"},
		{"PUT", "/v1/stream/new", map[string]string{"Stream-Forked-From": "/v1/stream/missing"}, "a"},
		{"PUT", "/v1/stream/four", nil, "a"}, // several partitions: not a protocol stream
		{"OPTIONS", "/v1/stream/one", nil, "a"},
	} {
		if code, body := send(t, c.method, a+c.path, c.h); code != 200 || body != c.want {
			t.Errorf("%s %s %v through a: %d %q, want %s's answer", c.method, c.path, c.h, code, body, c.want)
		}
	}
	if n := caught[0].Load(); n != 8 {
		t.Errorf("a caught up %d times for 8 creates and deletes", n)
	}
	if n := caught[1].Load(); n != 4 {
		t.Errorf("b, the owner, caught up %d times for the 4 it served", n)
	}
	// Owned here: served here, not proxied.
	w.set(2, "a")
	if code, body := send(t, "DELETE", a+"/v1/stream/one", nil); code != 200 || body != "a" {
		t.Errorf("DELETE of a stream a owns: %d %q", code, body)
	}
	// Nobody serves it: retry shortly, not a decision on a view that may
	// be behind.
	w.mu.Lock()
	delete(w.owner, 2)
	w.mu.Unlock()
	if code, body := send(t, "PUT", a+"/v1/stream/one", nil); code != 503 || !strings.Contains(body, "NO_SLOT_OWNER") {
		t.Errorf("PUT with no owner: %d %q", code, body)
	}
}

// TestRouterLocatesStreamsPastTheirLocalLifetime: a stream this broker's
// view calls expired (its last accesses, served by the owner, are not
// persisted yet) is still routed to its owner, who decides.
func TestRouterLocatesStreamsPastTheirLocalLifetime(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.set(2, "b")
	ra := w.routers["a"]
	ra.cfg.Broker = fakeRegistry{entries: map[string]*node.Entry{}} // Get: expired, not found
	ra.cfg.Locate = func(name string) (*node.Entry, error) {
		if name == "one" {
			return &node.Entry{Name: "one", Partitions: []uint64{10}}, nil
		}
		return nil, node.StreamNotFound.With("name", name)
	}
	for _, m := range []string{"HEAD", "GET", "POST"} {
		code, _ := send(t, m, w.servers["a"].URL+"/v1/stream/one", nil)
		w.mu.Lock()
		served := w.served["b"]
		w.mu.Unlock()
		if code != 200 || len(served) == 0 || !strings.HasPrefix(served[len(served)-1], m+" /v1/stream/one") {
			t.Errorf("%s of a stream a's view calls expired: %d, b served %v", m, code, served)
		}
	}
	if code, body, _ := get(t, w.servers["a"].URL, "/v1/log/one?from=0"); code != 200 || body != "b" {
		t.Errorf("log read of a stream a's view calls expired: %d %q", code, body)
	}
}

// TestRouterSendsAdminStreamChangesToTheOwner: the admin API's PUT (create
// or open), PATCH and DELETE of an existing stream go to its owner too — a
// stream of several partitions to its first partition's, whose owner
// writes them all; reads of the admin API, and a PUT of a new name, are
// served where they arrive.
func TestRouterSendsAdminStreamChangesToTheOwner(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	for s := range 4 {
		w.set(s, "b")
	}
	a := w.servers["a"].URL
	for _, c := range []struct{ method, path, want string }{
		{"PUT", "/v1/admin/streams/one", "b"},
		{"PATCH", "/v1/admin/streams/one", "b"},
		{"DELETE", "/v1/admin/streams/one", "b"},
		{"PUT", "/v1/admin/streams/four", "b"},
		{"GET", "/v1/admin/streams/one", "a"},
		{"GET", "/v1/admin/streams", "a"},
		{"PUT", "/v1/admin/streams/new", "a"},
	} {
		if code, body := send(t, c.method, a+c.path, nil); code != 200 || body != c.want {
			t.Errorf("%s %s through a: %d %q, want %s's answer", c.method, c.path, code, body, c.want)
		}
	}
	w.mu.Lock()
	served := append([]string(nil), w.served["b"]...)
	w.mu.Unlock()
	if len(served) != 4 || served[1] != "PATCH /v1/admin/streams/one?" {
		t.Errorf("b served %v", served)
	}
}

// TestMetaAfterAFailedCatchup: a create, a fork, a policy change or a
// delete is decided on this broker's copy (does the stream exist, with
// what configuration, up to what tail): refused with METADATA_CATCHING_UP
// while the catch-up fails, never decided on a copy that may be stale, and
// served once it succeeds.
func TestMetaAfterAFailedCatchup(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	for s := range 4 {
		w.set(s, "b")
	}
	var fail atomic.Bool
	var calls atomic.Int32
	fail.Store(true)
	w.routers["a"].cfg.Catchup = failingCatchup(&fail, &calls)
	a := w.servers["a"].URL
	cases := []struct {
		method, path string
		h            map[string]string
		want         string
	}{
		{"PUT", "/v1/stream/one", nil, "b"},
		{"PUT", "/v1/stream/new", nil, "a"},
		{"PUT", "/v1/stream/new", map[string]string{"Stream-Forked-From": "/v1/stream/one"}, "b"},
		{"DELETE", "/v1/stream/one", nil, "b"},
		{"PUT", "/v1/admin/streams/one", nil, "b"},
		{"PATCH", "/v1/admin/streams/one", nil, "b"},
		{"DELETE", "/v1/admin/streams/new", nil, "a"},
	}
	for _, c := range cases {
		code, body := send(t, c.method, a+c.path, c.h)
		if code != 503 || !strings.Contains(body, "METADATA_CATCHING_UP") {
			t.Errorf("behind, %s %s: %d %q, want 503 METADATA_CATCHING_UP", c.method, c.path, code, body)
		}
	}
	if n := w.servedCount("a") + w.servedCount("b"); n != 0 {
		t.Fatalf("behind: %d requests decided: %v", n, w.served)
	}
	fail.Store(false)
	for _, c := range cases {
		if code, body := send(t, c.method, a+c.path, c.h); code != 200 || body != c.want {
			t.Errorf("caught up, %s %s: %d %q, want served by %s", c.method, c.path, code, body, c.want)
		}
	}
}
