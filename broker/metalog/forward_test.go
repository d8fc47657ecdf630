package metalog

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/picomq/picomq/internal/testwait"
)

// namedNet is a test peer network: nodes are dialled by name, resolved at
// each dial through a table the test may change (a node restarted on a new
// port), as DNS names are in a StatefulSet.
type namedNet struct {
	mu    sync.Mutex
	addrs map[string]string // name -> host:port
	logs  map[string]*Log   // for the in-process Forwarder
}

func newNamedNet() *namedNet {
	return &namedNet{addrs: map[string]string{}, logs: map[string]*Log{}}
}

// network listens on a fresh port for name.
func (n *namedNet) network(t testing.TB, name string) *Network {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n.mu.Lock()
	n.addrs[name] = ln.Addr().String()
	n.mu.Unlock()
	return &Network{
		Listener:  ln,
		Advertise: name,
		Dial: func(ctx context.Context, addr string) (net.Conn, error) {
			n.mu.Lock()
			real, ok := n.addrs[addr]
			n.mu.Unlock()
			if !ok {
				return nil, fmt.Errorf("no such node %q", addr)
			}
			var d net.Dialer
			return d.DialContext(ctx, "tcp", real)
		},
	}
}

// forward is a Forwarder that hands entries to the leader's Log in
// process, as the peer API does over HTTP.
func (n *namedNet) forward(ctx context.Context, addr, id string, entries [][]byte) ([]error, error) {
	n.mu.Lock()
	l := n.logs[id]
	n.mu.Unlock()
	if l == nil {
		return nil, fmt.Errorf("%w: %s is gone", ErrNotLeader, id)
	}
	return l.AcceptForwarded(ctx, entries)
}

func (n *namedNet) open(t testing.TB, i int, dir string, bootstrap bool) (*Log, *toyFSM) {
	t.Helper()
	cfg := testConfig(t, dir)
	cfg.NodeID = fmt.Sprintf("node-%d", i)
	cfg.Bootstrap = bootstrap
	cfg.HeartbeatTimeout = 200 * time.Millisecond
	cfg.ElectionTimeout = 200 * time.Millisecond
	cfg.Network = n.network(t, cfg.NodeID)
	cfg.Forward = n.forward
	fsm := newToyFSM()
	l := open(t, cfg, fsm)
	n.mu.Lock()
	n.logs[cfg.NodeID] = l
	n.mu.Unlock()
	return l, fsm
}

// TestFollowersForwardCommands: on a three-node cluster whose addresses
// are names, a follower's Apply and Propose go through the leader and
// answer with the follower's own state machine's result, having applied
// it; a follower's proposals keep their order; a node restarted on a new
// port is still reached by name; after the leader goes, the next one
// takes the forwarded commands; with no quorum a forwarded command fails
// instead of hanging.
func TestFollowersForwardCommands(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	n := newNamedNet()
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	logs := make([]*Log, 3)
	fsms := make([]*toyFSM, 3)
	logs[0], fsms[0] = n.open(t, 0, dirs[0], true)
	for i := 1; i < 3; i++ {
		logs[i], fsms[i] = n.open(t, i, dirs[i], false)
		if err := logs[0].AddNonvoter(ctx, string(logs[i].self), logs[i].Addr()); err != nil {
			t.Fatal(err)
		}
		if err := logs[0].Promote(ctx, string(logs[i].self)); err != nil {
			t.Fatal(err)
		}
	}
	if addr := configOf(t, logs[0]).Servers[1].Address; addr != "node-1" {
		t.Fatalf("the configuration holds %q for node-1, want its name", addr)
	}

	res, err := logs[1].Apply(ctx, mustCmd("add", "k", 1))
	if err != nil || res != int64(1) {
		t.Fatalf("forwarded Apply = %v, %v; want 1", res, err)
	}
	if got := fsms[1].state()["k"]; got != 1 {
		t.Fatalf("the follower's state holds %d when its Apply returned, want 1", got)
	}

	// A follower's proposals apply in the order it made them.
	waits := make([]func(context.Context) (any, error), 200)
	for i := range waits {
		waits[i] = logs[2].Propose(mustCmd("add", "k", 1))
	}
	for i, w := range waits {
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		res, err := w(wctx)
		cancel()
		if err != nil || res != int64(i+2) {
			t.Fatalf("proposal %d = %v, %v; want %d (in order)", i, res, err, i+2)
		}
	}
	// A state machine refusal comes back as the error, from the follower.
	if _, err := logs[1].Apply(ctx, mustCmd("fail", "", 0)); !errors.Is(err, errToy) {
		t.Fatalf("forwarded refusal = %v, want the FSM's error", err)
	}

	// node-2 restarts on another port: reached by its name, it catches up.
	if err := logs[2].Close(); err != nil {
		t.Fatal(err)
	}
	logs[2], fsms[2] = n.open(t, 2, dirs[2], false)
	apply(t, logs[0], mustCmd("add", "k", 1))
	if !testwait.Poll(10*time.Second, func() bool { return fsms[2].state()["k"] == 202 }) {
		t.Fatalf("the restarted node-2 holds %v (applied %d, last %d; leader's last %d), want k=202", fsms[2].state(), logs[2].AppliedIndex(), logs[2].LastIndex(), logs[0].LastIndex())
	}

	// The leader goes: the next leader takes the forwarded commands.
	if err := logs[0].Close(); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 10*time.Second, "a new leader", func() bool { return logs[1].IsLeader() || logs[2].IsLeader() })
	follower := logs[1]
	if follower.IsLeader() {
		follower = logs[2]
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	res, err = follower.Apply(wctx, mustCmd("add", "k", 1))
	cancel()
	if err != nil || res != int64(203) {
		t.Fatalf("forwarded to the new leader = %v, %v; want 203", res, err)
	}

	// Only one node left: no quorum, and the command fails in time.
	leader := logs[1]
	if follower == logs[1] {
		leader = logs[2]
	}
	if err := leader.Close(); err != nil {
		t.Fatal(err)
	}
	wctx, cancel = context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	start := time.Now()
	if _, err := follower.Apply(wctx, mustCmd("add", "k", 1)); err == nil {
		t.Fatal("a command was answered with no quorum")
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Fatalf("the command without quorum failed after %v, want within its context's 2s", waited)
	}
}
