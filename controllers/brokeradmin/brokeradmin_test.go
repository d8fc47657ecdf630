package brokeradmin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/picomq/picomq/broker/client"
	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/httpapi/wire"
	"github.com/picomq/picomq/broker/stream"
)

func serve(t *testing.T, h http.HandlerFunc) Broker {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return Broker{Namespace: "ns", Cluster: "demo", Pod: "demo-0", URL: srv.URL}
}

func TestStatusDecodesNodeInfoAndClusterFields(t *testing.T) {
	t.Parallel()
	b := serve(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != wire.NodePath {
			t.Errorf("%s %s", r.Method, r.URL.Path)
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"nodeId":"demo-0","raftState":"Leader","leader":"demo-0","appliedIndex":5,"lastIndex":5,"streams":3,"ready":true,
			"slotsHeld":21,"drain":{"phase":"Draining","slotsHeld":4,"openStreams":2}}`)
	})
	st, err := NewHTTP().Status(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	if st.NodeID != "demo-0" || st.Leader != "demo-0" || st.RaftState != "Leader" || !st.Ready || st.Streams != 3 ||
		st.SlotsHeld == nil || *st.SlotsHeld != 21 || st.Drain.Phase != DrainInProgress || st.Drain.SlotsHeld != 4 {
		t.Errorf("status %+v", st)
	}
	// A single-node broker reports neither slots nor drain.
	b = serve(t, func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"nodeId":"b","raftState":"Leader","leader":"b","ready":true}`)
	})
	if st, err = NewHTTP().Status(context.Background(), b); err != nil || st.SlotsHeld != nil || st.Drain.Phase != DrainNone {
		t.Errorf("single node: %+v %v", st, err)
	}
}

// What a cluster-mode broker answers, encoded with the broker's own wire
// type (cmd/broker fills it), reaches NodeStatus whole: a field renamed on
// one side fails here, not as a status that silently lacks it.
func TestStatusDecodesTheClusterBrokersNodeInfo(t *testing.T) {
	t.Parallel()
	held, under := 3, 7
	info := wire.NodeInfo{NodeID: "demo-1", RaftState: "Follower", Leader: "demo-0~aa", Ready: true,
		ClusterID: "c-42", MemberID: "demo-1~bb", Voters: []string{"demo-0~aa", "demo-1~bb", "demo-2~cc"}, NonVoters: []string{"demo-3~dd"},
		SlotsHeld: &held, Slots: []int{1, 5, 9}, UnderReplicated: &under,
		Failsafe: &wire.Failsafe{Since: time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC), Rounds: 9}}
	b := serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(info)
	})
	st, err := NewHTTP().Status(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	if st.ClusterID != "c-42" || st.MemberID != "demo-1~bb" || st.Leader != "demo-0~aa" ||
		!slices.Equal(st.Voters, info.Voters) || !slices.Equal(st.NonVoters, info.NonVoters) ||
		st.SlotsHeld == nil || *st.SlotsHeld != 3 || !slices.Equal(st.Slots, []int32{1, 5, 9}) ||
		st.UnderReplicated == nil || *st.UnderReplicated != 7 ||
		!st.FailsafeSince.Equal(info.Failsafe.Since) || st.FailsafeRounds != 9 {
		t.Errorf("status %+v", st)
	}
}

// A broker the cluster removed for good answers the node call (and only
// that) with removed, its member id and why: it reaches NodeStatus, and
// RaftState Removed alone is enough to tell.
func TestStatusDecodesARemovedBroker(t *testing.T) {
	t.Parallel()
	info := wire.NodeInfo{NodeID: "demo-2", RaftState: wire.RaftStateRemoved, ClusterID: "c-42", MemberID: "demo-2~cc",
		Removed: true, Problem: "MEMBER_REMOVED (0.16.1.14): This broker was removed from the cluster [member=demo-2~cc]"}
	b := serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(info)
	})
	st, err := NewHTTP().Status(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Removed || st.Problem != info.Problem || st.MemberID != "demo-2~cc" || st.RaftState != wire.RaftStateRemoved || st.Ready || st.SlotsHeld != nil {
		t.Errorf("status %+v", st)
	}
	b = serve(t, func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"nodeId":"demo-2","raftState":"Removed"}`)
	})
	if st, err = NewHTTP().Status(context.Background(), b); err != nil || !st.Removed {
		t.Errorf("raftState Removed without removed: %+v %v", st, err)
	}
}

func TestDrainNotSupportedIsNeverSuccess(t *testing.T) {
	t.Parallel()
	for _, code := range []int{http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusNotImplemented} {
		b := serve(t, func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(code)
			fmt.Fprint(w, `{"code":"0.16.3.6","name":"ROUTE_NOT_FOUND","message":"No such endpoint"}`)
		})
		ds, err := NewHTTP().Drain(context.Background(), b)
		if !IsNotSupported(err) || ds.Done() {
			t.Errorf("%d: drain = %+v, %v; want ErrNotSupported", code, ds, err)
		}
		if err := NewHTTP().CancelDrain(context.Background(), b); !IsNotSupported(err) {
			t.Errorf("%d: cancel = %v", code, err)
		}
	}
}

func TestDrainProgressAndRefusals(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	b := serve(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != DrainPath {
			t.Errorf("%s %s", r.Method, r.URL.Path)
		}
		if calls.Add(1) == 1 {
			fmt.Fprint(w, `{"phase":"Draining","slotsHeld":3,"openStreams":9,"message":"handing off"}`)
			return
		}
		fmt.Fprint(w, `{"phase":"Drained"}`)
	})
	a := NewHTTP()
	ds, err := a.Drain(context.Background(), b)
	if err != nil || ds.Done() || ds.SlotsHeld != 3 || !strings.Contains(ds.String(), "handing off") {
		t.Errorf("first drain: %+v %v", ds, err)
	}
	if ds, err = a.Drain(context.Background(), b); err != nil || !ds.Done() {
		t.Errorf("second drain: %+v %v", ds, err)
	}

	// A coded refusal comes back as the broker's error, not as "not
	// supported".
	b = serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", wire.ProblemContentType)
		w.WriteHeader(http.StatusServiceUnavailable)
		raw, _ := errs.Marshal(wire.NotReady.With("reason", "no metadata leader"))
		w.Write(raw)
	})
	_, err = a.Drain(context.Background(), b)
	if err == nil || IsNotSupported(err) || !errors.Is(err, wire.NotReady) {
		t.Errorf("refusal = %v, want NOT_READY", err)
	}
}

func TestUnreachableAndTimeout(t *testing.T) {
	t.Parallel()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	a := NewHTTP()
	_, err := a.Status(context.Background(), Broker{Pod: "x", URL: "http://" + addr})
	if err == nil || !IsUnreachable(err) || IsNotSupported(err) || !errors.Is(err, client.BrokerUnreachable) || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("closed port: %v, want BROKER_UNREACHABLE wrapping ECONNREFUSED", err)
	}
	if ep, _ := errs.FieldOf(err, "endpoint"); ep != "http://"+addr {
		t.Errorf("closed port: endpoint %v", ep)
	}
	// A broker that never answers: the handler returns once the client
	// has given up.
	slow := serve(t, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	a.Timeout = 100 * time.Millisecond
	start := time.Now()
	if _, err := a.Status(context.Background(), slow); err == nil || time.Since(start) > time.Second {
		t.Errorf("slow broker: %v after %s", err, time.Since(start))
	}
}

func TestClientFactoryReusesClients(t *testing.T) {
	t.Parallel()
	f := NewClientFactory()
	a, err := f.For("http://a:4437", Credentials{})
	if err != nil {
		t.Fatal(err)
	}
	a2, _ := f.For("http://a:4437", Credentials{})
	b, _ := f.For("http://b:4437", Credentials{})
	if a != a2 || a == b || f.Len() != 2 {
		t.Errorf("clients not reused per endpoint (len %d)", f.Len())
	}
	if _, err := f.For("not a url", Credentials{}); err == nil {
		t.Errorf("a bad URL was accepted")
	}
}

func TestErrorClassification(t *testing.T) {
	t.Parallel()
	nf := errs.Static(0x7f_00_00_01, "STREAM_NOT_FOUND", "m", "d", 404, 1)
	if !IsNotFound(fmt.Errorf("wrapped: %w", nf.With("name", "x"))) || IsNotFound(errors.New("STREAM_NOT_FOUND")) {
		t.Errorf("IsNotFound")
	}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	if !IsUnreachable(client.BrokerUnreachable.Wrap(refused, "endpoint", "http://demo:4437")) || !IsUnreachable(refused) {
		t.Errorf("a broker that could not be reached is unreachable")
	}
	if !IsUnreachable(fmt.Errorf("get: %w", context.DeadlineExceeded)) {
		t.Errorf("a broker that did not answer in time is unreachable")
	}
	// The stream's storage failing is the broker's answer, not a transport
	// failure: before BROKER_UNREACHABLE the client reported both so.
	if IsUnreachable(stream.StreamBackendFailed.Wrap(errors.New("connection reset by peer"), "op", "http.admin.get")) ||
		IsUnreachable(stream.StreamBackendFailed.With("op", "http.admin.get", "status", 502)) {
		t.Errorf("STREAM_BACKEND_FAILED is not unreachable")
	}
	if ErrorCode(nf) != "STREAM_NOT_FOUND" || ErrorCode(errors.New("x")) != "" {
		t.Errorf("ErrorCode")
	}
}
