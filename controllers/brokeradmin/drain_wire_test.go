package brokeradmin

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/httpapi/wire"
)

// The broker's drain answers, encoded with its own wire types, decode to
// what the operator acts on: Draining is never Done, and a lone broker's
// 501 NOT_CLUSTERED is ErrNotSupported, never a drain begun or done.
func TestDrainDecodesTheBrokersWireTypes(t *testing.T) {
	t.Parallel()
	if DrainPath != wire.DrainPath || string(DrainNone) != wire.DrainNone ||
		string(DrainInProgress) != wire.DrainDraining || string(DrainComplete) != wire.DrainDrained {
		t.Fatalf("the operator's drain path or phases differ from the broker's")
	}
	ds := wire.DrainStatus{Phase: wire.DrainDraining, Message: "owns no slot; still holds its object copies and its Raft membership"}
	b := serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", wire.JSONContentType)
		switch r.URL.Path {
		case wire.DrainPath:
			_ = json.NewEncoder(w).Encode(ds)
		case wire.NodePath:
			_ = json.NewEncoder(w).Encode(wire.NodeInfo{NodeID: "demo-2", Leader: "demo-0", Ready: true, Drain: &ds})
		}
	})
	a := NewHTTP()
	got, err := a.Drain(context.Background(), b)
	if err != nil || got.Phase != DrainInProgress || got.Done() || got.SlotsHeld != 0 || got.Message != ds.Message {
		t.Errorf("Drain = %+v, %v", got, err)
	}
	st, err := a.Status(context.Background(), b)
	if err != nil || st.Drain.Phase != DrainInProgress || st.Drain.Done() {
		t.Errorf("Status = %+v, %v: want the drain reported", st, err)
	}

	lone := serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", wire.ProblemContentType)
		w.WriteHeader(errs.HTTPStatus(wire.NotClustered))
		raw, _ := errs.Marshal(wire.NotClustered.With("path", r.URL.Path))
		_, _ = w.Write(raw)
	})
	if got, err := a.Drain(context.Background(), lone); !IsNotSupported(err) || got.Done() {
		t.Errorf("a lone broker's drain = %+v, %v; want ErrNotSupported", got, err)
	}
	if err := a.CancelDrain(context.Background(), lone); !IsNotSupported(err) {
		t.Errorf("a lone broker's cancel = %v; want ErrNotSupported", err)
	}
}
