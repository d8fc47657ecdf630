package core

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/picomq/picomq/broker/journal"
	"github.com/picomq/picomq/broker/meta"
	"github.com/picomq/picomq/broker/node"
	"github.com/picomq/picomq/broker/objstore"
	"github.com/picomq/picomq/broker/stream"
)

// The journal data path: appends commit in the broker's journal, and the
// metadata log takes them in batches (checkpoints). A lone broker runs it
// (R = 1: its journal's fdatasync is the commit); a cluster member runs
// it on its ensembles (ensembles.go: the journals of a write quorum). Only
// a member given no Peers — an older build's cluster during a rolling
// upgrade — or Config.LogCommits commits each group commit through the
// log. The decisions, each for a reason:
//
//  1. A group commit is one object in the journal (broker/journal): its
//     payload is the object's frames, then its commit's descriptor — the
//     meta.Commit the log would have taken, encoded as the log encodes it
//     —, the descriptor's length and a kind byte. Once the journal's
//     fdatasync covers the object its appends are acknowledged and its
//     readers woken; the object is held in memory (objstore.Hold) and read
//     from there. No file, rename or directory fsync per object, and no
//     metadata command on the acknowledgement path.
//     1b. Above InlineBytes the object is a file of its own, written and
//     synced first, and the journal holds only its descriptor (kind
//     objectInFile): large objects are rarely merged, so held in memory
//     they would be written twice (journal, then their file) — measured,
//     half the bandwidth of 100 KiB appends. A start adopts such an
//     object only if its file is whole.
//  1c. Nothing checks an acknowledged object's offsets but the owner, so
//     a rollback must never leave an object built on rolled-back offsets
//     able to land: a failure before the journal (a file or the store)
//     rolls its batch back only once every batch before it is answered;
//     a journal append that fails fails every later one too, whatever the
//     journal answers them; and a rollback reopens the stream at a new
//     epoch, so that an object of the old one still in flight is left out
//     of the tail (APPEND_OUTCOME_UNKNOWN) and no start adopts it.
//  2. The tail — what is acknowledged and not yet in the log — lives on
//     the owner only (tailState). Reads, bounds, MaxBytes and producer
//     checks see the log's state plus the tail; a tail range is used only
//     at or past the state's end of its stream at the same epoch, so a
//     checkpoint applying under a reader never shows a range twice.
//  3. The checkpointer proposes one OpCheckpoint for the whole tail every
//     CheckpointInterval, at once when CheckpointBytes are waiting, and
//     before every command that must see the tail in the state (an open —
//     its next epoch starts at the state's end, so a tail left out would
//     have its offsets handed out again —, a close, a fork, a trim, a
//     group offset): see Broker.apply. Its commands per acknowledged
//     append tend to zero with load.
//  4. An append carrying a group offset must land atomically with it, and
//     the log may refuse the offset: its batch waits for every earlier
//     batch to be answered, the tail is checkpointed, and the batch
//     commits through the log as before (frames inline or in a synced
//     file) — never through the journal, so a refused one leaves nothing
//     a restart could adopt —, and nothing is written after it until it
//     is answered.
//  5. At start, after the log replays, every journal object is read in
//     the order the flusher built them (a sequence number in its payload:
//     several are handed to the journal at once and may land in another
//     order, and a file's id comes from a pool, handed out earlier):
//     those the state
//     references are held again, and the appends past their stream's
//     checkpointed end, at the epoch it is open at by this broker and
//     continuing it, are adopted by checkpoints (of bounded size) before
//     anything is served or opened — never one a checkpoint refused
//     before. Adopting one whose answer was lost is safe: its producer
//     state travels with it.
//  6. A journal segment is dropped, oldest first, once every object in it
//     is checkpointed and either referenced by no range or written to its
//     own file and synced (the maintenance loop; never by age). An object
//     counts as the tail's from the moment it is handed to the journal
//     until it is checkpointed, for this and for the orphan collector.
//  7. A journal that failed a write or an fdatasync acknowledges nothing
//     more: the volume is reported failed (STORAGE_FAILED) until restart.
//     The appends it could not answer durable are answered
//     APPEND_OUTCOME_UNKNOWN: their bytes may be on disk, and a start
//     adopts what continues a stream.
//  8. While the log takes no checkpoint, appends go on until
//     MaxUncheckpointedBytes are waiting (records, and tailAppendBytes an
//     append for what each costs beside them); past it they are refused
//     with METADATA_UNAVAILABLE (retriable).
//  9. The log path (a member without Peers, or Config.LogCommits) refuses a
//     data directory holding a journal: it could not adopt its appends.
//
// Upgrade: a data directory written before the journal has none; it is
// created empty, and everything committed is in the log. A release before
// the journal cannot apply checkpoints: going back to one is not supported
// once this one has written (meta.LevelCheckpoint).

// journalDir is where a data directory keeps the journal.
func journalDir(dataDir string) string { return filepath.Join(dataDir, "journal") }

// tailState is what the journal acknowledged and the log does not hold yet.
type tailState struct {
	mu      sync.Mutex
	commits []*meta.Commit // in the order acknowledged
	bytes   int64          // their record bytes, and tailAppendBytes an append
	objects map[uint64]int // object -> commits of the tail naming it
	// held are the members holding each replicated object of the tail or
	// still being sent it: take names them in its commits (ensembles.go,
	// decision 10).
	held    map[uint64]*holders
	streams map[uint64]*streamTail
	// due wakes the checkpointer before its tick.
	due chan struct{}
}

// streamTail is one internal stream's part of the tail.
type streamTail struct {
	epoch  int64
	ranges []meta.Range
	end    uint64 // past the last acknowledged append
	bytes  int64
}

func newTailState() *tailState {
	return &tailState{objects: map[uint64]int{}, held: map[uint64]*holders{}, streams: map[uint64]*streamTail{}, due: make(chan struct{}, 1)}
}

// track has take name object id's holders as h has them then. The object
// is held (hold) until its commits are checkpointed or it is released.
func (t *tailState) track(id uint64, h *holders) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.objects[id] > 0 {
		t.held[id] = h
	}
}

// forget ends object id's count by one. Called with t.mu held.
func (t *tailState) forget(id uint64) {
	if t.objects[id]--; t.objects[id] <= 0 {
		delete(t.objects, id)
		delete(t.held, id)
	}
}

// hold counts object id as the tail's from the moment it is handed to the
// journal: a durable object whose commit has not joined the tail yet must
// not have its journal segment dropped (releaseJournal) or its file taken
// for an orphan. add (via drop) or release ends the count.
func (t *tailState) hold(id uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.objects[id]++
}

// release ends hold's count of an object that will not join the tail.
func (t *tailState) release(id uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.forget(id)
}

// add appends an acknowledged commit, whose object hold counted.
func (t *tailState) add(c *meta.Commit) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.commits = append(t.commits, c)
	t.index(c)
}

// index adds c's appends to the per-stream view. Called with t.mu held.
func (t *tailState) index(c *meta.Commit) {
	for _, a := range c.Appends {
		st := t.streams[a.Stream]
		if st == nil || st.epoch != a.Epoch {
			st = &streamTail{epoch: a.Epoch}
			t.streams[a.Stream] = st
		}
		t.bytes += tailAppendBytes
		if a.Range != nil {
			st.ranges = append(st.ranges, *a.Range)
			st.end = a.Range.Next
			st.bytes += a.Range.Bytes
			t.bytes += a.Range.Bytes
		} else {
			st.end = max(st.end, a.First)
		}
	}
}

// settle waits until every member the tail's objects were sent to has
// answered, or deadline, or ctx ends.
func (t *tailState) settle(ctx context.Context, deadline time.Time) {
	t.mu.Lock()
	waits := make([]<-chan struct{}, 0, len(t.held))
	for _, h := range t.held {
		waits = append(waits, h.settled)
	}
	t.mu.Unlock()
	if len(waits) == 0 {
		return
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for _, w := range waits {
		select {
		case <-w:
		case <-timer.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// take returns the commits waiting (the caller checkpoints them), each
// replicated one naming the members that hold its object or are still
// being sent it: not those whose straggling failed since its quorum.
func (t *tailState) take() []*meta.Commit {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := slices.Clone(t.commits)
	for i, c := range out {
		if h := t.held[c.Object]; h != nil && len(c.Replicas) > 0 {
			named := *c
			named.Replicas = h.list()
			out[i] = &named
		}
	}
	return out
}

// drop forgets the first n commits, now in the log.
func (t *tailState) drop(n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range t.commits[:n] {
		t.forget(c.Object)
	}
	t.commits = slices.Delete(t.commits, 0, n)
	t.streams, t.bytes = map[uint64]*streamTail{}, 0
	for _, c := range t.commits {
		t.index(c)
	}
}

// tailAppendBytes is what the tail counts for an append beside its record
// bytes — its descriptor in the journal and in memory, about — so that
// MaxUncheckpointedBytes bounds what tiny records cost too.
const tailAppendBytes = 256

// size is the bytes waiting: records, and tailAppendBytes an append.
func (t *tailState) size() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.bytes
}

// holds reports whether an object of the tail (or on its way in) is id.
func (t *tailState) holds(id uint64) bool {
	if t == nil {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.objects[id] > 0
}

// past returns the tail's ranges of in at or past its end in the state,
// and the acknowledged end. Called inside a View (t.mu is a leaf).
func (t *tailState) past(in *meta.Internal) (ranges []meta.Range, end uint64) {
	if t == nil {
		return nil, in.End
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.streams[in.ID]
	if st == nil || st.epoch != in.Epoch || st.end <= in.End {
		return nil, in.End
	}
	i, _ := slices.BinarySearchFunc(st.ranges, in.End, func(r meta.Range, end uint64) int {
		if r.First < end {
			return -1
		}
		if r.First > end {
			return 1
		}
		return 0
	})
	return st.ranges[i:], st.end
}

// ackedEnd is in's end with the tail: where its next append goes.
func (t *tailState) ackedEnd(in *meta.Internal) uint64 {
	_, end := t.past(in)
	return end
}

// heldBytes is the record bytes of stream id's tail.
func (t *tailState) heldBytes(id uint64) int64 {
	if t == nil {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if st := t.streams[id]; st != nil {
		return st.bytes
	}
	return 0
}

// appendsTo calls fn with each acknowledged append of the tail to one of
// streams, in order, until fn returns false.
func (t *tailState) appendsTo(streams []uint64, fn func(a *meta.Append) bool) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range t.commits {
		for i := range c.Appends {
			if a := &c.Appends[i]; slices.Contains(streams, a.Stream) && !fn(a) {
				return
			}
		}
	}
}

// producerAt reports whether an acknowledged append of the tail to one of
// streams carries producer tuple p or a later one.
func (t *tailState) producerAt(streams []uint64, p meta.ProducerTuple) bool {
	found := false
	t.appendsTo(streams, func(a *meta.Append) bool {
		q := a.Producer
		found = q != nil && q.ID == p.ID && (q.Epoch > p.Epoch || q.Epoch == p.Epoch && q.Seq >= p.Seq)
		return !found
	})
	return found
}

// replay lays the tail's named-level changes to the streams of n over
// its committed state (a rollback's reset). Called with n.mu held.
func (t *tailState) replay(n *named) {
	t.appendsTo(n.streams, func(a *meta.Append) bool {
		if p := a.Producer; p != nil {
			n.producers[p.ID] = meta.Producer{Epoch: p.Epoch, LastSeq: p.Seq}
		}
		if a.StreamSeq != "" {
			n.lastSeq = a.StreamSeq
		}
		if a.Close {
			n.closed, n.closedBy = true, a.Producer
		}
		return true
	})
}

// overlay lays the tail's named-level changes to streams over out, an
// entry as the state holds it.
func (t *tailState) overlay(streams []uint64, out *node.Entry) {
	t.appendsTo(streams, func(a *meta.Append) bool {
		if p := a.Producer; p != nil {
			if out.Producers == nil {
				out.Producers = map[string]node.Producer{}
			}
			out.Producers[p.ID] = node.Producer{Epoch: p.Epoch, LastSeq: p.Seq}
		}
		if a.StreamSeq != "" {
			out.LastStreamSeq = a.StreamSeq
		}
		if a.Close {
			out.Closed = true
			if p := a.Producer; p != nil {
				out.ClosedBy = &node.ProducerTuple{ID: p.ID, Epoch: p.Epoch, Seq: p.Seq}
			}
		}
		return true
	})
}

// kick has the checkpointer run before its tick.
func (t *tailState) kick() {
	select {
	case t.due <- struct{}{}:
	default:
	}
}

// Where a journal object's frames are (the kind byte ending its payload).
const (
	objectInJournal byte = 1 // the payload holds them
	objectInFile    byte = 2 // the object's own file, synced before
)

// journalPayload is what the journal holds of a group commit: its frames
// (none for objectInFile), its descriptor (c, frames aside), the
// descriptor's length, the flusher's sequence number of the object and
// its kind. The sequence, not the id, orders adoption at start: an object
// in a file of its own takes a pool file's id, handed out before.
func journalPayload(frames []byte, c *meta.Commit, kind byte, seq uint64) ([]byte, error) {
	desc, err := meta.Encode(&meta.Command{Op: meta.OpCommit, Commit: c})
	if err != nil {
		return nil, err
	}
	// frames' own array has room for the rest when the caller allotted it;
	// the held slice (frames[:len:len]) never sees past its length.
	out := append(frames[:len(frames):cap(frames)], desc...)
	out = binary.LittleEndian.AppendUint32(out, uint32(len(desc)))
	out = binary.LittleEndian.AppendUint64(out, seq)
	return append(out, kind), nil
}

// parseJournalPayload splits a journal object's payload.
func parseJournalPayload(id uint64, p []byte) (frames []byte, c *meta.Commit, kind byte, seq uint64, err error) {
	bad := func(why string) error {
		return stream.StreamBackendFailed.With("op", "journal.read", "object", id, "reason", why)
	}
	if len(p) < 13 {
		return nil, nil, 0, 0, bad("payload shorter than its trailer")
	}
	kind, p = p[len(p)-1], p[:len(p)-1]
	seq, p = binary.LittleEndian.Uint64(p[len(p)-8:]), p[:len(p)-8]
	n := int(binary.LittleEndian.Uint32(p[len(p)-4:]))
	switch {
	case n > len(p)-4:
		return nil, nil, 0, 0, bad("descriptor longer than the payload")
	case kind != objectInJournal && kind != objectInFile:
		return nil, nil, 0, 0, bad(fmt.Sprintf("unknown kind %d", kind))
	case kind == objectInFile && n != len(p)-4:
		return nil, nil, 0, 0, bad("frames beside a descriptor of an object in its own file")
	}
	var cmd meta.Command
	if err := meta.Decode(p[len(p)-4-n:len(p)-4], &cmd); err != nil || cmd.Op != meta.OpCommit || cmd.Commit == nil {
		return nil, nil, 0, 0, bad(fmt.Sprintf("descriptor is not a commit: %v", err))
	}
	if cmd.Commit.Object != id {
		return nil, nil, 0, 0, bad(fmt.Sprintf("descriptor names object %d", cmd.Commit.Object))
	}
	return p[: len(p)-4-n : len(p)-4-n], cmd.Commit, kind, seq, nil
}

// partsOf are the journal parts of c's appends.
func partsOf(c *meta.Commit) []journal.Part {
	parts := make([]journal.Part, 0, len(c.Appends))
	for _, a := range c.Appends {
		p := journal.Part{Stream: a.Stream, Epoch: a.Epoch, First: a.First}
		if a.Range != nil {
			p.Count = a.Range.Next - a.Range.First
		}
		parts = append(parts, p)
	}
	return parts
}

// journalMaxID is the largest object id the journal holds (0: none).
func journalMaxID(j *journal.Journal) uint64 {
	var m uint64
	for _, s := range j.Segments() {
		for _, id := range s.Objects {
			m = max(m, id)
		}
	}
	return m
}

// recoverJournal holds again the journal's objects the state references
// and adopts, with one checkpoint, the appends acknowledged (or written)
// past the state's ends (decision 5). It runs in Open, before the
// flusher starts and before any open.
func (b *Broker) recoverJournal() error {
	ends := map[uint64]uint64{}
	var adopt []*meta.Commit
	appends := 0
	// In the order the flusher built them (its sequence numbers), not
	// their place in the journal — it hands several to the journal at
	// once, so they may land out of order — nor their ids — an object in
	// a file of its own takes a pool file's id, handed out earlier. Each
	// stream's offsets grow with the sequence.
	type found struct {
		id     uint64
		seq    uint64
		kind   byte
		frames []byte
		c      *meta.Commit
	}
	var all []found
	for _, s := range b.journal.Segments() {
		for _, id := range s.Objects {
			_, payload, err := b.journal.Read(id)
			if err != nil {
				return stream.StreamBackendFailed.Wrap(err, "op", "journal.read", "object", id)
			}
			frames, c, kind, seq, err := parseJournalPayload(id, payload)
			if err != nil {
				return err
			}
			all = append(all, found{id, seq, kind, frames, c})
			b.journalSeq = max(b.journalSeq, seq)
		}
	}
	slices.SortFunc(all, func(x, y found) int { return cmp.Compare(x.seq, y.seq) })
	for _, f := range all {
		id, frames, c, kind := f.id, f.frames, f.c, f.kind
		// An object in a file of its own is adopted only whole: its
		// appends were acknowledged after its fdatasync, and a crash
		// before it may have left anything (or nothing).
		whole := kind == objectInJournal || b.objectWhole(id, c.Size)
		referenced := false
		var keep []meta.Append
		b.fsm.View(func(st *meta.State) {
			_, referenced = st.Objects[id]
			if st.Garbage[id] {
				return // a checkpoint met it and refused all of it: never again
			}
			for _, a := range c.Appends {
				in, ok := st.Streams[a.Stream]
				if !ok || !in.Open || in.Owner != b.self() || in.Epoch != a.Epoch {
					continue
				}
				end, seen := ends[a.Stream]
				if !seen {
					end = in.End
				}
				if a.First != end || !whole {
					continue // checkpointed already (below), not continuing, or never acknowledged
				}
				keep = append(keep, a)
				if a.Range != nil {
					end = a.Range.Next
				}
				ends[a.Stream] = end
			}
		})
		if kind == objectInJournal && (referenced || len(keep) > 0) {
			if _, err := b.objs.Restore(id, frames); err != nil {
				return err
			}
		}
		if len(keep) > 0 {
			adopt = append(adopt, &meta.Commit{Object: id, Size: c.Size, Appends: keep, Now: c.Now})
			appends += len(keep)
		}
	}
	if len(adopt) == 0 {
		return nil
	}
	for _, chunk := range checkpointChunks(adopt) {
		ctx, cancel := context.WithTimeout(context.Background(), applyTimeout)
		err := b.applyCheckpoint(ctx, chunk)
		cancel()
		if err != nil {
			return err
		}
	}
	b.cfg.Logger.Info("adopted the journal's appends past the last checkpoint", "appends", appends, "objects", len(adopt))
	return nil
}

// objectWhole reports whether object id's file holds size bytes of whole
// frames.
func (b *Broker) objectWhole(id uint64, size int64) bool {
	end, err := b.objs.Scan(id, func(int64, int64, []byte) error { return nil })
	return err == nil && end == size
}

// checkpointLoop checkpoints the tail every CheckpointInterval, or at once
// when it is due (decision 3).
func (b *Broker) checkpointLoop() {
	t := time.NewTicker(b.cfg.CheckpointInterval)
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
		case <-b.tail.due:
		}
		ctx, cancel := context.WithTimeout(context.Background(), applyTimeout)
		if err := b.checkpoint(ctx); err != nil {
			b.cfg.Logger.Warn("checkpoint failed; the appends stay in the journal and the next one retries", "uncheckpointedBytes", b.tail.size(), "err", err)
		}
		cancel()
	}
}

// checkpoint puts everything acknowledged so far into the log, in one
// command, and returns once it applied. Checkpoints run one at a time.
func (b *Broker) checkpoint(ctx context.Context) error {
	if b.tail == nil {
		return nil
	}
	b.checkpointMu.Lock()
	defer b.checkpointMu.Unlock()
	commits := b.tail.take()
	for _, chunk := range checkpointChunks(commits) {
		if err := b.applyCheckpoint(ctx, chunk); err != nil {
			return err
		}
		b.tail.drop(len(chunk))
		b.cfg.Metrics.Checkpoints.Inc()
		b.cfg.Metrics.CheckpointCommits.Observe(float64(len(chunk)))
	}
	return nil
}

// applyCheckpoint puts commits into the log in one command and reports the
// appends it refused.
func (b *Broker) applyCheckpoint(ctx context.Context, commits []*meta.Commit) error {
	cp := &meta.Checkpoint{Commits: make([]meta.Commit, len(commits))}
	for i, c := range commits {
		cp.Commits[i] = *c
	}
	res, err := b.applyNow(ctx, &meta.Command{Op: meta.OpCheckpoint, Checkpoint: cp})
	if err != nil {
		return err
	}
	b.checkCheckpoint(cp.Commits, res)
	return nil
}

// maxCheckpointAppends bounds one checkpoint command: about 100 bytes an
// append, a few MiB — far below the log's largest entry (raft-wal: 64
// MiB), however long the log took no checkpoint.
const maxCheckpointAppends = 32 << 10

// checkpointChunks splits commits, in order, into runs of at most
// maxCheckpointAppends appends (a commit is never split).
func checkpointChunks(commits []*meta.Commit) [][]*meta.Commit {
	var out [][]*meta.Commit
	start, n := 0, 0
	for i, c := range commits {
		k := len(c.Appends)
		if n > 0 && n+k > maxCheckpointAppends {
			out = append(out, commits[start:i])
			start, n = i, 0
		}
		n += k
	}
	if start < len(commits) {
		out = append(out, commits[start:])
	}
	return out
}

// checkCheckpoint reports appends a checkpoint's log refused: acknowledged
// appends the state did not take. Only a stream deleted since is expected.
func (b *Broker) checkCheckpoint(commits []meta.Commit, res any) {
	r, ok := res.(*meta.CheckpointResult)
	if !ok {
		b.cfg.Logger.Error("checkpoint answered without its results", "result", fmt.Sprintf("%T", res))
		return
	}
	for i, cr := range r.Commits {
		if cr == nil {
			continue
		}
		for k, err := range cr.Appends {
			if err == nil || errors.Is(err, meta.StreamNotFound) || errors.Is(err, meta.StreamGone) {
				continue
			}
			a := commits[i].Appends[k]
			if errors.Is(err, meta.OffsetMismatch) && b.alreadyTaken(a, commits[i].Object) {
				continue // an earlier checkpoint whose outcome was unknown took it
			}
			b.cfg.Metrics.CheckpointRefused.Inc()
			b.cfg.Logger.Error("the log refused an acknowledged append in a checkpoint", "stream", a.Stream, "epoch", a.Epoch, "first", a.First, "object", commits[i].Object, "err", err)
		}
	}
}

// alreadyTaken reports whether the state holds append a, of object obj,
// already (a checkpoint proposed again after an unknown outcome).
func (b *Broker) alreadyTaken(a meta.Append, obj uint64) bool {
	held := false
	b.fsm.View(func(s *meta.State) {
		in, ok := s.Streams[a.Stream]
		if !ok || a.First >= in.End {
			return
		}
		if a.Range == nil {
			held = true // a close-only append below the end: taken
			return
		}
		i := in.RangeAt(a.First)
		// Below the start (trimmed since) or in the range it made.
		held = a.First < in.Start || i < len(in.Ranges) && in.Ranges[i].Object == obj && in.Ranges[i].First == a.First
	})
	return held
}

// needs reports whether command c must see the tail in the state before
// it is proposed (decision 3): it opens, closes, forks, trims or commits a
// group offset on a stream the tail holds appends of. (Checkpointing
// before every open cost one command per new stream's first append.)
func (t *tailState) needs(c *meta.Command) bool {
	var streams []uint64
	switch {
	case c.Op == meta.OpOpen && c.Open != nil:
		streams = []uint64{c.Open.Stream}
	case c.Op == meta.OpClose && c.Close != nil:
		streams = []uint64{c.Close.Stream}
	case c.Op == meta.OpCloseMany && c.CloseMany != nil:
		for _, cl := range c.CloseMany.Streams {
			streams = append(streams, cl.Stream)
		}
	case c.Op == meta.OpFork && c.Fork != nil:
		streams = c.Fork.SourceStreams
	case c.Op == meta.OpTrim && c.Trim != nil:
		streams = []uint64{c.Trim.Stream}
	case c.Op == meta.OpGroup && c.Group != nil:
		streams = []uint64{c.Group.Stream}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range streams {
		if _, ok := t.streams[id]; ok {
			return true
		}
	}
	return false
}

// uncheckpointedFull refuses an append while the tail is at its bound
// (decision 8).
func (b *Broker) uncheckpointedFull() error {
	if b.tail == nil {
		return nil
	}
	if n := b.tail.size(); n >= b.cfg.MaxUncheckpointedBytes {
		b.tail.kick()
		return node.MetadataUnavailable.With("op", "append", "reason", "the metadata log has not taken a checkpoint of the appends acknowledged so far",
			"uncheckpointed_bytes", n, "max", b.cfg.MaxUncheckpointedBytes)
	}
	return nil
}

// releaseJournal drops the journal's oldest segments whose objects are all
// checkpointed and are either referenced by no range or now in files,
// synced (decision 6).
func (b *Broker) releaseJournal() {
	if b.journal == nil {
		return
	}
	segments := b.journal.Segments()
	for i, s := range segments {
		if s.Current {
			return
		}
		for _, id := range s.Objects {
			if b.tail.holds(id) {
				return // not checkpointed yet
			}
		}
		// Within the retention, a segment whose objects still hold ranges
		// waits for the merges to free them: writing each to a file of
		// its own to drop the segment sooner cost half a cluster member's
		// CPU under 1 KiB appends.
		within := int64(len(segments)-i)*b.cfg.JournalSegmentBytes <= b.cfg.JournalRetainBytes
		// What the state makes of each (ensembles.go, decision 13): a
		// file wanted here, dead, or still a live epoch's tail. Decided
		// from the journal's index: a segment that must wait is looked at
		// again every pass, and reading its payloads each time cost a
		// cluster member 5% of its CPU under 1 KiB appends.
		var files []uint64
		live := false
		b.fsm.View(func(st *meta.State) {
			for _, id := range s.Objects {
				parts, ok := b.journal.Parts(id)
				if !ok {
					live = true // gone from the index meanwhile: look again next pass
					return
				}
				needed, dead := b.journalObjectState(st, id, parts)
				switch {
				case needed:
					files = append(files, id)
				case !dead:
					live = true
				}
			}
		})
		if live || within && len(files) > 0 {
			return
		}
		// The segment goes: the objects wanted here are read, and those
		// whose frames are in the journal written to files first. A dead
		// object is not read at all — nothing needs its bytes, so one that
		// could no longer be read does not keep its segment (and every
		// later one) for ever.
		want := map[uint64][]byte{}
		for _, id := range files {
			_, payload, err := b.journal.Read(id)
			if err != nil {
				b.cfg.Logger.Warn("reading a journal object failed; its segment stays", "object", id, "segment", s.Number, "err", err)
				return
			}
			frames, _, kind, _, err := parseJournalPayload(id, payload)
			if err != nil {
				b.cfg.Logger.Error("a journal object cannot be parsed; its segment stays", "object", id, "segment", s.Number, "err", err)
				return
			}
			if kind == objectInJournal {
				want[id] = frames
			} else if !b.objs.HasFile(id) && b.cfg.Cluster == nil {
				// The journal holds the only copy here: it stays.
				b.cfg.Logger.Error("an object the state references is neither held nor a file; its journal segment stays", "object", id, "segment", s.Number)
				return
			}
		}
		if err := b.ensureFiles(want); err != nil {
			b.cfg.Logger.Warn("writing the journal's live objects to files failed; the segment stays", "segment", s.Number, "err", err)
			return
		}
		for id := range want {
			if !b.objs.HasFile(id) {
				b.cfg.Logger.Error("an object the state references is neither held nor a file; its journal segment stays", "object", id, "segment", s.Number)
				return
			}
		}
		// The fences it holds (a recovery's) go on at the journal's end.
		if err := b.journal.CarryFences(s.Number); err != nil {
			b.cfg.Logger.Warn("carrying a journal segment's fences on failed; it stays", "segment", s.Number, "err", err)
			return
		}
		if err := b.journal.Drop(s.Number); err != nil {
			b.cfg.Logger.Warn("dropping a journal segment failed", "segment", s.Number, "err", err)
			return
		}
		b.cfg.Metrics.JournalSegmentsDropped.Inc()
	}
}

// objectsFrameBytes is the frames' size in an object of payload bytes
// holding count frames.
func objectsFrameBytes(payload int64, count int) int64 {
	return payload + int64(count*objstore.FrameHeaderSize)
}
