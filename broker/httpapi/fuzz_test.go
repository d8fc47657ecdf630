package httpapi

import (
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/picomq/picomq/broker/core"
	"github.com/picomq/picomq/broker/node"
	"github.com/picomq/picomq/broker/stream"
)

// FuzzAdminBodies: the admin API's request bodies — a stream's creation
// (configuration and policy JSON), a policy change, a drain's options —
// never panic the broker, and a refused body changes nothing: no name is
// created, the policy stays, no drain starts. An accepted creation is
// undone, so that every input meets the same broker.
func FuzzAdminBodies(f *testing.F) {
	for _, s := range []struct {
		kind uint8
		body string
	}{
		{0, `{"policy":{"partitions":2,"maxRecordBytes":1024}}`},
		{0, `{"contentType":"text/plain","ttl":"1h"}`},
		{0, `{"expiresAt":"2030-01-01T00:00:00Z","policy":{"retainFor":"1h","retainBytes":100}}`},
		{0, ``},
		{0, `{"ttl":"1h","ttl":"2h"}`},
		{0, `{} {}`},
		{0, "{\"contentType\":\"\xff\"}"},
		{0, `{"policy":{"partitions":-1}}`},
		{0, `{"ttl":"1ns"}`},
		{0, `{"expiresAt":"2000-01-01T00:00:00Z"}`},
		{0, `{"unknown":1}`},
		{1, `{"policy":{"partitions":3}}`},
		{1, `{"policy":{"retainFor":"10m","maxBytes":4096}}`},
		{1, `{"policy":{"partitions":0}}`},
		{1, `{"policy":{"blockTimeout":"-1s"}}`},
		{2, `{}`},
		{2, `{"stay":true}`},
		{2, `{"stay":"yes"}`},
	} {
		f.Add(s.kind, []byte(s.body))
	}
	b, err := core.Open(core.Config{DataDir: f.TempDir(), Metrics: core.NewMetrics(prometheus.NewRegistry()), MaintenanceInterval: time.Hour})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = b.Close() })
	drain := &fakeDrainer{slots: 1}
	api := New(b, nil, Options{Drain: drain})
	serve := func(method, path, body string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		api.ServeHTTP(w, httptest.NewRequest(method, path, strings.NewReader(body)))
		return w
	}
	const created, base = "fz-new", "fz-base"
	f.Fuzz(func(t *testing.T, kind uint8, body []byte) {
		switch kind % 3 {
		case 0:
			w := serve(http.MethodPut, "/v1/admin/streams/"+created, string(body))
			_, err := b.Get(created)
			switch {
			case w.Code == http.StatusCreated:
				if err != nil {
					t.Fatalf("201, then %v", err)
				}
				if w := serve(http.MethodDelete, "/v1/admin/streams/"+created, ""); w.Code != http.StatusNoContent {
					t.Fatalf("undo: %d %s", w.Code, w.Body)
				}
			case w.Code >= 400:
				if err == nil {
					t.Fatalf("refused (%d %s), yet the stream exists", w.Code, w.Body)
				}
				checkProblem(t, w)
			default:
				t.Fatalf("a creation of a new name answered %d %s", w.Code, w.Body)
			}
		case 1:
			if _, err := b.Get(base); err != nil {
				if _, _, err := b.Create(t.Context(), base, node.CreateOptions{ContentType: DefaultContentType, Policy: stream.PolicyValue{Partitions: 1}}); err != nil {
					t.Fatal(err)
				}
			}
			before, _ := b.Get(base)
			w := serve(http.MethodPatch, "/v1/admin/streams/"+base, string(body))
			after, err := b.Get(base)
			if err != nil {
				t.Fatalf("the stream went: %v", err)
			}
			switch {
			case w.Code == http.StatusOK:
				// Changed: the next input starts from a new stream
				// (partitions only grow).
				if err := b.Delete(t.Context(), base); err != nil {
					t.Fatal(err)
				}
			case w.Code >= 400:
				if !reflect.DeepEqual(before.Policy, after.Policy) {
					t.Fatalf("refused (%d %s), yet the policy changed: %+v to %+v", w.Code, w.Body, before.Policy, after.Policy)
				}
				checkProblem(t, w)
			default:
				t.Fatalf("a policy change answered %d %s", w.Code, w.Body)
			}
		case 2:
			drain.mu.Lock()
			calls := len(drain.calls)
			drain.mu.Unlock()
			w := serve(http.MethodPost, "/v1/admin/drain", string(body))
			drain.mu.Lock()
			started := len(drain.calls) > calls
			drain.calls = drain.calls[:0]
			drain.draining = false
			drain.mu.Unlock()
			if w.Code >= 400 {
				if started {
					t.Fatalf("refused (%d %s), yet a drain started", w.Code, w.Body)
				}
				checkProblem(t, w)
			}
		}
	})
}

// checkProblem fails t unless w is a coded refusal below 500: a body is
// the client's fault, never the broker's.
func checkProblem(t *testing.T, w *httptest.ResponseRecorder) {
	t.Helper()
	if w.Code >= 500 || !strings.Contains(w.Body.String(), `"code"`) {
		t.Fatalf("refusal %d %s: want a coded 4xx problem", w.Code, w.Body)
	}
}
