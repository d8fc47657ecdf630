package core

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/picomq/picomq/broker/diskio"
	"github.com/picomq/picomq/broker/journal"
	"github.com/picomq/picomq/broker/meta"
	"github.com/picomq/picomq/broker/node"
	"github.com/picomq/picomq/internal/testwait"
)

// fakePeers are a member's ensemble peers as real journals in this
// process, each of which can be made unreachable.
type fakePeers struct {
	self     string
	mu       sync.Mutex
	journals map[string]*journal.Journal
	down     map[string]bool
	// gone are left out of the ensembles chosen (removed or draining).
	gone map[string]bool
	// onFence, when set, runs as each fence arrives, before it is made.
	onFence func()
	// gate, when set for a member, holds each object sent to it until
	// closed (a member restarting: its journal takes the object later).
	gate map[string]chan struct{}
	held int // objects waiting at a gate
}

// hold makes objects sent to id wait until the returned release.
func (p *fakePeers) hold(id string) (release func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gate == nil {
		p.gate = map[string]chan struct{}{}
	}
	g := make(chan struct{})
	p.gate[id] = g
	return sync.OnceFunc(func() {
		p.mu.Lock()
		delete(p.gate, id)
		p.mu.Unlock()
		close(g)
	})
}

func (p *fakePeers) heldObjects() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held
}

func newFakePeers(t *testing.T, self string, ids ...string) *fakePeers {
	t.Helper()
	p := &fakePeers{self: self, journals: map[string]*journal.Journal{}, down: map[string]bool{}, gone: map[string]bool{}}
	for _, id := range ids {
		dir := filepath.Join(t.TempDir(), id)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		j, err := journal.Open(journal.DirOn(dir, diskio.OS), journal.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { j.Close() })
		p.journals[id] = j
	}
	return p
}

func (p *fakePeers) setDown(id string, down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down[id] = down
}

// setGone leaves id out of the ensembles chosen from now on (or takes it
// back).
func (p *fakePeers) setGone(id string, gone bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gone[id] = gone
}

// openOnPeers opens a cluster member in a new directory whose ensembles
// are peers' journals, checkpointing only when a test asks; it is closed
// when the test ends.
func openOnPeers(t *testing.T, peers *fakePeers) *Broker {
	t.Helper()
	b := openMember(t, t.TempDir(), func(c *Config) { c.CheckpointInterval, c.Peers = time.Hour, peers })
	t.Cleanup(func() { b.Close() })
	return b
}

// onlyGone is Reensemble's view of the members when member alone is gone,
// as how says.
func onlyGone(member string, how Gone) func(string) Gone {
	return func(m string) Gone {
		if m == member {
			return how
		}
		return Here
	}
}

func (p *fakePeers) reach(id string) (*journal.Journal, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down[id] {
		return nil, fmt.Errorf("%s: connection refused", id)
	}
	j, ok := p.journals[id]
	if !ok {
		return nil, fmt.Errorf("%s: no such member", id)
	}
	return j, nil
}

func (p *fakePeers) Ensemble() ([]string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := []string{p.self}
	for id := range p.journals {
		if !p.gone[id] && len(out) < 3 {
			out = append(out, id)
		}
	}
	slices.Sort(out[1:])
	return out, nil
}

func (p *fakePeers) Append(ctx context.Context, member string, o journal.Object) error {
	p.mu.Lock()
	g := p.gate[member]
	if g != nil {
		p.held++
	}
	p.mu.Unlock()
	if g != nil {
		<-g
		p.mu.Lock()
		p.held--
		p.mu.Unlock()
	}
	j, err := p.reach(member)
	if err != nil {
		return err
	}
	return j.Append(o)
}

func (p *fakePeers) Fence(ctx context.Context, member string, stream uint64, epoch int64) ([]journal.Ref, error) {
	p.mu.Lock()
	hook := p.onFence
	p.mu.Unlock()
	if hook != nil {
		hook()
	}
	j, err := p.reach(member)
	if err != nil {
		return nil, err
	}
	return j.Fence(stream, epoch)
}

func (p *fakePeers) Read(ctx context.Context, member string, id uint64) (journal.Object, error) {
	j, err := p.reach(member)
	if err != nil {
		return journal.Object{}, err
	}
	parts, payload, err := j.Read(id)
	return journal.Object{ID: id, Parts: parts, Payload: payload}, err
}

// FetchFrame reads a frame from the first replica whose journal holds its
// object, as the replication handler serves it (Broker.JournalFrame).
func (p *fakePeers) FetchFrame(object uint64, replicas []string, pos, n int64) ([]byte, error) {
	for _, m := range replicas {
		j, err := p.reach(m)
		if err != nil {
			continue
		}
		if frames, ok := journalFrames(j, object); ok {
			if _, payload, ok := frameAt(frames, object, pos, n); ok {
				return payload, nil
			}
		}
	}
	return nil, fmt.Errorf("object %d: no replica of %v holds it", object, replicas)
}

// TestEnsembleTailRecoveredFromPeers: on the ensemble path an
// acknowledged append is in its peers' journals before any checkpoint;
// when its owner's process dies with it only there — and its own journal
// is lost too —, the next open fences the ensemble, adopts the tail from a
// read quorum (one peer down), makes it readable here and commits it with
// the open: nothing acknowledged is lost, the producer state carries over.
func TestEnsembleTailRecoveredFromPeers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	peers := newFakePeers(t, "m-0~test", "p1", "p2")
	mod := func(c *Config) {
		c.CheckpointInterval, c.Peers, c.AckTimeout, c.Fetcher = time.Hour, peers, 2*time.Second, peers
		c.Cluster.Number = 1 // its ids reserved on disk, as a member's are
	}
	b := openMember(t, dir, mod)
	ctx := context.Background()
	mustCreate(t, b, "s", node.CreateOptions{})
	appendNumbered(t, b, "s", 0, 5)
	checkpointed(t, b)
	appendNumbered(t, b, "s", 5, 10)
	p := &node.ProducerTuple{ID: "p", Epoch: 1, Seq: 0}
	if _, err := b.Append(ctx, "s", recs("rec-15"), node.AppendOptions{Partition: -1, Producer: p}); err != nil {
		t.Fatal(err)
	}
	id := mustGet(t, b, "s").Partitions[0]
	in, _ := b.fsm.Internal(id)
	if in.End != 5 || !slices.Equal(in.Ensemble, []string{"m-0~test", "p1", "p2"}) {
		t.Fatalf("state before the crash: end %d ensemble %v; want 5 and the ensemble", in.End, in.Ensemble)
	}
	held := 0
	for _, pid := range []string{"p1", "p2"} {
		if refs := peers.journals[pid].Objects(id); len(refs) > 0 {
			held++
		}
	}
	if held == 0 {
		t.Fatal("no peer holds the acknowledged tail")
	}
	stopWithoutCheckpoint(t, b)
	if err := os.RemoveAll(journalDir(dir)); err != nil {
		t.Fatal(err)
	}
	peers.setDown("p2", true)

	b = openMember(t, dir, mod)
	defer b.Close()
	// The first append reopens the partition: the recovery runs then.
	if res, err := b.Append(ctx, "s", recs("rec-16"), node.AppendOptions{Partition: -1}); err != nil || res.First != 16 {
		t.Fatalf("the first append after the crash: %+v, %v; want offset 16", res, err)
	}
	got := readAll(t, b, "s", 0)
	if len(got) != 17 {
		t.Fatalf("%d records after the recovery, want 17", len(got))
	}
	for i, e := range got[:16] {
		if string(e.Record.Payload) != fmt.Sprintf("rec-%d", i) || int(e.Offset) != i {
			t.Fatalf("record %d: offset %d %q", i, e.Offset, e.Record.Payload)
		}
	}
	in, _ = b.fsm.Internal(id)
	if in.Epoch != 1 || in.End < 16 {
		t.Fatalf("after the recovering open: epoch %d end %d; want epoch 1, end past 16", in.Epoch, in.End)
	}
	res, err := b.Append(ctx, "s", recs("rec-15"), node.AppendOptions{Partition: -1, Producer: p})
	if err != nil || !res.Duplicate {
		t.Fatalf("retry of the recovered producer append: %+v, %v; want a duplicate", res, err)
	}
	// The old epoch is fenced on the peers that answered: an object of it
	// is refused there.
	if err := peers.journals["p1"].Append(journal.Object{ID: 1 << 40, Parts: []journal.Part{{Stream: id, Epoch: 0, First: 17, Count: 1}}, Payload: []byte("x")}); !errors.Is(err, journal.Fenced) {
		t.Fatalf("an old epoch's object after the recovery: %v, want JOURNAL_FENCED", err)
	}
}

// TestEnsembleQuorumLostIsOutcomeUnknown: an object that cannot reach a
// write quorum answers its appends APPEND_OUTCOME_UNKNOWN after the ack
// timeout — never acknowledged, never "nothing written" — and once the
// peers are back the stream reopens at a new epoch, its offsets
// continuing whatever the recovery adopted.
func TestEnsembleQuorumLostIsOutcomeUnknown(t *testing.T) {
	t.Parallel()
	peers := newFakePeers(t, "m-0~test", "p1", "p2")
	b := openMember(t, t.TempDir(), func(c *Config) {
		c.CheckpointInterval, c.Peers, c.AckTimeout = time.Hour, peers, 300*time.Millisecond
	})
	defer b.Close()
	ctx := context.Background()
	mustCreate(t, b, "s", node.CreateOptions{})
	appendNumbered(t, b, "s", 0, 3)
	peers.setDown("p1", true)
	appendNumbered(t, b, "s", 3, 2) // a quorum of 2 of 3 still answers
	peers.setDown("p2", true)
	if _, err := b.Append(ctx, "s", recs("lost?"), node.AppendOptions{Partition: -1}); !errors.Is(err, node.OutcomeUnknown) {
		t.Fatalf("an append with no write quorum: %v, want APPEND_OUTCOME_UNKNOWN", err)
	}
	peers.setDown("p1", false)
	peers.setDown("p2", false)
	res, err := b.Append(ctx, "s", recs("after"), node.AppendOptions{Partition: -1})
	if err != nil {
		t.Fatal(err)
	}
	got := readAll(t, b, "s", 0)
	if int(res.First) != len(got)-1 || (res.First != 5 && res.First != 6) {
		t.Fatalf("the append after the peers came back got offset %d of %d records; want 5 or 6 (the unknown one adopted or not)", res.First, len(got))
	}
	for i, e := range got[:5] {
		if string(e.Record.Payload) != fmt.Sprintf("rec-%d", i) {
			t.Fatalf("record %d: %q", i, e.Record.Payload)
		}
	}
	id := mustGet(t, b, "s").Partitions[0]
	if in, _ := b.fsm.Internal(id); in.Epoch < 1 {
		t.Fatalf("epoch %d after the lost quorum; want a new one", in.Epoch)
	}
}

// TestReensembleReplacesAGoneMember: a member of an owner's ensemble
// gone (draining, here) is replaced by a reopen — the appends admitted
// finish first, the open at the next epoch recovers from the old ensemble
// and records the new one — and appends go on to the new members, the
// gone one receiving nothing more.
func TestReensembleReplacesAGoneMember(t *testing.T) {
	t.Parallel()
	peers := newFakePeers(t, "m-0~test", "p1", "p2", "p3")
	peers.setGone("p3", true) // the ensemble starts as m-0, p1, p2
	b := openOnPeers(t, peers)
	ctx := context.Background()
	mustCreate(t, b, "s", node.CreateOptions{})
	appendNumbered(t, b, "s", 0, 5)
	id := mustGet(t, b, "s").Partitions[0]
	if in, _ := b.fsm.Internal(id); !slices.Equal(in.Ensemble, []string{"m-0~test", "p1", "p2"}) {
		t.Fatalf("first ensemble %v", in.Ensemble)
	}
	if n, err := b.Reensemble(ctx, onlyGone("p2", Down)); err != nil || n != 0 {
		t.Fatalf("with no replacement live: moved %d, %v; want nothing moved", n, err)
	}
	peers.setGone("p3", false)
	peers.setGone("p2", true)
	if n, err := b.Reensemble(ctx, onlyGone("p2", Down)); err != nil || n != 1 {
		t.Fatalf("moved %d, %v; want the one partition moved", n, err)
	}
	in, _ := b.fsm.Internal(id)
	if !slices.Equal(in.Ensemble, []string{"m-0~test", "p1", "p3"}) || in.Epoch != 1 || in.End != 5 {
		t.Fatalf("after the move: ensemble %v epoch %d end %d", in.Ensemble, in.Epoch, in.End)
	}
	before := len(peers.journals["p2"].Objects(id))
	appendNumbered(t, b, "s", 5, 5)
	checkNumbered(t, b, "s", 10)
	if after := len(peers.journals["p2"].Objects(id)); after != before {
		t.Fatalf("the member replaced received %d more objects", after-before)
	}
	if len(peers.journals["p3"].Objects(id)) == 0 {
		t.Fatal("the new member received nothing")
	}
	if n := b.EnsemblesNaming("p2"); n != 0 {
		t.Fatalf("%d open partitions still name the replaced member", n)
	}
}

// TestOwnJournalFencedIsNoStorageFailure: an owner whose own journal a
// newer epoch fenced (a new owner's recovery, while this one was paused)
// answers the appends it had in flight APPEND_OUTCOME_UNKNOWN and latches
// nothing: its other streams go on, and the fenced one reopens.
func TestOwnJournalFencedIsNoStorageFailure(t *testing.T) {
	t.Parallel()
	peers := newFakePeers(t, "m-0~test", "p1", "p2")
	b := openOnPeers(t, peers)
	ctx := context.Background()
	mustCreate(t, b, "s", node.CreateOptions{})
	mustCreate(t, b, "other", node.CreateOptions{})
	appendNumbered(t, b, "s", 0, 2)
	appendNumbered(t, b, "other", 0, 2)
	id := mustGet(t, b, "s").Partitions[0]
	if _, err := b.journal.Fence(id, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Append(ctx, "s", recs("fenced"), node.AppendOptions{Partition: -1}); !errors.Is(err, node.OutcomeUnknown) {
		t.Fatalf("an append the own journal refused: %v, want APPEND_OUTCOME_UNKNOWN", err)
	}
	appendNumbered(t, b, "other", 2, 2)
	checkNumbered(t, b, "other", 4)
	res, err := b.Append(ctx, "s", recs("after"), node.AppendOptions{Partition: -1})
	if err != nil {
		t.Fatalf("the fenced stream after its reopen: %v", err)
	}
	// The unknown one is kept or not — its peers had it, so the reopen's
	// recovery may adopt it —, and the next continues whichever it was.
	var got []string
	for _, e := range readAll(t, b, "s", 0) {
		got = append(got, string(e.Record.Payload))
	}
	want := []string{"rec-0", "rec-1", "after"}
	if res.First == 3 {
		want = []string{"rec-0", "rec-1", "fenced", "after"}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("records %q (the next append at %d), want %q", got, res.First, want)
	}
}

// TestClusterDirectoryOfTheLogPathOpensOnEnsembles: a member's data
// directory written by the previous release — every group commit through
// the metadata log, no journal — opens on the ensemble path: what it
// acknowledged reads back at its offsets, producer state carries over,
// and the stream's next open records an ensemble, its appends going to
// the peers' journals.
func TestClusterDirectoryOfTheLogPathOpensOnEnsembles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	number := func(c *Config) { c.Cluster.Number = 1 }
	old := openMember(t, dir, number, func(c *Config) { c.LogCommits = true })
	ctx := context.Background()
	mustCreate(t, old, "s", node.CreateOptions{})
	appendNumbered(t, old, "s", 0, 5)
	p := &node.ProducerTuple{ID: "p", Epoch: 1, Seq: 0}
	if _, err := old.Append(ctx, "s", recs("rec-5"), node.AppendOptions{Partition: -1, Producer: p}); err != nil {
		t.Fatal(err)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(journalDir(dir)); err == nil {
		t.Fatal("the log path wrote a journal: the fixture is not the previous release's")
	}

	peers := newFakePeers(t, "m-0~test", "p1", "p2")
	b := openMember(t, dir, number, func(c *Config) { c.CheckpointInterval, c.Peers = time.Hour, peers })
	defer b.Close()
	checkNumbered(t, b, "s", 6)
	if res, err := b.Append(ctx, "s", recs("rec-5"), node.AppendOptions{Partition: -1, Producer: p}); err != nil || !res.Duplicate {
		t.Fatalf("the previous release's producer append retried: %+v, %v; want a duplicate", res, err)
	}
	appendNumbered(t, b, "s", 6, 3)
	checkNumbered(t, b, "s", 9)
	id := mustGet(t, b, "s").Partitions[0]
	if in, _ := b.fsm.Internal(id); len(in.Ensemble) != 3 {
		t.Fatalf("the reopened stream's ensemble %v, want three members", in.Ensemble)
	}
	if len(peers.journals["p1"].Objects(id)) == 0 {
		t.Fatal("the new build's appends did not reach the ensemble's journals")
	}
}

// TestReensembleLeavesALeaverEvenForASmallerEnsemble: a member leaving
// for good (draining out, removed) is replaced even when no broker is
// left to take its place — the cluster shrinks, and its drain must end —
// while one only down is not (it may come back; a smaller ensemble would
// stall sooner).
func TestReensembleLeavesALeaverEvenForASmallerEnsemble(t *testing.T) {
	t.Parallel()
	peers := newFakePeers(t, "m-0~test", "p1", "p2")
	b := openOnPeers(t, peers)
	ctx := context.Background()
	mustCreate(t, b, "s", node.CreateOptions{})
	appendNumbered(t, b, "s", 0, 3)
	id := mustGet(t, b, "s").Partitions[0]
	peers.setGone("p2", true) // the ensemble chosen now: m-0, p1
	if n, err := b.Reensemble(ctx, onlyGone("p2", Down)); err != nil || n != 0 {
		t.Fatalf("a member down, no replacement: moved %d, %v; want none", n, err)
	}
	if n, err := b.Reensemble(ctx, onlyGone("p2", Leaving)); err != nil || n != 1 {
		t.Fatalf("a member leaving: moved %d, %v; want the partition", n, err)
	}
	if in, _ := b.fsm.Internal(id); !slices.Equal(in.Ensemble, []string{"m-0~test", "p1"}) {
		t.Fatalf("ensemble %v after the leaver went, want m-0~test and p1", in.Ensemble)
	}
	if n := b.EnsemblesNaming("p2"); n != 0 {
		t.Fatalf("%d open partitions still name the leaver", n)
	}
	appendNumbered(t, b, "s", 3, 2)
	checkNumbered(t, b, "s", 5)
}

// TestOpenCatchesUpWithTheCommittedProducerState: an open leaves the
// provisional producer state no older than the committed one, even when
// it was older before the open and the open moved nothing past where the
// partition stood. A rollback does that: an append fenced by a
// re-ensemble's open while that open ran resets the provisional state to
// the entry as it was before the open, and the recovery adopted the
// append. The producer's retry must then be answered as the repeat it is
// — written again, the log refused it in the next checkpoint and every
// append after it (e2e's TestDrainingBrokerKilled under -race:
// PRODUCER_SEQ_GAP, acknowledged appends lost).
func TestOpenCatchesUpWithTheCommittedProducerState(t *testing.T) {
	t.Parallel()
	peers := newFakePeers(t, "m-0~test", "p1", "p2")
	b := openOnPeers(t, peers)
	ctx := context.Background()
	mustCreate(t, b, "s", node.CreateOptions{})
	p := &node.ProducerTuple{ID: "p", Epoch: 1, Seq: 0}
	if _, err := b.Append(ctx, "s", recs("once"), node.AppendOptions{Partition: -1, Producer: p}); err != nil {
		t.Fatal(err)
	}
	if err := b.checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	// What the rollback leaves: the provisional state of before the
	// append, the partition taken out of service at the same end.
	n, err := b.stream("s")
	if err != nil {
		t.Fatal(err)
	}
	n.mu.Lock()
	delete(n.producers, "p")
	n.mu.Unlock()
	n.takeOpen(func(uint64) bool { return true })

	res, err := b.Append(ctx, "s", recs("once"), node.AppendOptions{Partition: -1, Producer: p})
	if err != nil || !res.Duplicate {
		t.Fatalf("the producer's retry: %+v, %v; want answered as a repeat", res, err)
	}
	next, err := b.Append(ctx, "s", recs("then"), node.AppendOptions{Partition: -1, Producer: &node.ProducerTuple{ID: "p", Epoch: 1, Seq: 1}})
	if err != nil || next.First != 1 {
		t.Fatalf("the next append: %+v, %v; want it at offset 1", next, err)
	}
	refused := testutil.ToFloat64(b.cfg.Metrics.CheckpointRefused)
	if err := b.checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(b.cfg.Metrics.CheckpointRefused) - refused; got != 0 {
		t.Fatalf("the checkpoint refused %v acknowledged appends", got)
	}
}

// TestReensembleGrowsASmallerEnsemble: a partition opened while one
// member was away has an ensemble of two; once a third is live again, the
// re-ensemble reopens it on three, so that its new objects have R copies
// (CI's TestOperatorKilledMidDrain: after a scale from 2 back to 3, the
// partitions that kept their ensembles of two wrote objects the repair
// copied to a third member one by one, never catching up).
func TestReensembleGrowsASmallerEnsemble(t *testing.T) {
	t.Parallel()
	peers := newFakePeers(t, "m-0~test", "p1", "p2")
	peers.setGone("p2", true)
	b := openOnPeers(t, peers)
	ctx := context.Background()
	mustCreate(t, b, "s", node.CreateOptions{})
	appendNumbered(t, b, "s", 0, 3)
	id := mustGet(t, b, "s").Partitions[0]
	if in, _ := b.fsm.Internal(id); !slices.Equal(in.Ensemble, []string{"m-0~test", "p1"}) {
		t.Fatalf("opened with p2 away: ensemble %v, want m-0~test and p1", in.Ensemble)
	}
	nobody := func(string) Gone { return Here }
	if n, err := b.Reensemble(ctx, nobody); err != nil || n != 0 {
		t.Fatalf("no larger ensemble to be had: moved %d, %v; want none", n, err)
	}
	peers.setGone("p2", false)
	if n, err := b.Reensemble(ctx, nobody); err != nil || n != 1 {
		t.Fatalf("p2 live again: moved %d, %v; want the partition", n, err)
	}
	in, _ := b.fsm.Internal(id)
	if !slices.Equal(in.Ensemble, []string{"m-0~test", "p1", "p2"}) || in.Epoch != 1 || in.End != 3 {
		t.Fatalf("after growing: ensemble %v epoch %d end %d; want all three at epoch 1, end 3", in.Ensemble, in.Epoch, in.End)
	}
	if n, err := b.Reensemble(ctx, nobody); err != nil || n != 0 {
		t.Fatalf("grown already: moved %d, %v; want none", n, err)
	}
	appendNumbered(t, b, "s", 3, 2)
	checkNumbered(t, b, "s", 5)
	// Acknowledged on a write quorum (this member and p1): p2's copy went
	// out at the same moment, and may land just after the answer.
	testwait.Until(t, 10*time.Second, "the appends after growing in p2's journal", func() bool {
		return len(peers.journals["p2"].Objects(id)) > 0
	})
}

// TestReensembleMovesWhatAnEarlierProcessLeftOpen: a partition an earlier
// process of this member opened — killed before it closed it, and no
// append came since — is still open in the log on its old ensemble, and
// no process here has it open. When a member of that ensemble leaves, the
// re-ensemble opens it here at the next epoch on the new ensemble,
// recovering its tail, so that the leaver's drain can end (CI's
// TestStreamClusterScaleDownDrainsRealBrokers waited for it forever).
func TestReensembleMovesWhatAnEarlierProcessLeftOpen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	peers := newFakePeers(t, "m-0~test", "p1", "p2")
	mod := func(c *Config) {
		c.CheckpointInterval, c.Peers, c.Fetcher = time.Hour, peers, peers
		c.Cluster.Number = 1
	}
	b := openMember(t, dir, mod)
	ctx := context.Background()
	mustCreate(t, b, "s", node.CreateOptions{})
	appendNumbered(t, b, "s", 0, 4)
	id := mustGet(t, b, "s").Partitions[0]
	stopWithoutCheckpoint(t, b)

	b = openMember(t, dir, mod)
	defer b.Close()
	if in, _ := b.fsm.Internal(id); !in.Open || !slices.Contains(in.Ensemble, "p2") {
		t.Fatalf("after the restart: open %v ensemble %v; want left open on an ensemble naming p2", in.Open, in.Ensemble)
	}
	peers.setGone("p2", true)
	if n := b.EnsemblesNaming("p2"); n != 1 {
		t.Fatalf("p2's drain waits for %d partitions, want the one left open", n)
	}
	if n, err := b.Reensemble(ctx, onlyGone("p2", Leaving)); err != nil || n != 1 {
		t.Fatalf("moved %d, %v; want the partition left open", n, err)
	}
	in, _ := b.fsm.Internal(id)
	if !in.Open || slices.Contains(in.Ensemble, "p2") || in.Epoch != 1 || in.End != 4 {
		t.Fatalf("after the move: open %v ensemble %v epoch %d end %d; want open at epoch 1 without p2, end 4", in.Open, in.Ensemble, in.Epoch, in.End)
	}
	if n := b.EnsemblesNaming("p2"); n != 0 {
		t.Fatalf("%d open partitions still name the leaver", n)
	}
	appendNumbered(t, b, "s", 4, 2)
	checkNumbered(t, b, "s", 6)
}

// TestOpenBuiltAgainWhenTheEndMovedUnderItsRecovery: the appends a
// reopen's recovery finds past the stream's end may be checkpointed by
// their owner's previous process (a hand-off) between the recovery's read
// of the state and the open's apply; the log refuses that open
// (OFFSET_MISMATCH), and the opener builds it again from the state as it
// is now, adopting nothing twice — it is not handed to the appends
// waiting for the open (a rolling restart's planned move refused them).
func TestOpenBuiltAgainWhenTheEndMovedUnderItsRecovery(t *testing.T) {
	t.Parallel()
	peers := newFakePeers(t, "m-0~test", "p1", "p2", "p3")
	peers.setGone("p3", true) // the ensemble starts as m-0, p1, p2
	b := openOnPeers(t, peers)
	ctx := context.Background()
	mustCreate(t, b, "s", node.CreateOptions{})
	appendNumbered(t, b, "s", 0, 5)
	checkpointed(t, b)
	appendNumbered(t, b, "s", 5, 5) // acknowledged, in the tail only
	id := mustGet(t, b, "s").Partitions[0]
	// The tail's checkpoint is held back and lands while the reopen's
	// recovery fences the ensemble, as a previous owner's late one does.
	late := b.tail.take()
	b.tail.drop(len(late))
	var once sync.Once
	peers.mu.Lock()
	peers.onFence = func() {
		once.Do(func() {
			if err := b.applyCheckpoint(ctx, late); err != nil {
				t.Errorf("the late checkpoint: %v", err)
			}
		})
	}
	peers.mu.Unlock()
	peers.setGone("p3", false)
	peers.setGone("p2", true)
	if n, err := b.Reensemble(ctx, onlyGone("p2", Leaving)); err != nil || n != 1 {
		t.Fatalf("reopened %d, %v; want the partition reopened", n, err)
	}
	in, _ := b.fsm.Internal(id)
	if in.Epoch != 1 || in.End != 10 || !slices.Equal(in.Ensemble, []string{"m-0~test", "p1", "p3"}) {
		t.Fatalf("after the reopen: epoch %d end %d ensemble %v; want 1, 10, the new ensemble", in.Epoch, in.End, in.Ensemble)
	}
	appendNumbered(t, b, "s", 10, 2)
	checkNumbered(t, b, "s", 12)
}

// reopenBeatenByAnotherOpen writes five appends to stream "s" on a member,
// then moves it off p2 (Reensemble) while, at the reopen's first fence,
// owner's open of it lands in the log first — with the slot lost to this
// member from then on when slotLost. It returns the member, the
// partition, the epoch owner's open made (0: it never ran) and
// Reensemble's error.
func reopenBeatenByAnotherOpen(t *testing.T, owner string, slotLost bool) (*Broker, uint64, int64, error) {
	t.Helper()
	peers := newFakePeers(t, "m-0~test", "p1", "p2", "p3")
	peers.setGone("p3", true)
	own := &testOwnership{refuse: map[uint64]bool{}}
	b := openMember(t, t.TempDir(), func(c *Config) { c.CheckpointInterval, c.Peers, c.Ownership = time.Hour, peers, own })
	t.Cleanup(func() { b.Close() })
	ctx := context.Background()
	mustCreate(t, b, "s", node.CreateOptions{})
	appendNumbered(t, b, "s", 0, 5)
	id := mustGet(t, b, "s").Partitions[0]
	var once sync.Once
	var other int64
	peers.mu.Lock()
	peers.onFence = func() {
		once.Do(func() {
			if slotLost {
				own.mu.Lock()
				own.refuse[id] = true
				own.mu.Unlock()
			}
			in, _ := b.fsm.Internal(id)
			expect := in.Epoch
			if _, err := b.apply(ctx, &meta.Command{Op: meta.OpOpen, Open: &meta.Open{Stream: id, Owner: owner, Expect: &expect}}); err != nil {
				t.Errorf("the other owner's open: %v", err)
			}
			other = expect + 1
		})
	}
	peers.mu.Unlock()
	peers.setGone("p3", false)
	peers.setGone("p2", true)
	_, err := b.Reensemble(ctx, onlyGone("p2", Leaving))
	return b, id, other, err
}

// TestOpenLostToAnotherOwnerIsTheSlotsRefusal: an open that another
// owner's open beat to the log (STALE_EPOCH: refused before anything of it
// applied), with the slot no longer this broker's, answers the Ownership's
// refusal — the one a router sends to the slot's next owner — not the
// stale epoch (a rolling restart's planned move refused an append so).
func TestOpenLostToAnotherOwnerIsTheSlotsRefusal(t *testing.T) {
	t.Parallel()
	// The slot's next owner opens it first; this broker's Lease is gone.
	b, id, _, err := reopenBeatenByAnotherOpen(t, "m-9~next", true)
	if !errors.Is(err, notOwner) {
		t.Fatalf("an open another owner's beat to the log: %v, want the Ownership's refusal", err)
	}
	if in, _ := b.fsm.Internal(id); in.Owner != "m-9~next" || in.Epoch != 1 {
		t.Fatalf("after the lost open: owner %s epoch %d, want m-9~next at 1", in.Owner, in.Epoch)
	}
}

// TestOpenBuiltAgainWhenAnotherOwnersOpenCameFirst: an open refused
// STALE_EPOCH because another owner's open landed between its read and
// its apply — while the slot is still this broker's (a slot handed off and
// back in a rolling restart, the other holder's open still in flight when
// it let go) — is built again at the epoch now current, fencing that open,
// instead of answering the writes STALE_EPOCH (the rolling-restart trial
// saw one refused so).
func TestOpenBuiltAgainWhenAnotherOwnersOpenCameFirst(t *testing.T) {
	t.Parallel()
	// Another broker's open, sent while it still held the slot, lands
	// now; the slot stays this broker's.
	b, id, other, err := reopenBeatenByAnotherOpen(t, "m-9~before", false)
	if err != nil {
		t.Fatalf("a reopen whose epoch another owner's open took first: %v, want it built again", err)
	}
	if other == 0 {
		t.Fatal("the other owner's open never ran: the reopen fenced nothing")
	}
	in, _ := b.fsm.Internal(id)
	if in.Owner != "m-0~test" || in.Epoch != other+1 {
		t.Fatalf("after the reopen: owner %s epoch %d, want m-0~test at %d (past the other owner's)", in.Owner, in.Epoch, other+1)
	}
	appendNumbered(t, b, "s", 5, 3)
	checkNumbered(t, b, "s", 8)
}

// TestOpenWaitsForTheAppendsOfTheEpochItEnds: while a reopen (an ensemble
// change) waits for a partition's appends in flight — one member of a
// two-member ensemble is slow to take their object, as a member
// restarting is —, an append arriving meanwhile waits for the reopen; it
// never opens the partition itself, whose recovery would fence the slow
// member and answer the appends in flight APPEND_OUTCOME_UNKNOWN although
// their object reaches its quorum a moment later (the rolling-restart
// trial saw four answered so).
func TestOpenWaitsForTheAppendsOfTheEpochItEnds(t *testing.T) {
	t.Parallel()
	peers := newFakePeers(t, "m-0~test", "p1", "p2")
	peers.setGone("p2", true) // the ensemble: m-0 and p1, both needed
	// The held object waits for p1, not for the ack timeout.
	b := openMember(t, t.TempDir(), func(c *Config) { c.CheckpointInterval, c.Peers, c.AckTimeout = time.Hour, peers, time.Minute })
	t.Cleanup(func() { b.Close() })
	ctx := context.Background()
	mustCreate(t, b, "s", node.CreateOptions{})
	appendNumbered(t, b, "s", 0, 3)
	n, err := b.stream("s")
	if err != nil {
		t.Fatal(err)
	}
	pt := n.parts[0]
	fenced := make(chan struct{}, 16)
	peers.mu.Lock()
	peers.onFence = func() { fenced <- struct{}{} }
	peers.mu.Unlock()

	release := peers.hold("p1")
	defer release()
	first := make(chan error, 1)
	go func() {
		_, err := b.Append(ctx, "s", recs("rec-3"), node.AppendOptions{Partition: -1})
		first <- err
	}()
	testwait.Until(t, 10*time.Second, "the append held at p1", func() bool { return peers.heldObjects() == 1 })

	// p1 leaves: the partition moves to m-0 and p2 once its append in
	// flight is answered.
	peers.setGone("p1", true)
	peers.setGone("p2", false)
	moved := make(chan error, 1)
	go func() {
		_, err := b.Reensemble(ctx, onlyGone("p1", Leaving))
		moved <- err
	}()
	testwait.Until(t, 10*time.Second, "the partition out of service", func() bool {
		n.mu.Lock()
		defer n.mu.Unlock()
		return !pt.opened && n.releasing == 1
	})
	second := make(chan error, 1)
	go func() {
		_, err := b.Append(ctx, "s", recs("rec-4"), node.AppendOptions{Partition: -1})
		second <- err
	}()
	// The second append either waits for the answer of the first (two
	// waiting) or, as it did, opens the partition and fences p1.
	testwait.Until(t, 10*time.Second, "the second append waiting, or a fence", func() bool {
		if len(fenced) > 0 {
			return true
		}
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.releasing == 2
	})
	release()
	answer := func(what string, ch <-chan error) error {
		t.Helper()
		select {
		case err := <-ch:
			return err
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: no answer in 30 s", what)
			return nil
		}
	}
	if err := answer("the append in flight", first); err != nil {
		t.Fatalf("the append in flight when the partition moved: %v, want it acknowledged once p1 took its object", err)
	}
	if err := answer("Reensemble", moved); err != nil {
		t.Fatalf("Reensemble: %v", err)
	}
	if err := answer("the append that came while it moved", second); err != nil {
		t.Fatalf("the append that came while it moved: %v", err)
	}
	checkNumbered(t, b, "s", 5)
	if in, _ := b.fsm.Internal(pt.id); !slices.Equal(in.Ensemble, []string{"m-0~test", "p2"}) {
		t.Fatalf("ensemble %v after the move, want [m-0~test p2]", in.Ensemble)
	}
}

// TestEnsemblesNeedingCountsTwoMemberEnsembles: a member stopping waits
// for the open partitions whose ensemble cannot reach its write quorum
// without it — two members, one of them it — and for no other: a
// three-member ensemble still has its quorum while one is away, and an
// owner is never waited for (its own partitions are handed off).
func TestEnsemblesNeedingCountsTwoMemberEnsembles(t *testing.T) {
	t.Parallel()
	peers := newFakePeers(t, "m-0~test", "p1", "p2")
	b := openMember(t, t.TempDir(), func(c *Config) { c.CheckpointInterval, c.Peers = time.Hour, peers })
	t.Cleanup(func() { b.Close() })
	ctx := context.Background()
	mustCreate(t, b, "three", node.CreateOptions{})
	appendNumbered(t, b, "three", 0, 2) // opened on m-0, p1, p2
	peers.setGone("p2", true)
	mustCreate(t, b, "two", node.CreateOptions{})
	appendNumbered(t, b, "two", 0, 2) // opened on m-0, p1
	for member, want := range map[string]int{"p1": 1, "p2": 0, "m-0~test": 0} {
		if n := b.EnsemblesNeeding(member); n != want {
			t.Errorf("EnsemblesNeeding(%s) = %d, want %d", member, n, want)
		}
	}
	// p1 stops: its owner moves the two-member partition to m-0 and p2.
	peers.setGone("p2", false)
	peers.setGone("p1", true)
	if _, err := b.Reensemble(ctx, onlyGone("p1", Leaving)); err != nil {
		t.Fatal(err)
	}
	if n := b.EnsemblesNeeding("p1"); n != 0 {
		t.Fatalf("after the move %d partitions still need p1", n)
	}
	checkNumbered(t, b, "two", 2)
}

// TestOpenRefusedAtOnceWhenTheSlotLeft: an append to a partition this
// broker no longer may open gets the Ownership's refusal at once — it does
// not wait for the appends still in flight at the old epoch (which wait
// for a slow member, here until released) as an open would.
func TestOpenRefusedAtOnceWhenTheSlotLeft(t *testing.T) {
	t.Parallel()
	peers := newFakePeers(t, "m-0~test", "p1", "p2")
	peers.setGone("p2", true)
	own := &testOwnership{refuse: map[uint64]bool{}}
	b := openMember(t, t.TempDir(), func(c *Config) {
		c.CheckpointInterval, c.Peers, c.Ownership, c.AckTimeout = time.Hour, peers, own, time.Minute
	})
	t.Cleanup(func() { b.Close() })
	ctx := context.Background()
	mustCreate(t, b, "s", node.CreateOptions{})
	appendNumbered(t, b, "s", 0, 2)
	id := mustGet(t, b, "s").Partitions[0]
	release := peers.hold("p1")
	defer release()
	first := make(chan error, 1)
	go func() {
		_, err := b.Append(ctx, "s", recs("rec-2"), node.AppendOptions{Partition: -1})
		first <- err
	}()
	testwait.Until(t, 10*time.Second, "the append held at p1", func() bool { return peers.heldObjects() == 1 })
	// The slot is lost: writing stops at once.
	own.mu.Lock()
	own.refuse[id] = true
	own.mu.Unlock()
	b.Revoke(func(x uint64) bool { return x == id })
	second := make(chan error, 1)
	go func() {
		_, err := b.Append(ctx, "s", recs("rec-3"), node.AppendOptions{Partition: -1})
		second <- err
	}()
	select {
	case err := <-second:
		if !errors.Is(err, notOwner) {
			t.Fatalf("an append after the slot left: %v, want the Ownership's refusal", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("an append after the slot left waited for the appends in flight at the old epoch")
	}
	if peers.heldObjects() != 1 {
		t.Fatal("the first append is no longer held: the test proved nothing")
	}
	release()
	<-first // answered however its epoch's end made it; only the wait is under test
}

// TestReplicaSetsNameNoMemberThatNeverHeldTheObject: a checkpoint names
// the members an object was sent to that hold it or are still being sent
// it (a member restarting gets it once back), never one that refused it;
// one that refuses it after the checkpoint named it is taken out of the
// set by the owner (repair counts each name as a copy, and copies from
// it). A member out of an object's set holds a dead copy in its journal.
func TestReplicaSetsNameNoMemberThatNeverHeldTheObject(t *testing.T) {
	t.Parallel()
	peers, b, sid := onThreeMembers(t)
	ctx := context.Background()
	named := func() map[uint64][]string { return objectSets(b) }
	// appendCheckpointed appends one record and checkpoints it, returning
	// its object and the set the checkpoint named.
	appendCheckpointed := func(rec int) (uint64, []string) {
		t.Helper()
		before := named()
		appendNumbered(t, b, "s", rec, 1)
		if err := b.checkpoint(ctx); err != nil {
			t.Fatal(err)
		}
		var id uint64
		var set []string
		for o, r := range named() {
			if _, ok := before[o]; !ok {
				if id != 0 {
					t.Fatalf("two new objects (%d, %d): want one an append", id, o)
				}
				id, set = o, r
			}
		}
		if id == 0 {
			t.Fatal("the checkpoint named no new object")
		}
		return id, set
	}
	all, quorum := []string{"m-0~test", "p1", "p2"}, []string{"m-0~test", "p1"}

	// p2 has not answered at the checkpoint (restarting): named.
	release := peers.hold("p2")
	_, set := appendCheckpointed(0)
	release()
	if !slices.Equal(set, all) {
		t.Fatalf("straggler still being sent the object: replicas %v, want %v", set, all)
	}

	// p2 refuses it at once (fenced past the epoch): not named.
	if err := fenceNextEpoch(peers, b, sid, "p2"); err != nil {
		t.Fatal(err)
	}
	// (Its refusal may be read just after the quorum, and the checkpoint
	// taken first: then the owner takes p2 out after it.)
	refused, _ := appendCheckpointed(1)
	testwait.NoError(t, 10*time.Second, "p2, which refused it, not named", func() error {
		if got := named()[refused]; !slices.Equal(got, quorum) {
			return fmt.Errorf("replicas %v, want %v", got, quorum)
		}
		return nil
	})

	// p2 refuses it after the checkpoint named it: taken out.
	release = peers.hold("p2")
	defer release()
	id, set := appendCheckpointed(2)
	if !slices.Equal(set, all) {
		t.Fatalf("straggler still being sent the object: replicas %v, want %v", set, all)
	}
	release() // p2's journal, fenced, refuses it now
	testwait.NoError(t, 10*time.Second, "p2 out of the object's set", func() error {
		if got := named()[id]; !slices.Equal(got, quorum) {
			return fmt.Errorf("replicas %v, want %v", got, quorum)
		}
		return nil
	})

	// A member the set does not name holds a dead copy, once its parts
	// are checkpointed; the owner's is needed.
	parts, ok := b.journal.Parts(id)
	if !ok {
		t.Fatalf("object %d not in the owner's journal index", id)
	}
	b.fsm.View(func(s *meta.State) {
		p2 := &Broker{cfg: Config{Cluster: &ClusterConfig{MemberID: "p2"}}} // the state as p2 sees it
		if needed, dead := p2.journalObjectState(s, id, parts); needed || !dead {
			t.Errorf("a copy of object %d on p2, which its set %v does not name: needed %v, dead %v; want dead", id, s.Objects[id].Replicas, needed, dead)
		}
		if needed, dead := b.journalObjectState(s, id, parts); !needed || dead {
			t.Errorf("the owner's copy of object %d: needed %v, dead %v; want needed", id, needed, dead)
		}
	})
}

// TestACloseLetsTheStragglersAnswerFirst: a hand-off closes a partition
// whose last object p2 has not answered yet; p2 then refuses it (fenced,
// as the next owner's open would). The close waits for the answer, so its
// checkpoint names only the members that hold the object — a stopping
// owner would not be there to take the name out afterwards.
func TestACloseLetsTheStragglersAnswerFirst(t *testing.T) {
	t.Parallel()
	peers, b, sid := onThreeMembers(t)
	release := peers.hold("p2")
	defer release()
	appendNumbered(t, b, "s", 0, 1)
	go func() {
		time.Sleep(100 * time.Millisecond) // the close is waiting by then
		if err := fenceNextEpoch(peers, b, sid, "p2"); err != nil {
			t.Error(err)
		}
		release() // p2's journal refuses the object now
	}()
	if err := b.Release(context.Background(), func(id uint64) bool { return id == sid }); err != nil {
		t.Fatal(err)
	}
	sets := objectSets(b)
	if len(sets) != 1 {
		t.Fatalf("%d objects in the state, want the one append's", len(sets))
	}
	for id, set := range sets {
		if want := []string{"m-0~test", "p1"}; !slices.Equal(set, want) {
			t.Errorf("object %d: the close's checkpoint names %v, want %v (p2 refused it)", id, set, want)
		}
	}
}

// onThreeMembers opens a member whose ensemble is itself, p1 and p2, and
// creates stream "s" on it; it returns the peers, the member and the
// stream's partition.
func onThreeMembers(t *testing.T) (*fakePeers, *Broker, uint64) {
	t.Helper()
	peers := newFakePeers(t, "m-0~test", "p1", "p2")
	b := openOnPeers(t, peers)
	mustCreate(t, b, "s", node.CreateOptions{})
	return peers, b, mustGet(t, b, "s").Partitions[0]
}

// objectSets are the replica sets of the objects b's state holds.
func objectSets(b *Broker) map[uint64][]string {
	out := map[uint64][]string{}
	b.fsm.View(func(s *meta.State) {
		for id, o := range s.Objects {
			out[id] = slices.Clone(o.Replicas)
		}
	})
	return out
}

// fenceNextEpoch fences member's journal for partition id past its epoch
// now, as the partition's next owner's open would: member refuses the
// objects of that epoch from then on.
func fenceNextEpoch(peers *fakePeers, b *Broker, id uint64, member string) error {
	in, _ := b.fsm.Internal(id)
	_, err := peers.journals[member].Fence(id, in.Epoch+1)
	return err
}
