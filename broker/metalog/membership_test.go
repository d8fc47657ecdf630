package metalog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/picomq/picomq/internal/testwait"
)

// clusterConfig is node i of a test cluster: a TCP transport on a free
// loopback port, timeouts short enough for elections and transfers to take
// tens of milliseconds, long enough for a loaded test machine not to lose
// a leader it has (the lease is half the heartbeat timeout).
func clusterConfig(t testing.TB, i int) Config {
	cfg := testConfig(t, t.TempDir())
	cfg.NodeID = fmt.Sprintf("node-%d", i)
	cfg.BindAddr = "127.0.0.1:0"
	cfg.Bootstrap = i == 0
	cfg.HeartbeatTimeout = 200 * time.Millisecond
	cfg.ElectionTimeout = 200 * time.Millisecond
	return cfg
}

// servers is a configuration's servers as "id@address/suffrage" strings.
func servers(c Configuration) []string {
	var out []string
	for _, s := range c.Servers {
		out = append(out, fmt.Sprintf("%s@%s/%s", s.ID, s.Address, s.Suffrage))
	}
	return out
}

func member(l *Log, id string, s Suffrage) string {
	return fmt.Sprintf("%s@%s/%s", id, l.Addr(), s)
}

func configOf(t testing.TB, l *Log) Configuration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := l.Configuration(ctx)
	if err != nil {
		t.Fatalf("Configuration: %v", err)
	}
	return c
}

// A lone node's configuration is itself, a voter, set by the bootstrap
// entry — also once that entry is compacted away behind a snapshot, and
// after a restart. AddVoter on its own ID re-addresses it.
func TestConfigurationOfASingleNode(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, t.TempDir())
	cfg.TrailingLogs = 10
	l := open(t, cfg, newToyFSM())
	c := configOf(t, l)
	if want := []string{"node-0@node-0/voter"}; !slices.Equal(servers(c), want) || c.Index != 1 {
		t.Fatalf("Configuration = %v at %d, want %v at 1 (the bootstrap entry)", servers(c), c.Index, want)
	}
	if got := c.Voters(); !slices.Equal(got, []string{"node-0"}) {
		t.Fatalf("Voters = %v", got)
	}
	if s, ok := c.Server("node-0"); !ok || s.Suffrage != Voter || s.Address != l.Addr() {
		t.Fatalf("Server(node-0) = %+v, %v", s, ok)
	}
	if _, ok := c.Server("node-1"); ok {
		t.Fatal("Server(node-1) found")
	}

	for i := range 100 {
		apply(t, l, mustCmd("add", "k", int64(i)))
	}
	if err := l.Snapshot(); err != nil {
		t.Fatal(err)
	}
	if first, err := l.logs.FirstIndex(); err != nil || first <= 1 {
		t.Fatalf("the log starts at %d (%v) after the snapshot: the bootstrap entry is not compacted, the test does not read the snapshot", first, err)
	}
	if c := configOf(t, l); !slices.Equal(servers(c), []string{"node-0@node-0/voter"}) || c.Index != 1 {
		t.Fatalf("Configuration from the snapshot = %v at %d, want the bootstrap's", servers(c), c.Index)
	}

	// Re-address through AddVoter on the known ID: a new entry.
	ctx := context.Background()
	if err := l.AddVoter(ctx, "node-0", "elsewhere"); err != nil {
		t.Fatal(err)
	}
	c = configOf(t, l)
	if !slices.Equal(servers(c), []string{"node-0@elsewhere/voter"}) || c.Index <= 100 {
		t.Fatalf("Configuration after AddVoter = %v at %d, want node-0 at its new address, at a new index", servers(c), c.Index)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Configuration(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("Configuration after Close: %v, want ErrClosed", err)
	}

	// Reopened, the configuration comes back from the log.
	l2 := open(t, cfg, newToyFSM())
	if c2 := configOf(t, l2); !slices.Equal(servers(c2), servers(c)) || c2.Index != c.Index {
		t.Fatalf("after reopen = %v at %d, want %v at %d", servers(c2), c2.Index, servers(c), c.Index)
	}
	// The last voter can be neither removed nor demoted.
	if err := l2.RemoveServer(ctx, "node-0"); err == nil {
		t.Fatal("RemoveServer of the only voter succeeded")
	}
	if err := l2.DemoteVoter(ctx, "node-0"); err == nil {
		t.Fatal("DemoteVoter of the only voter succeeded")
	}
	// Leadership has nowhere to go.
	if err := l2.TransferLeadership(ctx, ""); !errors.Is(err, ErrNotVoter) {
		t.Fatalf("TransferLeadership with no other voter: %v, want ErrNotVoter", err)
	}
	if err := l2.TransferLeadership(ctx, "node-0"); err != nil || !l2.IsLeader() {
		t.Fatalf("TransferLeadership to the leader itself: %v (leader %v), want nothing to do", err, l2.IsLeader())
	}
	for name, err := range map[string]error{
		"AddNonvoter without ID":      l2.AddNonvoter(ctx, "", "a:1"),
		"AddNonvoter without address": l2.AddNonvoter(ctx, "n", ""),
		"AddVoter without address":    l2.AddVoter(ctx, "n", ""),
		"Promote without ID":          l2.Promote(ctx, ""),
	} {
		if err == nil {
			t.Errorf("%s succeeded", name)
		}
	}
}

// The life of a three-node cluster over TCP: node 0 bootstraps alone, nodes
// 1 and 2 start empty and join as non-voters, replicate, are promoted;
// leadership moves to node 2, which demotes and removes node 0. A follower
// refuses every change with ErrNotLeader, and Configuration follows each
// step on every node.
func TestClusterMembership(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var nodes []*Log
	var fsms []*toyFSM
	for i := range 3 {
		fsm := newToyFSM()
		nodes, fsms = append(nodes, open(t, clusterConfig(t, i), fsm)), append(fsms, fsm)
	}
	n0, n1, n2 := nodes[0], nodes[1], nodes[2]
	for _, n := range nodes {
		if !strings.HasPrefix(n.Addr(), "127.0.0.1:") || strings.HasSuffix(n.Addr(), ":0") {
			t.Fatalf("Addr() = %q, want the bound loopback port", n.Addr())
		}
	}
	if !n0.IsLeader() {
		t.Fatalf("node 0: %s after Open, want the leader of its own cluster", n0.State())
	}
	c := configOf(t, n0)
	if want := []string{member(n0, "node-0", Voter)}; !slices.Equal(servers(c), want) || c.Index == 0 {
		t.Fatalf("node 0's configuration = %v at %d, want %v", servers(c), c.Index, want)
	}
	for _, n := range nodes[1:] {
		if c := configOf(t, n); len(c.Servers) != 0 || c.Index != 0 {
			t.Fatalf("a node never added has configuration %v at %d, want none", servers(c), c.Index)
		}
	}

	// step checks that the leader, on[0], has the configuration want at an
	// index above the previous step's, and that the other nodes in on reach
	// it.
	last := c.Index
	step := func(what string, on []*Log, want ...string) {
		t.Helper()
		c := configOf(t, on[0])
		if !slices.Equal(servers(c), want) || c.Index <= last {
			t.Fatalf("%s: configuration %v at %d, want %v above %d", what, servers(c), c.Index, want, last)
		}
		for _, n := range on[1:] {
			testwait.Until(t, 10*time.Second, what+": a follower has the configuration", func() bool {
				got := configOf(t, n)
				return slices.Equal(servers(got), want) && got.Index == c.Index
			})
		}
		last = c.Index
	}
	// replicated checks that the command applied on leader reaches the FSMs
	// of every node in on.
	replicated := func(leader *Log, key string, val int64, on ...*toyFSM) {
		t.Helper()
		if got, err := leader.Apply(ctx, mustCmd("add", key, val)); err != nil || got != val {
			t.Fatalf("Apply on the leader = %v, %v", got, err)
		}
		for _, f := range on {
			testwait.Until(t, 10*time.Second, "the command is applied on a follower", func() bool { return f.state()[key] == val })
		}
	}

	// Join as non-voters: the log reaches them, the quorum stays node 0.
	for i, n := range nodes[1:] {
		if err := n0.AddNonvoter(ctx, fmt.Sprintf("node-%d", i+1), n.Addr()); err != nil {
			t.Fatalf("AddNonvoter node-%d: %v", i+1, err)
		}
	}
	step("non-voters added", nodes,
		member(n0, "node-0", Voter), member(n1, "node-1", Nonvoter), member(n2, "node-2", Nonvoter))
	replicated(n0, "a", 5, fsms[1], fsms[2])

	// Refusals. A follower refuses every change, appending nothing.
	for name, err := range map[string]error{
		"AddNonvoter":                  n1.AddNonvoter(ctx, "node-9", "127.0.0.1:1"),
		"AddVoter":                     n1.AddVoter(ctx, "node-9", "127.0.0.1:1"),
		"Promote":                      n1.Promote(ctx, "node-2"),
		"DemoteVoter":                  n1.DemoteVoter(ctx, "node-0"),
		"RemoveServer":                 n1.RemoveServer(ctx, "node-2"),
		"TransferLeadership":           n1.TransferLeadership(ctx, "node-0"),
		"TransferLeadership to anyone": n1.TransferLeadership(ctx, ""),
	} {
		if !errors.Is(err, ErrNotLeader) {
			t.Errorf("%s on a follower: %v, want ErrNotLeader", name, err)
		} else if !strings.Contains(err.Error(), "the leader is node-0 at "+n0.Addr()) {
			t.Errorf("%s on a follower: %v, want it to name the leader", name, err)
		}
	}
	if err := n0.Promote(ctx, "node-9"); !errors.Is(err, ErrUnknownServer) {
		t.Errorf("Promote of a stranger: %v, want ErrUnknownServer", err)
	}
	if err := n0.TransferLeadership(ctx, "node-9"); !errors.Is(err, ErrUnknownServer) {
		t.Errorf("TransferLeadership to a stranger: %v, want ErrUnknownServer", err)
	}
	if err := n0.TransferLeadership(ctx, "node-1"); !errors.Is(err, ErrNotVoter) {
		t.Errorf("TransferLeadership to a non-voter: %v, want ErrNotVoter", err)
	}
	if err := n0.TransferLeadership(ctx, ""); !errors.Is(err, ErrNotVoter) {
		t.Errorf("TransferLeadership with no other voter: %v, want ErrNotVoter", err)
	}
	if c := configOf(t, n0); c.Index != last {
		t.Fatalf("the refusals changed the configuration: index %d, was %d", c.Index, last)
	}

	// Promote: three voters.
	for _, id := range []string{"node-1", "node-2"} {
		if err := n0.Promote(ctx, id); err != nil {
			t.Fatalf("Promote %s: %v", id, err)
		}
	}
	step("promoted", nodes, member(n0, "node-0", Voter), member(n1, "node-1", Voter), member(n2, "node-2", Voter))
	if err := n0.Promote(ctx, "node-1"); err != nil {
		t.Fatalf("Promote of a voter: %v, want nothing to do", err)
	}
	if c := configOf(t, n0); c.Index != last {
		t.Fatalf("promoting a voter appended a configuration: index %d, was %d", c.Index, last)
	}
	replicated(n0, "b", 7, fsms[1], fsms[2])

	// Hand leadership to node 2.
	if err := n0.TransferLeadership(ctx, "node-2"); err != nil {
		t.Fatalf("TransferLeadership to node-2: %v", err)
	}
	testwait.Until(t, 10*time.Second, "node 2 leads and every node knows it", func() bool {
		if !n2.IsLeader() {
			return false
		}
		for _, n := range nodes {
			if _, id := n.Leader(); id != "node-2" {
				return false
			}
		}
		return true
	})
	if err := n0.AddNonvoter(ctx, "node-9", "127.0.0.1:1"); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("AddNonvoter on the former leader: %v, want ErrNotLeader", err)
	}
	if _, err := n0.Apply(ctx, mustCmd("add", "c", 1)); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("Apply on the former leader: %v, want ErrNotLeader", err)
	}
	replicated(n2, "c", 9, fsms[0], fsms[1])

	// Node 0 leaves: demoted first (add before remove, and a removed voter
	// must not campaign), then removed.
	if err := n2.DemoteVoter(ctx, "node-0"); err != nil {
		t.Fatalf("DemoteVoter node-0: %v", err)
	}
	step("node 0 demoted", []*Log{n2, n0, n1}, member(n0, "node-0", Nonvoter), member(n1, "node-1", Voter), member(n2, "node-2", Voter))
	if err := n2.RemoveServer(ctx, "node-0"); err != nil {
		t.Fatalf("RemoveServer node-0: %v", err)
	}
	step("node 0 removed", []*Log{n2, n1}, member(n1, "node-1", Voter), member(n2, "node-2", Voter))
	// Removing it again changes nothing but succeeds: a retry is safe.
	if err := n2.RemoveServer(ctx, "node-0"); err != nil {
		t.Fatalf("RemoveServer of a removed server: %v", err)
	}
	if c := configOf(t, n2); !slices.Equal(servers(c), []string{member(n1, "node-1", Voter), member(n2, "node-2", Voter)}) {
		t.Fatalf("after the second removal: %v", servers(c))
	}
	// The log goes on without node 0: it received the entry removing it,
	// and nothing after.
	replicated(n2, "d", 11, fsms[1])
	if got := fsms[0].state()["d"]; got != 0 {
		t.Fatalf("the removed node applied an entry after its removal (d = %d)", got)
	}
	testwait.Until(t, 10*time.Second, "the removed node has the entry removing it", func() bool {
		_, listed := configOf(t, n0).Server("node-0")
		return !listed
	})
}
