package repair

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/picomq/picomq/broker/meta"
	"github.com/picomq/picomq/broker/replication"
	"github.com/picomq/picomq/internal/syncbuf"
)

// fakeCluster keeps objects as the log would: Commit is meta's replicas
// command, refused unless the set is the one planned on.
type fakeCluster struct {
	mu      sync.Mutex
	state   *meta.State
	members []Member
	copies  map[uint64][]string // who holds a file of each object
	failTo  string              // copies to this member fail
	held    error               // CanMove's answer
	copied  int                 // copies made
	// named: a set may name a member without a file (repair must cope);
	// otherwise a copy from one is a planning bug.
	named bool
	tried []string // the sources of every copy asked for
}

func (f *fakeCluster) CanMove() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.held
}

func (f *fakeCluster) IsLeader() bool { return true }
func (f *fakeCluster) R() int         { return 2 }
func (f *fakeCluster) Members() []Member {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.members)
}

func (f *fakeCluster) Objects() []Object {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Object
	for id, o := range f.state.Objects {
		out = append(out, Object{ID: id, Size: o.Size, Replicas: slices.Clone(o.Replicas)})
	}
	slices.SortFunc(out, func(a, b Object) int { return int(a.ID) - int(b.ID) })
	return out
}

func (f *fakeCluster) Copy(_ context.Context, id uint64, from, to string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if to == f.failTo {
		return context.DeadlineExceeded
	}
	f.tried = append(f.tried, from)
	if !slices.Contains(f.copies[id], from) {
		if !f.named {
			panic("copy from a member without a file")
		}
		// As CopyBetween fails when the source's peer answers that it
		// holds no copy (the refusal wrapped).
		return replication.ReplicaUnavailable.Wrap(replication.ReplicaNotFound.With("object", id), "object", id, "member", from, "reason", "the source's copy could not be read")
	}
	f.copies[id] = append(f.copies[id], to)
	f.copied++
	return nil
}

func (f *fakeCluster) Commit(_ context.Context, id uint64, old, new []string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, m := range new {
		if !slices.Contains(f.copies[id], m) {
			panic("a set naming a member without a durable copy")
		}
	}
	if err, ok := f.state.Apply(&meta.Command{Op: meta.OpReplicas, Replicas: &meta.Replicas{Object: id, Old: old, New: new}}).(error); ok {
		return err
	}
	return nil
}

// onAAndB is a cluster's state with objects 1..n, each of 10 bytes, held
// by members a and b (its members left to the test).
func onAAndB(n int) (*meta.State, *fakeCluster) {
	st := meta.NewState()
	f := &fakeCluster{state: st, copies: map[uint64][]string{}}
	for id := uint64(1); id <= uint64(n); id++ {
		st.Objects[id] = &meta.Object{ID: id, Size: 10, Replicas: []string{"a", "b"}}
		f.copies[id] = []string{"a", "b"}
	}
	return st, f
}

// TestRunnerRepairsAfterTheGrace: a member goes down; its copies are made
// again only once it has been down longer than the grace; a copy that
// fails is retried the next round; the summary and the set end right.
func TestRunnerRepairsAfterTheGrace(t *testing.T) {
	st, f := onAAndB(5)
	f.members = []Member{{ID: "a", Live: true}, {ID: "b"}, {ID: "c", Live: true}}
	now := time.Unix(1000, 0)
	r := New(Config{DownGrace: time.Minute, Now: func() time.Time { return now }}, f)
	ctx := context.Background()

	sum, err := r.Round(ctx)
	if err != nil || sum.Pending != 0 {
		t.Fatalf("b just went down: %+v %v, want nothing pending within the grace", sum, err)
	}
	now = now.Add(2 * time.Minute)
	f.failTo = "c"
	if sum, err = r.Round(ctx); err == nil || sum.Pending != 5 {
		t.Fatalf("copies to c failing: %+v %v, want 5 pending and the error", sum, err)
	}
	f.failTo = ""
	if sum, err = r.Round(ctx); err != nil || sum.Pending != 0 || sum.Stuck != 0 {
		t.Fatalf("after the repair: %+v %v", sum, err)
	}
	for id, o := range st.Objects {
		if !slices.Equal(o.Replicas, []string{"a", "c"}) {
			t.Errorf("object %d: replicas %v, want [a c]", id, o.Replicas)
		}
	}
	if got := r.Summary(); got.Held["b"] != 0 || got.Held["c"] != 5 {
		t.Errorf("summary held %v", got.Held)
	}
}

// TestRunnerHeldWhileAMemberCannotCommit: while a member's build cannot
// apply a move (a rolling upgrade), a round copies nothing and commits
// nothing, though it still reports what is pending; once it can, the
// moves are made.
func TestRunnerHeldWhileAMemberCannotCommit(t *testing.T) {
	st, f := onAAndB(3)
	f.members = []Member{{ID: "a", Live: true}, {ID: "b", Removed: true}, {ID: "c", Live: true}}
	f.held = errors.New("LEVEL_TOO_LOW")
	r := New(Config{}, f)
	ctx := context.Background()
	sum, err := r.Round(ctx)
	if err != nil || sum.Pending != 3 || f.copied != 0 {
		t.Fatalf("held: %+v %v, %d copies; want 3 pending and no copy", sum, err, f.copied)
	}
	for id, o := range st.Objects {
		if !slices.Equal(o.Replicas, []string{"a", "b"}) {
			t.Errorf("object %d moved while held: %v", id, o.Replicas)
		}
	}
	f.mu.Lock()
	f.held = nil
	f.mu.Unlock()
	if sum, err = r.Round(ctx); err != nil || sum.Pending != 0 || f.copied != 3 {
		t.Fatalf("resumed: %+v %v, %d copies", sum, err, f.copied)
	}
}

// TestRunnerSaysWhenStuck: objects no member can repair now (their only
// live holder gone, nowhere to copy) are named in one warning, with their
// replica sets and the members as the round saw them — not one a round —
// and the end of it is said once too.
func TestRunnerSaysWhenStuck(t *testing.T) {
	_, f := onAAndB(4)
	// b removed for good, a live but no other member to copy to.
	f.members = []Member{{ID: "a", Live: true}, {ID: "b", Removed: true}}
	var logged syncbuf.Buffer
	r := New(Config{Logger: slog.New(slog.NewTextHandler(&logged, nil))}, f)
	ctx := context.Background()
	for range 3 {
		if sum, err := r.Round(ctx); err != nil || sum.Stuck != 4 {
			t.Fatalf("nowhere to copy to: %+v %v, want 4 stuck", sum, err)
		}
	}
	out := logged.String()
	if n := strings.Count(out, "repair stuck"); n != 1 {
		t.Fatalf("%d stuck warnings over 3 rounds, want 1:\n%s", n, out)
	}
	if !strings.Contains(out, "stuck=4") || !strings.Contains(out, "1:[a b]") || !strings.Contains(out, "b=removed") || strings.Contains(out, "4:[a b]") {
		t.Fatalf("the warning should count 4, name the first %d with their sets and the members' states:\n%s", maxStuckExamples, out)
	}
	f.mu.Lock()
	f.members = append(f.members, Member{ID: "c", Live: true})
	f.mu.Unlock()
	if sum, err := r.Round(ctx); err != nil || sum.Stuck != 0 || sum.Pending != 0 {
		t.Fatalf("c joined: %+v %v, want all repaired", sum, err)
	}
	if out := logged.String(); !strings.Contains(out, "repair no longer stuck") {
		t.Fatalf("the end of it not said:\n%s", out)
	}
}

// TestRunnerCopiesFromTheNextHolderWhenANamedOneHasNone: a set names a
// member that holds no copy (an older build named every member an object
// was sent to). The copy comes from the next live holder instead of
// failing every round, the set stops naming the member without one, and
// a later round gives it a real copy.
func TestRunnerCopiesFromTheNextHolderWhenANamedOneHasNone(t *testing.T) {
	st, f := namedAAndLeavingL()
	f.copies[1] = []string{"l"} // a was named, never written
	var logged syncbuf.Buffer
	r := New(Config{Logger: slog.New(slog.NewTextHandler(&logged, nil))}, f)
	ctx := context.Background()
	if _, err := r.Round(ctx); err != nil {
		t.Fatalf("first round: %v\n%s", err, logged.String())
	}
	// l, leaving, keeps its name until enough copies that count exist.
	if got := st.Objects[1].Replicas; !slices.Equal(got, []string{"l", "c"}) {
		t.Fatalf("after the first round: replicas %v, want [l c] (copied from l; a named no more)", got)
	}
	if out := logged.String(); !strings.Contains(out, "hold no copy") || !strings.Contains(out, "missing=[a]") {
		t.Errorf("the member without a copy not logged:\n%s", out)
	}
	sum, err := r.Round(ctx)
	if err != nil || sum.Pending != 0 || sum.Stuck != 0 {
		t.Fatalf("second round: %+v %v", sum, err)
	}
	if got := st.Objects[1].Replicas; !slices.Equal(got, []string{"c", "a"}) || !slices.Contains(f.copies[1], "a") {
		t.Fatalf("after the second round: replicas %v, files on %v; want [c a], a holding one", got, f.copies[1])
	}
}

// TestRunnerFailsWhenNoNamedHolderHasACopy: every live member the set
// names answers that it holds none: the move fails (nothing to copy from)
// and the set is left as it is, never emptied.
func TestRunnerFailsWhenNoNamedHolderHasACopy(t *testing.T) {
	st, f := namedAAndLeavingL() // neither holds a file
	r := New(Config{}, f)
	if _, err := r.Round(context.Background()); !errors.Is(err, replication.ReplicaNotFound) {
		t.Fatalf("round: %v, want REPLICA_NOT_FOUND", err)
	}
	if !slices.Equal(f.tried, []string{"a", "l"}) {
		t.Fatalf("copies tried from %v, want from a, then l", f.tried)
	}
	if got := st.Objects[1].Replicas; !slices.Equal(got, []string{"a", "l"}) {
		t.Fatalf("replicas %v after a failed move, want [a l] unchanged", got)
	}
}

// namedAAndLeavingL is a cluster whose object 1's set names a and l (l
// leaving), with c live beside them; who holds a file of it is the
// test's to say, and a set may name a member without one.
func namedAAndLeavingL() (*meta.State, *fakeCluster) {
	st := meta.NewState()
	f := &fakeCluster{state: st, copies: map[uint64][]string{}, named: true}
	st.Objects[1] = &meta.Object{ID: 1, Size: 10, Replicas: []string{"a", "l"}}
	f.members = []Member{{ID: "a", Live: true}, {ID: "l", Live: true, Leaving: true}, {ID: "c", Live: true}}
	return st, f
}
