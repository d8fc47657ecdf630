package core

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/picomq/picomq/broker/node"
	"github.com/picomq/picomq/broker/stream"
)

// recordingStore is a Placement over the local store that records what it
// was asked, as a replicating store would see it, and can fail Sync.
type recordingStore struct {
	local ObjectStore
	b     func() *Broker

	mu        sync.Mutex
	synced    map[uint64]bool
	committed map[uint64]bool // the object was in the state when its Sync came
	failSync  error
}

func (s *recordingStore) Create() (ObjectWriter, error) {
	w, err := s.local.Create()
	if err != nil {
		return nil, err
	}
	return &recordingWriter{ObjectWriter: w, s: s}, nil
}

type recordingWriter struct {
	ObjectWriter
	s *recordingStore
}

func (w *recordingWriter) Sync() error {
	s := w.s
	s.mu.Lock()
	fail := s.failSync
	s.mu.Unlock()
	if fail != nil {
		return fail
	}
	if err := w.ObjectWriter.Sync(); err != nil {
		return err
	}
	_, inState := s.b().fsm.State().Objects[w.ID()]
	s.mu.Lock()
	s.synced[w.ID()] = true
	s.committed[w.ID()] = inState
	s.mu.Unlock()
	return nil
}

// TestPlacementSeesEveryObjectFile: every object file the broker writes —
// group commits too large to travel inline, merged segments, compactions,
// a create's initial records — goes through Config.Placement and is synced
// there before any commit names it; a Sync the placement fails is an
// append refused with nothing committed.
func TestPlacementSeesEveryObjectFile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var b *Broker
	rs := &recordingStore{b: func() *Broker { return b }, synced: map[uint64]bool{}, committed: map[uint64]bool{}}
	b = openTest(t, t.TempDir(), func(c *Config) {
		c.LogCommits = true // the log path, whose files a cluster places
		c.InlineBytes = -1  // every group commit is a file
		c.MergeMinRanges = 4
		c.Placement = func(local ObjectStore) ObjectStore { rs.local = local; return rs }
	})
	defer b.Close()
	mustCreate(t, b, "p", node.CreateOptions{Initial: recs("first")})
	mustCreate(t, b, "k", node.CreateOptions{Policy: stream.PolicyValue{CompactAfter: 1}})
	for i := range 6 {
		if _, err := b.Append(ctx, "p", recs("x"), node.AppendOptions{Partition: -1}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Append(ctx, "k", []stream.RecordValue{{Key: []byte("key"), Payload: []byte{byte(i)}}}, node.AppendOptions{Partition: -1}); err != nil {
			t.Fatal(err)
		}
	}
	b.maintain(ctx) // merges p's small ranges
	if v, err := b.Compact(ctx, "k", 0); err != nil || v.Dropped == 0 {
		t.Fatalf("compact: %+v, %v", v, err)
	}
	st := b.fsm.State()
	if len(st.Objects) == 0 {
		t.Fatal("no object committed")
	}
	rs.mu.Lock()
	for id := range st.Objects {
		if !rs.synced[id] {
			t.Errorf("committed object %d was not written through the placement", id)
		}
		if rs.committed[id] {
			t.Errorf("object %d was in the state before the placement synced it", id)
		}
	}
	rs.failSync = errors.New("replica unreachable")
	rs.mu.Unlock()

	commands := b.fsm.Commands()
	e, _ := b.Get("p")
	before, _ := b.fsm.Internal(e.Partitions[0])
	if _, err := b.Append(ctx, "p", recs("y"), node.AppendOptions{Partition: -1}); err == nil {
		t.Fatal("an append whose object the placement could not sync was acknowledged")
	}
	if after, _ := b.fsm.Internal(e.Partitions[0]); after.End != before.End || b.fsm.Commands() != commands {
		t.Fatalf("the refused append moved the end %d -> %d or wrote %d commands", before.End, after.End, b.fsm.Commands()-commands)
	}
}
