package journal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"maps"
	"slices"
	"sync"
)

// Options configure Open.
type Options struct {
	// Incarnation is the member's: every segment carries it, and a
	// journal of another incarnation (a wiped and re-formatted member's
	// directory, handed to it again) opens Damaged.
	Incarnation string
	// SegmentBytes is the size past which a new segment begins (default
	// 64 MiB).
	SegmentBytes int64
	// Preallocate keeps a zero-filled spare segment ready, written and
	// synced in the background: an fdatasync of a write into a file's
	// existing bytes need not update its size, and measured here took
	// half the time of one that grows the file (0.10 against 0.19 ms).
	Preallocate bool
	// Synced, when set, is called after each batch's fdatasync (metrics:
	// the fdatasyncs a broker makes per second).
	Synced func()
}

// Ref is one part of an object the journal holds.
type Ref struct {
	Object uint64
	Part   Part
}

// Journal is one broker's journal. Its methods are safe for concurrent
// use; concurrent Appends and Fences share batches and fdatasyncs.
type Journal struct {
	fs   FS
	opts Options
	reqs chan *request
	done chan struct{}
	wg   sync.WaitGroup
	// sending is held by each request from its closed check to its send,
	// and by Close to set closed.
	sending sync.RWMutex
	dropMu  sync.Mutex // one Drop at a time

	mu       sync.Mutex // guards the index below, read by Objects and Read
	fences   map[uint64]int64
	fenceSeg map[uint64]uint64   // the segment holding each stream's fence
	segObjs  map[uint64][]uint64 // each segment's objects, in the order written
	byStream map[uint64][]Ref
	objects  map[uint64]*stored
	segments map[uint64]File
	damaged  error // set at open, never cleared
	failed   error // set by the writer, never cleared
	closed   bool

	// The writer's own.
	cur     uint64 // the segment appended to
	curSize int64

	// spareReady: the zero-filled spare is in place (guarded by mu);
	// spareWanted asks the preparer for one.
	spareReady  bool
	spareWanted chan struct{}
}

// stored is where an object's payload lies.
type stored struct {
	seg   uint64
	off   int64 // of the payload in the segment
	n     int
	parts []Part
	sum   uint32 // CRC-32C of parts and payload, to tell a resend from a conflict
}

type request struct {
	obj    *Object
	fence  bool
	stream uint64
	epoch  int64
	// carry writes a fence again at its own epoch (CarryFences).
	carry bool

	refs []Ref // a fence's answer
	err  error
	done chan struct{}
	// settled: the answer is final — what it needed is synced, or it was
	// refused writing nothing — and a later failure of its batch does not
	// change it (the object is durable: answering it failed would make a
	// start's adoption of it a surprise).
	settled bool
}

// Open opens the journal in fs, cutting off a torn tail; a journal found
// damaged is opened all the same, and answers Damaged (see Damaged).
func Open(fs FS, opts Options) (*Journal, error) {
	if opts.SegmentBytes <= 0 {
		opts.SegmentBytes = 64 << 20
	}
	if len(opts.Incarnation) > maxIncarnation {
		return nil, errors.New("journal: incarnation longer than 1 KiB")
	}
	j := &Journal{fs: fs, opts: opts, reqs: make(chan *request, 1024), done: make(chan struct{}), spareWanted: make(chan struct{}, 1),
		fences: map[uint64]int64{}, fenceSeg: map[uint64]uint64{}, segObjs: map[uint64][]uint64{}, byStream: map[uint64][]Ref{}, objects: map[uint64]*stored{}, segments: map[uint64]File{}}
	if err := j.recover(); err != nil {
		j.closeFiles()
		return nil, err
	}
	fail := func(err error) (*Journal, error) {
		j.closeFiles()
		return nil, err
	}
	if opts.Preallocate && j.damaged == nil {
		if err := j.findSpare(); err != nil {
			return fail(err)
		}
	}
	switch {
	case j.damaged != nil:
	case len(j.segments) == 0:
		if err := j.beginPreallocated(1); err != nil {
			return fail(err)
		}
	default:
		// What open read may be a killed process's page cache, never
		// synced: a resend of it is answered as durable, a retried fence
		// as in place. Make it so before anything is answered.
		err := j.segments[j.cur].Sync()
		if err == nil {
			err = j.fs.SyncDir()
		}
		if err != nil {
			return fail(err)
		}
		if opts.Preallocate {
			// A current segment that grows (written before preallocation,
			// or when no spare was ready) would cost every append its
			// growth: begin a preallocated one.
			size, err := j.segments[j.cur].Size()
			if err != nil {
				return fail(err)
			}
			if size <= j.curSize {
				if err := j.beginPreallocated(j.cur + 1); err != nil {
					return fail(err)
				}
			}
		}
	}
	if opts.Preallocate && j.damaged == nil {
		j.wg.Add(1)
		go j.prepareSpares()
	}
	j.wg.Add(1)
	go j.run()
	return j, nil
}

// The spare segment: zero-filled, synced, renamed into place, and renamed
// to a segment's name when the writer begins one.
const (
	spareName = "journal-spare.zeroed"
	spareTmp  = spareName + ".tmp"
)

// beginPreallocated begins segment n at open, from a spare made now when
// Preallocate is set and none is ready: the first appends pay for no
// growth either.
func (j *Journal) beginPreallocated(n uint64) error {
	if j.opts.Preallocate && !j.spareReady {
		if err := j.prepareSpare(); err != nil {
			return err
		}
	}
	return j.newSegment(n)
}

// findSpare keeps a whole spare left by an earlier run and removes what
// is not one; the preparer makes one if none is left.
func (j *Journal) findSpare() error {
	names, err := j.fs.List()
	if err != nil {
		return err
	}
	for _, name := range names {
		switch name {
		case spareTmp:
			if err := j.fs.Remove(name); err != nil {
				return err
			}
		case spareName:
			f, err := j.fs.Open(name)
			if err != nil {
				return err
			}
			size, err := f.Size()
			f.Close()
			if err != nil {
				return err
			}
			if size == j.opts.SegmentBytes {
				j.spareReady = true
			} else if err := j.fs.Remove(name); err != nil {
				return err
			}
		}
	}
	if !j.spareReady {
		j.wantSpare()
	}
	return nil
}

func (j *Journal) wantSpare() {
	select {
	case j.spareWanted <- struct{}{}:
	default:
	}
}

// prepareSpares writes a spare whenever one is wanted, until Close.
func (j *Journal) prepareSpares() {
	defer j.wg.Done()
	for {
		select {
		case <-j.done:
			return
		case <-j.spareWanted:
		}
		if err := j.prepareSpare(); err != nil {
			// The next segment is created growing, as without a spare;
			// the one after asks again.
			_ = j.fs.Remove(spareTmp)
		}
	}
}

// prepareSpare zero-fills SegmentBytes of a new file, syncs it and renames
// it into place.
func (j *Journal) prepareSpare() error {
	_ = j.fs.Remove(spareTmp)
	f, zeros, err := j.createSpare()
	if err != nil {
		return err
	}
	for off := int64(0); off < j.opts.SegmentBytes; off += int64(len(zeros)) {
		select {
		case <-j.done:
			f.Close()
			return Closed
		default:
		}
		n := min(int64(len(zeros)), j.opts.SegmentBytes-off)
		if _, err := f.WriteAt(zeros[:n], off); err != nil {
			f.Close()
			return err
		}
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = j.fs.Rename(spareTmp, spareName)
	}
	if err == nil {
		err = j.fs.SyncDir()
	}
	if err != nil {
		return err
	}
	j.mu.Lock()
	j.spareReady = true
	j.mu.Unlock()
	return nil
}

// createSpare creates the spare's file and the zeros to fill it with:
// written directly when the file system can and the size keeps direct
// I/O's alignment (zeroing a 16 MiB spare through the page cache showed as
// a tenth of a cluster broker's CPU under load), else through the cache.
// Either way the file's blocks are written, not merely allocated, which
// is what spares the later fdatasyncs a metadata update.
func (j *Journal) createSpare() (File, []byte, error) {
	const chunk = 1 << 20
	if dc, ok := j.fs.(DirectCreator); ok && j.opts.SegmentBytes%DirectAlign == 0 {
		f, ok, err := dc.CreateDirect(spareTmp)
		if err != nil {
			return nil, nil, err
		}
		if ok {
			return f, AlignedBuffer(int(min(chunk, j.opts.SegmentBytes))), nil
		}
	}
	f, err := j.fs.Create(spareTmp)
	if err != nil {
		return nil, nil, err
	}
	return f, make([]byte, min(chunk, j.opts.SegmentBytes)), nil
}

// Damaged is the damage open found (a JOURNAL_DAMAGED error), or nil.
func (j *Journal) Damaged() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.damaged
}

// Append makes o durable in the journal and returns nil once an fdatasync
// covers it — or refuses it, writing nothing: Fenced when a part's stream
// is fenced past its epoch (for a copy, past By), Conflict when o's id is
// held with other bytes. An object held already with the same bytes is
// answered at once.
func (j *Journal) Append(o Object) error {
	r := &request{obj: &o, done: make(chan struct{})}
	return j.do(r).err
}

// Fence raises stream's fence to epoch (never lowers it) and returns, once
// an fdatasync covers the fence, every part of stream the journal holds —
// each object of the stream written before the fence. From the fence on,
// objects with a part of stream at an older epoch are refused.
func (j *Journal) Fence(stream uint64, epoch int64) ([]Ref, error) {
	r := &request{fence: true, stream: stream, epoch: epoch, done: make(chan struct{})}
	j.do(r)
	return r.refs, r.err
}

func (j *Journal) do(r *request) *request {
	// Held from the check to the send: Close waits for it, so a request
	// sent is always one the writer will answer.
	j.sending.RLock()
	j.mu.Lock()
	switch {
	case j.closed:
		r.err = Closed
	case j.damaged != nil:
		r.err = j.damaged
	case j.failed != nil:
		r.err = j.failed
	}
	j.mu.Unlock()
	sent := r.err == nil
	if sent {
		j.reqs <- r
	}
	j.sending.RUnlock()
	if sent {
		<-r.done // the writer sets r's answer before it closes done
	}
	return r
}

// Objects returns every part of stream the journal holds, in the order
// written.
func (j *Journal) Objects(stream uint64) []Ref {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.byStream[stream])
}

// FenceOf returns stream's fence (-1 when none).
func (j *Journal) FenceOf(stream uint64) int64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	if e, ok := j.fences[stream]; ok {
		return e
	}
	return -1
}

// Where returns the segment and the byte range holding object id's
// payload: what a test checks is durable when the object is answered.
func (j *Journal) Where(id uint64) (segment string, off, n int64, ok bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	s, ok := j.objects[id]
	if !ok {
		return "", 0, 0, false
	}
	return segmentName(s.seg), s.off, int64(s.n), true
}

// Parts returns object id's parts from the journal's index, reading
// nothing: what a caller deciding whether a segment can go needs, without
// the payloads it may never use.
func (j *Journal) Parts(id uint64) ([]Part, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	s, ok := j.objects[id]
	if !ok {
		return nil, false
	}
	return slices.Clone(s.parts), true
}

// Read returns object id's parts and payload.
func (j *Journal) Read(id uint64) ([]Part, []byte, error) {
	j.mu.Lock()
	s, ok := j.objects[id]
	var f File
	if ok {
		f = j.segments[s.seg]
	}
	j.mu.Unlock()
	if !ok || f == nil {
		return nil, nil, NotHeld.With("object", id)
	}
	buf := make([]byte, s.n)
	if s.n > 0 {
		if _, err := f.ReadAt(buf, s.off); err != nil {
			return nil, nil, err
		}
	}
	return slices.Clone(s.parts), buf, nil
}

// Segment is one segment of the journal as Segments lists it.
type Segment struct {
	Number  uint64
	Objects []uint64 // in the order written
	// Current: the segment appended to, which Drop refuses.
	Current bool
}

// Segments lists the journal's segments, oldest first.
func (j *Journal) Segments() []Segment {
	j.mu.Lock()
	defer j.mu.Unlock()
	numbers := slices.Sorted(maps.Keys(j.segments))
	out := make([]Segment, len(numbers))
	for i, n := range numbers {
		out[i] = Segment{Number: n, Objects: slices.Clone(j.segObjs[n]), Current: i == len(numbers)-1}
	}
	return out
}

// CarryFences writes every stream's current fence that segment n holds
// again, at the end of the journal, and returns once an fdatasync covers
// them: the segment no longer pins them, and Drop may take it. (A stream
// fenced once and never again would otherwise keep its segment, and every
// later one, forever.)
func (j *Journal) CarryFences(n uint64) error {
	j.mu.Lock()
	var reqs []*request
	for st, seg := range j.fenceSeg {
		if seg == n {
			reqs = append(reqs, &request{fence: true, carry: true, stream: st, epoch: j.fences[st], done: make(chan struct{})})
		}
	}
	j.mu.Unlock()
	errs := make(chan error, len(reqs))
	for _, r := range reqs {
		go func() { errs <- j.do(r).err }()
	}
	var first error
	for range reqs {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Drop deletes segment n and forgets the objects in it: the caller has
// them elsewhere, durably, or needs them no more. Only the oldest
// segment, never the current one, and never one holding a stream's
// current fence (Pinned: CarryFences moves them on) may go; the directory is synced before Drop
// returns, so that a crash never leaves a gap before a later segment.
func (j *Journal) Drop(n uint64) error {
	// One at a time: the checks below hold until the file is gone.
	j.dropMu.Lock()
	defer j.dropMu.Unlock()
	j.mu.Lock()
	numbers := slices.Sorted(maps.Keys(j.segments))
	switch {
	case j.closed:
		j.mu.Unlock()
		return Closed
	case len(numbers) < 2 || numbers[0] != n:
		var oldest, current uint64
		if len(numbers) > 0 {
			oldest, current = numbers[0], numbers[len(numbers)-1]
		}
		j.mu.Unlock()
		return NotOldest.With("segment", segmentName(n), "oldest", oldest, "current", current)
	}
	for st, seg := range j.fenceSeg {
		if seg == n {
			e := j.fences[st]
			j.mu.Unlock()
			return Pinned.With("segment", segmentName(n), "stream", st, "epoch", e)
		}
	}
	j.mu.Unlock()
	// The file first: a segment forgotten but left on disk would leave a
	// gap behind the next one dropped, and a gap is damage at open. (The
	// open file stays readable until it is closed below.)
	if err := j.fs.Remove(segmentName(n)); err != nil {
		return err
	}
	j.mu.Lock()
	f := j.segments[n]
	delete(j.segments, n)
	gone := map[uint64]bool{}
	streams := map[uint64]bool{}
	for _, id := range j.segObjs[n] {
		s := j.objects[id]
		if s == nil || s.seg != n {
			continue
		}
		delete(j.objects, id)
		gone[id] = true
		for _, p := range s.parts {
			streams[p.Stream] = true
		}
	}
	for st := range streams {
		refs := slices.DeleteFunc(j.byStream[st], func(r Ref) bool { return gone[r.Object] })
		if len(refs) == 0 {
			delete(j.byStream, st)
		} else {
			j.byStream[st] = refs
		}
	}
	delete(j.segObjs, n)
	j.mu.Unlock()
	_ = f.Close()
	return j.fs.SyncDir()
}

// Close stops the writer after the batch in progress; requests after it
// are refused with Closed.
func (j *Journal) Close() error {
	j.sending.Lock()
	j.mu.Lock()
	was := j.closed
	j.closed = true
	j.mu.Unlock()
	j.sending.Unlock()
	if was {
		return nil
	}
	close(j.done)
	j.wg.Wait()
	return j.closeFiles()
}

func (j *Journal) closeFiles() error {
	var first error
	for _, f := range j.segments {
		if err := f.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// run is the one writer.
func (j *Journal) run() {
	defer j.wg.Done()
	for {
		var batch []*request
		select {
		case r := <-j.reqs:
			batch = append(batch, r)
		case <-j.done:
			j.refuseQueued()
			return
		}
	more:
		for {
			select {
			case r := <-j.reqs:
				batch = append(batch, r)
			default:
				break more
			}
		}
		j.commit(batch)
	}
}

// refuseQueued answers what is still queued at Close.
func (j *Journal) refuseQueued() {
	for {
		select {
		case r := <-j.reqs:
			r.err = Closed
			close(r.done)
		default:
			return
		}
	}
}

// splitBytes is where the writer ends a batch and begins another (the
// format's bound; tests lower it).
var splitBytes = maxBatchBytes

// commit checks a batch's requests in order, writes what it accepted —
// in more than one write and fdatasync when it outgrows splitBytes — and
// answers them all once every write is synced.
func (j *Journal) commit(batch []*request) {
	defer func() {
		for _, r := range batch {
			close(r.done)
		}
	}()
	if err := j.failedErr(); err != nil {
		for _, r := range batch {
			r.err = err
		}
		return
	}
	type placed struct {
		obj *Object
		at  int // of the payload, in buf
	}
	buf := make([]byte, batchHeader, 4096)
	var accepted []placed
	var inBuf []*request            // answered by buf's flush
	fences := map[uint64]int64{}    // raised in buf
	pending := map[uint64]*Object{} // accepted in buf, by id
	// flush writes and syncs buf, then makes its fences and objects the
	// journal's; false when the write failed (the batch is answered).
	flush := func() bool {
		if len(buf) == batchHeader {
			return true
		}
		seg, at := j.cur, j.curSize
		f := j.segment(seg)
		if _, err := f.WriteAt(sealBatch(buf), at); err != nil {
			j.fail(err, seg, "write", batch)
			return false
		}
		if err := f.Sync(); err != nil {
			j.fail(err, seg, "sync", batch)
			return false
		}
		if j.opts.Synced != nil {
			j.opts.Synced()
		}
		j.curSize += int64(len(buf))
		for _, r := range inBuf {
			r.settled = true
		}
		inBuf = nil
		j.mu.Lock()
		for st, e := range fences {
			j.fences[st], j.fenceSeg[st] = e, seg
		}
		for _, p := range accepted {
			j.index(p.obj, seg, at+int64(p.at))
		}
		j.mu.Unlock()
		buf, accepted, fences, pending = buf[:batchHeader], nil, map[uint64]int64{}, map[uint64]*Object{}
		if j.curSize >= j.opts.SegmentBytes {
			if err := j.newSegment(j.cur + 1); err != nil {
				j.fail(err, j.cur+1, "create", batch)
				return false
			}
		}
		return true
	}
	fenceOf := func(stream uint64) (int64, bool) { // called with j.mu held
		if e, ok := fences[stream]; ok {
			return e, true
		}
		e, ok := j.fences[stream]
		return e, ok
	}
	for _, r := range batch {
		if r.fence {
			if len(buf)+fenceBytes > splitBytes && !flush() {
				return
			}
			j.mu.Lock()
			if e, ok := fenceOf(r.stream); !ok || r.epoch > e || r.carry && r.epoch == e {
				fences[r.stream] = r.epoch
				buf = appendFence(buf, r.stream, r.epoch)
			}
			// Its answer: the stream's objects before it, those waiting
			// in buf included; given once they are all synced.
			r.refs = slices.Clone(j.byStream[r.stream])
			j.mu.Unlock()
			for _, p := range accepted {
				for _, part := range p.obj.Parts {
					if part.Stream == r.stream {
						r.refs = append(r.refs, Ref{Object: p.obj.ID, Part: part})
					}
				}
			}
			inBuf = append(inBuf, r)
			continue
		}
		o := r.obj
		size := objectBytes(o)
		if size > maxObjectBytes {
			r.err, r.settled = TooLarge.With("object", o.ID, "bytes", size, "max", maxObjectBytes), true
			continue
		}
		j.mu.Lock()
		held, isHeld := j.objects[o.ID]
		var fenced error
		for _, p := range o.Parts {
			if e, ok := fenceOf(p.Stream); ok && o.authority(p) < e {
				fenced = Fenced.With("object", o.ID, "stream", p.Stream, "epoch", o.authority(p), "fence", e)
				break
			}
		}
		j.mu.Unlock()
		same := func(sum uint32, parts []Part) bool { return sum == objectSum(o) && slices.Equal(parts, o.Parts) }
		switch prev, isPending := pending[o.ID]; {
		case isHeld && same(held.sum, held.parts):
			// The same bytes, durable already: a resend.
			r.settled = true
			continue
		case isPending && same(objectSum(prev), prev.Parts):
			// The same bytes, about to be durable: a resend.
			inBuf = append(inBuf, r)
			continue
		case fenced != nil:
			r.err, r.settled = fenced, true
			continue
		case isHeld || isPending:
			r.err, r.settled = Conflict.With("object", o.ID), true
			continue
		}
		if len(buf)+size > splitBytes && !flush() {
			return
		}
		pending[o.ID] = o
		buf = appendObject(buf, o)
		accepted = append(accepted, placed{o, len(buf) - len(o.Payload)})
		inBuf = append(inBuf, r)
	}
	flush()
}

// index records o, whose payload lies at off in segment seg. Called with
// j.mu held.
func (j *Journal) index(o *Object, seg uint64, off int64) {
	parts := slices.Clone(o.Parts)
	j.objects[o.ID] = &stored{seg: seg, off: off, n: len(o.Payload), parts: parts, sum: objectSum(o)}
	j.segObjs[seg] = append(j.segObjs[seg], o.ID)
	for _, p := range parts {
		j.byStream[p.Stream] = append(j.byStream[p.Stream], Ref{Object: o.ID, Part: p})
	}
}

func (j *Journal) segment(n uint64) File {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.segments[n]
}

func (j *Journal) failedErr() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.failed
}

// fail latches the journal as failed and answers batch with it.
func (j *Journal) fail(cause error, seg uint64, op string, batch []*request) {
	err := Failed.Wrap(cause, "segment", segmentName(seg), "op", op)
	j.mu.Lock()
	if j.failed == nil {
		j.failed = err
	}
	j.mu.Unlock()
	for _, r := range batch {
		if !r.settled {
			r.err, r.refs = err, nil
		}
	}
}

// newSegment begins segment n: its header written and synced, its
// directory entry synced, before anything in it is answered.
func (j *Journal) newSegment(n uint64) error {
	j.mu.Lock()
	spare := j.spareReady
	j.spareReady = false
	j.mu.Unlock()
	var f File
	var err error
	if spare {
		// Renamed, then its header written and synced and the rename
		// synced with the directory below: a crash before leaves a
		// zero-filled last segment, begun again at open.
		if err = j.fs.Rename(spareName, segmentName(n)); err == nil {
			f, err = j.fs.Open(segmentName(n))
		}
		j.wantSpare()
	}
	if !spare || err != nil {
		f, err = j.fs.Create(segmentName(n))
	}
	if err != nil {
		return err
	}
	if err = j.writeHeader(f, n); err == nil {
		err = j.fs.SyncDir()
	}
	if err != nil {
		f.Close()
		return err
	}
	j.mu.Lock()
	j.segments[n] = f
	j.mu.Unlock()
	return nil
}

// writeHeader writes and syncs segment n's header at the start of f (an
// empty file), and makes n the segment appended to.
func (j *Journal) writeHeader(f File, n uint64) error {
	hdr := appendHeader(nil, n, j.opts.Incarnation)
	if _, err := f.WriteAt(hdr, 0); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	j.cur, j.curSize = n, int64(len(hdr))
	return nil
}

// objectSum is a CRC-32C of o's parts and payload.
func objectSum(o *Object) uint32 {
	var b [partBytes]byte
	sum := uint32(0)
	for _, p := range o.Parts {
		binary.LittleEndian.PutUint64(b[0:], p.Stream)
		binary.LittleEndian.PutUint64(b[8:], uint64(p.Epoch))
		binary.LittleEndian.PutUint64(b[16:], p.First)
		binary.LittleEndian.PutUint64(b[24:], p.Count)
		sum = crc32.Update(sum, castagnoli, b[:])
	}
	return crc32.Update(sum, castagnoli, o.Payload)
}

// recover reads every segment in order into the index, cuts off a torn
// tail of the last, and marks the journal damaged at any other fault.
func (j *Journal) recover() error {
	names, err := j.fs.List()
	if err != nil {
		return err
	}
	var numbers []uint64
	for _, name := range names {
		if n, ok := segmentNumber(name); ok {
			numbers = append(numbers, n)
		}
	}
	slices.Sort(numbers)
	for i, n := range numbers {
		last := i == len(numbers)-1
		if i > 0 && n != numbers[i-1]+1 {
			j.damage(n, 0, "a segment is missing before this one")
			return nil
		}
		f, err := j.fs.Open(segmentName(n))
		if err != nil {
			return err
		}
		j.segments[n] = f
		size, err := f.Size()
		if err != nil {
			return err
		}
		data := make([]byte, size)
		if _, err := f.ReadAt(data, 0); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		num, inc, hlen, herr := parseHeader(data)
		hlenWant := len(appendHeader(nil, n, j.opts.Incarnation))
		switch {
		case herr != nil && last && (len(data) < hlenWant || allZero(data[hlenWant:])):
			// Created, its header torn (nothing is written after a
			// header before it is synced; a preallocated segment is
			// zeros after it): begin it again.
			if err := f.Truncate(0); err != nil {
				return err
			}
			if err := j.writeHeader(f, n); err != nil {
				return err
			}
			continue
		case herr != nil:
			j.damage(n, 0, herr.Error())
			return nil
		case num != n:
			j.damage(n, 0, "the header names another segment")
			return nil
		case inc != j.opts.Incarnation:
			j.damage(n, 0, "a segment of another incarnation ("+inc+")")
			return nil
		}
		end, reason, checked := j.scan(n, data, hlen)
		if reason != "" && !checked && allZero(data[end:]) {
			// The rest of a preallocated segment: never written.
			reason = ""
		}
		if reason != "" {
			if !last || checked || !tornTail(data, end) {
				j.damage(n, end, reason)
				return nil
			}
			// A torn tail: cut it off, durably, before appending after it.
			if err := f.Truncate(end); err != nil {
				return err
			}
			if err := f.Sync(); err != nil {
				return err
			}
		}
		j.cur, j.curSize = n, end
	}
	return nil
}

// scan indexes the batches of segment n in data from off; it returns where
// the good batches end and, when a bad record stopped it, why — and
// whether that record passed its checksum (then it is what was written,
// and no tear explains it).
func (j *Journal) scan(n uint64, data []byte, off int) (end int64, reason string, checked bool) {
	for off < len(data) {
		body, ok := batchAt(data, int64(off))
		if !ok {
			return int64(off), "a batch cut short, or failing its checksum", false
		}
		l := len(body)
		entries, err := parseEntries(body)
		if err != nil {
			return int64(off), err.Error(), true
		}
		for _, e := range entries {
			if e.fence {
				if prev, ok := j.fences[e.stream]; !ok || e.epoch > prev {
					j.fences[e.stream], j.fenceSeg[e.stream] = e.epoch, n
				}
				continue
			}
			if _, ok := j.objects[e.obj.ID]; !ok {
				j.index(&e.obj, n, int64(off+batchHeader+e.payloadAt))
			}
		}
		off += batchHeader + l
	}
	return int64(off), "", false
}

// tornTail reports whether the bad record at off in the last segment is a
// torn write: only the last batch can be unsynced at a crash, so it is torn
// when no checksum-valid batch begins anywhere after it (whatever its own
// bytes: a tail written back out of order reads as zeros, then data).
// Damage that leaves a valid batch after it — a flipped length, a lost
// page mid-file — is damage. (A bad final batch that was synced is not
// told from a torn one: nothing after it says it was.)
func tornTail(data []byte, off int64) bool {
	for i := off + 1; i < int64(len(data)); {
		k := bytes.Index(data[i:], []byte(batchMagic))
		if k < 0 {
			return true
		}
		if _, ok := batchAt(data, i+int64(k)); ok {
			return false
		}
		i += int64(k) + 1
	}
	return true
}

func allZero(b []byte) bool { return len(bytes.Trim(b, "\x00")) == 0 }

// damage marks the journal damaged. Called at open only.
func (j *Journal) damage(seg uint64, off int64, reason string) {
	j.damaged = Damaged.With("segment", segmentName(seg), "offset", off, "reason", reason)
}
