package core

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/node"
	"github.com/picomq/picomq/broker/stream"
	"github.com/picomq/picomq/internal/testwait"
)

// notOwner is the refusal the tests' Ownership answers with.
var notOwner = errs.Static(0x00_10_7F_01, "TEST_NOT_OWNER", "not this node's", "core tests: Ownership refused", 503, 75)

// testOwnership refuses the ids in refuse, and blocks MayOpen of an id in
// gate until the gate is closed.
type testOwnership struct {
	mu     sync.Mutex
	refuse map[uint64]bool
	gate   map[uint64]chan struct{}
	asked  []uint64
}

func (o *testOwnership) MayOpen(id uint64) error {
	o.mu.Lock()
	o.asked = append(o.asked, id)
	refused, gate := o.refuse[id], o.gate[id]
	o.mu.Unlock()
	if gate != nil {
		<-gate
	}
	if refused {
		return notOwner.With("stream", id)
	}
	return nil
}

// TestOwnershipRefusalWritesNothing: an append to a partition Ownership
// refuses answers the refusal and writes nothing: no open, no offsets.
func TestOwnershipRefusalWritesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	own := &testOwnership{refuse: map[uint64]bool{}}
	b := openTest(t, t.TempDir(), func(c *Config) { c.Ownership = own })
	defer b.Close()
	mustCreate(t, b, "o", node.CreateOptions{Policy: stream.PolicyValue{Partitions: 2}})
	e, _ := b.Get("o")
	own.mu.Lock()
	own.refuse[e.Partitions[1]] = true
	own.mu.Unlock()
	commands := b.fsm.Commands()
	if _, err := b.Append(ctx, "o", recs("x"), node.AppendOptions{Partition: 1}); !errors.Is(err, notOwner) {
		t.Fatalf("append to a partition not ours: %v, want the Ownership's refusal", err)
	}
	if n := b.fsm.Commands() - commands; n != 0 {
		t.Fatalf("the refused append wrote %d commands", n)
	}
	if in, _ := b.fsm.Internal(e.Partitions[1]); in.Epoch != -1 || in.End != 0 {
		t.Fatalf("refused partition %+v, want never opened and empty", in)
	}
	if _, err := b.Append(ctx, "o", recs("y"), node.AppendOptions{Partition: 0}); err != nil {
		t.Fatalf("append to a partition of ours: %v", err)
	}
}

// TestOpenLeavesTheStreamLock: while one partition's open is on its way
// (here held up in Ownership, standing for a slow metadata log), appends to
// another partition of the same stream, and reads of it, go on; appends to
// the opening partition wait for that open and do not open it again.
func TestOpenLeavesTheStreamLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	gate := make(chan struct{})
	own := &testOwnership{gate: map[uint64]chan struct{}{}}
	b := openTest(t, t.TempDir(), func(c *Config) { c.Ownership = own })
	defer b.Close()
	mustCreate(t, b, "o", node.CreateOptions{Policy: stream.PolicyValue{Partitions: 2}})
	if _, err := b.Append(ctx, "o", recs("p0"), node.AppendOptions{Partition: 0}); err != nil {
		t.Fatal(err)
	}
	e, _ := b.Get("o")
	own.mu.Lock()
	own.gate[e.Partitions[1]] = gate
	own.mu.Unlock()

	done := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := b.Append(ctx, "o", recs("p1"), node.AppendOptions{Partition: 1})
			done <- err
		}()
	}
	// Wait until an open of partition 1 is in Ownership: from then on,
	// partition 0 and reads must not wait for it.
	testwait.Until(t, 10*time.Second, "an open of partition 1 reaches Ownership", func() bool {
		own.mu.Lock()
		defer own.mu.Unlock()
		return slices.Contains(own.asked, e.Partitions[1])
	})
	tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := b.Append(tctx, "o", recs("p0 again"), node.AppendOptions{Partition: 0}); err != nil {
		t.Fatalf("append to the open partition while another opens: %v", err)
	}
	if got, _, err := b.Read(tctx, "o", 0, 0, 10, node.ReadOptions{}); err != nil || len(got) != 2 {
		t.Fatalf("read while another partition opens: %d records, %v", len(got), err)
	}
	close(gate)
	for range 2 {
		if err := <-done; err != nil {
			t.Fatalf("append to the opened partition: %v", err)
		}
	}
	checkpointed(t, b)
	in, _ := b.fsm.Internal(e.Partitions[1])
	if in.Epoch != 0 || in.End != 2 {
		t.Fatalf("partition 1 %+v: want opened once (epoch 0) holding both appends", in)
	}
}

// TestWaitingForAFailedOpenFails: a request that found an open of its
// partition in flight and waited for it learns that open's outcome. When
// it failed — a recovery that could not reach its ensemble, say — the
// waiter fails too: it must not serve a read from a state the open would
// have completed with the tail it recovers (CI's recover-member-down
// trial: a long-poll answered OFFSET_AHEAD with next=0 while the records
// it had read were only in the journals).
func TestWaitingForAFailedOpenFails(t *testing.T) {
	t.Parallel()
	own := &testOwnership{}
	b := openMember(t, t.TempDir(), func(c *Config) { c.Ownership = own })
	defer b.Close()
	mustCreate(t, b, "w", node.CreateOptions{})
	id := mustGet(t, b, "w").Partitions[0]
	n, pt, err := b.partByID(id)
	if err != nil {
		t.Fatal(err)
	}
	// An open in flight, as another request's would be.
	a := &openAttempt{done: make(chan struct{})}
	n.mu.Lock()
	pt.opening = a
	n.mu.Unlock()
	waited := make(chan error, 1)
	go func() { waited <- b.OpenForServing(context.Background(), id) }()
	// Over, failed: the attempt stays in place until the waiter has
	// looked, whether it came before or after.
	failed := errors.New("the recovery reached no read quorum")
	a.err = failed
	close(a.done)
	if err := <-waited; !errors.Is(err, failed) {
		t.Fatalf("a request waiting for an open that failed: %v, want that open's error", err)
	}
	n.mu.Lock()
	pt.opening = nil
	opened := pt.opened
	n.mu.Unlock()
	if opened {
		t.Fatal("the partition counts as opened after its open failed")
	}
	// An open that failed only because the request running it went away
	// says nothing of the partition: a waiter runs the open itself.
	a = &openAttempt{done: make(chan struct{})}
	n.mu.Lock()
	pt.opening = a
	n.mu.Unlock()
	go func() { waited <- b.OpenForServing(context.Background(), id) }()
	n.mu.Lock()
	pt.opening, a.err = nil, context.Canceled
	close(a.done)
	n.mu.Unlock()
	if err := <-waited; err != nil {
		t.Fatalf("a request waiting for an open whose requester went away: %v, want its own open", err)
	}
	n.mu.Lock()
	opened = pt.opened
	n.mu.Unlock()
	if !opened {
		t.Fatal("the waiter's own open did not open the partition")
	}
}

// TestReleaseClosesThroughTheLog: Release closes the partitions it names,
// once their admitted appends are answered — those commit under the epoch
// they were admitted at — and leaves the others open; the next append
// reopens at the next epoch.
func TestReleaseClosesThroughTheLog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := openTest(t, t.TempDir(), func(c *Config) { c.MaxHold = time.Minute })
	defer b.Close()
	mustCreate(t, b, "o", node.CreateOptions{Policy: stream.PolicyValue{Partitions: 2}})
	for p := range 2 {
		if _, err := b.Append(ctx, "o", recs("x"), node.AppendOptions{Partition: p}); err != nil {
			t.Fatal(err)
		}
	}
	e, _ := b.Get("o")
	p0, p1 := e.Partitions[0], e.Partitions[1]

	hold := b.Hold() // the next group commit waits for this release
	pd, err := b.Admit(ctx, "o", recs("admitted before the release"), node.AppendOptions{Partition: 0})
	if err != nil {
		t.Fatal(err)
	}
	released := make(chan error, 1)
	go func() { released <- b.Release(ctx, func(id uint64) bool { return id == p0 }) }()
	select {
	case err := <-released:
		t.Fatalf("Release returned (%v) before the append admitted under the old epoch was answered", err)
	case <-time.After(200 * time.Millisecond): // measures that nothing happens meanwhile
	}
	hold()
	if res, err := pd.Wait(ctx); err != nil || res.First != 1 {
		t.Fatalf("the append admitted before the release: %+v, %v; want committed at offset 1", res, err)
	}
	if err := <-released; err != nil {
		t.Fatal(err)
	}
	if in, _ := b.fsm.Internal(p0); in.Open || in.Owner != "" || in.Epoch != 0 || in.End != 2 {
		t.Fatalf("released partition %+v, want closed at epoch 0 with 2 records", in)
	}
	if in, _ := b.fsm.Internal(p1); !in.Open {
		t.Fatalf("partition not named was closed: %+v", in)
	}
	if _, err := b.Append(ctx, "o", recs("y"), node.AppendOptions{Partition: 0}); err != nil {
		t.Fatal(err)
	}
	checkpointed(t, b)
	if in, _ := b.fsm.Internal(p0); !in.Open || in.Epoch != 1 || in.End != 3 {
		t.Fatalf("after the release an append reopened %+v, want epoch 1", in)
	}
}

// TestRevokeAbortsWhatIsNotProposed: Revoke stops writing at once without
// the log: an append queued and not yet proposed is aborted (retriable,
// nothing written), and the next append reopens at the next epoch.
func TestRevokeAbortsWhatIsNotProposed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := openTest(t, t.TempDir(), func(c *Config) { c.MaxHold = time.Minute })
	defer b.Close()
	mustCreate(t, b, "o", node.CreateOptions{})
	if _, err := b.Append(ctx, "o", recs("a"), node.AppendOptions{Partition: 0}); err != nil {
		t.Fatal(err)
	}
	e, _ := b.Get("o")
	id := e.Partitions[0]
	hold := b.Hold()
	pd, err := b.Admit(ctx, "o", recs("queued"), node.AppendOptions{Partition: 0})
	if err != nil {
		t.Fatal(err)
	}
	commands := b.fsm.Commands()
	b.Revoke(func(x uint64) bool { return x == id })
	if n := b.fsm.Commands() - commands; n != 0 {
		t.Fatalf("Revoke wrote %d commands", n)
	}
	hold()
	if _, err := pd.Wait(ctx); !errors.Is(err, node.Aborted) || errs.HTTPStatus(err) != 503 {
		t.Fatalf("the queued append after a revoke: %v, want APPEND_ABORTED (503)", err)
	}
	checkpointed(t, b)
	if in, _ := b.fsm.Internal(id); in.End != 1 {
		t.Fatalf("end %d: the aborted append was written", in.End)
	}
	if res, err := b.Append(ctx, "o", recs("b"), node.AppendOptions{Partition: 0}); err != nil || res.First != 1 {
		t.Fatalf("append after the revoke: %+v, %v", res, err)
	}
	if in, _ := b.fsm.Internal(id); in.Epoch != 1 {
		t.Fatalf("epoch %d after the revoke, want the partition reopened at 1", in.Epoch)
	}
}
