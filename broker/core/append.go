package core

import (
	"context"
	"errors"

	"github.com/picomq/picomq/broker/bufpool"
	"github.com/picomq/picomq/broker/meta"
	"github.com/picomq/picomq/broker/stream"
)

// AppendOptions carry what an append asks beyond its records.
type AppendOptions struct {
	// Partition is the partition to append to, or -1 to place the batch by
	// its keys (PartitionOf) or round-robin when it has none.
	Partition int
	// Producer makes the append idempotent: a repeat of an accepted
	// sequence is acknowledged without writing.
	Producer *meta.ProducerTuple
	// StreamSeq, when set, must be byte-wise above the last one accepted.
	StreamSeq string
	// Close closes the stream for good with this append (records may be
	// empty: a close-only append).
	Close bool
	// Group, when set, commits a consumer-group offset atomically with the
	// records (exactly-once in effect for a consume-transform-produce loop).
	Group *meta.GroupOffset
	// NoRoomWait makes an append that would wait for room under MaxBytes
	// return ErrWouldWait at once, having written nothing, instead of
	// waiting up to BlockTimeout: an append sharing a request with others
	// must not make them wait (the client sends it again on its own).
	NoRoomWait bool
	// NoOpen makes Admit return ErrNotOpen at once, having admitted
	// nothing, when the append's partition must first be opened (a write
	// of the metadata log): a caller admitting appends one after another
	// admits those concurrently instead, so that their opens share log
	// writes rather than queue behind one another.
	NoOpen bool
}

// ErrWouldWait is what an append with NoRoomWait returns when it would
// have waited for room.
var ErrWouldWait = errors.New("core: the append would wait for room")

// ErrNotOpen is what an append with NoOpen returns when its partition is
// not open yet.
var ErrNotOpen = errors.New("core: the append's partition is not open yet")

// Hold makes the next group commit wait, at most Config.MaxHold (1 ms),
// until release is called: a caller about to admit several appends at once
// (the appends of one request, with Admit) gets them into one object,
// rather than the flusher taking the first of them alone.
func (b *Broker) Hold() (release func()) { return b.flush.hold() }

// AppendResult says where an append landed.
type AppendResult struct {
	Partition int
	// First and Last are the batch's offsets; Next is the partition's next
	// offset after it. A close-only append has First == Next and Last unset.
	First, Last, Next uint64
	// Duplicate: an idempotent repeat, acknowledged without writing.
	Duplicate bool
	// Producer is the producer's highest accepted state after the append.
	Producer meta.Producer
	// Closed: the stream is closed after the append.
	Closed bool
}

// batchBuffers recycles large appends' encoded batches. Such a batch lives
// from admission until its commit is answered: the flusher writes it from
// where it is (objstore's AppendFrameRef) and nothing keeps it after (it
// is not put in the frame cache: its object is a file whose pages are
// cached). Allocating one per append, zeroed, was a tenth of the broker's
// CPU under 100 KiB batches, and most of its garbage.
var batchBuffers bufpool.Pool

// pendingAppend is an append waiting for the flusher.
type pendingAppend struct {
	n       *named
	gen     uint64
	app     meta.Append
	group   *meta.GroupOffset
	payload []byte
	// recycled: payload came from batchBuffers and goes back once answered.
	recycled bool
	count    int
	bytes    int64
	at       int64
	res      AppendResult
	done     chan error
}

// Append validates records against the stream's policy and its provisional
// state, gives them offsets, and waits until the flusher has written them to
// an object, made it durable and committed it through the metadata log.
// Nothing is acknowledged before that commit applies; a refusal writes
// nothing.
func (b *Broker) Append(ctx context.Context, name string, records []stream.RecordValue, o AppendOptions) (AppendResult, error) {
	pd, err := b.Admit(ctx, name, records, o)
	if err != nil {
		return pd.res, err
	}
	return pd.Wait(ctx)
}

// Pending is an append Admit accepted: its offsets are given and it is
// queued for the flusher (or, a duplicate, answered already).
type Pending struct {
	b     *Broker
	p     *pendingAppend // nil when answered at admission
	res   AppendResult
	bytes int64
}

// Wait waits for the append's commit and returns where it landed, as
// Append does; call it once. When ctx ends first the append may still
// commit, and the caller learns nothing more.
func (pd *Pending) Wait(ctx context.Context) (AppendResult, error) {
	if pd.p == nil {
		return pd.res, nil
	}
	select {
	case err := <-pd.p.done:
		if err != nil {
			return AppendResult{}, err
		}
		pd.b.cfg.Metrics.Appends.Inc()
		pd.b.cfg.Metrics.AppendBytes.Add(float64(pd.bytes))
		return pd.p.res, nil
	case <-ctx.Done():
		return AppendResult{}, context.Cause(ctx)
	}
}

// Admit is Append without the wait for the commit: it checks the append,
// gives it offsets and queues it, and returns once it is queued, refused or
// answered — so that one goroutine can admit several appends that share an
// object (see Hold), then wait for them. Without NoRoomWait it may wait for
// room under MaxBytes first, as Append does. It returns a Pending in every
// case; on a refusal, Wait must not be called, and the error comes with
// what Append would return beside it.
func (b *Broker) Admit(ctx context.Context, name string, records []stream.RecordValue, o AppendOptions) (*Pending, error) {
	refused := &Pending{}
	if err := context.Cause(ctx); err != nil {
		return refused, err
	}
	n, err := b.stream(name)
	if err != nil {
		return refused, err
	}
	n.mu.Lock()
	policy := n.policy
	n.mu.Unlock()

	partition := o.Partition
	if len(records) > 0 || !o.Close {
		keyed, err := stream.CheckBatch(policy, records)
		if err != nil {
			return refused, err
		}
		if partition < 0 {
			partition = keyed
		} else if keyed >= 0 && keyed != partition {
			return refused, stream.PartitionsMixed.With("index", 0, "partition", partition, "key_partition", keyed)
		}
	}
	if partition >= 0 {
		if err := stream.CheckPartition(partition, policy.Partitions); err != nil {
			return refused, err
		}
	}
	batchBytes := stream.BatchBytes(records)
	n.lastAccess.Store(max(n.lastAccess.Load(), b.now().UnixNano()))

	// Room under MaxBytes is signalled by trims, retention and commits of
	// this stream; nothing else makes it, so there is no poll.
	rw := stream.NewRoomWait(policy, 0)
	defer rw.Stop()
	for {
		p, wait, err := b.admit(ctx, n, partition, records, batchBytes, o, rw)
		if err != nil {
			return &Pending{res: wait.res}, err
		}
		if wait.room != nil {
			if o.NoRoomWait && policy.BlockTimeout > 0 {
				return refused, ErrWouldWait
			}
			if err := rw.Wait(ctx, wait.room); err != nil {
				return refused, err
			}
			continue
		}
		if p == nil {
			return &Pending{res: wait.res}, nil // a duplicate, answered without writing
		}
		return &Pending{b: b, p: p, bytes: batchBytes}, nil
	}
}

// admitWait tells Append what to answer at once, or, when room is set, that
// it must wait for room under MaxBytes.
type admitWait struct {
	room <-chan struct{}
	res  AppendResult
}

// admit runs the provisional checks under the stream's lock and, when they
// pass, assigns offsets and queues the append, which it returns. Otherwise
// it returns no append and says why in admitWait: an answer (a duplicate or
// a refusal's details) or room to wait for.
func (b *Broker) admit(ctx context.Context, n *named, partition int, records []stream.RecordValue, batchBytes int64, o AppendOptions, rw *stream.RoomWait) (*pendingAppend, admitWait, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	turn := partition < 0
	if turn {
		partition = n.rr % len(n.parts)
	}
	pt := n.parts[partition]
	if !pt.opened && o.NoOpen {
		// Refused before anything changed: the turn stays this partition's.
		return nil, admitWait{}, ErrNotOpen
	}
	if turn {
		n.rr++
	}

	// Closed first: only the exact retry of the closing append is answered,
	// as the duplicate it is.
	if n.closed {
		if o.Producer != nil && n.closedBy != nil && *o.Producer == *n.closedBy {
			return nil, admitWait{res: AppendResult{Partition: partition, First: pt.next, Next: pt.next, Duplicate: true, Closed: true,
				Producer: n.producers[o.Producer.ID]}}, nil
		}
		return nil, admitWait{res: AppendResult{Partition: partition, Next: b.committedEnd(pt), Closed: true}},
			meta.StreamClosed.With("name", n.name, "end", b.committedEnd(pt))
	}
	if o.Producer != nil {
		cur, known := n.producers[o.Producer.ID]
		switch {
		case known && o.Producer.Epoch < cur.Epoch:
			return nil, admitWait{res: AppendResult{Producer: cur}}, meta.ProducerFenced.With("producer", o.Producer.ID, "epoch", o.Producer.Epoch, "current", cur.Epoch)
		case known && o.Producer.Epoch == cur.Epoch && o.Producer.Seq <= cur.LastSeq:
			// A repeat: acknowledge once the original is committed.
			n.mu.Unlock()
			err := b.awaitProducer(ctx, n, o.Producer)
			n.mu.Lock()
			return nil, admitWait{res: AppendResult{Partition: partition, Duplicate: true, Producer: cur, Next: b.committedEnd(pt)}}, err
		case !known && o.Producer.Seq != 0:
			return nil, admitWait{res: AppendResult{Producer: cur}}, meta.ProducerSeqGap.With("producer", o.Producer.ID, "expected", 0, "received", o.Producer.Seq)
		case known && o.Producer.Epoch > cur.Epoch && o.Producer.Seq != 0:
			return nil, admitWait{res: AppendResult{Producer: cur}}, meta.ProducerEpochSeq.With("producer", o.Producer.ID, "epoch", o.Producer.Epoch, "seq", o.Producer.Seq)
		case known && o.Producer.Epoch == cur.Epoch && o.Producer.Seq != cur.LastSeq+1:
			return nil, admitWait{res: AppendResult{Producer: cur}}, meta.ProducerSeqGap.With("producer", o.Producer.ID, "expected", cur.LastSeq+1, "received", o.Producer.Seq)
		}
	}
	if o.StreamSeq != "" && o.StreamSeq <= n.lastSeq {
		return nil, admitWait{}, meta.StreamSeqOrder.With("name", n.name, "last", n.lastSeq, "received", o.StreamSeq)
	}
	if n.policy.MaxBytes > 0 && len(records) > 0 {
		if wait, err := rw.Check(b.heldBytesLocked(n), batchBytes); err != nil {
			return nil, admitWait{}, err
		} else if wait {
			return nil, admitWait{room: n.room}, nil
		}
	}
	if !pt.opened {
		if err := n.open(ctx, b, pt); err != nil {
			return nil, admitWait{}, err
		}
	}

	// Admitted: hand out offsets and advance the provisional state.
	now := b.now()
	p := &pendingAppend{
		n: n, gen: n.gen, count: len(records), bytes: batchBytes, at: now.UnixNano(),
		app:  meta.Append{Stream: pt.id, Epoch: pt.epoch, First: pt.next, Producer: o.Producer, StreamSeq: o.StreamSeq, Close: o.Close},
		done: make(chan error, 1),
	}
	if len(records) > 0 {
		var buf []byte
		buf, p.recycled = batchBuffers.Get(int(batchBytes) + len(records)*24)
		p.payload = encodeBatch(buf, pt.next, now, records)
	}
	p.res = AppendResult{Partition: partition, First: pt.next, Next: pt.next + uint64(len(records)), Closed: o.Close}
	if len(records) > 0 {
		p.res.Last = p.res.Next - 1
	}
	if o.Group != nil {
		g := *o.Group
		if g.Stream == 0 { // no stream named: the append's own partition
			g.Stream = pt.id
		}
		p.group = &g
	}
	if err := b.flush.enqueue(p); err != nil {
		return nil, admitWait{}, err
	}
	pt.next += uint64(len(records))
	n.pendingBytes += batchBytes
	if o.Producer != nil {
		n.producers[o.Producer.ID] = meta.Producer{Epoch: o.Producer.Epoch, LastSeq: o.Producer.Seq}
		p.res.Producer = n.producers[o.Producer.ID]
	}
	if o.StreamSeq != "" {
		n.lastSeq = o.StreamSeq
	}
	if o.Close {
		n.closed = true
		if o.Producer != nil {
			t := *o.Producer
			n.closedBy = &t
		}
	}
	return p, admitWait{}, nil
}

// awaitProducer waits until the committed state of the stream holds the
// producer's tuple (the original append of a repeat), or the provisional
// state is rolled back (Aborted: the original never committed).
func (b *Broker) awaitProducer(ctx context.Context, n *named, t *meta.ProducerTuple) error {
	for {
		n.mu.Lock()
		wake, gen := n.wake, n.gen
		n.mu.Unlock()
		if b.producerCommitted(n.name, t) {
			return nil
		}
		select {
		case <-wake:
			n.mu.Lock()
			rolled := n.gen != gen
			n.mu.Unlock()
			if rolled {
				if b.producerCommitted(n.name, t) {
					return nil
				}
				return Aborted.With("name", n.name, "producer", t.ID, "seq", t.Seq)
			}
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// producerCommitted reports whether the committed state of name holds the
// producer at t or past it. It reads in place: no copy of the entry.
func (b *Broker) producerCommitted(name string, t *meta.ProducerTuple) bool {
	done := false
	b.fsm.View(func(s *meta.State) {
		if e, ok := s.Names[name]; ok {
			cur, ok := e.Producers[t.ID]
			done = ok && (cur.Epoch > t.Epoch || cur.Epoch == t.Epoch && cur.LastSeq >= t.Seq)
		}
	})
	return done
}

// committedEnd returns a partition's committed end.
func (b *Broker) committedEnd(p *part) uint64 {
	if in, ok := b.fsm.Internal(p.id); ok {
		return in.End
	}
	return 0
}

// heldBytesLocked is what MaxBytes measures: the records committed at or
// above each partition's start, plus those handed offsets but not
// committed. Called with n.mu held.
func (b *Broker) heldBytesLocked(n *named) int64 {
	held := n.pendingBytes
	b.fsm.View(func(s *meta.State) {
		for _, id := range n.streams {
			if in, ok := s.Streams[id]; ok {
				held += in.Bytes()
			}
		}
	})
	return held
}
