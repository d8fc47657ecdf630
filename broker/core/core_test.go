package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/meta"
	"github.com/picomq/picomq/broker/node"
	"github.com/picomq/picomq/broker/stream"
	"github.com/picomq/picomq/internal/syncbuf"
	"github.com/picomq/picomq/internal/testwait"
)

// fakeClock is a settable clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func openTest(t *testing.T, dir string, mod ...func(*Config)) *Broker {
	t.Helper()
	cfg := Config{DataDir: dir, MaintenanceInterval: time.Hour}
	for _, m := range mod {
		m(&cfg)
	}
	b, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func recs(vals ...string) []stream.RecordValue {
	var out []stream.RecordValue
	for _, v := range vals {
		out = append(out, stream.RecordValue{Payload: []byte(v)})
	}
	return out
}

func mustCreate(t *testing.T, b *Broker, name string, o node.CreateOptions) {
	t.Helper()
	if _, _, err := b.Create(context.Background(), name, o); err != nil {
		t.Fatal(err)
	}
}

func readAll(t *testing.T, b *Broker, name string, partition int) []stream.EntryValue {
	t.Helper()
	out, _, err := b.Read(context.Background(), name, partition, 0, 1<<20, node.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestDataDirRefused(t *testing.T) {
	t.Parallel()
	open := 0o777
	dir := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(dir, os.FileMode(open)); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(dir, os.FileMode(open))
	if _, err := Open(Config{DataDir: dir}); !errors.Is(err, stream.StreamDirectoryUnusable) {
		t.Fatalf("group/other-writable dir: %v", err)
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(Config{DataDir: file}); !errors.Is(err, stream.StreamDirectoryUnusable) {
		t.Fatalf("file as dir: %v", err)
	}
}

func TestNamesRefused(t *testing.T) {
	t.Parallel()
	b := openTest(t, t.TempDir())
	defer b.Close()
	for _, n := range []string{"", "/a", "a/", "a//b", "a/../b", "..", "a b", "a%2Fb", string(make([]byte, 256))} {
		if _, _, err := b.Create(context.Background(), n, node.CreateOptions{}); !errors.Is(err, stream.StreamMisconfigured) {
			t.Errorf("Create(%q) = %v, want STREAM_MISCONFIGURED", n, err)
		}
	}
	if len(b.List()) != 0 {
		t.Fatal("a refused name was created")
	}
}

// TestRestartKeepsOffsetsProducersAndClosed: what was acknowledged is there
// after a restart, the producer state still de-duplicates, the epoch moved.
func TestRestartKeepsOffsetsProducersAndClosed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	b := openTest(t, dir)
	mustCreate(t, b, "s", node.CreateOptions{ContentType: "text/plain"})
	for seq := int64(0); seq < 3; seq++ {
		if _, err := b.Append(ctx, "s", recs("r"), node.AppendOptions{Partition: -1, Producer: &node.ProducerTuple{ID: "p", Epoch: 1, Seq: seq}, StreamSeq: string(rune('a' + seq))}); err != nil {
			t.Fatal(err)
		}
	}
	e, _ := b.Get("s")
	in, _ := b.fsm.Internal(e.Partitions[0])
	epoch := in.Epoch
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	b = openTest(t, dir)
	defer b.Close()
	if got := readAll(t, b, "s", 0); len(got) != 3 {
		t.Fatalf("after restart read %d records, want 3", len(got))
	}
	res, err := b.Append(ctx, "s", recs("dup"), node.AppendOptions{Partition: -1, Producer: &node.ProducerTuple{ID: "p", Epoch: 1, Seq: 1}})
	if err != nil || !res.Duplicate {
		t.Fatalf("repeat after restart = %+v, %v; want a duplicate", res, err)
	}
	if _, err := b.Append(ctx, "s", recs("gap"), node.AppendOptions{Partition: -1, Producer: &node.ProducerTuple{ID: "p", Epoch: 1, Seq: 5}}); !errors.Is(err, meta.ProducerSeqGap) {
		t.Fatalf("gap after restart: %v", err)
	}
	if _, err := b.Append(ctx, "s", recs("old"), node.AppendOptions{Partition: -1, StreamSeq: "b"}); !errors.Is(err, meta.StreamSeqOrder) {
		t.Fatalf("Stream-Seq after restart: %v", err)
	}
	res, err = b.Append(ctx, "s", recs("last"), node.AppendOptions{Partition: -1, Producer: &node.ProducerTuple{ID: "p", Epoch: 1, Seq: 3}, Close: true})
	if err != nil || res.First != 3 || !res.Closed {
		t.Fatalf("append-and-close = %+v, %v", res, err)
	}
	in, _ = b.fsm.Internal(e.Partitions[0])
	if in.Epoch != epoch+1 {
		t.Fatalf("epoch after restart = %d, want %d", in.Epoch, epoch+1)
	}
	if got := readAll(t, b, "s", 0); len(got) != 4 || string(got[3].Record.Payload) != "last" {
		t.Fatalf("read after restart: %d records", len(got))
	}
	// Closed survives a restart too, and the closing tuple's retry is a duplicate.
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = openTest(t, dir)
	defer b.Close()
	if _, err := b.Append(ctx, "s", recs("x"), node.AppendOptions{Partition: -1}); !errors.Is(err, meta.StreamClosed) {
		t.Fatalf("append to a closed stream: %v", err)
	}
	res, err = b.Append(ctx, "s", recs("last"), node.AppendOptions{Partition: -1, Producer: &node.ProducerTuple{ID: "p", Epoch: 1, Seq: 3}, Close: true})
	if err != nil || !res.Duplicate || !res.Closed {
		t.Fatalf("closing tuple retry = %+v, %v", res, err)
	}
}

// TestTornUncommittedObjectIsDiscarded: an object file nobody committed —
// a flush torn by a crash — is removed at start and never read.
func TestTornUncommittedObjectIsDiscarded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	b := openTest(t, dir)
	mustCreate(t, b, "s", node.CreateOptions{})
	if _, err := b.Append(ctx, "s", recs("a", "b"), node.AppendOptions{Partition: -1}); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	torn := filepath.Join(dir, "objects", "00000000000000ff.obj")
	if err := os.WriteFile(torn, []byte("PMQO\x01\x00\x00\x00\xff\x00\x00\x00\x00\x00\x00\x00\x10\x00\x00"), 0o600); err != nil {
		t.Fatal(err)
	}
	b = openTest(t, dir)
	defer b.Close()
	if _, err := os.Stat(torn); !os.IsNotExist(err) {
		t.Fatalf("torn object still there: %v", err)
	}
	if got := readAll(t, b, "s", 0); len(got) != 2 {
		t.Fatalf("read %d records, want 2", len(got))
	}
	if res, err := b.Append(ctx, "s", recs("c"), node.AppendOptions{Partition: -1}); err != nil || res.First != 2 {
		t.Fatalf("append after recovery = %+v, %v", res, err)
	}
}

// TestCorruptCommittedObjectIsNeverServed: a committed object whose bytes
// changed on disk fails its checksum; the read is refused, logged and
// counted.
func TestCorruptCommittedObjectIsNeverServed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	// An object synced on its own: one committed inline is written again
	// from the log at start (TestInlineObjectsRewrittenFromTheLog).
	b := openTest(t, dir, func(c *Config) { c.InlineBytes = -1; c.LogCommits = true }) // a journal's damage: TestJournal*
	mustCreate(t, b, "s", node.CreateOptions{})
	if _, err := b.Append(ctx, "s", recs("payload-one", "payload-two"), node.AppendOptions{Partition: -1}); err != nil {
		t.Fatal(err)
	}
	e, _ := b.Get("s")
	in, _ := b.fsm.Internal(e.Partitions[0])
	r := in.Ranges[0]
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "objects", objName(r.Object))
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	raw[r.Pos+r.Len-3] ^= 0xff // inside the payload
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	m := NewMetrics(nil)
	b = openTest(t, dir, func(c *Config) { c.Metrics = m; c.InlineBytes = -1 })
	defer b.Close()
	_, _, err = b.Read(ctx, "s", 0, 0, 10, node.ReadOptions{})
	if !errors.Is(err, node.Corrupt) {
		t.Fatalf("read of a corrupt object = %v, want OBJECT_CORRUPT", err)
	}
	if got := testutil.ToFloat64(m.CorruptReads); got != 1 {
		t.Fatalf("corrupt reads metric = %v", got)
	}
}

func objName(id uint64) string {
	const hex = "0123456789abcdef"
	b := make([]byte, 16)
	for i := 15; i >= 0; i-- {
		b[i] = hex[id&15]
		id >>= 4
	}
	return string(b) + ".obj"
}

// TestSlidingTTLAndExpiry: reads and appends extend a TTL, nothing does an
// absolute expiry; an expired stream is gone and its name reusable.
func TestSlidingTTLAndExpiry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	dir := t.TempDir()
	b := openTest(t, dir, func(c *Config) { c.Clock = clock.Now })
	mustCreate(t, b, "ttl", node.CreateOptions{TTL: 10 * time.Second})
	mustCreate(t, b, "abs", node.CreateOptions{ExpiresAt: clock.Now().Add(15 * time.Second)})
	clock.Add(8 * time.Second)
	readAll(t, b, "ttl", 0) // touch
	readAll(t, b, "abs", 0) // no effect on an absolute expiry
	clock.Add(8 * time.Second)
	if _, err := b.Get("ttl"); err != nil {
		t.Fatalf("ttl stream expired although read 8s ago: %v", err)
	}
	if _, err := b.Get("abs"); !errors.Is(err, meta.StreamNotFound) {
		t.Fatalf("absolute expiry passed: %v", err)
	}
	// The touch survives a restart (persisted lazily on close).
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = openTest(t, dir, func(c *Config) { c.Clock = clock.Now })
	defer b.Close()
	if _, err := b.Get("ttl"); err != nil {
		t.Fatalf("ttl stream lost its last access across a restart: %v", err)
	}
	clock.Add(11 * time.Second)
	if _, err := b.Get("ttl"); !errors.Is(err, meta.StreamNotFound) {
		t.Fatalf("ttl passed: %v", err)
	}
	b.maintain(ctx)
	if len(b.fsm.State().Names) != 0 {
		t.Fatalf("maintenance left expired streams: %v", b.fsm.State().Names)
	}
	if _, created, err := b.Create(ctx, "ttl", node.CreateOptions{}); err != nil || !created {
		t.Fatalf("recreate after expiry: %v %v", created, err)
	}
}

// TestMergeAndGarbageCollection: small ranges merge into segment frames;
// reads are unchanged; the objects they leave are deleted.
func TestMergeAndGarbageCollection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	b := openTest(t, dir, func(c *Config) {
		c.MergeMinRanges = 8
		c.OrphanGrace = time.Hour
		c.GarbageGrace = 50 * time.Millisecond
		// Objects as files, whose collection this is about (held objects:
		// TestHeldObjectsAreMergedWithoutFiles), on the log path (a lone
		// broker's journal holds them in memory).
		c.InlineBytes = -1
		c.LogCommits = true
	})
	defer b.Close()
	mustCreate(t, b, "a", node.CreateOptions{})
	for i := 0; i < 20; i++ {
		if _, err := b.Append(ctx, "a", recs("x", "yy"), node.AppendOptions{Partition: -1}); err != nil {
			t.Fatal(err)
		}
	}
	before := readAll(t, b, "a", 0)
	// Objects, not the pool's files: a removed object's file may go back
	// to the pool under a new id (objstore recycles it).
	objects := func() int {
		infos, err := b.objs.List()
		if err != nil {
			t.Fatal(err)
		}
		return len(infos)
	}
	filesBefore := objects()
	replaces := testutil.ToFloat64(b.cfg.Metrics.MetadataCommands.WithLabelValues(string(meta.OpReplaceMany)))
	b.maintain(ctx)
	// The pass's merge is one replaceMany command, counted under its op.
	if got := testutil.ToFloat64(b.cfg.Metrics.MetadataCommands.WithLabelValues(string(meta.OpReplaceMany))) - replaces; got != 1 {
		t.Errorf("the merge counted %v replaceMany commands, want 1", got)
	}
	e, _ := b.Get("a")
	in, _ := b.fsm.Internal(e.Partitions[0])
	if len(in.Ranges) != 1 || in.Ranges[0].Count != 40 {
		t.Fatalf("after merge: %d ranges", len(in.Ranges))
	}
	after := readAll(t, b, "a", 0)
	if len(after) != len(before) {
		t.Fatalf("merge changed reads: %d vs %d", len(after), len(before))
	}
	for i := range after {
		if after[i].Offset != before[i].Offset || string(after[i].Record.Payload) != string(before[i].Record.Payload) || !after[i].AppendedAt.Equal(before[i].AppendedAt) {
			t.Fatalf("record %d differs after merge", i)
		}
	}
	// First pass: the merged-away objects wait out GarbageGrace, for reads
	// that looked them up just before.
	garbage := b.fsm.State().Garbage
	if len(garbage) == 0 {
		t.Fatal("the merge left no garbage object")
	}
	exists := func(id uint64) bool {
		_, err := os.Stat(filepath.Join(dir, "objects", objName(id)))
		return err == nil
	}
	if err := b.collectGarbage(ctx, time.Hour, true); err != nil {
		t.Fatal(err)
	}
	for id := range garbage {
		if !exists(id) {
			t.Fatalf("object %d deleted within GarbageGrace", id)
		}
	}
	testwait.Until(t, 10*time.Second, "garbage is deleted once GarbageGrace is over", func() bool {
		if err := b.collectGarbage(ctx, time.Hour, true); err != nil {
			t.Fatal(err)
		}
		for id := range garbage {
			if exists(id) {
				return false
			}
		}
		return true
	})
	if n := objects(); n >= filesBefore || len(b.fsm.State().Garbage) != 0 {
		t.Fatalf("objects %d -> %d, garbage left %v", filesBefore, n, b.fsm.State().Garbage)
	}
}

// TestMergeLeavesLargeRangesAlone: a range of MergeRangeBytes or more is
// already cheap to keep and to read, so merging it would only write its
// bytes a second time; runs of small ranges around it still merge.
func TestMergeLeavesLargeRangesAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := openTest(t, t.TempDir(), func(c *Config) {
		c.MergeMinRanges = 4
		c.MergeRangeBytes = 4 << 10
		c.OrphanGrace = time.Hour
	})
	defer b.Close()
	mustCreate(t, b, "a", node.CreateOptions{})
	big := []stream.RecordValue{{Payload: make([]byte, 8<<10)}}
	for i := 0; i < 6; i++ {
		if _, err := b.Append(ctx, "a", big, node.AppendOptions{Partition: -1}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 6; i++ {
		if _, err := b.Append(ctx, "a", recs("x"), node.AppendOptions{Partition: -1}); err != nil {
			t.Fatal(err)
		}
	}
	b.maintain(ctx)
	e, _ := b.Get("a")
	in, _ := b.fsm.Internal(e.Partitions[0])
	// Six large ranges untouched, the six small ones merged into one.
	if len(in.Ranges) != 7 {
		t.Fatalf("after merge: %d ranges, want 7 (6 large kept, 6 small merged into 1)", len(in.Ranges))
	}
	for i, r := range in.Ranges[:6] {
		if r.Count != 1 || r.First != uint64(i) {
			t.Fatalf("large range %d changed: %+v", i, r)
		}
	}
	if r := in.Ranges[6]; r.Count != 6 || r.First != 6 {
		t.Fatalf("small ranges not merged: %+v", r)
	}
	if got := readAll(t, b, "a", 0); len(got) != 12 || len(got[0].Record.Payload) != 8<<10 {
		t.Fatalf("read %d records after merge", len(got))
	}
}

// TestForeignOpenFencesThisNode: when another node opens the stream (its
// epoch moves), this node's appends in flight fail retriably with nothing
// written, its provisional state is dropped, and the append after that
// reopens at a new epoch and continues the committed offsets without a gap.
func TestForeignOpenFencesThisNode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := openTest(t, t.TempDir(), func(c *Config) { c.MaxHold = time.Minute })
	defer b.Close()
	mustCreate(t, b, "s", node.CreateOptions{})
	if _, err := b.Append(ctx, "s", recs("a", "b"), node.AppendOptions{Partition: -1}); err != nil {
		t.Fatal(err)
	}
	e, _ := b.Get("s")
	// An append admitted under epoch 0 and not committed yet (the hold
	// keeps it queued) when another node opens the partition: it fails
	// retriably, and nothing of it is written.
	hold := b.Hold()
	pd, err := b.Admit(ctx, "s", recs("in flight"), node.AppendOptions{Partition: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.apply(ctx, &meta.Command{Op: meta.OpOpen, Open: &meta.Open{Stream: e.Partitions[0], Owner: "other"}}); err != nil {
		t.Fatal(err)
	}
	hold()
	if _, err := pd.Wait(ctx); err == nil || errs.HTTPStatus(err) != 503 {
		t.Fatalf("an append in flight when another node opened its partition: %v, want a retriable refusal (503)", err)
	}
	if in, _ := b.fsm.Internal(e.Partitions[0]); in.End != 2 || in.Owner != "other" {
		t.Fatalf("after the foreign open %+v: want end 2, owner other", in)
	}
	// This node may still open it (SingleNode ownership): the next append
	// reopens at the next epoch and continues at the committed end.
	res, err := b.Append(ctx, "s", recs("d"), node.AppendOptions{Partition: -1})
	if err != nil || res.First != 2 {
		t.Fatalf("append after the fence = %+v, %v; want offset 2", res, err)
	}
	in, _ := b.fsm.Internal(e.Partitions[0])
	if in.Epoch != 2 || in.Owner != b.NodeID() {
		t.Fatalf("internal after reopen %+v", in)
	}
}

// TestGroupOffsetRidesWithAppend: an append and a consumer-group offset
// commit atomically.
func TestGroupOffsetRidesWithAppend(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := openTest(t, t.TempDir())
	defer b.Close()
	mustCreate(t, b, "in", node.CreateOptions{})
	mustCreate(t, b, "out", node.CreateOptions{})
	if _, err := b.Append(ctx, "in", recs("1", "2", "3"), node.AppendOptions{Partition: -1}); err != nil {
		t.Fatal(err)
	}
	g := &node.GroupOffset{Stream: "in", Partition: 0, Group: "g", Next: 3}
	if _, err := b.Append(ctx, "out", recs("sum=6"), node.AppendOptions{Partition: -1, Group: g}); err != nil {
		t.Fatal(err)
	}
	if next, err := b.Committed(ctx, "in", "g", 0); err != nil || next != 3 {
		t.Fatalf("committed = %d, %v", next, err)
	}
	// A group offset past the input's end refuses the output append too.
	g = &node.GroupOffset{Stream: "in", Partition: 0, Group: "g", Next: 9}
	if _, err := b.Append(ctx, "out", recs("bad"), node.AppendOptions{Partition: -1, Group: g}); !errors.Is(err, stream.OffsetAhead) {
		t.Fatalf("append with a bad group offset = %v", err)
	}
	if got := readAll(t, b, "out", 0); len(got) != 1 {
		t.Fatalf("output holds %d records, want 1", len(got))
	}
}

// TestConcurrentAppendsGroupCommit: many appenders on many streams share
// flushes; every acknowledged offset is readable, none twice.
func TestConcurrentAppendsGroupCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := NewMetrics(nil)
	b := openTest(t, t.TempDir(), func(c *Config) { c.Metrics = m })
	defer b.Close()
	names := []string{"a", "b", "c", "d"}
	for _, n := range names {
		mustCreate(t, b, n, node.CreateOptions{})
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := map[string]map[uint64]string{}
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				n := names[(w+i)%len(names)]
				v := string(rune('A'+w)) + string(rune('a'+i))
				res, err := b.Append(ctx, n, recs(v), node.AppendOptions{Partition: -1})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if seen[n] == nil {
					seen[n] = map[uint64]string{}
				}
				if prev, dup := seen[n][res.First]; dup {
					t.Errorf("offset %d of %s acknowledged twice (%s, %s)", res.First, n, prev, v)
				}
				seen[n][res.First] = v
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	total := 0
	for _, n := range names {
		got := readAll(t, b, n, 0)
		total += len(got)
		for i, e := range got {
			if e.Offset != stream.Offset(i) || seen[n][uint64(i)] != string(e.Record.Payload) {
				t.Fatalf("%s offset %d: %q, acknowledged %q", n, e.Offset, e.Record.Payload, seen[n][uint64(i)])
			}
		}
	}
	if total != 32*20 {
		t.Fatalf("read %d records, want %d", total, 32*20)
	}
	// Group commit happened: fewer flushes than appends.
	var d dto.Metric
	if err := m.FlushAppends.Write(&d); err != nil {
		t.Fatal(err)
	}
	flushes, appended := d.GetHistogram().GetSampleCount(), d.GetHistogram().GetSampleSum()
	if appended != 32*20 || flushes >= 32*20 {
		t.Fatalf("%d flushes for %v appends: no group commit", flushes, appended)
	}
	t.Logf("%d appends in %d flushes", int(appended), flushes)
}

// TestSnapshotThenRestart: state restored from a metadata snapshot plus the
// entries after it serves the same records.
func TestSnapshotThenRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	b := openTest(t, dir)
	mustCreate(t, b, "s", node.CreateOptions{Policy: stream.PolicyValue{Partitions: 2}})
	for i := 0; i < 10; i++ {
		if _, err := b.Append(ctx, "s", recs("before"), node.AppendOptions{Partition: i % 2}); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Snapshot(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 6; i++ {
		if _, err := b.Append(ctx, "s", recs("after"), node.AppendOptions{Partition: i % 2}); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(ctx, "s", "g", 1, 4); err != nil {
		t.Fatal(err)
	}
	want := b.fsm.State()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if snaps, _ := filepath.Glob(filepath.Join(dir, "meta", "snapshots", "*", "state.bin")); len(snaps) == 0 {
		t.Fatal("no snapshot on disk")
	}
	b = openTest(t, dir)
	defer b.Close()
	got := b.fsm.State()
	if err := got.Check(); err != nil {
		t.Fatal(err)
	}
	for p := 0; p < 2; p++ {
		if n := len(readAll(t, b, "s", p)); n != 8 {
			t.Fatalf("partition %d: %d records after restart, want 8", p, n)
		}
	}
	if next, err := b.Committed(ctx, "s", "g", 1); err != nil || next != 4 {
		t.Fatalf("group offset after restart = %d, %v", next, err)
	}
	if got.NextStreamID != want.NextStreamID || got.MaxObjectID != want.MaxObjectID {
		t.Fatalf("restored counters differ: %d/%d vs %d/%d", got.NextStreamID, got.MaxObjectID, want.NextStreamID, want.MaxObjectID)
	}
}

// TestCloseClosesEveryOwnedStreamAtOnce: shutdown closes all the streams
// this node opened in one command, however many there are.
func TestCloseClosesEveryOwnedStreamAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	b := openTest(t, dir)
	const n = 300
	for i := 0; i < n; i++ {
		name := "s" + strconv.Itoa(i)
		mustCreate(t, b, name, node.CreateOptions{})
		if _, err := b.Append(ctx, name, recs("x"), node.AppendOptions{Partition: -1}); err != nil {
			t.Fatal(err)
		}
	}
	checkpointed(t, b) // what shutdown must write is the close
	before := b.fsm.Commands()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if got := b.fsm.Commands() - before; got > 2 { // closeMany (+ a last touch)
		t.Fatalf("shutdown took %d commands to close %d streams", got, n)
	}
	b = openTest(t, dir)
	defer b.Close()
	for id, in := range b.fsm.State().Streams {
		if in.Open || in.Owner != "" {
			t.Fatalf("stream %d still open after shutdown: %+v", id, in)
		}
	}
}

// TestRunningBrokerCollectsOrphans: an object written and never committed
// (a flush whose commit failed, say) is removed by the maintenance loop
// once older than OrphanGrace; committed objects stay.
func TestRunningBrokerCollectsOrphans(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := openTest(t, t.TempDir(), func(c *Config) {
		c.MaintenanceInterval = 20 * time.Millisecond
		c.OrphanGrace = 100 * time.Millisecond
	})
	defer b.Close()
	mustCreate(t, b, "a", node.CreateOptions{})
	if _, err := b.Append(ctx, "a", recs("kept"), node.AppendOptions{Partition: -1}); err != nil {
		t.Fatal(err)
	}
	w, err := b.objs.Create()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.AppendFrame([]byte("never committed")); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	orphan := w.ID()
	listed := func(id uint64) bool {
		infos, err := b.objs.List()
		if err != nil {
			t.Fatal(err)
		}
		for _, info := range infos {
			if info.ID == id {
				return true
			}
		}
		return false
	}
	testwait.Until(t, 10*time.Second, fmt.Sprintf("orphan %d is collected", orphan), func() bool { return !listed(orphan) })
	if got := readAll(t, b, "a", 0); len(got) != 1 || string(got[0].Record.Payload) != "kept" {
		t.Fatalf("a reads %v after orphan collection", got)
	}
}

// TestMergeReadsFramesOfOneObjectTogether: appends that shared a flush lie
// in consecutive frames of one object, which the merge reads in one go;
// every record keeps its offset, instant and bytes.
func TestMergeReadsFramesOfOneObjectTogether(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := openTest(t, t.TempDir(), func(c *Config) {
		c.MergeMinRanges = 4
		c.FlushLinger = 20 * time.Millisecond
		c.OrphanGrace = time.Hour
	})
	defer b.Close()
	mustCreate(t, b, "a", node.CreateOptions{})
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := range 4 {
				if _, err := b.Append(ctx, "a", recs(fmt.Sprintf("w%d-%d", w, i), strings.Repeat("p", w*i)), node.AppendOptions{Partition: -1}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	e, _ := b.Get("a")
	in, _ := b.fsm.Internal(e.Partitions[0])
	shared := false
	for i := 1; i < len(in.Ranges); i++ {
		if in.Ranges[i].Object == in.Ranges[i-1].Object {
			shared = true
		}
	}
	if !shared {
		t.Skip("no two appends shared a flush; nothing to read together")
	}
	before := readAll(t, b, "a", 0)
	b.maintain(ctx)
	in, _ = b.fsm.Internal(e.Partitions[0])
	if len(in.Ranges) != 1 || in.Ranges[0].Count != 128 {
		t.Fatalf("after merge: %d ranges", len(in.Ranges))
	}
	after := readAll(t, b, "a", 0)
	if len(after) != len(before) {
		t.Fatalf("merge changed reads: %d vs %d", len(after), len(before))
	}
	for i := range after {
		if after[i].Offset != before[i].Offset || string(after[i].Record.Key) != string(before[i].Record.Key) ||
			string(after[i].Record.Payload) != string(before[i].Record.Payload) || !after[i].AppendedAt.Equal(before[i].AppendedAt) {
			t.Fatalf("record %d differs after merge", i)
		}
	}
}

// TestReadsSurviveCollectionUnderThem: with no grace at all, objects are
// merged away and collected while readers read and seek them; a read whose
// object vanished looks its ranges up again instead of failing.
func TestReadsSurviveCollectionUnderThem(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := openTest(t, t.TempDir(), func(c *Config) {
		c.MergeMinRanges = 2
		c.OrphanGrace = time.Hour
	})
	defer b.Close()
	mustCreate(t, b, "a", node.CreateOptions{})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var reads, collected atomic.Int64
	wg.Go(func() { // writer
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := b.Append(ctx, "a", recs(strconv.Itoa(i)), node.AppendOptions{Partition: -1}); err != nil {
				t.Error(err)
				return
			}
		}
	})
	wg.Go(func() { // merges and collects with no grace
		for {
			select {
			case <-stop:
				return
			default:
			}
			b.maintain(ctx)
			if err := b.collectGarbage(ctx, 0, false); err != nil {
				t.Error(err)
				return
			}
			collected.Add(1)
		}
	})
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				es, _, err := b.Read(ctx, "a", 0, 0, 10_000, node.ReadOptions{})
				if err != nil {
					t.Errorf("read: %v", err)
					return
				}
				for i, e := range es {
					if e.Offset != stream.Offset(i) || string(e.Record.Payload) != strconv.Itoa(i) {
						t.Errorf("entry %d: offset %d payload %q", i, e.Offset, e.Record.Payload)
						return
					}
				}
				// Seeking by time reads frames too.
				if _, err := b.OffsetAt(ctx, "a", 0, time.Unix(0, 1)); err != nil {
					t.Errorf("seek: %v", err)
					return
				}
				reads.Add(1)
			}
		})
	}
	// Run until both sides have done enough to have met: reads whose
	// objects were collected under them.
	testwait.Until(t, 30*time.Second, "50 reads and 5 collections", func() bool { return reads.Load() >= 50 && collected.Load() >= 5 })
	close(stop)
	wg.Wait()
	if reads.Load() == 0 || collected.Load() == 0 {
		t.Fatalf("%d reads, %d collections", reads.Load(), collected.Load())
	}
	t.Logf("%d reads, %d collections", reads.Load(), collected.Load())
}

// TestJustAppendedIsReadFromMemory: a committed append's frame is cached
// as it is acknowledged, so live readers do not read the object back.
// (Small objects are not files at first anyway: see inline.go.)
func TestJustAppendedIsReadFromMemory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	b := openTest(t, dir, func(c *Config) { c.InlineBytes = -1; c.LogCommits = true }) // the log path's object files
	defer b.Close()
	mustCreate(t, b, "a", node.CreateOptions{})
	if _, err := b.Append(ctx, "a", recs("live"), node.AppendOptions{Partition: -1}); err != nil {
		t.Fatal(err)
	}
	e, _ := b.Get("a")
	in, _ := b.fsm.Internal(e.Partitions[0])
	// Take the object away from under the broker: only the cache has it.
	if err := os.Remove(filepath.Join(dir, "objects", objName(in.Ranges[0].Object))); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, b, "a", 0); len(got) != 1 || string(got[0].Record.Payload) != "live" {
		t.Fatalf("read %v", got)
	}
}

// TestHoldPutsAppendsInOneObject: appends admitted one after another under
// a hold share one object, and Admit returns at once on every path —
// queued, refused before admission, refused by the stream, answered as a
// duplicate — so that holding never waits on one of them.
func TestHoldPutsAppendsInOneObject(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// A bound far above the time the admissions take, even under -race on
	// a loaded machine: here the release decides, not the bound.
	b := openTest(t, t.TempDir(), func(c *Config) { c.MaxHold = time.Minute })
	defer b.Close()
	mustCreate(t, b, "a", node.CreateOptions{})
	const n = 20
	release := b.Hold()
	pending := make([]node.Pending, n)
	for i := range n {
		pd, err := b.Admit(ctx, "a", recs(strconv.Itoa(i)), node.AppendOptions{Partition: -1})
		if err != nil {
			t.Fatal(err)
		}
		pending[i] = pd
	}
	release()
	release() // a second call changes nothing
	for i, pd := range pending {
		res, err := pd.Wait(ctx)
		if err != nil || res.First != uint64(i) {
			t.Fatalf("append %d: %+v, %v; want offset %d (admitted in order)", i, res, err, i)
		}
	}
	e, _ := b.Get("a")
	checkpointed(t, b)
	in, _ := b.fsm.Internal(e.Partitions[0])
	if len(in.Ranges) != n {
		t.Fatalf("%d ranges for %d appends", len(in.Ranges), n)
	}
	for _, r := range in.Ranges {
		if r.Object != in.Ranges[0].Object {
			t.Fatalf("appends admitted under a hold went to objects %d and %d", in.Ranges[0].Object, r.Object)
		}
	}

	// Under a hold never released (the bound is a minute), every other path
	// still returns from Admit at once.
	hold := b.Hold()
	defer hold()
	admit := func(o node.AppendOptions, name string, want error) node.Pending {
		t.Helper()
		pd, err := b.Admit(ctx, name, recs("x"), o)
		if !errors.Is(err, want) && !(want == nil && err == nil) {
			t.Fatalf("admit to %s: %v, want %v", name, err, want)
		}
		return pd
	}
	admit(node.AppendOptions{Partition: -1}, "missing", meta.StreamNotFound)
	admit(node.AppendOptions{Partition: 7}, "a", stream.UnknownPartition)
	p := &node.ProducerTuple{ID: "p", Epoch: 0, Seq: 0}
	first := admit(node.AppendOptions{Partition: -1, Producer: p}, "a", nil)
	hold()
	if _, err := first.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if res, err := admit(node.AppendOptions{Partition: -1, Producer: p}, "a", nil).Wait(ctx); err != nil || !res.Duplicate {
		t.Fatalf("the repeat: %+v, %v; want a duplicate answered at admission", res, err)
	}
	admit(node.AppendOptions{Partition: -1, Producer: &node.ProducerTuple{ID: "p", Epoch: 0, Seq: 5}}, "a", meta.ProducerSeqGap)
	// A refusal answers at once under the hold too, with the producer's
	// accepted state beside it.
	gap, err := b.Append(ctx, "a", recs("x"), node.AppendOptions{Partition: -1, Producer: &node.ProducerTuple{ID: "p", Epoch: 0, Seq: 5}})
	if !errors.Is(err, meta.ProducerSeqGap) || gap.Producer.LastSeq != 0 {
		t.Fatalf("a refused append: %+v, %v; want PRODUCER_SEQ_GAP reporting the producer's accepted state", gap.Producer, err)
	}
}

// TestNoOpenLeavesAnUnopenedPartitionAlone: with NoOpen, an append whose
// partition is not open yet is refused node.ErrNotOpen having done nothing (no
// open, no offsets); once the partition is open, NoOpen changes nothing.
func TestNoOpenLeavesAnUnopenedPartitionAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := openTest(t, t.TempDir())
	defer b.Close()
	mustCreate(t, b, "fresh", node.CreateOptions{})
	commands := b.fsm.Commands()
	if _, err := b.Admit(ctx, "fresh", recs("x"), node.AppendOptions{Partition: 0, NoOpen: true}); !errors.Is(err, node.ErrNotOpen) {
		t.Fatalf("admit to an unopened partition with NoOpen: %v, want node.ErrNotOpen", err)
	}
	if got := b.fsm.Commands(); got != commands {
		t.Fatalf("%d metadata commands for a refused admission", got-commands)
	}
	for i, noOpen := range []bool{false, true} {
		pd, err := b.Admit(ctx, "fresh", recs(strconv.Itoa(i)), node.AppendOptions{Partition: 0, NoOpen: noOpen})
		if err != nil {
			t.Fatal(err)
		}
		if res, err := pd.Wait(ctx); err != nil || res.First != uint64(i) {
			t.Fatalf("append %d: %+v, %v", i, res, err)
		}
	}

	// Refused, an unkeyed append does not use up its partition's turn.
	mustCreate(t, b, "turns", node.CreateOptions{Policy: stream.PolicyValue{Partitions: 2}})
	if _, err := b.Admit(ctx, "turns", recs("x"), node.AppendOptions{Partition: -1, NoOpen: true}); !errors.Is(err, node.ErrNotOpen) {
		t.Fatalf("unkeyed admit with NoOpen: %v, want node.ErrNotOpen", err)
	}
	for want := range 2 {
		res, err := b.Append(ctx, "turns", recs("y"), node.AppendOptions{Partition: -1})
		if err != nil || res.Partition != want {
			t.Fatalf("unkeyed append %d went to partition %d (%v), want %d", want, res.Partition, err, want)
		}
	}
}

// TestFrameCacheDropsOneObjectsFrames: dropping an object forgets its
// frames only; eviction and dropping keep the per-object index and the
// size in step with the frames held.
func TestFrameCacheDropsOneObjectsFrames(t *testing.T) {
	t.Parallel()
	c := newFrameCache(40)
	for obj := uint64(1); obj <= 2; obj++ {
		for pos := int64(0); pos < 4; pos++ {
			c.put(frameKey{obj, pos}, []byte("12345")) // 5 bytes each: 40 in all
		}
	}
	c.dropObject(1)
	for pos := int64(0); pos < 4; pos++ {
		if _, ok := c.get(frameKey{1, pos}); ok {
			t.Fatalf("frame 1/%d kept after dropObject(1)", pos)
		}
		if _, ok := c.get(frameKey{2, pos}); !ok {
			t.Fatalf("frame 2/%d lost by dropObject(1)", pos)
		}
	}
	if c.size != 20 || c.ll.Len() != 4 || len(c.perObject) != 1 || len(c.perObject[2]) != 4 {
		t.Fatalf("size %d, %d items, index %v", c.size, c.ll.Len(), c.perObject)
	}
	// Six more frames of object 3 evict the two least recently used of 2.
	for pos := int64(0); pos < 6; pos++ {
		c.put(frameKey{3, pos}, []byte("12345"))
	}
	if c.size != 40 || c.ll.Len() != 8 || len(c.perObject[2]) != 2 || len(c.perObject[3]) != 6 {
		t.Fatalf("after eviction: size %d, %d items, object 2 %d frames, object 3 %d", c.size, c.ll.Len(), len(c.perObject[2]), len(c.perObject[3]))
	}
	c.dropObject(2)
	c.dropObject(3)
	if c.size != 0 || c.ll.Len() != 0 || len(c.perObject) != 0 {
		t.Fatalf("after dropping all: size %d, %d items, index %v", c.size, c.ll.Len(), c.perObject)
	}
}

// TestHoldNeverStallsForLong: a hold nobody releases delays a group commit
// by MaxHold at most; the append is acknowledged.
func TestHoldNeverStallsForLong(t *testing.T) {
	t.Parallel()
	b := openTest(t, t.TempDir(), func(c *Config) { c.MaxHold = 20 * time.Millisecond })
	defer b.Close()
	mustCreate(t, b, "a", node.CreateOptions{})
	release := b.Hold()
	defer release()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := b.Append(ctx, "a", recs("x"), node.AppendOptions{Partition: -1}); err != nil {
		t.Fatalf("append under a hold never released: %v", err)
	}
}

// TestNoRoomWaitReturnsAtOnce: an append with NoRoomWait that would wait
// for room returns node.ErrWouldWait and writes nothing; one whose stream has no
// BlockTimeout is refused STREAM_FULL as without it.
func TestNoRoomWaitReturnsAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := openTest(t, t.TempDir())
	defer b.Close()
	mustCreate(t, b, "wait", node.CreateOptions{Policy: stream.PolicyValue{MaxBytes: 8, MaxRecordBytes: 8, BlockTimeout: time.Hour}})
	mustCreate(t, b, "now", node.CreateOptions{Policy: stream.PolicyValue{MaxBytes: 8, MaxRecordBytes: 8}})
	for _, name := range []string{"wait", "now"} {
		if _, err := b.Append(ctx, name, recs("12345678"), node.AppendOptions{Partition: -1}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Append(ctx, "wait", recs("x"), node.AppendOptions{Partition: -1, NoRoomWait: true}); !errors.Is(err, node.ErrWouldWait) {
		t.Fatalf("append to a full stream with a BlockTimeout: %v, want node.ErrWouldWait", err)
	}
	if _, err := b.Append(ctx, "now", recs("x"), node.AppendOptions{Partition: -1, NoRoomWait: true}); !errors.Is(err, stream.StreamFull) {
		t.Fatalf("append to a full stream without one: %v, want STREAM_FULL", err)
	}
	if got := readAll(t, b, "wait", 0); len(got) != 1 {
		t.Fatalf("the stream holds %d records", len(got))
	}
}

// TestStoppedMaintenanceLogsNoFailures: a maintenance pass cut by the
// broker's stop (its context cancelled) ends without a "merge failed"
// warning a stream — what every stop under load used to log — while a
// pass that ran out of time reports it, once.
func TestStoppedMaintenanceLogsNoFailures(t *testing.T) {
	t.Parallel()
	var logged syncbuf.Buffer
	b := openTest(t, t.TempDir(), func(c *Config) {
		c.MergeMinRanges = 2
		c.InlineBytes = -1
		c.LogCommits = true
		c.Logger = slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	defer b.Close()
	for _, name := range []string{"a", "b", "c"} {
		mustCreate(t, b, name, node.CreateOptions{})
		for range 4 {
			if _, err := b.Append(context.Background(), name, recs("x"), node.AppendOptions{Partition: -1}); err != nil {
				t.Fatal(err)
			}
		}
	}
	stopped, stop := context.WithCancel(context.Background())
	stop()
	b.maintain(stopped)
	if s := logged.String(); strings.Contains(s, "failed") {
		t.Fatalf("a stopped pass logged:\n%s", s)
	}
	late, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	b.maintain(late)
	if s := logged.String(); strings.Count(s, "maintenance pass out of time") != 1 || strings.Contains(s, "merge failed") {
		t.Fatalf("a pass out of time: want its one warning, no merge failures a stream:\n%s", s)
	}
}
