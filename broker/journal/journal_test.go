package journal

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/picomq/picomq/broker/crashfs"
	"github.com/picomq/picomq/internal/testwait"
)

// memFS is a crashfs directory as a journal's FS: journaltest.FS for this
// package's own tests, which cannot import journaltest (it imports this
// package).
type memFS struct{ d *crashfs.Dir }

func (m memFS) Create(name string) (File, error) {
	f, err := m.d.Create(name)
	if err != nil {
		return nil, err
	}
	return f, nil
}

func (m memFS) Open(name string) (File, error) {
	f, err := m.d.Open(name)
	if err != nil {
		return nil, err
	}
	return f, nil
}

func (m memFS) Remove(name string) error     { return m.d.Remove(name) }
func (m memFS) Rename(from, to string) error { return m.d.Rename(from, to) }
func (m memFS) List() ([]string, error)      { return m.d.List(), nil }
func (m memFS) SyncDir() error               { return m.d.SyncDir() }

func open(t *testing.T, d *crashfs.Dir, opts ...func(*Options)) *Journal {
	t.Helper()
	o := Options{Incarnation: "broker-0/abc"}
	for _, f := range opts {
		f(&o)
	}
	j, err := Open(memFS{d}, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}

func obj(id uint64, stream uint64, epoch int64, first uint64, payload string) Object {
	return Object{ID: id, Parts: []Part{{Stream: stream, Epoch: epoch, First: first, Count: 1}}, Payload: []byte(payload)}
}

func mustAppend(t *testing.T, j *Journal, o Object) {
	t.Helper()
	if err := j.Append(o); err != nil {
		t.Fatalf("append of object %d: %v", o.ID, err)
	}
}

func ids(refs []Ref) []uint64 {
	var out []uint64
	for _, r := range refs {
		out = append(out, r.Object)
	}
	return out
}

// TestAcknowledgedObjectsSurviveACrash: every object Append answered is
// read back, byte for byte, after a crash that keeps only what fdatasyncs
// covered — and it was covered when it was answered.
func TestAcknowledgedObjectsSurviveACrash(t *testing.T) {
	d := &crashfs.Dir{}
	j := open(t, d)
	for i := range uint64(20) {
		mustAppend(t, j, obj(i+1, i%3, 0, i, fmt.Sprintf("payload-%d", i)))
		j.mu.Lock()
		s := j.objects[i+1]
		j.mu.Unlock()
		if !d.Synced(segmentName(s.seg), s.off, int64(s.n)) {
			t.Fatalf("object %d answered before an fdatasync covered it", i+1)
		}
	}
	d.Crash()
	j2 := open(t, d)
	for i := range uint64(20) {
		parts, payload, err := j2.Read(i + 1)
		if err != nil || string(payload) != fmt.Sprintf("payload-%d", i) || parts[0].First != i {
			t.Fatalf("object %d after the crash: %v %q %v", i+1, parts, payload, err)
		}
	}
	if got := ids(j2.Objects(1)); !slices.Equal(got, []uint64{2, 5, 8, 11, 14, 17, 20}) {
		t.Fatalf("stream 1's objects after the crash: %v", got)
	}
}

// TestFenceRefusesOlderEpochsAndSurvivesACrash: a fence answers with the
// stream's objects before it; from then on an object of the stream at an
// older epoch is refused, the owner's own included, a newer one accepted —
// and so after a crash right after the fence was answered.
func TestFenceRefusesOlderEpochsAndSurvivesACrash(t *testing.T) {
	d := &crashfs.Dir{}
	j := open(t, d)
	mustAppend(t, j, obj(1, 7, 3, 0, "a"))
	mustAppend(t, j, obj(2, 8, 3, 0, "other stream"))
	mustAppend(t, j, obj(3, 7, 3, 1, "b"))
	refs, err := j.Fence(7, 4)
	if err != nil || !slices.Equal(ids(refs), []uint64{1, 3}) {
		t.Fatalf("fence: %v %v, want objects 1 and 3", ids(refs), err)
	}
	d.Crash() // right after the answer
	j = open(t, d)
	if err := j.Append(obj(4, 7, 3, 2, "late")); !errors.Is(err, Fenced) {
		t.Fatalf("an epoch-3 object after the fence at 4 (and a crash): %v, want JOURNAL_FENCED", err)
	}
	// A part of another stream in the same object does not save it.
	mixed := Object{ID: 5, Parts: []Part{{Stream: 8, Epoch: 3}, {Stream: 7, Epoch: 3, First: 2}}, Payload: []byte("mixed")}
	if err := j.Append(mixed); !errors.Is(err, Fenced) {
		t.Fatalf("an object with one fenced part: %v", err)
	}
	mustAppend(t, j, obj(6, 7, 4, 2, "new owner"))
	if _, _, err := j.Read(4); !errors.Is(err, NotHeld) {
		t.Fatalf("a refused object was stored: %v", err)
	}
	// Fences only rise; a lower one changes nothing and answers the same.
	refs, err = j.Fence(7, 2)
	if err != nil || !slices.Equal(ids(refs), []uint64{1, 3, 6}) || j.FenceOf(7) != 4 {
		t.Fatalf("a lower fence: %v %v, fence now %d", ids(refs), err, j.FenceOf(7))
	}
}

// TestResendIsDurableOnceAndConflictRefused: an object sent again with the
// same bytes (its answer was lost) is answered without a second copy; with
// other bytes it is refused.
func TestResendIsDurableOnceAndConflictRefused(t *testing.T) {
	d := &crashfs.Dir{}
	j := open(t, d)
	mustAppend(t, j, obj(1, 7, 0, 0, "same"))
	files, _ := d.Syncs()
	mustAppend(t, j, obj(1, 7, 0, 0, "same"))
	if after, _ := d.Syncs(); after != files {
		t.Fatalf("a resend of held bytes was written again (%d syncs, then %d)", files, after)
	}
	if err := j.Append(obj(1, 7, 0, 0, "different")); !errors.Is(err, Conflict) {
		t.Fatalf("the same id with other bytes: %v, want JOURNAL_CONFLICT", err)
	}
	if err := j.Append(obj(1, 7, 0, 5, "same")); !errors.Is(err, Conflict) {
		t.Fatalf("the same id with other parts: %v, want JOURNAL_CONFLICT", err)
	}
}

// TestTornTailIsCutAndDamageIsNot: a crash that tears the last batch
// leaves a journal that opens with every acknowledged object and appends
// after them; a bad batch anywhere else marks the journal damaged, not
// shortened.
func TestTornTailIsCutAndDamageIsNot(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	var whole, cut int
	for trial := range 100 {
		d := &crashfs.Dir{}
		j := open(t, d)
		for i := range uint64(5) {
			mustAppend(t, j, obj(i+1, 1, 0, i, "acked"))
		}
		// Written, not synced: what a crash mid-batch leaves in part.
		seg := segmentName(j.cur)
		f, _ := d.Open(seg)
		tail := sealBatch(appendObject(make([]byte, batchHeader), &Object{ID: 99, Parts: []Part{{Stream: 1, First: 5, Count: 1}}, Payload: bytes.Repeat([]byte("t"), 100)}))
		_, _ = f.WriteAt(tail, j.curSize)
		j.Close()
		d.CrashTorn(rng)
		f, _ = d.Open(seg)
		torn, _ := f.Size()
		j2 := open(t, d)
		if err := j2.Damaged(); err != nil {
			t.Fatalf("trial %d: a torn tail opened as damage: %v", trial, err)
		}
		if _, _, err := j2.Read(99); err == nil {
			whole++
		} else if torn > j2.curSize {
			cut++
		}
		for i := range uint64(5) {
			if _, p, err := j2.Read(i + 1); err != nil || string(p) != "acked" {
				t.Fatalf("trial %d: acknowledged object %d lost: %v", trial, i+1, err)
			}
		}
		// Object 99 is there only if the whole batch survived.
		mustAppend(t, j2, obj(100, 1, 0, 6, "after the tear"))
		j2.Close()
		d.Crash()
		j3 := open(t, d)
		if _, p, err := j3.Read(100); err != nil || string(p) != "after the tear" {
			t.Fatalf("trial %d: an append after a cut tail: %q %v", trial, p, err)
		}
		j3.Close()
	}
	if whole == 0 || cut == 0 {
		t.Fatalf("100 torn crashes: the unsynced batch survived whole %d times, was cut %d times; want both", whole, cut)
	}

	// A flipped byte in a batch followed by another: damage.
	d := &crashfs.Dir{}
	j := open(t, d)
	mustAppend(t, j, obj(1, 1, 0, 0, "first batch"))
	firstEnd := j.curSize
	mustAppend(t, j, obj(2, 1, 0, 1, "second batch"))
	seg := segmentName(j.cur)
	j.Close()
	f, _ := d.Open(seg)
	_, _ = f.WriteAt([]byte{'X'}, firstEnd-3) // inside the first batch's payload
	_ = f.Sync()
	j2 := open(t, d)
	if err := j2.Damaged(); !errors.Is(err, Damaged) {
		t.Fatalf("a bad batch mid-file: %v, want JOURNAL_DAMAGED", err)
	}
	if err := j2.Append(obj(3, 1, 0, 2, "x")); !errors.Is(err, Damaged) {
		t.Fatalf("an append to a damaged journal: %v", err)
	}
	if _, err := j2.Fence(1, 1); !errors.Is(err, Damaged) {
		t.Fatalf("a fence of a damaged journal: %v", err)
	}
}

// TestAnotherIncarnationsJournalIsDamaged: a directory written by another
// incarnation of the member opens damaged.
func TestAnotherIncarnationsJournalIsDamaged(t *testing.T) {
	d := &crashfs.Dir{}
	j := open(t, d)
	mustAppend(t, j, obj(1, 1, 0, 0, "x"))
	j.Close()
	j2 := open(t, d, func(o *Options) { o.Incarnation = "broker-0/new" })
	if err := j2.Damaged(); !errors.Is(err, Damaged) {
		t.Fatalf("another incarnation's journal: %v", err)
	}
}

// TestConcurrentPeersUnderLoad: objects from concurrent peers are each
// answered only once durable, and segment boundaries crossed under load
// lose nothing.
func TestConcurrentPeersUnderLoad(t *testing.T) {
	d := &crashfs.Dir{}
	j := open(t, d, func(o *Options) { o.SegmentBytes = 4 << 10 })
	const peers, each = 8, 50
	var wg sync.WaitGroup
	errs := make(chan error, peers*each)
	for p := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				id := uint64(p*each + i + 1)
				o := obj(id, uint64(p), 0, uint64(i), fmt.Sprintf("peer %d object %d", p, i))
				if err := j.Append(o); err != nil {
					errs <- err
					return
				}
				j.mu.Lock()
				s := j.objects[id]
				j.mu.Unlock()
				if !d.Synced(segmentName(s.seg), s.off, int64(s.n)) {
					errs <- fmt.Errorf("object %d answered before it was durable", id)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	files, _ := d.Syncs()
	t.Logf("%d objects from %d peers: %d fdatasyncs, %d segments", peers*each, peers, files, len(d.List()))
	if len(d.List()) < 2 {
		t.Errorf("no segment boundary crossed (%v)", d.List())
	}
	d.Crash()
	j2 := open(t, d)
	for p := range peers {
		if got := len(j2.Objects(uint64(p))); got != each {
			t.Fatalf("peer %d: %d objects after the crash, want %d", p, got, each)
		}
	}
}

// gatedFS holds every fdatasync of a segment until the test lets it go.
type gatedFS struct {
	memFS
	syncing chan struct{} // a Sync began
	release chan struct{} // let one finish
}

type gatedFile struct {
	File
	g *gatedFS
}

func (g *gatedFS) Create(name string) (File, error) {
	f, err := g.memFS.Create(name)
	return gatedFile{f, g}, err
}

func (f gatedFile) Sync() error {
	f.g.syncing <- struct{}{}
	<-f.g.release
	return f.File.Sync()
}

// TestGroupCommit: the objects that arrive while a batch is being synced
// go, all of them, into the next batch and its one fdatasync.
func TestGroupCommit(t *testing.T) {
	d := &crashfs.Dir{}
	g := &gatedFS{memFS: memFS{d}, syncing: make(chan struct{}), release: make(chan struct{})}
	go func() { <-g.syncing; g.release <- struct{}{} }() // the first segment's header
	j, err := Open(g, Options{Incarnation: "broker-0/abc"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		go func() { // nothing syncs after the test's batches; in case
			for range g.syncing {
				g.release <- struct{}{}
			}
		}()
		j.Close()
		close(g.syncing)
	}()
	done := make(chan error, 8)
	go func() { done <- j.Append(obj(1, 1, 0, 0, "first")) }()
	<-g.syncing // the first batch, alone, is being synced
	for i := range uint64(7) {
		go func() { done <- j.Append(obj(i+2, i, 0, 0, "queued")) }()
	}
	for len(j.reqs) < 7 { // all seven wait behind the first sync
		runtime.Gosched()
	}
	files, _ := d.Syncs()
	g.release <- struct{}{}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	<-g.syncing // the second batch
	select {
	case err := <-done:
		t.Fatalf("an object was answered before its batch's fdatasync: %v", err)
	default:
	}
	g.release <- struct{}{}
	for range 7 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if after, _ := d.Syncs(); after-files != 2 {
		t.Fatalf("%d fdatasyncs for the first object and the seven that arrived during its sync, want 2", after-files)
	}
}

// TestRecoveryCopyPassesTheFenceOfItsEpoch: a member fenced at a new epoch
// refuses the old owner's objects but takes the new owner's recovery copies
// of them, which keep their epoch — across a crash too — and a copy of an
// object held already is held once.
func TestRecoveryCopyPassesTheFenceOfItsEpoch(t *testing.T) {
	d := &crashfs.Dir{}
	j := open(t, d)
	mustAppend(t, j, obj(1, 7, 3, 0, "held"))
	if _, err := j.Fence(7, 4); err != nil {
		t.Fatal(err)
	}
	old := obj(2, 7, 3, 1, "adopted")
	if err := j.Append(old); !errors.Is(err, Fenced) {
		t.Fatalf("the old owner's object after the fence: %v", err)
	}
	cp := old
	cp.Copied, cp.By = true, 4
	mustAppend(t, j, cp)
	stale := obj(3, 7, 3, 2, "copied by a stale recovery")
	stale.Copied, stale.By = true, 3
	if err := j.Append(stale); !errors.Is(err, Fenced) {
		t.Fatalf("a copy on the authority of a fenced epoch: %v", err)
	}
	again := obj(1, 7, 3, 0, "held")
	again.Copied, again.By = true, 4
	files, _ := d.Syncs()
	mustAppend(t, j, again)
	if after, _ := d.Syncs(); after != files {
		t.Fatalf("a copy of an object held already was written again")
	}
	d.Crash()
	j = open(t, d)
	parts, p, err := j.Read(2)
	if err != nil || string(p) != "adopted" || parts[0].Epoch != 3 {
		t.Fatalf("the copy after a crash: %v %q %v; want epoch 3's object", parts, p, err)
	}
	// Parts answers from the index what Read reads, and nothing for an
	// object never held (the stale copy refused above).
	if indexed, ok := j.Parts(2); !ok || !slices.Equal(indexed, parts) {
		t.Fatalf("Parts(2) = %v, %v; Read's %v", indexed, ok, parts)
	}
	if indexed, ok := j.Parts(3); ok {
		t.Fatalf("Parts of a refused object: %v", indexed)
	}
	if got := ids(j.Objects(7)); !slices.Equal(got, []uint64{1, 2}) {
		t.Fatalf("stream 7 holds %v", got)
	}
}

// TestFenceAndObjectsInOneBatch: an object that arrives just before a
// fence, in the same batch, is written and listed in the fence's answer;
// one just after it is refused — the writer orders them as they came.
func TestFenceAndObjectsInOneBatch(t *testing.T) {
	d := &crashfs.Dir{}
	g := &gatedFS{memFS: memFS{d}, syncing: make(chan struct{}), release: make(chan struct{})}
	go func() { <-g.syncing; g.release <- struct{}{} }() // the segment's header
	j, err := Open(g, Options{Incarnation: "broker-0/abc"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		go func() {
			for range g.syncing {
				g.release <- struct{}{}
			}
		}()
		j.Close()
		close(g.syncing)
	}()
	first := make(chan error, 1)
	go func() { first <- j.Append(obj(1, 9, 0, 0, "holds the writer")) }()
	<-g.syncing // the writer is busy: the next three queue, in this order
	before := make(chan error, 1)
	go func() { before <- j.Append(obj(2, 7, 3, 0, "before the fence")) }()
	for len(j.reqs) < 1 {
		runtime.Gosched()
	}
	fence := make(chan []Ref, 1)
	go func() {
		refs, err := j.Fence(7, 4)
		if err != nil {
			t.Error(err)
		}
		fence <- refs
	}()
	for len(j.reqs) < 2 {
		runtime.Gosched()
	}
	after := make(chan error, 1)
	go func() { after <- j.Append(obj(3, 7, 3, 1, "after the fence")) }()
	for len(j.reqs) < 3 {
		runtime.Gosched()
	}
	g.release <- struct{}{}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	<-g.syncing // one batch: the object, the fence, the refused object
	g.release <- struct{}{}
	if err := <-before; err != nil {
		t.Fatalf("the object queued before the fence: %v", err)
	}
	if refs := <-fence; !slices.Equal(ids(refs), []uint64{2}) {
		t.Fatalf("the fence's answer %v, want the object queued before it", ids(refs))
	}
	if err := <-after; !errors.Is(err, Fenced) {
		t.Fatalf("the object queued after the fence: %v, want JOURNAL_FENCED", err)
	}
}

// TestWhatOpenReadsIsMadeDurable: a process killed after writing a batch
// and before its fdatasync leaves the batch in the page cache; the next
// open reads it — and syncs it before answering anything for it, so that
// a resend answered "held already" survives the power failing next.
func TestWhatOpenReadsIsMadeDurable(t *testing.T) {
	d := &crashfs.Dir{}
	j := open(t, d)
	mustAppend(t, j, obj(1, 7, 0, 0, "synced"))
	seg := segmentName(j.cur)
	f, _ := d.Open(seg)
	unsynced := sealBatch(appendFence(appendObject(make([]byte, batchHeader), &Object{ID: 2, Parts: []Part{{Stream: 7, First: 1, Count: 1}}, Payload: []byte("cached")}), 7, 5))
	_, _ = f.WriteAt(unsynced, j.curSize)
	d.Kill()
	j = open(t, d)
	mustAppend(t, j, obj(2, 7, 0, 1, "cached")) // held already: answered at once
	d.Crash()
	j = open(t, d)
	if _, p, err := j.Read(2); err != nil || string(p) != "cached" {
		t.Fatalf("an object answered as held after a kill was lost to the crash after: %q %v", p, err)
	}
	if j.FenceOf(7) != 5 {
		t.Fatalf("a fence read back after a kill was lost to the crash after: %d", j.FenceOf(7))
	}
}

// TestDamageBeforeValidBatchesIsNotATornTail: a bad length (or a lost
// page) in a batch followed by valid ones is damage, not a tail to cut —
// cutting would drop acknowledged objects and fences.
func TestDamageBeforeValidBatchesIsNotATornTail(t *testing.T) {
	d := &crashfs.Dir{}
	j := open(t, d)
	hdr := j.curSize
	for i := range uint64(5) {
		mustAppend(t, j, obj(i+1, 1, 0, i, "acked"))
	}
	seg := segmentName(j.cur)
	j.Close()
	f, _ := d.Open(seg)
	_, _ = f.WriteAt([]byte{0xff, 0xff, 0xff, 0x7f}, hdr+4) // the first batch's length, past the end
	_ = f.Sync()
	if err := open(t, d).Damaged(); !errors.Is(err, Damaged) {
		t.Fatalf("a flipped length before four valid batches: %v, want JOURNAL_DAMAGED", err)
	}
}

// TestTailWrittenBackOutOfOrderIsTorn: the last batch's first bytes lost
// (zeros) while later ones reached the disk is still a torn tail.
func TestTailWrittenBackOutOfOrderIsTorn(t *testing.T) {
	d := &crashfs.Dir{}
	j := open(t, d)
	mustAppend(t, j, obj(1, 1, 0, 0, "acked"))
	end := j.curSize
	seg := segmentName(j.cur)
	j.Close()
	f, _ := d.Open(seg)
	tail := sealBatch(appendObject(make([]byte, batchHeader), &Object{ID: 2, Parts: []Part{{Stream: 1, First: 1, Count: 1}}, Payload: bytes.Repeat([]byte("t"), 64)}))
	clear(tail[:16])
	_, _ = f.WriteAt(tail, end)
	_ = f.Sync()
	j = open(t, d)
	if err := j.Damaged(); err != nil {
		t.Fatalf("a tail written back out of order: %v, want it cut", err)
	}
	if _, _, err := j.Read(1); err != nil {
		t.Fatal(err)
	}
}

// TestCloseAnswersEveryRequest: requests racing Close are each answered
// (durable, or JOURNAL_CLOSED), never left waiting.
func TestCloseAnswersEveryRequest(t *testing.T) {
	for trial := range 300 {
		j := open(t, &crashfs.Dir{})
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := j.Append(obj(uint64(i+1), 1, 0, uint64(i), "x")); err != nil && !errors.Is(err, Closed) {
					t.Errorf("trial %d: %v", trial, err)
				}
			}()
		}
		j.Close()
		wg.Wait() // a request left unanswered hangs here
	}
}

// TestBatchesSplitAtTheirBound: a batch that would outgrow the bound is
// written as several, each synced, every request answered, all read back.
func TestBatchesSplitAtTheirBound(t *testing.T) {
	defer func(old int) { splitBytes = old }(splitBytes)
	splitBytes = 1 << 10
	d := &crashfs.Dir{}
	g := &gatedFS{memFS: memFS{d}, syncing: make(chan struct{}), release: make(chan struct{})}
	go func() {
		for range g.syncing {
			g.release <- struct{}{}
		}
	}()
	defer close(g.syncing)
	j, err := Open(g, Options{Incarnation: "broker-0/abc"})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	var wg sync.WaitGroup
	for i := range uint64(20) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := j.Append(obj(i+1, 1, 0, i, string(bytes.Repeat([]byte("p"), 300)))); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	j.Close()
	d.Crash()
	j2 := open(t, d)
	if got := len(j2.Objects(1)); got != 20 {
		t.Fatalf("%d objects after the crash, want 20", got)
	}
}

// TestDropOldestSegments: segments go oldest first and never the current
// one or one holding a stream's current fence, which CarryFences writes
// again at the end so that its segment can go; what Drop forgot is gone
// from the index, the rest survives a crash right after, and the journal
// reopens whole (no gap, not damaged).
func TestDropOldestSegments(t *testing.T) {
	d := &crashfs.Dir{}
	j := open(t, d, func(o *Options) { o.SegmentBytes = 200 })
	if _, err := j.Fence(9, 3); err != nil { // stream 9's fence, in segment 1
		t.Fatal(err)
	}
	for i := range uint64(12) {
		mustAppend(t, j, obj(i+1, 1+i%2, 0, i/2, fmt.Sprintf("payload-%02d-%s", i, bytes.Repeat([]byte("x"), 60))))
	}
	segs := j.Segments()
	if len(segs) < 4 || !segs[len(segs)-1].Current || segs[0].Current {
		t.Fatalf("segments: %+v", segs)
	}
	if err := j.Drop(segs[1].Number); !errors.Is(err, NotOldest) {
		t.Fatalf("drop of the second segment: %v, want JOURNAL_SEGMENT_NOT_OLDEST", err)
	}
	if err := j.Drop(segs[0].Number); !errors.Is(err, Pinned) {
		t.Fatalf("drop of the segment holding a fence: %v, want JOURNAL_SEGMENT_PINNED", err)
	}
	if err := j.CarryFences(segs[0].Number); err != nil { // now in the current segment
		t.Fatal(err)
	}
	if e := j.FenceOf(9); e != 3 {
		t.Fatalf("stream 9's fence after it was carried: %d, want 3", e)
	}
	var dropped []uint64
	for _, s := range j.Segments()[:2] {
		if err := j.Drop(s.Number); err != nil {
			t.Fatalf("drop of segment %d: %v", s.Number, err)
		}
		dropped = append(dropped, s.Objects...)
	}
	if len(dropped) == 0 {
		t.Fatal("the dropped segments held no object: the test proves nothing")
	}
	check := func(j *Journal) {
		t.Helper()
		for i := range uint64(12) {
			_, payload, err := j.Read(i + 1)
			if slices.Contains(dropped, i+1) {
				if !errors.Is(err, NotHeld) {
					t.Fatalf("dropped object %d: %v", i+1, err)
				}
				continue
			}
			if err != nil || !bytes.HasPrefix(payload, []byte(fmt.Sprintf("payload-%02d-", i))) {
				t.Fatalf("object %d: %q %v", i+1, payload, err)
			}
		}
		for _, st := range []uint64{1, 2} {
			for _, r := range j.Objects(st) {
				if slices.Contains(dropped, r.Object) {
					t.Fatalf("stream %d still lists dropped object %d", st, r.Object)
				}
			}
		}
		if j.FenceOf(9) != 3 {
			t.Fatalf("stream 9's fence: %d (its segment dropped after it was carried)", j.FenceOf(9))
		}
		if err := j.Append(obj(200, 9, 2, 0, "an older epoch")); !errors.Is(err, Fenced) {
			t.Fatalf("an object of stream 9's older epoch: %v, want JOURNAL_FENCED", err)
		}
	}
	check(j)
	j.Close()
	d.Crash()
	j2 := open(t, d)
	if err := j2.Damaged(); err != nil {
		t.Fatalf("reopened after drops: %v", err)
	}
	check(j2)
	mustAppend(t, j2, obj(100, 1, 0, 6, "after"))
}

// waitSpare waits until j's preparer has a spare ready: on the clock, not
// by a count of yields — on a loaded machine (CI runs packages side by
// side) the preparer may not run within thousands of them.
func waitSpare(t *testing.T, j *Journal) {
	t.Helper()
	testwait.Until(t, 20*time.Second, "a spare is prepared", func() bool {
		j.mu.Lock()
		defer j.mu.Unlock()
		return j.spareReady
	})
}

// TestPreallocatedSegments: with Preallocate a new segment is the spare,
// zero-filled and synced ahead; the zeros past the last batch are neither
// a torn tail nor damage, in the last segment or an earlier one; a crash
// at any point keeps every answered object and reopens whole, a spare
// torn mid-fill included.
func TestPreallocatedSegments(t *testing.T) {
	d := &crashfs.Dir{}
	pre := func(o *Options) { o.SegmentBytes = 4 << 10; o.Preallocate = true }
	j := open(t, d, pre)
	var want []Object
	for i := range uint64(40) {
		if i%10 == 0 {
			waitSpare(t, j) // so that the next segments are spares
		}
		o := obj(i+1, i%3, 0, i/3, fmt.Sprintf("payload-%02d-%s", i, bytes.Repeat([]byte("y"), 200)))
		mustAppend(t, j, o)
		want = append(want, o)
	}
	segs := j.Segments()
	if len(segs) < 3 {
		t.Fatalf("%d segments: the test proves nothing", len(segs))
	}
	preallocated := 0
	for _, s := range segs[:len(segs)-1] {
		f, err := d.Open(segmentName(s.Number))
		if err != nil {
			t.Fatal(err)
		}
		if size, _ := f.Size(); size >= 4<<10 {
			preallocated++
		}
	}
	if preallocated == 0 {
		t.Fatal("no segment was a preallocated spare")
	}
	check := func(j *Journal) {
		t.Helper()
		if err := j.Damaged(); err != nil {
			t.Fatal(err)
		}
		for _, o := range want {
			_, payload, err := j.Read(o.ID)
			if err != nil || !bytes.Equal(payload, o.Payload) {
				t.Fatalf("object %d: %v", o.ID, err)
			}
		}
	}
	j.Close()
	d.Crash()
	j2 := open(t, d, pre)
	check(j2)
	mustAppend(t, j2, obj(100, 1, 0, 99, "after"))
	want = append(want, obj(100, 1, 0, 99, "after"))
	j2.Close()
	// A spare torn mid-fill (the process killed while writing it) is
	// removed and made again.
	f, err := d.Create(spareTmp)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt(make([]byte, 100), 0)
	d.Kill()
	j3 := open(t, d, pre)
	check(j3)
	waitSpare(t, j3)
	for _, name := range d.List() {
		if name == spareTmp {
			t.Fatal("the torn spare was left")
		}
	}
}

// failingFS fails Create of one name, or Remove of one name once.
type failingFS struct {
	memFS
	create string
	remove *string
}

func (f failingFS) Create(name string) (File, error) {
	if name == f.create {
		return nil, errors.New("injected: create failed")
	}
	return f.memFS.Create(name)
}

func (f failingFS) Remove(name string) error {
	if f.remove != nil && name == *f.remove {
		*f.remove = ""
		return errors.New("injected: remove failed")
	}
	return f.memFS.Remove(name)
}

// TestSyncedObjectIsAnsweredDurableWhenTheRollFails: an object whose
// batch was written and synced is answered durable even when beginning
// the next segment then fails — a start reads it back, so answering it
// failed would make its adoption a surprise — and the journal accepts
// nothing after. (A review found it answered JOURNAL_FAILED.)
func TestSyncedObjectIsAnsweredDurableWhenTheRollFails(t *testing.T) {
	d := &crashfs.Dir{}
	j, err := Open(failingFS{memFS: memFS{d}, create: segmentName(2)}, Options{Incarnation: "broker-0/abc", SegmentBytes: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Append(obj(1, 1, 0, 0, strings.Repeat("z", 5000))); err != nil {
		t.Fatalf("an object synced before the roll failed: %v", err)
	}
	if err := j.Append(obj(2, 1, 0, 1, "after")); !errors.Is(err, Failed) {
		t.Fatalf("an append after the roll failed: %v, want JOURNAL_FAILED", err)
	}
	j.Close()
	d.Crash()
	j2 := open(t, d, func(o *Options) { o.SegmentBytes = 4 << 10 })
	if _, p, err := j2.Read(1); err != nil || len(p) != 5000 {
		t.Fatalf("the object after a crash: %d bytes, %v", len(p), err)
	}
}

// TestDropWhoseRemoveFailsForgetsNothing: a Drop whose file could not be
// removed leaves the segment in the journal, the oldest still; the next
// Drop of it succeeds and the journal reopens whole. (A review found the
// segment forgotten, the next one dropped, and a gap: damage at open.)
func TestDropWhoseRemoveFailsForgetsNothing(t *testing.T) {
	d := &crashfs.Dir{}
	name := segmentName(1)
	j, err := Open(failingFS{memFS: memFS{d}, remove: &name}, Options{Incarnation: "broker-0/abc", SegmentBytes: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	for i := range uint64(4) {
		mustAppend(t, j, obj(i+1, 1, 0, i, strings.Repeat("z", 5000)))
	}
	if err := j.Drop(1); err == nil {
		t.Fatal("the Drop whose Remove failed answered nil")
	}
	if _, _, err := j.Read(1); err != nil {
		t.Fatalf("the segment's object after a failed Drop: %v", err)
	}
	if err := j.Drop(2); !errors.Is(err, NotOldest) {
		t.Fatalf("a Drop past the segment left: %v, want JOURNAL_SEGMENT_NOT_OLDEST", err)
	}
	if err := j.Drop(1); err != nil {
		t.Fatal(err)
	}
	j.Close()
	j2 := open(t, d, func(o *Options) { o.SegmentBytes = 4 << 10 })
	if err := j2.Damaged(); err != nil {
		t.Fatalf("reopened: %v", err)
	}
	if _, _, err := j2.Read(2); err != nil {
		t.Fatal(err)
	}
}

// TestTornHeaderOfAPreallocatedSegmentIsBegunAgain: a last segment whose
// header was torn over a preallocated file (zeros after it) is begun
// again, not damage.
func TestTornHeaderOfAPreallocatedSegmentIsBegunAgain(t *testing.T) {
	d := &crashfs.Dir{}
	j := open(t, d, func(o *Options) { o.SegmentBytes = 4 << 10 })
	mustAppend(t, j, obj(1, 1, 0, 0, "kept"))
	j.Close()
	f, err := d.Create(segmentName(2))
	if err != nil {
		t.Fatal(err)
	}
	torn := append([]byte("PMQJ\\x01garbage"), make([]byte, 4<<10)...)
	if _, err := f.WriteAt(torn, 0); err != nil {
		t.Fatal(err)
	}
	f.Sync()
	d.SyncDir()
	j2 := open(t, d, func(o *Options) { o.SegmentBytes = 4 << 10 })
	if err := j2.Damaged(); err != nil {
		t.Fatalf("a torn header over zeros: %v", err)
	}
	if _, p, err := j2.Read(1); err != nil || string(p) != "kept" {
		t.Fatalf("object 1: %q %v", p, err)
	}
	mustAppend(t, j2, obj(2, 1, 0, 1, "after"))
}
