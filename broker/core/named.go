package core

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/picomq/picomq/broker/meta"
	"github.com/picomq/picomq/broker/stream"
)

// named is the owner's in-memory view of one named stream: the provisional
// state appends are validated against before they are committed — next
// offsets, producer sequences, Stream-Seq, the closed flag — plus wake-ups
// and the last access. It lives only on the owner; the metadata log holds
// the committed truth, and a rollback resets the view from it.
type named struct {
	name    string
	streams []uint64 // the incarnation: a recreated name has other ids

	mu          sync.Mutex
	policy      stream.PolicyValue // normalized
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
	wake         chan struct{}
	room         chan struct{}

	lastAccess      atomic.Int64 // Unix ns, in memory only
	persistedAccess atomic.Int64
}

// part is one partition's provisional state.
type part struct {
	id     uint64
	opened bool
	epoch  int64
	next   uint64
}

func newNamed(e *meta.Entry) *named {
	n := &named{name: e.Name, streams: append([]uint64(nil), e.Streams...), wake: make(chan struct{}), room: make(chan struct{})}
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
	n.producers = make(map[string]meta.Producer, len(e.Producers))
	for k, v := range e.Producers {
		n.producers[k] = v
	}
	n.lastSeq = e.LastStreamSeq
	n.closed = e.Closed
	n.closedBy = e.ClosedBy
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
		reload = !cached || len(e.Streams) < len(have) || !sameIDs(have, e.Streams[:len(have)])
		switch {
		case reload:
			fresh = e.Clone()
		case len(e.Streams) > len(have):
			ids = append([]uint64(nil), e.Streams...)
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
		if cur, ok := b.named[name]; ok && sameIDs(cur.streams, fresh.Streams) {
			return cur, nil
		}
		n = newNamed(fresh)
		b.named[name] = n
		return n, nil
	}
	n.mu.Lock()
	if len(ids) > len(n.streams) { // partitions grew (and no one added them meanwhile)
		for _, id := range ids[len(n.streams):] {
			n.parts = append(n.parts, &part{id: id})
		}
		n.streams = ids
	}
	n.policy = policy.Normalized()
	n.mu.Unlock()
	return n, nil
}

func sameIDs(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// forget drops the cached view of name (delete, policy change).
func (b *Broker) forget(name string) {
	b.mu.Lock()
	n := b.named[name]
	delete(b.named, name)
	b.mu.Unlock()
	if n != nil {
		n.mu.Lock()
		n.gen++
		n.signal()
		n.mu.Unlock()
	}
}

// open makes this node the writer of partition p at a new epoch. Called with
// n.mu held: appends to the stream wait for it, which happens once per
// ownership.
func (n *named) open(ctx context.Context, b *Broker, p *part) error {
	res, err := b.apply(ctx, &meta.Command{Op: meta.OpOpen, Open: &meta.Open{Stream: p.id, Owner: b.cfg.NodeID}})
	if err != nil {
		return err
	}
	switch r := res.(type) {
	case *meta.OpenResult:
		p.opened, p.epoch, p.next = true, r.Internal.Epoch, r.Internal.End
		b.cfg.Logger.Debug("stream opened", "name", n.name, "stream", p.id, "epoch", p.epoch)
		return nil
	case error:
		return r
	}
	return meta.BadCommand.With("op", "open")
}

// openParts returns the partitions this node opened, marking them closed
// in memory: the caller closes them in the log (shutdown, hand-off).
func (n *named) openParts() []meta.Close {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []meta.Close
	for _, p := range n.parts {
		if p.opened {
			out = append(out, meta.Close{Stream: p.id, Epoch: p.epoch})
			p.opened = false
		}
	}
	return out
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
	b.cfg.Logger.Warn("append refused by the metadata log; rolling back provisional state", "name", n.name, "err", cause)
	e, ok := b.fsm.Entry(n.name)
	if !ok {
		n.signal()
		return
	}
	n.reset(e)
	for _, p := range n.parts {
		in, ok := b.fsm.Internal(p.id)
		if !ok || !in.Open || in.Epoch != p.epoch || in.Owner != b.cfg.NodeID {
			p.opened = false // fenced: the next append reopens at a new epoch
			continue
		}
		p.next = in.End
	}
	n.signal()
}

func sortEntries(es []*meta.Entry) {
	sort.Slice(es, func(i, j int) bool { return es[i].Name < es[j].Name })
}
