package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"testing"

	"github.com/picomq/picomq/broker/httpapi/wire"
)

// fakeDrainer is a Drainer recording its calls.
type fakeDrainer struct {
	mu       sync.Mutex
	draining bool
	slots    int
	refuse   error
	calls    []string
}

func (d *fakeDrainer) StartDrain(_ context.Context, o wire.DrainOptions) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if o.Stay {
		d.calls = append(d.calls, "start stay")
	} else {
		d.calls = append(d.calls, "start")
	}
	if d.refuse != nil {
		return d.refuse
	}
	d.draining = true
	return nil
}

func (d *fakeDrainer) CancelDrain(context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls = append(d.calls, "cancel")
	d.draining = false
	return nil
}

func (d *fakeDrainer) DrainStatus() wire.DrainStatus {
	d.mu.Lock()
	defer d.mu.Unlock()
	ds := wire.DrainStatus{SlotsHeld: d.slots, OpenStreams: 2 * d.slots, Message: "not draining"}
	if d.draining {
		ds.Phase, ds.Message = wire.DrainDraining, "handing off"
	}
	return ds
}

// drainCall sends one request to DrainPath and decodes its 200 answer.
func (f *fixture) drainCall(method string, h hdr, body []byte) wire.DrainStatus {
	f.t.Helper()
	resp, out := f.do(method, wire.DrainPath, h, body)
	return decodeDrain(f.t, resp, out)
}

func decodeDrain(t *testing.T, resp *http.Response, body []byte) wire.DrainStatus {
	t.Helper()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != wire.JSONContentType {
		t.Fatalf("status %d, Content-Type %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	var ds wire.DrainStatus
	if err := json.Unmarshal(body, &ds); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	return ds
}

func TestDrainEndpoint(t *testing.T) {
	d := &fakeDrainer{slots: 3}
	f := newFixture(t, Options{Drain: d})

	ds := f.drainCall(http.MethodGet, nil, nil)
	if ds.Phase != wire.DrainNone || ds.SlotsHeld != 3 || ds.OpenStreams != 6 {
		t.Errorf("GET before: %+v", ds)
	}
	// POST starts it, with the body the operator sends, none, or the
	// options, and answers the progress; asked again it answers the same.
	for _, body := range [][]byte{[]byte("{}"), nil, []byte(`{"stay":true}`)} {
		ds = f.drainCall(http.MethodPost, hdr{"Content-Type": wire.JSONContentType}, body)
		if ds.Phase != wire.DrainDraining || ds.SlotsHeld != 3 || ds.Message == "" {
			t.Errorf("POST %q: %+v", body, ds)
		}
	}
	if ds = f.drainCall(http.MethodGet, nil, nil); ds.Phase != wire.DrainDraining {
		t.Errorf("GET while draining: %+v", ds)
	}
	// GET /v1/admin/node carries nothing of it: the cluster's nodeInfo
	// hook adds it (cmd/broker), and none is set here.
	resp, body := f.do(http.MethodDelete, wire.DrainPath, nil, nil)
	if ds = decodeDrain(t, resp, body); ds.Phase != wire.DrainNone {
		t.Errorf("DELETE: %+v", ds)
	}
	d.mu.Lock()
	calls := append([]string(nil), d.calls...)
	d.mu.Unlock()
	if len(calls) != 4 || calls[0] != "start" || calls[1] != "start" || calls[2] != "start stay" || calls[3] != "cancel" {
		t.Errorf("calls %v", calls)
	}

	// A body with an option it does not know is refused before anything
	// changes.
	resp, body = f.do(http.MethodPost, wire.DrainPath, nil, []byte(`{"force":true}`))
	wantProblem(t, resp, body, http.StatusBadRequest, wire.MalformedBody)
	resp, body = f.do(http.MethodPut, wire.DrainPath, nil, nil)
	wantProblem(t, resp, body, http.StatusMethodNotAllowed, wire.MethodNotAllowed)
	if resp.Header.Get("Allow") != "GET, POST, DELETE" {
		t.Errorf("Allow %q", resp.Header.Get("Allow"))
	}
	if len(d.calls) != 4 {
		t.Errorf("refused requests reached the drainer: %v", d.calls)
	}

	// A refusal of the drainer is its coded problem, the drain not begun.
	d.refuse = wire.DrainRefused.With("liveOthers", 1, "replicationFactor", 2)
	resp, body = f.do(http.MethodPost, wire.DrainPath, nil, nil)
	wantProblem(t, resp, body, http.StatusConflict, wire.DrainRefused, "liveOthers", 1)
	if ds = f.drainCall(http.MethodGet, nil, nil); ds.Phase != wire.DrainNone {
		t.Errorf("after a refusal: %+v", ds)
	}
}

// A lone broker has nothing to drain: every method answers 501
// NOT_CLUSTERED, which the operator's brokeradmin reads as "not
// supported" (404, 405 and 501 are), never as a drain begun or done.
func TestDrainOnALoneBroker(t *testing.T) {
	f := newFixture(t, Options{})
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodDelete} {
		resp, body := f.do(m, wire.DrainPath, nil, nil)
		wantProblem(t, resp, body, http.StatusNotImplemented, wire.NotClustered)
	}
	resp, body := f.do(http.MethodGet, wire.NodePath, nil, nil)
	var info map[string]any
	if err := json.Unmarshal(body, &info); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("node: %d %v %s", resp.StatusCode, err, body)
	}
	if _, ok := info["drain"]; ok {
		t.Errorf("a lone broker's node status reports a drain: %s", body)
	}
}
