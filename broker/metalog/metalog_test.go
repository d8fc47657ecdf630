package metalog

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/picomq/picomq/internal/syncbuf"
	"github.com/picomq/picomq/internal/testwait"
)

// testConfig is a single-node configuration with short timeouts, so that
// each Open elects itself in tens of milliseconds.
func testConfig(t testing.TB, dir string) Config {
	logs := &syncbuf.Buffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("raft log of %s:\n%s", dir, logs.String())
		}
	})
	return Config{
		Dir:              dir,
		NodeID:           "node-0",
		Bootstrap:        true,
		HeartbeatTimeout: 50 * time.Millisecond,
		ElectionTimeout:  50 * time.Millisecond,
		OpenTimeout:      10 * time.Second,
		LogOutput:        logs,
		LogLevel:         "debug",
	}
}

// open opens cfg with fsm and closes the Log when the test ends.
func open(t testing.TB, cfg Config, fsm *toyFSM) *Log {
	t.Helper()
	l, err := Open(cfg, fsm)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func apply(t testing.TB, l *Log, cmd []byte) any {
	t.Helper()
	resp, err := l.Apply(context.Background(), cmd)
	if err != nil {
		t.Fatalf("Apply(%s): %v", cmd, err)
	}
	return resp
}

// appliedCatchesUp reports whether AppliedIndex reaches LastIndex within a
// second. raft's main loop sets the applied index just after it hands a batch
// to the FSM goroutine, which may answer the futures first: right after an
// Apply or a Barrier returns, AppliedIndex can trail by that batch.
func appliedCatchesUp(l *Log) bool {
	return testwait.Poll(time.Second, func() bool { return l.AppliedIndex() == l.LastIndex() })
}

// within fails the test if fn does not return within d.
func within(t *testing.T, d time.Duration, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s did not return within %v", what, d)
	}
}

func TestOpenBootstrapsOneVoterLeader(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := open(t, testConfig(t, dir), newToyFSM())

	if !l.IsLeader() || l.State() != "Leader" {
		t.Fatalf("after Open: IsLeader %v, State %q; want a leader", l.IsLeader(), l.State())
	}
	if addr, id := l.Leader(); id != "node-0" || addr != "node-0" {
		t.Errorf("Leader() = (%q, %q), want (node-0, node-0): in-memory address is the node ID", addr, id)
	}
	stats := l.Stats()
	if stats["state"] != "Leader" || stats["num_peers"] != "0" {
		t.Errorf("Stats: state %q num_peers %q, want Leader and 0", stats["state"], stats["num_peers"])
	}
	// The bootstrap configuration entry is in the log and applied.
	if l.LastIndex() == 0 || !appliedCatchesUp(l) {
		t.Errorf("LastIndex %d AppliedIndex %d: want equal and non-zero after Open's barrier", l.LastIndex(), l.AppliedIndex())
	}
	for _, name := range []string{"wal/wal-meta.db", "LOCK", "snapshots"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestApplyReturnsFSMResponse(t *testing.T) {
	t.Parallel()
	l := open(t, testConfig(t, t.TempDir()), newToyFSM())

	if got := apply(t, l, mustCmd("add", "a", 5)); got != int64(5) {
		t.Fatalf("add a 5 = %v, want 5", got)
	}
	if got := apply(t, l, mustCmd("add", "a", 2)); got != int64(7) {
		t.Fatalf("add a 2 = %v, want 7", got)
	}

	// An error response is the error, exactly as the FSM returned it.
	resp, err := l.Apply(context.Background(), mustCmd("fail", "a", 0))
	if err != errToy || resp != nil {
		t.Fatalf("fail = (%v, %v), want (nil, errToy) unwrapped", resp, err)
	}
}

func TestConcurrentApply(t *testing.T) {
	t.Parallel()
	const proposers, each, keys = 64, 50, 8
	fsm := newToyFSM()
	l := open(t, testConfig(t, t.TempDir()), fsm)

	// Each proposer adds 1 to key p%keys, 50 times. Every response is the
	// counter's value right after that command, so for each key the
	// responses must be exactly 1..n, each seen once, whatever the
	// interleaving: a missing or duplicated value would mean a response
	// handed to the wrong caller, or a command applied twice or not at all.
	var mu sync.Mutex
	seen := map[string][]int64{}
	errs := make(chan error, proposers)
	var wg sync.WaitGroup
	for p := range proposers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := string(rune('a' + p%keys))
			for range each {
				resp, err := l.Apply(context.Background(), mustCmd("add", key, 1))
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				seen[key] = append(seen[key], resp.(int64))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Apply: %v", err)
	}

	perKey := proposers / keys * each
	want := map[string]int64{}
	for k := range keys {
		key := string(rune('a' + k))
		want[key] = int64(perKey)
		got := seen[key]
		slices.Sort(got)
		for i, v := range got {
			if v != int64(i+1) {
				t.Fatalf("key %s: sorted responses[%d] = %d, want %d (len %d)", key, i, v, i+1, len(got))
			}
		}
		if len(got) != perKey {
			t.Fatalf("key %s: %d responses, want %d", key, len(got), perKey)
		}
	}
	if got := fsm.state(); !maps.Equal(got, want) {
		t.Fatalf("state = %v, want %v", got, want)
	}
	if n := fsm.applies.Load(); n != proposers*each {
		t.Fatalf("FSM applied %d commands, want %d", n, proposers*each)
	}
	if n := fsm.outOfOrder(); n != 0 {
		t.Fatalf("%d entries applied out of index order", n)
	}
	if !appliedCatchesUp(l) {
		t.Fatalf("AppliedIndex %d != LastIndex %d after every Apply returned", l.AppliedIndex(), l.LastIndex())
	}
}

func TestReopenReplaysLog(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := testConfig(t, dir)

	fsm1 := newToyFSM()
	l1 := open(t, cfg, fsm1)
	for i := range 100 {
		apply(t, l1, mustCmd("add", string(rune('a'+i%5)), int64(i)))
	}
	want := fsm1.state()
	last := l1.LastIndex()
	if err := l1.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	// A fresh, empty FSM: everything must come back from the WAL.
	fsm2 := newToyFSM()
	l2 := open(t, cfg, fsm2)
	if got := fsm2.state(); !maps.Equal(got, want) {
		t.Fatalf("state after reopen = %v, want %v", got, want)
	}
	if n := fsm2.restores.Load(); n != 0 {
		t.Errorf("Restore called %d times; there is no snapshot, state must come from log replay", n)
	}
	if n := fsm2.applies.Load(); n != 100 {
		t.Errorf("replay applied %d commands, want 100", n)
	}
	if !l2.IsLeader() || l2.LastIndex() <= last {
		t.Errorf("reopened: leader %v, LastIndex %d (was %d): want leader with a new term's entry", l2.IsLeader(), l2.LastIndex(), last)
	}
	// And it goes on working.
	if got := apply(t, l2, mustCmd("add", "a", 1)); got != want["a"]+1 {
		t.Errorf("add after reopen = %v, want %d", got, want["a"]+1)
	}
}

// TestSnapshotKeeping: SnapshotKeeping compacts the log down to the entries
// it names, where a plain Snapshot keeps TrailingLogs of them, and puts
// TrailingLogs back for the snapshots after it.
func TestSnapshotKeeping(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := testConfig(t, dir)
	cfg.TrailingLogs = 1000
	fsm := newToyFSM()
	l := open(t, cfg, fsm)
	first := func() uint64 {
		t.Helper()
		i, err := l.logs.FirstIndex()
		if err != nil {
			t.Fatal(err)
		}
		return i
	}
	for i := range 200 {
		apply(t, l, mustCmd("add", "a", int64(i)))
	}
	if err := l.Snapshot(); err != nil {
		t.Fatal(err)
	}
	if f := first(); f > 1 {
		t.Fatalf("a plain snapshot of %d entries compacted the log to %d: TrailingLogs is 1000", l.LastIndex(), f)
	}
	if err := l.SnapshotKeeping(10); err != nil {
		t.Fatal(err)
	}
	last := l.LastIndex()
	if f := first(); last-f+1 > 10 {
		t.Fatalf("after SnapshotKeeping(10) the log holds %d..%d, %d entries", f, last, last-f+1)
	}
	if got := l.raft.ReloadableConfig().TrailingLogs; got != 1000 {
		t.Fatalf("TrailingLogs after SnapshotKeeping = %d, want 1000 put back", got)
	}
	// The next plain snapshot keeps TrailingLogs again.
	was := first()
	for i := range 200 {
		apply(t, l, mustCmd("add", "b", int64(i)))
	}
	if err := l.Snapshot(); err != nil {
		t.Fatal(err)
	}
	if f := first(); f != was {
		t.Fatalf("a plain snapshot after SnapshotKeeping compacted the log from %d to %d", was, f)
	}
	if err := l.SnapshotKeeping(0); err == nil {
		t.Fatal("SnapshotKeeping(0) accepted")
	}
	if got, want := fsm.state()["a"]+fsm.state()["b"], int64(2*199*200/2); got != want {
		t.Fatalf("state after compactions: a+b = %d, want %d", got, want)
	}
}

func TestSnapshotThenReopen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := testConfig(t, dir)
	// Keep few entries behind a snapshot so compaction really removes some:
	// replay must then start from the snapshot, not from index 1.
	cfg.TrailingLogs = 10

	fsm1 := newToyFSM()
	l1 := open(t, cfg, fsm1)
	for i := range 200 {
		apply(t, l1, mustCmd("add", "before", int64(i)))
	}
	if err := l1.Snapshot(); err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	// Again, twice, with nothing new: each writes a snapshot at the same
	// index, and the store keeps the two newest.
	for range 2 {
		if err := l1.Snapshot(); err != nil {
			t.Fatalf("Snapshot with nothing new: %v", err)
		}
	}
	const after = 25
	for i := range after {
		apply(t, l1, mustCmd("add", "after", int64(i)))
	}
	want := fsm1.state()
	if err := l1.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	snaps, _ := filepath.Glob(filepath.Join(dir, "snapshots", "*", "state.bin"))
	if len(snaps) != 2 {
		t.Fatalf("snapshots on disk: %v, want two (retain 2)", snaps)
	}

	fsm2 := newToyFSM()
	open(t, cfg, fsm2)
	if n := fsm2.restores.Load(); n != 1 {
		t.Fatalf("Restore called %d times, want 1", n)
	}
	// Only the entries after the snapshot are replayed on top of it.
	if n := fsm2.applies.Load(); n != after {
		t.Fatalf("replay applied %d commands after the snapshot, want %d", n, after)
	}
	if got := fsm2.state(); !maps.Equal(got, want) {
		t.Fatalf("state after reopen = %v, want %v", got, want)
	}
}

func TestApplyHonoursContext(t *testing.T) {
	fsm := newToyFSM()
	fsm.gate = make(chan struct{})
	l := open(t, testConfig(t, t.TempDir()), fsm)
	// Runs before Close (cleanups run last-in first-out): a blocked FSM
	// would keep raft's shutdown waiting.
	var openGate sync.Once
	release := func() { openGate.Do(func() { close(fsm.gate) }) }
	t.Cleanup(release)

	// The FSM is stuck in "block", so the command commits but is not
	// applied: Apply must give up when its context does, not when the FSM
	// gets going again.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := l.Apply(ctx, mustCmd("block", "k", 1))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Apply with expiring context: %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Apply returned after %v, want about 50ms", d)
	}

	// Cancellation without a deadline, on a command queued behind the
	// blocked one.
	ctx2, cancel2 := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel2)
	if _, err := l.Apply(ctx2, mustCmd("add", "k", 10)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Apply with cancelled context: %v, want Canceled", err)
	}

	// An already-ended context proposes nothing.
	if _, err := l.Apply(ctx2, mustCmd("add", "k", 100)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Apply with a context already cancelled: %v, want Canceled", err)
	}

	// As documented, the abandoned commands still apply, in order.
	release()
	if err := l.Barrier(context.Background()); err != nil {
		t.Fatalf("Barrier: %v", err)
	}
	if got := fsm.state()["k"]; got != 11 {
		t.Fatalf("k = %d after the gate opened, want 11 (both abandoned commands applied, the third never proposed)", got)
	}
}

func TestApplyAfterClose(t *testing.T) {
	t.Parallel()
	l := open(t, testConfig(t, t.TempDir()), newToyFSM())
	apply(t, l, mustCmd("add", "a", 1))
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	within(t, 2*time.Second, "Apply after Close", func() {
		if _, err := l.Apply(context.Background(), mustCmd("add", "a", 1)); !errors.Is(err, ErrClosed) {
			t.Errorf("Apply after Close: %v, want ErrClosed", err)
		}
		if err := l.Barrier(context.Background()); !errors.Is(err, ErrClosed) {
			t.Errorf("Barrier after Close: %v, want ErrClosed", err)
		}
		if err := l.Snapshot(); !errors.Is(err, ErrClosed) {
			t.Errorf("Snapshot after Close: %v, want ErrClosed", err)
		}
	})
	if l.IsLeader() || l.State() != "Shutdown" {
		t.Errorf("after Close: IsLeader %v, State %q", l.IsLeader(), l.State())
	}
}

// Close while proposers are busy: every Apply must return — none may hang on
// a proposal raft dropped during the shutdown (hashicorp/raft#498).
func TestCloseWithAppliesInFlight(t *testing.T) {
	t.Parallel()
	fsm := newToyFSM()
	l := open(t, testConfig(t, t.TempDir()), fsm)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var unexpected []error
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				_, err := l.Apply(context.Background(), mustCmd("add", "x", 1))
				if err == nil {
					continue
				}
				if !errors.Is(err, ErrClosed) && !strings.Contains(err.Error(), "leadership lost") {
					mu.Lock()
					unexpected = append(unexpected, err)
					mu.Unlock()
				}
				return
			}
		}()
	}
	// Close once the proposers are busy: some of their commands applied,
	// more in flight.
	testwait.Until(t, 10*time.Second, "the proposers' commands apply", func() bool { return fsm.applies.Load() >= 64 })
	within(t, 5*time.Second, "Close and the in-flight Applies", func() {
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		wg.Wait()
	})
	for _, err := range unexpected {
		t.Errorf("Apply during Close: %v", err)
	}
}

func TestNotBootstrappedNodeIsFollower(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, t.TempDir())
	cfg.Bootstrap = false
	var l *Log
	within(t, 2*time.Second, "Open of a node waiting to join", func() {
		l = open(t, cfg, newToyFSM())
	})
	if l.IsLeader() || l.State() != "Follower" {
		t.Fatalf("State %q, want Follower", l.State())
	}
	_, err := l.Apply(context.Background(), mustCmd("add", "a", 1))
	if !errors.Is(err, ErrNotLeader) {
		t.Fatalf("Apply on a follower: %v, want ErrNotLeader", err)
	}
	if err := l.Barrier(context.Background()); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("Barrier on a follower: %v, want ErrNotLeader", err)
	}
}

func TestTCPTransport(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := testConfig(t, dir)
	cfg.BindAddr = "127.0.0.1:0"

	fsm := newToyFSM()
	l := open(t, cfg, fsm)
	addr, id := l.Leader()
	if id != "node-0" || !strings.HasPrefix(addr, "127.0.0.1:") || addr == "127.0.0.1:0" {
		t.Fatalf("Leader() = (%q, %q), want node-0 at the bound 127.0.0.1 port", addr, id)
	}
	apply(t, l, mustCmd("add", "a", 3))
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	// Reopen on another port: the single voter is recognised by ID, so it
	// still elects itself even though the address in its configuration is
	// the old one.
	fsm2 := newToyFSM()
	open(t, cfg, fsm2)
	if got := fsm2.state()["a"]; got != 3 {
		t.Fatalf("a = %d after reopen, want 3", got)
	}
}

func TestSecondOpenOfSameDirFails(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, t.TempDir())
	open(t, cfg, newToyFSM())
	if l, err := Open(cfg, newToyFSM()); err == nil {
		_ = l.Close()
		t.Fatal("second Open of a Dir in use succeeded")
	}
}

func TestOpenRejectsBadConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for name, cfg := range map[string]Config{
		"no dir":                 {NodeID: "n"},
		"no node id":             {Dir: dir},
		"advertise without bind": {Dir: dir, NodeID: "n", Advertise: "127.0.0.1:7000"},
		"unadvertisable bind":    {Dir: dir, NodeID: "n", BindAddr: "0.0.0.0:0"},
		"unknown log level":      {Dir: dir, NodeID: "n", LogLevel: "loud"},
	} {
		cfg.LogOutput = &syncbuf.Buffer{}
		if l, err := Open(cfg, newToyFSM()); err == nil {
			_ = l.Close()
			t.Errorf("%s: Open succeeded", name)
		}
	}
	if _, err := Open(Config{Dir: dir, NodeID: "n"}, nil); err == nil {
		t.Error("nil FSM: Open succeeded")
	}
}

// A value out of range is refused, naming the field and the values, never
// adjusted: zero means the default, negative is refused, for every field.
func TestConfigRefusedByField(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ms := time.Millisecond
	for _, c := range []struct {
		name string
		cfg  Config
		want []string // in the error
	}{
		{"election below heartbeat", Config{HeartbeatTimeout: 200 * ms, ElectionTimeout: 100 * ms},
			[]string{"Config.ElectionTimeout 100ms", "Config.HeartbeatTimeout 200ms"}},
		{"default election below heartbeat", Config{HeartbeatTimeout: 2 * time.Second},
			[]string{"Config.ElectionTimeout 500ms (the default", "Config.HeartbeatTimeout 2s"}},
		{"negative heartbeat", Config{HeartbeatTimeout: -ms}, []string{"Config.HeartbeatTimeout -1ms is negative"}},
		{"negative election", Config{ElectionTimeout: -ms}, []string{"Config.ElectionTimeout -1ms is negative"}},
		{"negative snapshot interval", Config{SnapshotInterval: -time.Second}, []string{"Config.SnapshotInterval -1s is negative"}},
		{"negative open timeout", Config{OpenTimeout: -time.Second}, []string{"Config.OpenTimeout -1s is negative"}},
		{"negative append entries", Config{MaxAppendEntries: -1}, []string{"Config.MaxAppendEntries -1 is negative"}},
		{"negative segment", Config{SegmentBytes: -1}, []string{"Config.SegmentBytes -1 is negative"}},
		{"heartbeat too short", Config{HeartbeatTimeout: ms, ElectionTimeout: ms}, []string{"Config.HeartbeatTimeout 1ms", "5ms"}},
		{"snapshot interval too short", Config{SnapshotInterval: ms}, []string{"Config.SnapshotInterval 1ms", "5ms"}},
		{"too many append entries", Config{MaxAppendEntries: 5000}, []string{"Config.MaxAppendEntries 5000", "1024"}},
		{"tiny WAL segments", Config{SegmentBytes: 4096}, []string{"Config.SegmentBytes 4096", "1 MiB"}},
	} {
		c.cfg.Dir, c.cfg.NodeID, c.cfg.LogOutput = dir, "n", &syncbuf.Buffer{}
		l, err := Open(c.cfg, newToyFSM())
		if err == nil {
			_ = l.Close()
			t.Errorf("%s: Open succeeded", c.name)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v; want it to say %q", c.name, err, w)
			}
		}
	}
	// What was clamped before is now refused, and what is consistent is
	// kept as given.
	got, err := Config{Dir: dir, NodeID: "n", HeartbeatTimeout: 2 * time.Second, ElectionTimeout: 3 * time.Second}.withDefaults()
	if err != nil || got.HeartbeatTimeout != 2*time.Second || got.ElectionTimeout != 3*time.Second {
		t.Fatalf("withDefaults = %v, %v; want the timeouts as given", got, err)
	}
	got, err = Config{Dir: dir, NodeID: "n"}.withDefaults()
	if err != nil || got.HeartbeatTimeout != DefaultHeartbeatTimeout || got.ElectionTimeout != DefaultElectionTimeout ||
		got.MaxAppendEntries != DefaultMaxAppendEntries || got.SegmentBytes != DefaultSegmentBytes || got.OpenTimeout != DefaultOpenTimeout {
		t.Fatalf("withDefaults of zeros = %+v, %v; want the defaults", got, err)
	}
}

// With the default timeouts a single node still starts quickly: it waits
// 1-2x HeartbeatTimeout (500ms) before electing itself.
func TestOpenWithDefaults(t *testing.T) {
	cfg := Config{Dir: t.TempDir(), NodeID: "solo", Bootstrap: true, LogOutput: &syncbuf.Buffer{}}
	start := time.Now()
	l := open(t, cfg, newToyFSM())
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Open took %v", d)
	}
	if !l.IsLeader() {
		t.Fatalf("State %q after Open", l.State())
	}
	apply(t, l, mustCmd("add", "a", 1))
}

func TestProposeKeepsOrderWithSeveralInFlight(t *testing.T) {
	t.Parallel()
	l := open(t, testConfig(t, t.TempDir()), newToyFSM())
	var waits []func(context.Context) (any, error)
	for i := 0; i < 50; i++ {
		waits = append(waits, l.Propose(mustCmd("add", "k", 1)))
	}
	for i, w := range waits {
		res, err := w(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if res != int64(i+1) {
			t.Fatalf("proposal %d applied as %v: order lost", i, res)
		}
	}
	_ = l.Close()
	if _, err := l.Propose(mustCmd("add", "k", 1))(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Propose after Close: %v", err)
	}
}

// A proposal whose leader stepped down before it committed may still be
// applied: callers must see "outcome unknown", not a plain failure they would
// report as "not written".
func TestWrapLeadershipLostIsUnknownOutcome(t *testing.T) {
	l := &Log{}
	err := l.wrap("apply", raft.ErrLeadershipLost)
	if !errors.Is(err, ErrUnknownOutcome) || !errors.Is(err, raft.ErrLeadershipLost) {
		t.Fatalf("wrap(ErrLeadershipLost) = %v: want ErrUnknownOutcome wrapping raft.ErrLeadershipLost", err)
	}
	if errors.Is(err, ErrNotLeader) {
		t.Fatalf("wrap(ErrLeadershipLost) = %v: must not read as not-appended ErrNotLeader", err)
	}
}
