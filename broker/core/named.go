package core

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/picomq/picomq/broker/meta"
	"github.com/picomq/picomq/broker/node"
	"github.com/picomq/picomq/broker/stream"
)

// named is the owner's in-memory view of one named stream: the provisional
// state appends are validated against before they are committed — next
// offsets, producer sequences, Stream-Seq, the closed flag — plus wake-ups
// and the last access. It lives only on the owner; the metadata log holds
// the committed truth, and a rollback resets the view from it.
type named struct {
	name string

	mu      sync.Mutex         // guards every field below but lastAccess and persistedAccess
	streams []uint64           // the incarnation: a recreated name has other ids
	policy  stream.PolicyValue // normalized
	// contentType, producers, lastSeq, closed and closedBy are the
	// committed named-level state plus what admitted appends add to it.
	contentType string
	parts       []*part
	producers   map[string]meta.Producer
	lastSeq     string
	closed      bool
	closedBy    *meta.ProducerTuple
	// gen counts rollbacks: an append queued under an older gen was built on
	// offsets that no longer hold and is aborted.
	gen          uint64
	rr           int   // round-robin cursor for unkeyed batches
	pendingBytes int64 // bytes handed offsets but not committed yet
	releasing    int   // Release calls waiting for admitted appends to be answered
	wake         chan struct{}
	room         chan struct{}

	lastAccess      atomic.Int64 // Unix ns, in memory only
	persistedAccess atomic.Int64
}

// part is one partition's provisional state, guarded by its named's mu.
type part struct {
	id     uint64
	opened bool  // this node is the partition's writer at epoch
	epoch  int64 // the epoch of the open, when opened
	next   uint64
	// ensemble holds the epoch's objects (the ensemble data path; empty
	// otherwise), as its open recorded it.
	ensemble []string
	// opening is the open of the partition in flight; nil when none is.
	opening *openAttempt
	// inflight counts the appends admitted and not answered yet.
	inflight int
}

func newNamed(e *meta.Entry) *named {
	n := &named{name: e.Name, streams: slices.Clone(e.Streams), wake: make(chan struct{}), room: make(chan struct{})}
	n.lastAccess.Store(e.LastAccess)
	n.persistedAccess.Store(e.LastAccess)
	n.reset(e)
	for _, id := range e.Streams {
		n.parts = append(n.parts, &part{id: id})
	}
	return n
}

// reset loads the committed named-level state. Called with n.mu held (or
// before n is shared).
func (n *named) reset(e *meta.Entry) {
	n.policy = e.Policy.Normalized()
	n.contentType = e.ContentType
	n.producers = maps.Clone(e.Producers)
	if n.producers == nil {
		n.producers = map[string]meta.Producer{}
	}
	n.lastSeq = e.LastStreamSeq
	n.closed = e.Closed
	n.closedBy = e.ClosedBy
}

// adopt merges into the provisional named-level state what an open
// recovered: a producer's or Stream-Seq's committed state only ever grows,
// so the later of the two is kept (the provisional one may hold other
// partitions' appends in flight). Called with n.mu held.
func (n *named) adopt(e *meta.Entry) {
	for id, p := range e.Producers {
		if q, ok := n.producers[id]; !ok || p.Epoch > q.Epoch || p.Epoch == q.Epoch && p.LastSeq > q.LastSeq {
			n.producers[id] = p
		}
	}
	if e.LastStreamSeq > n.lastSeq {
		n.lastSeq = e.LastStreamSeq
	}
	if e.Closed && !n.closed {
		n.closed, n.closedBy = true, nil
		if e.ClosedBy != nil {
			by := *e.ClosedBy // e may be the state's own
			n.closedBy = &by
		}
	}
}

// stream returns the owner's view of name, loading it on first use; an
// incarnation that was deleted or recreated is replaced. It is on every
// request's path, so it reads the registry in place rather than copying
// the entry (whose producer map may be large): only a (re)load copies.
func (b *Broker) stream(name string) (*named, error) {
	b.mu.Lock()
	n, cached := b.named[name]
	b.mu.Unlock()
	var have []uint64 // the cached view's ids, read under its lock
	if cached {
		n.mu.Lock()
		have = n.streams
		n.mu.Unlock()
	}
	var (
		found, deleted, reload   bool
		ttl, expiresAt, accessed int64
		ids                      []uint64
		policy                   stream.PolicyValue
		fresh                    *meta.Entry
	)
	b.fsm.View(func(s *meta.State) {
		e, ok := s.Names[name]
		if !ok {
			return
		}
		found, deleted = true, e.Deleted
		ttl, expiresAt, accessed = e.TTL, e.ExpiresAt, e.LastAccess
		reload = !cached || len(e.Streams) < len(have) || !slices.Equal(have, e.Streams[:len(have)])
		switch {
		case reload:
			fresh = e.Clone()
		case len(e.Streams) > len(have):
			ids = slices.Clone(e.Streams)
		}
		policy = e.Policy
	})
	if !found || b.expiredAt(name, ttl, expiresAt, accessed, b.now().UnixNano()) {
		return nil, meta.StreamNotFound.With("name", name)
	}
	if deleted {
		return nil, meta.StreamGone.With("name", name)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, stream.StreamBackendFailed.With("op", "broker.closed")
	}
	if reload {
		// Another request may have loaded this incarnation meanwhile: use
		// it, or both would open the partitions and fence each other.
		if cur, ok := b.named[name]; ok && slices.Equal(cur.streams, fresh.Streams) {
			return cur, nil
		}
		if old, ok := b.named[name]; ok {
			b.unindexLocked(old)
		}
		n = newNamed(fresh)
		b.named[name] = n
		for _, id := range fresh.Streams {
			b.byID[id] = n
		}
		return n, nil
	}
	n.mu.Lock()
	if len(ids) > len(n.streams) { // partitions grew (and no one added them meanwhile)
		for _, id := range ids[len(n.streams):] {
			n.parts = append(n.parts, &part{id: id})
			b.byID[id] = n
		}
		n.streams = ids
	}
	n.policy = policy.Normalized()
	n.mu.Unlock()
	return n, nil
}

// views returns the loaded stream views.
func (b *Broker) views() []*named {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Collect(maps.Values(b.named))
}

// unindexLocked drops n's partitions from b.byID. Called with b.mu held.
func (b *Broker) unindexLocked(n *named) {
	n.mu.Lock()
	ids := n.streams
	n.mu.Unlock()
	for _, id := range ids {
		if b.byID[id] == n {
			delete(b.byID, id)
		}
	}
}

// forget drops the cached view of name (delete, policy change).
func (b *Broker) forget(name string) {
	b.mu.Lock()
	n := b.named[name]
	delete(b.named, name)
	if n != nil {
		b.unindexLocked(n)
	}
	b.mu.Unlock()
	if n != nil {
		n.mu.Lock()
		n.gen++
		n.signal()
		n.mu.Unlock()
	}
}

// gaveUp reports an error that says only that a request's context ended.
func gaveUp(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// openAttempt is one open of a partition in flight: done is closed once
// it is over, err (written before) says how it ended. Whoever waited for
// it learns the outcome of that attempt — a failed open must not let a
// waiting read be served from a state the open would have completed (a
// recovery adopts the tail the last owner acknowledged).
type openAttempt struct {
	done chan struct{}
	err  error
}

// openPart makes this node the writer of partition pt at a new epoch,
// through the metadata log. It is called without n.mu and takes it only to
// mark the open in flight and to record its outcome — no command is
// proposed, nor Ownership asked, under a stream's lock —; appends to pt
// wait for it meanwhile (pt.opening), so that the partition is opened
// once. It returns once pt is open, or with the error of the open that
// failed (its own, or the one it waited for); the caller checks its
// append again, since the stream may have changed while the lock was
// free.
func (b *Broker) openPart(ctx context.Context, n *named, pt *part) error {
	n.mu.Lock()
	for {
		if pt.opened {
			n.mu.Unlock()
			return nil
		}
		a := pt.opening
		if a == nil {
			break
		}
		n.mu.Unlock()
		select {
		case <-a.done:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		if a.err == nil || !gaveUp(a.err) || ctx.Err() != nil {
			return a.err
		}
		// The request that ran the open went away, not the open's
		// chances: this one tries.
		n.mu.Lock()
	}
	a := &openAttempt{done: make(chan struct{})}
	pt.opening = a
	n.mu.Unlock()

	// The appends still in flight at the epoch this open ends finish
	// first, as Release and Reensemble let them (awaitAnswered): the
	// open's recovery fences their ensemble, which would answer them
	// APPEND_OUTCOME_UNKNOWN although their objects may reach a quorum a
	// moment later — a member restarting in a rolling restart, whose
	// journal takes the object when it is back. (The rolling-restart
	// trial saw an append arriving while Reensemble waited for them open
	// the partition itself, and fence them.) New appends cannot join
	// them meanwhile: they wait for this open. Ownership is asked first:
	// a slot that left answers its refusal at once, not after them. A
	// lone broker's open fences nothing, and does not wait.
	var err error
	if b.cfg.Cluster != nil {
		if err = b.cfg.Ownership.MayOpen(pt.id); err == nil {
			err = n.awaitAnswered(ctx, []meta.Close{{Stream: pt.id}})
		}
	}
	var in *meta.Internal
	if err == nil {
		in, err = b.open(ctx, pt.id)
	}
	n.mu.Lock()
	pt.opening = nil
	a.err = err
	close(a.done)
	if err == nil {
		// The provisional producer and Stream-Seq state must not be
		// behind the entry's once the partition takes appends again. The
		// open may have recovered appends (ensembles.go) — and a rollback
		// of an append that failed while the open ran (fenced by it)
		// resets the provisional state to the entry as it was before the
		// open: had it adopted only when the end moved past where this
		// open began, a producer's retry of an append the recovery adopted
		// would be written again, and the log would refuse it and every
		// append after it (e2e's TestDrainingBrokerKilled under -race:
		// PRODUCER_SEQ_GAP, acknowledged appends lost). The merge keeps
		// the later of each. (Same lock order as rollback: the stream's,
		// then the state's.)
		b.fsm.View(func(s *meta.State) {
			if x, ok := s.Names[n.name]; ok {
				n.adopt(x)
			}
		})
		pt.opened, pt.epoch, pt.next, pt.ensemble = true, in.Epoch, in.End, in.Ensemble
		b.cfg.Logger.Debug("stream opened", "name", n.name, "stream", pt.id, "epoch", pt.epoch)
	}
	n.mu.Unlock()
	return err
}

// openRetryFor bounds how long an open is tried again while the metadata
// log changes leaders: a broker stopping hands its leadership over right
// after its slots, just as their new owners open them.
const openRetryFor = 3 * time.Second

// applyOpen builds internal stream id's open (its recovery included) and
// commits it, doing both again for up to openRetryFor while the log
// answers METADATA_UNAVAILABLE (no leader, or an outcome lost to a leader
// change), OFFSET_MISMATCH with the stream's end moved since the recovery
// read it, or STALE_EPOCH for the epoch the open expected (another
// owner's open came first) while the slot is still this broker's. Doing
// it again is safe whatever became of the first try, as a client's retry
// would: the log raised no epoch for an open it refused (the recovered
// appends before a refused one stand, and the next recovery starts past
// them), and an open whose answer never came is fenced by the next one's
// later epoch.
func (b *Broker) applyOpen(ctx context.Context, id uint64) (any, error) {
	give := time.Now().Add(openRetryFor)
	for wait := 20 * time.Millisecond; ; wait = min(2*wait, 200*time.Millisecond) {
		var res any
		open, err := b.openCommand(ctx, id) // its checkpoint may meet the leader change too
		if err == nil {
			res, err = b.apply(ctx, &meta.Command{Op: meta.OpOpen, Open: open})
		}
		// STALE_EPOCH with an Expect: another owner's open landed between
		// this one's read and its apply, nothing of this one applied.
		// While the slot is still this broker's (below) — a holder that
		// handed the slot off and back in a rolling restart, whose open
		// was still in flight when it let go —, this open is built again
		// at the epoch now current: it fences and recovers that open, as
		// any takeover does.
		restale := errors.Is(err, node.StaleEpoch) && open != nil && open.Expect != nil
		if err == nil || !errors.Is(err, node.MetadataUnavailable) && !errors.Is(err, node.OffsetMismatch) && !restale {
			return res, err
		}
		if errors.Is(err, node.OffsetMismatch) && !b.endMovedSince(id, open) {
			// The copies the recovery adopted contradict the log: no
			// second try would read otherwise.
			b.cfg.Logger.Warn("open refused: the appends its recovery adopted do not continue the stream", "stream", id, "err", err)
			return nil, err
		}
		// OFFSET_MISMATCH with the end moved: between the recovery's read
		// of the state and the open's apply, the previous owner's
		// checkpoint of the tail the recovery also found landed first (a
		// hand-off in a rolling restart). Built again from the state as
		// it is now, the recovery adopts only what is past its end.
		if mayErr := b.cfg.Ownership.MayOpen(id); mayErr != nil {
			// No longer ours to open (a hand-off began meanwhile): that
			// is the answer, one that says nothing was written.
			return nil, mayErr
		}
		if time.Now().Add(wait).After(give) {
			return nil, err
		}
		if restale {
			b.cfg.Logger.Info("open built again: another owner's open came first while the slot is this broker's", "stream", id, "err", err)
		} else {
			b.cfg.Logger.Debug("open tried again", "stream", id, "err", err)
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(wait):
		}
	}
}

// open asks Ownership, then opens internal stream id through the log.
func (b *Broker) open(ctx context.Context, id uint64) (*meta.Internal, error) {
	if err := b.cfg.Ownership.MayOpen(id); err != nil {
		return nil, err
	}
	res, err := b.applyOpen(ctx, id)
	if err != nil {
		if errors.Is(err, node.StaleEpoch) {
			// Another owner's open came first (checked before anything
			// of this one applies): the slot moved on, and the
			// Ownership's refusal says so to a router, which sends the
			// write to the slot's owner.
			if mayErr := b.cfg.Ownership.MayOpen(id); mayErr != nil {
				return nil, mayErr
			}
		}
		return nil, err
	}
	r, ok := res.(*meta.OpenResult)
	if !ok {
		return nil, meta.BadCommand.With("op", "open", "reason", fmt.Sprintf("result %T", res))
	}
	// Ownership may have been lost while the open was in the log: then
	// the next owner's open fences this one, and nothing is written under
	// it.
	if err := b.cfg.Ownership.MayOpen(id); err != nil {
		return nil, err
	}
	return r.Internal, nil
}

// endMovedSince reports whether internal stream id's end is no longer the
// one open's recovery read: where its first recovered append starts.
func (b *Broker) endMovedSince(id uint64, open *meta.Open) bool {
	if open == nil || len(open.Recovered) == 0 || len(open.Recovered[0].Appends) == 0 {
		return false
	}
	read := open.Recovered[0].Appends[0].First
	moved := false
	b.fsm.View(func(s *meta.State) {
		if in, ok := s.Streams[id]; ok {
			moved = in.End != read
		}
	})
	return moved
}

// takeOpen returns the partitions this node opened that which selects,
// marking them closed in memory: the caller closes them in the log
// (shutdown, hand-off).
func (n *named) takeOpen(which func(id uint64) bool) []meta.Close {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []meta.Close
	for _, p := range n.parts {
		if p.opened && which(p.id) {
			out = append(out, meta.Close{Stream: p.id, Epoch: p.epoch})
			p.opened = false
		}
	}
	return out
}

// awaitAnswered waits until every append admitted for the partitions of
// taken is answered.
func (n *named) awaitAnswered(ctx context.Context, taken []meta.Close) error {
	ids := make(map[uint64]bool, len(taken))
	for _, c := range taken {
		ids[c.Stream] = true
	}
	n.mu.Lock()
	n.releasing++
	defer func() {
		n.mu.Lock()
		n.releasing--
		n.mu.Unlock()
	}()
	for {
		busy := false
		for _, p := range n.parts {
			busy = busy || (ids[p.id] && p.inflight > 0)
		}
		wake := n.wake
		n.mu.Unlock()
		if !busy {
			return nil
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		n.mu.Lock()
	}
}

// signal wakes readers and room waiters. Called with n.mu held.
func (n *named) signal() {
	close(n.wake)
	n.wake = make(chan struct{})
}

// freed wakes appends waiting for room under MaxBytes.
func (n *named) freed() {
	n.mu.Lock()
	close(n.room)
	n.room = make(chan struct{})
	n.mu.Unlock()
}

// Wake returns a channel closed by the next commit to any partition of name
// on this broker (or by its deletion): get it BEFORE the read that may come
// back empty.
func (b *Broker) Wake(name string) (<-chan struct{}, error) {
	n, err := b.stream(name)
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.wake, nil
}

// fence stops this node writing internal stream id after another node's
// open of it applied (epoch, the open's): appends queued for it are
// aborted, those already proposed are refused by the state machine
// (OWNER_CHANGED), and the next append must open it again. It runs on the
// log's apply goroutine.
func (b *Broker) fence(id uint64, epoch int64) {
	b.mu.Lock()
	n := b.byID[id]
	b.mu.Unlock()
	if n == nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, p := range n.parts {
		if p.id == id && p.opened && p.epoch < epoch {
			p.opened = false
			n.gen++ // queued appends were built on the fenced epoch
			n.pendingBytes = 0
			n.signal()
			b.cfg.Logger.Info("partition fenced: another node opened it", "name", n.name, "stream", id, "epoch", p.epoch, "by", epoch)
		}
	}
}

// rollback resets the provisional state of n to what the log committed,
// after the log refused an append of generation gen. Later appends of that
// generation are aborted by the flusher.
func (b *Broker) rollback(n *named, gen uint64, cause error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.gen != gen {
		return // an earlier refusal already reset this generation
	}
	n.gen++
	n.pendingBytes = 0
	b.cfg.Metrics.Rollbacks.Inc()
	b.cfg.Logger.Warn("append refused; rolling back provisional state", "name", n.name, "err", cause)
	// The state and the journal's tail in one view: a checkpoint moving
	// appends from one to the other between two looks would hide them.
	b.fsm.View(func(s *meta.State) {
		e, ok := s.Names[n.name]
		if !ok {
			return
		}
		n.reset(e)
		b.tail.replay(n) // acknowledged by the journal: committed, as far as n goes
		for _, p := range n.parts {
			in, ok := s.Streams[p.id]
			if !ok || !in.Open || in.Epoch != p.epoch || in.Owner != b.self() {
				p.opened = false // fenced: the next append reopens at a new epoch
				continue
			}
			p.next = b.tail.ackedEnd(in)
			if b.tail != nil {
				// On the journal path nothing checks a later object's
				// offsets: those in flight after the refused one are
				// durable at offsets that now leave a gap. A new epoch
				// makes sure no start ever adopts them (they answer
				// APPEND_OUTCOME_UNKNOWN) and that what follows is
				// acknowledged only on the reopened partition.
				p.opened = false
			}
		}
	})
	n.signal()
}
