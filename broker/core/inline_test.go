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

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/picomq/picomq/broker/meta"
	"github.com/picomq/picomq/broker/node"
	"github.com/picomq/picomq/broker/objstore"
	"github.com/picomq/picomq/broker/stream"
	"github.com/picomq/picomq/internal/testwait"
)

// appendNumbered appends n one-record batches "rec-<i>" to stream s.
func appendNumbered(t *testing.T, b *Broker, s string, from, n int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		if _, err := b.Append(context.Background(), s, recs(fmt.Sprintf("rec-%d", i)), node.AppendOptions{Partition: -1}); err != nil {
			t.Fatal(err)
		}
	}
}

// checkNumbered reads stream s and wants exactly "rec-0".."rec-<n-1>" at
// offsets 0..n-1.
func checkNumbered(t *testing.T, b *Broker, s string, n int) {
	t.Helper()
	got := readAll(t, b, s, 0)
	if len(got) != n {
		t.Fatalf("%d records, want %d", len(got), n)
	}
	for i, e := range got {
		if int(e.Offset) != i || string(e.Record.Payload) != fmt.Sprintf("rec-%d", i) {
			t.Fatalf("record %d: offset %d payload %q", i, e.Offset, e.Record.Payload)
		}
	}
}

// TestInlineObjectsRestoredFromTheLog: small appends are acknowledged
// without an fdatasync of their object — without a file even, the object
// held in memory —, their bytes durable in the metadata log. After a close
// (or a crash) the next start holds each object again from its log entry
// and writes no file. A power loss can also leave the files of objects
// spilled before it torn, empty, corrupt or gone: the start after that
// removes those and holds their objects again, and keeps the intact ones.
// Every acknowledged record reads back.
func TestInlineObjectsRestoredFromTheLog(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	m := NewMetrics(nil)
	b := openLogPath(t, dir, func(c *Config) { c.Metrics = m })
	mustCreate(t, b, "s", node.CreateOptions{})
	appendNumbered(t, b, "s", 0, 15)
	if n := testutil.ToFloat64(m.InlineObjects); n < 15 {
		t.Fatalf("%v objects committed inline, want 15 (one per append)", n)
	}
	if n := sampleCount(m.FsyncSeconds); n != 0 {
		t.Fatalf("objects synced on their own: %d, want none", n)
	}
	objectFiles := func() []string {
		t.Helper()
		objs, err := filepath.Glob(filepath.Join(dir, "objects", "*.obj"))
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(objs)
		return objs
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if objs := objectFiles(); len(objs) != 0 {
		t.Fatalf("object files %v: held objects were written", objs)
	}

	b = openLogPath(t, dir)
	checkNumbered(t, b, "s", 15)
	ids := objectsOf(t, b, "s")
	if len(ids) != 15 {
		t.Fatalf("objects %v, want 15", ids)
	}
	for _, id := range ids {
		if !b.objs.Held(id) {
			t.Fatalf("object %d is not held again after the replay", id)
		}
	}
	if infos, err := b.objs.List(); err != nil || len(infos) != 0 { // the pool's files aside
		t.Fatalf("object files %v, %v: the replay wrote files", infos, err)
	}
	// Spilled before the next crash, not yet synced.
	if err := b.objs.Spill(ids); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	intact := map[uint64]os.FileInfo{}
	for i, id := range ids {
		p := filepath.Join(dir, "objects", objName(id))
		var err error
		switch i % 5 {
		case 0:
			err = os.Remove(p)
		case 1:
			err = os.Truncate(p, 0)
		case 2:
			err = os.Truncate(p, 20) // torn inside the first frame
		case 3:
			raw, rerr := os.ReadFile(p)
			if rerr == nil && len(raw) > 0 {
				raw[len(raw)-1] ^= 0xff
			}
			err = errors.Join(rerr, os.WriteFile(p, raw, 0o600))
		case 4:
			intact[id], err = os.Stat(p)
		}
		if err != nil {
			t.Fatal(err)
		}
	}

	b = openLogPath(t, dir)
	defer b.Close()
	for _, id := range ids {
		info, err := os.Stat(filepath.Join(dir, "objects", objName(id)))
		if was, ok := intact[id]; ok {
			if b.objs.Held(id) || err != nil || !info.ModTime().Equal(was.ModTime()) {
				t.Fatalf("intact object %d: held %v, file %v: want its file kept as it was", id, b.objs.Held(id), err)
			}
			continue
		}
		if !b.objs.Held(id) || !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("damaged object %d: held %v, file %v: want held again and the file removed", id, b.objs.Held(id), err)
		}
	}
	checkNumbered(t, b, "s", 15)
	appendNumbered(t, b, "s", 15, 3) // and the stream goes on
	checkNumbered(t, b, "s", 18)
	// The next snapshot makes the restored objects files, durable.
	if err := b.Snapshot(); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if _, err := os.Stat(filepath.Join(dir, "objects", objName(id))); err != nil || b.objs.Held(id) {
			t.Fatalf("object %d after a snapshot: held %v, file %v", id, b.objs.Held(id), err)
		}
	}
	checkNumbered(t, b, "s", 18)
}

// TestReplaySkipsMergedObjects: objects the log merged into a segment
// after committing them inline are neither held nor written when the log
// is replayed; those still referenced are held.
func TestReplaySkipsMergedObjects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	b := heldInTwoStreams(t, dir)
	merged, kept := objectsOf(t, b, "a"), objectsOf(t, b, "b")
	b.maintain(ctx) // merges a
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = openLogPath(t, dir)
	defer b.Close()
	for _, id := range merged {
		if _, err := os.Stat(filepath.Join(dir, "objects", objName(id))); b.objs.Held(id) || !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("merged object %d: held %v, file %v: want neither", id, b.objs.Held(id), err)
		}
	}
	for _, id := range kept {
		if !b.objs.Held(id) {
			t.Fatalf("object %d, still referenced, is not held", id)
		}
	}
	checkNumbered(t, b, "a", 10)
	checkNumbered(t, b, "b", 3)
}

// TestSnapshotWhileReplaying: a snapshot taken while the log replays (as
// raft.RecoverCluster takes one) must not let the log drop entries whose
// objects are in memory only: it writes the files of the objects the state
// references first, and the store, once open, reads them from there; an
// object the state no longer references gets no file.
func TestSnapshotWhileReplaying(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b := &Broker{cfg: Config{DataDir: dir}.withDefaults(), inline: newInlineObjects(objectsDir(dir), objstore.SyncObjects)}
	frames := objstore.AppendFrame(nil, []byte("replayed"))
	b.applied(&meta.Command{Op: meta.OpCommit, Commit: &meta.Commit{Object: 7, Frames: frames}}, nil)
	b.applied(&meta.Command{Op: meta.OpCommit, Commit: &meta.Commit{Object: 8, Frames: objstore.AppendFrame(nil, []byte("merged away"))}}, nil)
	st := meta.NewState()
	st.Objects[7] = &meta.Object{ID: 7, Size: int64(objstore.HeaderSize + len(frames)), Refs: 1}
	if err := b.snapshotting(st)(); err != nil {
		t.Fatalf("snapshot during the replay: %v", err)
	}
	if _, err := os.Stat(filepath.Join(objectsDir(dir), objName(8))); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("object 8, referenced by nothing, got a file: %v", err)
	}
	s, err := objstore.Open(objectsDir(dir), objstore.Options{MinNextID: 9, PoolSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := b.inline.restore(s, st); err != nil {
		t.Fatal(err)
	}
	got, err := s.ReadFrame(7, objstore.HeaderSize, int64(len(frames)))
	if err != nil || string(got) != "replayed" || s.Held(7) {
		t.Fatalf("object 7 after the restore: %q, %v, held %v; want its file", got, err, s.Held(7))
	}
	if err := b.snapshotting(st)(); err != nil {
		t.Fatal(err)
	}
}

// TestSnapshotAtStartWhenTheLogIsLong: a log replayed at start that holds
// more than InlineLogBytes of frames past its snapshot gets one at once,
// not after the first maintenance pass: a broker that keeps crashing
// early would otherwise let it grow.
func TestSnapshotAtStartWhenTheLogIsLong(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// The first run's log may grow past the small bound without a
	// snapshot (as one that crashed before its first would): it has the
	// default, far above what it writes. The restart has the small one.
	small := func(c *Config) { c.InlineLogBytes = 1 << 10 }
	b := openLogPath(t, dir) // no maintenance pass within the test
	mustCreate(t, b, "s", node.CreateOptions{})
	appendNumbered(t, b, "s", 0, 100)
	snapshots := func() []string {
		snaps, _ := filepath.Glob(filepath.Join(dir, "meta", "snapshots", "*", "state.bin"))
		return snaps
	}
	if len(snapshots()) != 0 {
		t.Fatalf("snapshots before the restart: %v", snapshots())
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = openLogPath(t, dir, small)
	defer b.Close()
	testwait.Until(t, 20*time.Second, "a snapshot after a start replaying more than InlineLogBytes", func() bool { return len(snapshots()) > 0 })
	checkNumbered(t, b, "s", 100)
}

// TestSnapshotAsSoonAsTheLogHoldsInlineLogBytes: appends that put more
// than InlineLogBytes of frames in the log get a snapshot without waiting
// for the maintenance loop's next tick (here an hour away): a burst filled
// a small volume's log with 44 MiB of frames within one tick, which the
// snapshot then had to write out at once, more than the headroom held.
func TestSnapshotAsSoonAsTheLogHoldsInlineLogBytes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b := openLogPath(t, dir, func(c *Config) { c.InlineLogBytes = 1 << 10 })
	defer b.Close()
	mustCreate(t, b, "s", node.CreateOptions{})
	appendNumbered(t, b, "s", 0, 100)
	testwait.Until(t, 20*time.Second, "a snapshot once the log held InlineLogBytes of frames", func() bool {
		snaps, _ := filepath.Glob(filepath.Join(dir, "meta", "snapshots", "*", "state.bin"))
		return len(snaps) > 0
	})
	checkNumbered(t, b, "s", 100)
}

// heldInTwoStreams opens a broker on dir that merges a stream's small
// ranges once it has 8 and keeps garbage and held objects for an hour, and
// appends 10 records to stream "a" (enough to merge) and 3 to "b" (too few):
// every object held in memory.
func heldInTwoStreams(t *testing.T, dir string, mod ...func(*Config)) *Broker {
	t.Helper()
	b := openLogPath(t, dir, append([]func(*Config){func(c *Config) {
		c.MergeMinRanges = 8
		c.GarbageGrace = time.Hour
		c.HoldFor = time.Hour
	}}, mod...)...)
	mustCreate(t, b, "a", node.CreateOptions{})
	mustCreate(t, b, "b", node.CreateOptions{})
	appendNumbered(t, b, "a", 0, 10)
	appendNumbered(t, b, "b", 0, 3)
	return b
}

// TestHeldObjectsAreMergedWithoutFiles: the objects of small appends are
// held in memory; the merge reads them from there, and the collection
// removes them at once (no file, no grace). Those the merge leaves become
// files once held for HoldFor, byte for byte what the log would restore.
func TestHeldObjectsAreMergedWithoutFiles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	b := heldInTwoStreams(t, dir)
	defer func() { b.Close() }()
	held := append(objectsOf(t, b, "a"), objectsOf(t, b, "b")...)
	for _, id := range held {
		if !b.objs.Held(id) {
			t.Fatalf("object %d is not held", id)
		}
	}
	if infos, err := b.objs.List(); err != nil || len(infos) != 0 {
		t.Fatalf("object files %v, %v: want none", infos, err)
	}
	checkNumbered(t, b, "a", 10)

	b.maintain(ctx) // merges a
	if err := b.collectGarbage(ctx, time.Hour, true); err != nil {
		t.Fatal(err)
	}
	for _, id := range objectsOf(t, b, "a") {
		if b.objs.Held(id) {
			t.Fatalf("a still reads held object %d after the merge", id)
		}
	}
	for _, id := range held[:10] {
		if b.objs.Held(id) {
			t.Fatalf("merged-away object %d is still held", id)
		}
		if _, err := os.Stat(filepath.Join(dir, "objects", objName(id))); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("merged-away object %d has a file: %v", id, err)
		}
	}
	if g := b.fsm.State().Garbage; len(g) != 0 {
		t.Fatalf("garbage left: %v", g)
	}
	checkNumbered(t, b, "a", 10)

	// b's objects were not merged: once held long enough, they are files,
	// exactly as the replay of the log at the next start writes them (it
	// leaves an intact file alone).
	if err := b.objs.SpillOlder(0); err != nil {
		t.Fatal(err)
	}
	spilled := map[uint64]os.FileInfo{}
	for _, id := range held[10:] {
		if b.objs.Held(id) {
			t.Fatalf("object %d still held after the spill", id)
		}
		info, err := os.Stat(filepath.Join(dir, "objects", objName(id)))
		if err != nil {
			t.Fatal(err)
		}
		spilled[id] = info
	}
	checkNumbered(t, b, "b", 3)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = openLogPath(t, dir)
	for id, info := range spilled {
		again, err := os.Stat(filepath.Join(dir, "objects", objName(id)))
		if err != nil || !again.ModTime().Equal(info.ModTime()) || again.Size() != info.Size() {
			t.Fatalf("object %d: the replay rewrote the spilled file (%v)", id, err)
		}
	}
	checkNumbered(t, b, "b", 3)
}

// sampleCount is how many observations histogram h holds.
func sampleCount(h prometheus.Histogram) uint64 {
	var d dto.Metric
	if err := h.Write(&d); err != nil {
		return 0
	}
	return d.GetHistogram().GetSampleCount()
}

// objectsOf returns the objects stream s's partition 0 references.
func objectsOf(t *testing.T, b *Broker, s string) []uint64 {
	t.Helper()
	e, err := b.Get(s)
	if err != nil {
		t.Fatal(err)
	}
	in, ok := b.fsm.Internal(e.Partitions[0])
	if !ok {
		t.Fatalf("no internal stream %d", e.Partitions[0])
	}
	var ids []uint64
	for _, r := range in.Ranges {
		ids = append(ids, r.Object)
	}
	return ids
}

// TestSnapshotSyncsInlineObjectsFirst: a snapshot lets the log drop the
// entries holding inline objects' bytes, so it is persisted only after those
// objects are written (they may be held in memory still) and synced; when syncing fails, the snapshot fails, and the next
// one syncs them.
func TestSnapshotSyncsInlineObjectsFirst(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var synced []uint64
	fail := true
	real := objstore.SyncObjects
	syncObjects := func(dir string, ids []uint64) error {
		mu.Lock()
		defer mu.Unlock()
		if fail {
			return errors.New("disk gone")
		}
		synced = append(synced, ids...)
		return real(dir, ids)
	}

	dir := t.TempDir()
	b := openLogPath(t, dir, func(c *Config) { c.syncObjects = syncObjects })
	defer b.Close()
	mustCreate(t, b, "s", node.CreateOptions{})
	appendNumbered(t, b, "s", 0, 5)
	want := objectsOf(t, b, "s")

	if err := b.Snapshot(); err == nil {
		t.Fatal("snapshot persisted although its objects could not be synced")
	}
	if snaps, _ := filepath.Glob(filepath.Join(dir, "meta", "snapshots", "*", "state.bin")); len(snaps) != 0 {
		t.Fatalf("snapshot on disk: %v", snaps)
	}
	mu.Lock()
	fail = false
	mu.Unlock()
	appendNumbered(t, b, "s", 5, 1)
	last := objectsOf(t, b, "s")[5]
	if !b.objs.Held(last) {
		t.Fatalf("object %d is not held", last)
	}
	if err := b.Snapshot(); err != nil {
		t.Fatal(err)
	}
	// The snapshot wrote the held object before syncing it.
	if _, err := os.Stat(filepath.Join(dir, "objects", objName(last))); err != nil || b.objs.Held(last) {
		t.Fatalf("object %d after the snapshot: held %v, file: %v", last, b.objs.Held(last), err)
	}
	want = append(want, last)
	mu.Lock()
	defer mu.Unlock()
	for _, id := range want {
		if !slices.Contains(synced, id) {
			t.Fatalf("object %d not synced before the snapshot (synced %v)", id, synced)
		}
	}
	checkNumbered(t, b, "s", 6)
}

// TestSnapshotSkipsMergedHeldObjects: a snapshot writes and syncs only the
// held objects its state still references; those a merge left without
// ranges stay in memory, no file made, until collected — and after a
// restart from that snapshot every record still reads back.
func TestSnapshotSkipsMergedHeldObjects(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var synced []uint64
	real := objstore.SyncObjects
	syncObjects := func(dir string, ids []uint64) error {
		mu.Lock()
		synced = append(synced, ids...)
		mu.Unlock()
		return real(dir, ids)
	}

	ctx := context.Background()
	dir := t.TempDir()
	b := heldInTwoStreams(t, dir, func(c *Config) { c.syncObjects = syncObjects })
	defer func() { b.Close() }()
	merged, kept := objectsOf(t, b, "a"), objectsOf(t, b, "b")
	b.maintain(ctx) // merges a; its old objects wait out the grace, held
	for _, id := range merged {
		if !b.objs.Held(id) || !b.fsm.State().Garbage[id] {
			t.Fatalf("merged object %d: held %v, garbage %v; want both", id, b.objs.Held(id), b.fsm.State().Garbage[id])
		}
	}

	if err := b.Snapshot(); err != nil {
		t.Fatal(err)
	}
	for _, id := range merged {
		if !b.objs.Held(id) {
			t.Fatalf("merged object %d was spilled by the snapshot", id)
		}
		if _, err := os.Stat(filepath.Join(dir, "objects", objName(id))); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("merged object %d has a file: %v", id, err)
		}
	}
	for _, id := range kept {
		if b.objs.Held(id) {
			t.Fatalf("object %d, still referenced, is held after the snapshot", id)
		}
		if _, err := os.Stat(filepath.Join(dir, "objects", objName(id))); err != nil {
			t.Fatalf("object %d, still referenced, has no file: %v", id, err)
		}
	}
	mu.Lock()
	if !slices.Equal(synced, kept) {
		mu.Unlock()
		t.Fatalf("the snapshot synced %v, want exactly b's objects %v", synced, kept)
	}
	mu.Unlock()

	// More appends after the snapshot, then a restart: the log's replay
	// starts from the snapshot, which needs none of the merged objects.
	appendNumbered(t, b, "a", 10, 2)
	appendNumbered(t, b, "b", 3, 2)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = openLogPath(t, dir)
	checkNumbered(t, b, "a", 12)
	checkNumbered(t, b, "b", 5)
	if err := b.collectGarbage(ctx, 0, true); err != nil {
		t.Fatal(err)
	}
	if g := b.fsm.State().Garbage; len(g) != 0 {
		t.Fatalf("garbage left after the restart's collection: %v", g)
	}
	checkNumbered(t, b, "a", 12)
}

// TestInlineOff: with InlineBytes negative every object is synced on its
// own and no commit carries frames.
func TestInlineOff(t *testing.T) {
	t.Parallel()
	m := NewMetrics(nil)
	b := openLogPath(t, t.TempDir(), func(c *Config) { c.Metrics = m; c.InlineBytes = -1 })
	defer b.Close()
	mustCreate(t, b, "s", node.CreateOptions{})
	appendNumbered(t, b, "s", 0, 4)
	if n := testutil.ToFloat64(m.InlineObjects); n != 0 {
		t.Fatalf("%v objects committed inline", n)
	}
	if n := sampleCount(m.FsyncSeconds); n != 4 {
		t.Fatalf("%d objects synced, want 4", n)
	}
	checkNumbered(t, b, "s", 4)
}

// TestLargeObjectsAreSynced: an object above InlineBytes is synced itself,
// and a smaller one in the same broker is not.
func TestLargeObjectsAreSynced(t *testing.T) {
	t.Parallel()
	m := NewMetrics(nil)
	b := openLogPath(t, t.TempDir(), func(c *Config) { c.Metrics = m; c.InlineBytes = 1024 })
	defer b.Close()
	mustCreate(t, b, "s", node.CreateOptions{})
	if _, err := b.Append(context.Background(), "s", recs(string(make([]byte, 4096))), node.AppendOptions{Partition: -1}); err != nil {
		t.Fatal(err)
	}
	appendNumbered(t, b, "s", 1, 1)
	if n, inl := sampleCount(m.FsyncSeconds), testutil.ToFloat64(m.InlineObjects); n != 1 || inl != 1 {
		t.Fatalf("synced %d, inline %v: want 1 and 1", n, inl)
	}
}

// TestSyncLingerGathersConcurrentAppends: a batch whose object will be
// synced on its own waits for the appends others are sending, so one
// fdatasync covers them all; it stops waiting once SyncLingerBytes are
// queued. A lone writer's append does not wait at all (the linger here is
// an hour: the test would time out).
func TestSyncLingerGathersConcurrentAppends(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := NewMetrics(nil)
	b := openLogPath(t, t.TempDir(), func(c *Config) {
		c.Metrics = m
		c.InlineBytes = 1024
		c.SyncLinger = time.Hour
		c.MaxHold = time.Minute
	})
	defer b.Close()
	mustCreate(t, b, "a", node.CreateOptions{})

	// Alone: no other append queued, none in flight.
	big := func(n int) []stream.RecordValue {
		out := make([]stream.RecordValue, n)
		for i := range out {
			out[i] = stream.RecordValue{Payload: make([]byte, 256<<10)}
		}
		return out
	}
	if _, err := b.Append(ctx, "a", big(1), node.AppendOptions{Partition: -1}); err != nil {
		t.Fatal(err)
	}

	// Two appends queued together: the flusher waits for more — the third,
	// admitted after they were released to it — until SyncLingerBytes.
	release := b.Hold()
	var pending []node.Pending
	for range 2 {
		pd, err := b.Admit(ctx, "a", big(1), node.AppendOptions{Partition: -1})
		if err != nil {
			t.Fatal(err)
		}
		pending = append(pending, pd)
	}
	release()
	pd, err := b.Admit(ctx, "a", big(3), node.AppendOptions{Partition: -1})
	if err != nil {
		t.Fatal(err)
	}
	pending = append(pending, pd)
	for _, pd := range pending {
		if _, err := pd.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	objs := objectsOf(t, b, "a")
	if len(objs) != 4 || objs[1] != objs[2] || objs[2] != objs[3] || objs[0] == objs[1] {
		t.Fatalf("objects of the four appends: %v; want the last three in one", objs)
	}
	if n := sampleCount(m.FsyncSeconds); n != 2 {
		t.Fatalf("%d objects synced, want 2", n)
	}
}

// openLogPath opens a broker on the log path, where the inline commits
// these tests are about live (a cluster member's; a lone broker commits in
// its journal).
func openLogPath(t *testing.T, dir string, mod ...func(*Config)) *Broker {
	t.Helper()
	return openTest(t, dir, append([]func(*Config){func(c *Config) { c.LogCommits = true }}, mod...)...)
}
