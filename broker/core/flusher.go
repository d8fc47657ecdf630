package core

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/picomq/picomq/broker/ensemble"
	"github.com/picomq/picomq/broker/journal"
	"github.com/picomq/picomq/broker/meta"
	"github.com/picomq/picomq/broker/node"
	"github.com/picomq/picomq/broker/objstore"
	"github.com/picomq/picomq/broker/stream"
)

// flusher is the group commit: one goroutine takes every append queued since
// its last flush — across all streams —, writes them as frames of one new
// object, fdatasyncs it (or, when small, carries its frames in the commit:
// see inline.go), commits it with one metadata command, then answers each
// append. Appends arriving meanwhile queue for the next flush, so a
// batch grows with the load and the syncs per append fall.
type flusher struct {
	b *Broker

	mu      sync.Mutex
	queue   []*pendingAppend
	bytes   int64
	closing bool
	signal  chan struct{}
	done    chan struct{}

	// slots bounds the commit commands in the log at once (see run); its
	// length is how many are in flight.
	slots chan struct{}

	// holds counts the callers admitting several appends that should share
	// one object (Broker.Hold); unheld is signalled when it drops to zero.
	holds  int
	unheld chan struct{}

	// unsettled counts the batches written and not yet answered: a batch
	// that must commit through the log while the journal path runs waits
	// for it to reach zero (see journal.go, decision 4), as does the
	// rollback of one the writer could not write.
	unsettled sync.WaitGroup
	// broken is the first journal append that failed (settle's own): no
	// later object is acknowledged, whatever the journal answers it.
	broken error
	// seq numbers the journal objects in the order built (the writer's).
	seq uint64
}

func newFlusher(b *Broker) *flusher {
	return &flusher{
		b: b, signal: make(chan struct{}, 1), done: make(chan struct{}), unheld: make(chan struct{}, 1),
		slots: make(chan struct{}, b.cfg.CommitsInFlight), seq: b.journalSeq,
	}
}

// enqueue queues p. It is called under p.n.mu, so a stream's appends queue
// in the order of their offsets.
func (f *flusher) enqueue(p *pendingAppend) error {
	f.mu.Lock()
	if f.closing {
		f.mu.Unlock()
		return stream.StreamBackendFailed.With("op", "broker.closed")
	}
	f.queue = append(f.queue, p)
	f.bytes += int64(len(p.payload))
	f.mu.Unlock()
	select {
	case f.signal <- struct{}{}:
	default:
	}
	return nil
}

// close stops accepting appends and waits until the queued ones are
// answered.
func (f *flusher) close() {
	f.mu.Lock()
	f.closing = true
	f.mu.Unlock()
	select {
	case f.signal <- struct{}{}:
	default:
	}
	<-f.done
}

// run pipelines the group commit in three stages: one goroutine writes and
// syncs objects, one proposes their commit commands — several may be in
// flight, and raft writes them in one batch —, and this one answers the
// appends as the commands apply, in order. An append whose generation a
// rollback ended is dropped before its proposal (its bytes in the object
// are simply never referenced); one already proposed is refused by the
// state machine, since its offsets no longer continue the stream.
func (f *flusher) run() {
	defer close(f.done)
	written := make(chan *written)
	inflight := f.b.cfg.CommitsInFlight
	proposed := make(chan *proposal, inflight)
	// slots bounds the commit commands in the log at once. While they
	// commit, the writer stage may sync one more object and then waits, so
	// the appends arriving meanwhile gather into one larger object instead
	// of many small ones, each with its own fdatasync and proposal.
	slots := f.slots
	go func() {
		defer close(written)
		for {
			batch, closing := f.take()
			if len(batch) == 0 {
				if closing {
					return
				}
				<-f.signal
				continue
			}
			if w := f.write(batch); w != nil {
				f.unsettled.Add(1)
				written <- w
				if w.drain {
					// Nothing is written after it until it is answered:
					// were it refused, what follows would be built on it.
					f.unsettled.Wait()
				}
			}
		}
	}()
	go func() {
		defer close(proposed)
		for w := range written {
			slots <- struct{}{}
			if p := f.propose(w); p != nil {
				proposed <- p
			} else {
				f.unsettled.Done()
				<-slots
			}
		}
	}()
	for p := range proposed {
		f.settle(p)
		f.unsettled.Done()
		<-slots
	}
}

// hold makes the next flush wait (up to Config.MaxHold) until release;
// release may be called more than once.
func (f *flusher) hold() (release func()) {
	f.mu.Lock()
	f.holds++
	f.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			f.mu.Lock()
			f.holds--
			zero := f.holds == 0
			f.mu.Unlock()
			if zero {
				select {
				case f.unheld <- struct{}{}:
				default:
				}
			}
		})
	}
}

// take removes up to MaxBatchBytes of queued appends (at least one).
func (f *flusher) take() ([]*pendingAppend, bool) {
	if linger := f.b.cfg.FlushLinger; linger > 0 {
		time.Sleep(linger)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	// Someone is admitting appends meant to share this object: give them a
	// moment, never more than MaxHold. (A signal left from an earlier
	// release only makes the loop look again.)
	for deadline := time.Now().Add(f.b.cfg.MaxHold); f.holds > 0; {
		wait := time.Until(deadline)
		if wait <= 0 {
			break
		}
		f.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-f.unheld:
		case <-t.C:
		}
		t.Stop()
		f.mu.Lock()
	}
	limit := f.b.cfg.MaxBatchBytes
	f.lingerForSync(limit)
	var size int64
	i := 0
	for i < len(f.queue) {
		size += int64(len(f.queue[i].payload))
		i++
		if size >= limit {
			break
		}
	}
	batch := f.queue[:i:i]
	f.queue = f.queue[i:]
	f.bytes -= size
	return batch, f.closing
}

// SyncLingerBytes is where a group commit stops waiting for more appends
// (Config.SyncLinger): an fdatasync of that much costs about what the
// disk's streaming rate does.
const SyncLingerBytes = 1 << 20

// lingerForSync waits, up to Config.SyncLinger, for more appends to join a
// batch that will be synced on its own, until SyncLingerBytes (or limit)
// are queued — when others are appending concurrently: several appends
// queued, or commits still in flight, whose writers are likely to append
// again at once. A lone writer's next append never waits. Called with f.mu
// held.
func (f *flusher) lingerForSync(limit int64) {
	cfg := f.b.cfg
	if cfg.SyncLinger <= 0 || f.bytes <= cfg.InlineBytes || (len(f.queue) < 2 && len(f.slots) == 0) {
		return
	}
	t := time.NewTimer(cfg.SyncLinger)
	defer t.Stop()
	for f.bytes < min(SyncLingerBytes, limit) && !f.closing {
		f.mu.Unlock()
		select {
		case <-f.signal: // an append was queued
		case <-t.C:
			f.mu.Lock()
			return
		}
		f.mu.Lock()
	}
}

// written is a batch whose object is durable (or whose frames its commit
// carries, see inline.go), waiting for its commit.
type written struct {
	live  []*pendingAppend
	c     *meta.Commit
	bytes int64
	// obj, when set, is the object to append to the journal (see
	// journal.go); otherwise the commit goes through the log.
	obj *journal.Object
	// drain: on the journal path, a batch committed through the log (group
	// offsets), after which the writer waits until it is answered.
	drain bool
}

// dropStale answers the appends of batch built on a generation a rollback
// ended, and returns the others.
func dropStale(batch []*pendingAppend) []*pendingAppend {
	live := batch[:0]
	for _, p := range batch {
		p.n.mu.Lock()
		stale := p.n.gen != p.gen
		p.n.mu.Unlock()
		if stale {
			p.answer(node.Aborted.With("name", p.n.name, "first", p.app.First), false)
			continue
		}
		live = append(live, p)
	}
	return live
}

// write writes a batch's records as frames of one new object and syncs it,
// unless the object is small enough for its frames to ride in its commit.
func (f *flusher) write(batch []*pendingAppend) *written {
	b := f.b
	live := dropStale(batch)
	if len(live) == 0 {
		return nil
	}
	c := &meta.Commit{}
	var payloadBytes int64
	groups := false
	for _, p := range live {
		payloadBytes += int64(len(p.payload))
		groups = groups || p.group != nil
		// A cluster member's stream opened without an ensemble (a rolling
		// upgrade, ensembles.go) commits through the log, as one with a
		// group offset does.
		groups = groups || b.cfg.Cluster != nil && len(p.ensemble) == 0
	}
	if b.journal != nil {
		if !groups {
			return f.writeJournal(live, c, payloadBytes)
		}
		// Atomic with its group offsets: through the log, after every
		// earlier batch is answered and the tail checkpointed.
		f.unsettled.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), applyTimeout)
		err := b.checkpoint(ctx)
		cancel()
		if err != nil {
			f.fail(live, err)
			return nil
		}
	}
	var w *written
	switch {
	case payloadBytes > 0 && b.cfg.InlineBytes > 0 && payloadBytes+int64(len(live)*objstore.FrameHeaderSize) <= b.cfg.InlineBytes:
		// Small: the frames ride in the commit, whose fsync makes them
		// durable, and the object is held in memory, no file yet (see
		// inline.go).
		w = f.holdInline(live, c, payloadBytes)
	case payloadBytes > 0:
		if !f.writeFile(live, c) {
			return nil
		}
		w = &written{live: live, c: c, bytes: payloadBytes}
	default:
		w = &written{live: live, c: c, bytes: payloadBytes}
	}
	if w != nil {
		w.drain = b.journal != nil
	}
	return w
}

// writeFile writes a batch's records as frames of a new object file and
// syncs it, filling c's object; false when it failed (the batch is
// answered).
func (f *flusher) writeFile(live []*pendingAppend, c *meta.Commit) bool {
	b := f.b
	w, err := b.out.Create()
	if err != nil {
		f.failUnwritten(live, err)
		return false
	}
	for _, p := range live {
		if p.payload == nil {
			continue
		}
		// The encoded batch stays as it is until answered.
		pos, ln, err := w.AppendFrameRef(p.payload)
		if err != nil {
			w.Abort()
			f.failUnwritten(live, err)
			return false
		}
		p.app.Range = rangeOf(p, w.ID(), pos, ln)
	}
	start := time.Now()
	if err := w.Sync(); err != nil {
		w.Abort()
		f.failUnwritten(live, err)
		return false
	}
	b.cfg.Metrics.FsyncSeconds.Observe(time.Since(start).Seconds())
	c.Object, c.Size, c.Replicas = w.ID(), w.Size(), w.Replicas()
	if err := w.Close(); err != nil {
		f.failUnwritten(live, err)
		return false
	}
	return true
}

// failUnwritten answers a batch the writer could not write. On the journal
// path the batches before it are acknowledged without the log checking
// their offsets, so its rollback waits until every one is answered: the
// provisional state it resets to must hold them all.
func (f *flusher) failUnwritten(live []*pendingAppend, err error) {
	if f.b.journal != nil {
		f.unsettled.Wait()
	}
	f.fail(live, err)
}

// writeJournal builds a batch's object in memory, holds it and makes the
// journal object that will commit it (journal.go, decision 1) — or, above
// InlineBytes, writes and syncs the object as a file of its own first and
// journals only its descriptor (decision 1b).
func (f *flusher) writeJournal(live []*pendingAppend, c *meta.Commit, payloadBytes int64) *written {
	b := f.b
	n := objectsFrameBytes(payloadBytes, len(live))
	if payloadBytes > 0 && (b.cfg.InlineBytes <= 0 || n > b.cfg.InlineBytes) {
		if !f.writeFile(live, c) {
			return nil
		}
		c.Now, c.Appends = b.now().UnixNano(), make([]meta.Append, len(live))
		for i, p := range live {
			c.Appends[i] = p.app
		}
		f.seq++
		payload, err := journalPayload(nil, c, objectInFile, f.seq)
		if err != nil {
			f.failUnwritten(live, meta.BadCommand.Wrap(err, "op", "journal.describe"))
			return nil
		}
		return &written{live: live, c: c, bytes: payloadBytes, obj: &journal.Object{ID: c.Object, Parts: partsOf(c), Payload: payload}}
	}
	// Room for the descriptor after the frames: one array for both.
	frames := make([]byte, 0, n+int64(64+len(live)*96))
	for _, p := range live {
		if p.payload == nil {
			continue
		}
		pos := int64(objstore.HeaderSize + len(frames))
		frames = objstore.AppendFrame(frames, p.payload)
		p.app.Range = rangeOf(p, 0, pos, int64(objstore.HeaderSize+len(frames))-pos)
	}
	id, err := b.objs.Hold(frames[:len(frames):len(frames)])
	if err != nil {
		f.failUnwritten(live, err)
		return nil
	}
	c.Object, c.Size, c.Now, c.Appends = id, int64(objstore.HeaderSize+len(frames)), b.now().UnixNano(), make([]meta.Append, len(live))
	for i, p := range live {
		if p.app.Range != nil {
			p.app.Range.Object = id
		}
		c.Appends[i] = p.app
	}
	f.seq++
	payload, err := journalPayload(frames, c, objectInJournal, f.seq)
	if err != nil {
		b.objs.Remove(id)
		f.failUnwritten(live, meta.BadCommand.Wrap(err, "op", "journal.describe"))
		return nil
	}
	return &written{live: live, c: c, bytes: payloadBytes, obj: &journal.Object{ID: id, Parts: partsOf(c), Payload: payload}}
}

// holdInline builds a small batch's object in memory and holds it (no file, no
// fdatasync): its frames go in the commit.
func (f *flusher) holdInline(live []*pendingAppend, c *meta.Commit, payloadBytes int64) *written {
	frames := make([]byte, 0, payloadBytes+int64(len(live)*objstore.FrameHeaderSize))
	for _, p := range live {
		if p.payload == nil {
			continue
		}
		pos := int64(objstore.HeaderSize + len(frames))
		frames = objstore.AppendFrame(frames, p.payload)
		p.app.Range = rangeOf(p, 0, pos, int64(objstore.HeaderSize+len(frames))-pos)
	}
	id, err := f.b.objs.Hold(frames)
	if err != nil {
		f.fail(live, err)
		return nil
	}
	for _, p := range live {
		if p.app.Range != nil {
			p.app.Range.Object = id
		}
	}
	f.b.cfg.Metrics.InlineObjects.Inc()
	c.Object, c.Size, c.Frames = id, int64(objstore.HeaderSize+len(frames)), frames
	return &written{live: live, c: c, bytes: payloadBytes}
}

// rangeOf is the range an append's frame at pos (ln bytes) of object obj
// adds to its stream.
func rangeOf(p *pendingAppend, obj uint64, pos, ln int64) *meta.Range {
	return &meta.Range{
		First: p.app.First, Next: p.app.First + uint64(p.count), Object: obj, Pos: pos, Len: ln,
		Bytes: p.bytes, Count: int64(p.count), MinTime: p.at, MaxTime: p.at,
	}
}

// proposal is a commit command in the log, waiting to apply.
type proposal struct {
	live   []*pendingAppend
	object uint64
	start  time.Time
	wait   func(context.Context) (any, error)
	// journaled: wait answers the journal's append of c's object.
	journaled bool
	c         *meta.Commit
	bytes     int64
}

// propose appends a written batch's commit command to the log.
func (f *flusher) propose(w *written) *proposal {
	b := f.b
	if w.obj != nil {
		// Written into its object's descriptor already: no append is
		// dropped now; one whose stream was rolled back, revoked or
		// fenced meanwhile is left out of the tail when it settles
		// (joinTail), and the stream reopens at a new epoch, so no start
		// adopts it.
		done := make(chan error, 1)
		b.tail.hold(w.obj.ID)
		if b.cfg.Cluster != nil && b.cfg.Peers != nil {
			// On its ensembles (ensembles.go, decision 10).
			ensembles := objectEnsembles(w.live)
			go func() {
				held, err := b.replicate(*w.obj, ensembles)
				if err == nil && len(w.c.Replicas) == 0 {
					// Its frames are in their journals: the checkpoint
					// names those holding it then (decision 10).
					w.c.Replicas = held.list()
					b.tail.track(w.obj.ID, held)
				}
				done <- err
			}()
		} else {
			go func() { done <- b.journal.Append(*w.obj) }()
		}
		wait := func(context.Context) (any, error) { return nil, <-done }
		return &proposal{live: w.live, object: w.c.Object, start: time.Now(), wait: wait, journaled: true, c: w.c, bytes: w.bytes}
	}
	live := dropStale(w.live)
	if len(live) == 0 {
		if w.c.Frames != nil {
			b.objs.Remove(w.c.Object) // held, never to be committed: forget it
		}
		return nil // the object's file holds nothing committed: an orphan, collected later
	}
	c := w.c
	c.Now = b.now().UnixNano()
	c.Appends = make([]meta.Append, len(live))
	for i, p := range live {
		c.Appends[i] = p.app
		if p.group != nil {
			g := *p.group
			g.After = i
			c.Groups = append(c.Groups, g)
		}
	}
	b.cfg.Metrics.FlushAppends.Observe(float64(len(live)))
	b.cfg.Metrics.FlushBytes.Observe(float64(w.bytes))
	raw, err := meta.Encode(&meta.Command{Op: meta.OpCommit, Commit: c})
	if err != nil {
		f.fail(live, meta.BadCommand.Wrap(err, "op", "commit"))
		return nil
	}
	return &proposal{live: live, object: c.Object, start: time.Now(), wait: b.log.Propose(raw)}
}

// settle waits for a proposal to apply and answers its appends.
func (f *flusher) settle(p *proposal) {
	b := f.b
	if p.journaled {
		f.settleJournaled(p)
		return
	}
	res, err := p.wait(context.Background())
	b.cfg.Metrics.observeCommit(time.Since(p.start))
	if err != nil {
		// Whether the commit made it into the log is unknown: a held object
		// becomes a file, collected later as an orphan if it did not.
		if err := b.objs.Spill([]uint64{p.object}); err != nil {
			b.cfg.Logger.Error("writing a held object failed", "object", p.object, "err", err)
		}
		f.fail(p.live, logFailure(err, "metalog.apply.commit"))
		return
	}
	cr, ok := res.(*meta.CommitResult)
	if !ok {
		f.fail(p.live, meta.BadCommand.With("op", "commit", "reason", "no commit result"))
		return
	}
	touched := map[*named]bool{}
	for i, pa := range p.live {
		// A group offset riding with the append is refused with it.
		if err := cr.Appends[i]; err != nil {
			pa.n.mu.Lock()
			stale := pa.n.gen != pa.gen
			pa.n.mu.Unlock()
			switch {
			case stale:
				// Built on an append refused before it: not its own fault.
				err = node.Aborted.Wrap(err, "name", pa.n.name, "first", pa.app.First)
			case errors.Is(err, meta.StaleEpoch):
				// Fenced by another owner's open: nothing was written.
				err = node.OwnerChanged.Wrap(err, "name", pa.n.name, "stream", pa.app.Stream)
			}
			b.rollback(pa.n, pa.gen, err)
			pa.answer(err, false)
			continue
		}
		f.acknowledge(pa, touched)
	}
	wake(touched)
}

// acknowledge answers a committed append and notes its stream in touched,
// whose readers wake once the batch is answered.
func (f *flusher) acknowledge(pa *pendingAppend, touched map[*named]bool) {
	// Live readers read what was just appended: serve it from memory,
	// without a system call. A recycled buffer is not kept: a large
	// batch's object is a file whose pages are cached anyway.
	if r := pa.app.Range; r != nil && pa.payload != nil && !pa.recycled {
		f.b.frames.put(frameKey{r.Object, r.Pos}, pa.payload)
	}
	if pa.recycled {
		f.b.batchBuffers.Put(pa.payload)
	}
	pa.payload = nil
	touched[pa.n] = true
	pa.answer(nil, true)
}

// wake signals the readers of the streams touched.
func wake(touched map[*named]bool) {
	for n := range touched {
		n.mu.Lock()
		n.signal()
		n.mu.Unlock()
	}
}

// settleJournaled answers the appends of an object once the journal has it
// durable: the commit joins the tail first, so that the readers it wakes
// find it.
func (f *flusher) settleJournaled(p *proposal) {
	b := f.b
	_, err := p.wait(context.Background())
	b.cfg.Metrics.FsyncSeconds.Observe(time.Since(p.start).Seconds())
	if err == nil && f.broken != nil {
		// An earlier object failed: this one's offsets continue appends
		// that were never acknowledged, and a start would not adopt it.
		err = f.broken
	}
	if err != nil {
		if errors.Is(err, ensemble.QuorumLost) && f.broken == nil {
			// Not this journal's fault: the object's streams roll back to
			// a new epoch (fail), whose open recovers, and the others go
			// on (ensembles.go, decision 11).
			b.tail.release(p.object)
			b.objs.Remove(p.object)
			f.fail(p.live, node.OutcomeUnknown.Wrap(err, "name", p.live[0].n.name, "first", p.live[0].app.First))
			return
		}
		if f.broken == nil {
			f.broken = err
		}
		b.tail.release(p.object)
		b.objs.Remove(p.object) // a start restores it from the journal if it adopts it
		if errors.Is(err, journal.Failed) {
			b.storageFailed("journal.append", journalDir(b.cfg.DataDir), err)
		}
		// The object may be on disk whatever the answer (a failed
		// fdatasync says nothing of the bytes that did reach it), and a
		// start adopts what continues the stream: the outcome is unknown,
		// never "nothing written".
		f.fail(p.live, node.OutcomeUnknown.Wrap(err, "name", p.live[0].n.name, "first", p.live[0].app.First))
		return
	}
	b.cfg.Metrics.FlushAppends.Observe(float64(len(p.live)))
	b.cfg.Metrics.FlushBytes.Observe(float64(p.bytes))
	live := f.joinTail(p)
	if b.tail.size() >= b.cfg.CheckpointBytes {
		b.tail.kick()
	}
	touched := map[*named]bool{}
	for _, pa := range live {
		f.acknowledge(pa, touched)
	}
	wake(touched)
}

// joinTail adds a journaled object's commit to the tail, without the
// appends whose stream's provisional state ended since they were admitted
// (a revoke or a fence): those are answered APPEND_OUTCOME_UNKNOWN — the
// object is durable, and a recovery at their epoch may adopt them. The
// check and the add are made under the streams' locks, so that a revoke
// either comes first (the append stays out) or finds it in the tail (the
// next open checkpoints it first). It returns the appends to acknowledge.
func (f *flusher) joinTail(p *proposal) []*pendingAppend {
	var ns []*named
	for _, pa := range p.live {
		if !slices.Contains(ns, pa.n) {
			ns = append(ns, pa.n)
		}
	}
	slices.SortFunc(ns, func(a, b *named) int { return strings.Compare(a.name, b.name) })
	for _, n := range ns {
		n.mu.Lock()
	}
	var live, stale []*pendingAppend
	defer func() {
		for _, n := range ns {
			n.mu.Unlock()
		}
		// Answered once the locks are left (answer takes its stream's).
		for _, pa := range stale {
			pa.answer(node.OutcomeUnknown.With("name", pa.n.name, "first", pa.app.First), false)
		}
	}()
	var apps []meta.Append
	for _, pa := range p.live {
		if pa.n.gen != pa.gen {
			stale = append(stale, pa)
			continue
		}
		live, apps = append(live, pa), append(apps, pa.app)
	}
	c := p.c
	if len(stale) > 0 {
		cc := *p.c
		cc.Appends = apps
		c = &cc
	}
	f.b.tail.add(c)
	return live
}

// fail answers every append of a batch that could not be written or
// committed, and rolls their streams back.
func (f *flusher) fail(batch []*pendingAppend, cause error) {
	f.b.cfg.Logger.Error("group commit failed", "appends", len(batch), "err", cause)
	for _, p := range batch {
		f.b.rollback(p.n, p.gen, cause)
		p.answer(cause, false)
	}
}
