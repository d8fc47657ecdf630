package core

import (
	"context"

	"github.com/picomq/picomq/broker/meta"
	"github.com/picomq/picomq/broker/node"
	"github.com/picomq/picomq/broker/stream"
)

// Hold makes the next group commit wait, at most Config.MaxHold (1 ms),
// until release is called: a caller about to admit several appends at once
// (the appends of one request, with Admit) gets them into one object,
// rather than the flusher taking the first of them alone.
func (b *Broker) Hold() (release func()) { return b.flush.hold() }

// pendingAppend is an append waiting for the flusher. It is the
// node.Pending Admit returns.
type pendingAppend struct {
	b   *Broker
	n   *named
	pt  *part
	gen uint64
	// ensemble is the part's, as it was opened when the append was
	// admitted (the ensemble data path).
	ensemble []string
	app      meta.Append
	group    *meta.GroupOffset
	// payload is the encoded batch; recycled: it came from b.batchBuffers
	// and goes back once answered.
	payload  []byte
	recycled bool
	count    int
	bytes    int64
	at       int64
	res      node.AppendResult
	done     chan error
}

// Append validates records against the stream's policy and its provisional
// state, gives them offsets, and waits until the flusher has written them to
// an object, made it durable and committed it through the metadata log.
// Nothing is acknowledged before that commit applies; a refusal writes
// nothing.
func (b *Broker) Append(ctx context.Context, name string, records []stream.RecordValue, o node.AppendOptions) (node.AppendResult, error) {
	p, res, err := b.admitAppend(ctx, name, records, o)
	if err != nil || p == nil {
		return res, err
	}
	return p.Wait(ctx)
}

// Admit is Append without the wait for the commit: it checks the append,
// gives it offsets and queues it, and returns once it is queued, refused or
// answered — so that one goroutine can admit several appends that share an
// object (see Hold), then wait for them. Without NoRoomWait it may wait for
// room under MaxBytes first, as Append does.
func (b *Broker) Admit(ctx context.Context, name string, records []stream.RecordValue, o node.AppendOptions) (node.Pending, error) {
	p, res, err := b.admitAppend(ctx, name, records, o)
	switch {
	case err != nil:
		return nil, err
	case p == nil:
		return node.Answered(res), nil // a duplicate, answered without writing
	}
	return p, nil
}

// Wait waits for the append's commit and returns where it landed, as
// Append does; call it once. When ctx ends first the append may still
// commit, and the caller learns nothing more.
func (p *pendingAppend) Wait(ctx context.Context) (node.AppendResult, error) {
	select {
	case err := <-p.done:
		if err != nil {
			return node.AppendResult{}, err
		}
		p.b.cfg.Metrics.Appends.Inc()
		p.b.cfg.Metrics.AppendBytes.Add(float64(p.bytes))
		return p.res, nil
	case <-ctx.Done():
		return node.AppendResult{}, context.Cause(ctx)
	}
}

// answer delivers the append's outcome and counts it answered on its
// partition. committed: its commit applied (its bytes are no longer
// pending).
func (p *pendingAppend) answer(err error, committed bool) {
	n := p.n
	n.mu.Lock()
	p.pt.inflight--
	if committed && p.gen == n.gen {
		n.pendingBytes -= p.bytes
	}
	if p.pt.inflight == 0 && n.releasing > 0 {
		n.signal()
	}
	n.mu.Unlock()
	p.done <- err
}

// admitAppend checks an append and queues it. It returns the queued
// append, or none and the answer: a duplicate's result, or a refusal with
// what Append returns beside it.
func (b *Broker) admitAppend(ctx context.Context, name string, records []stream.RecordValue, o node.AppendOptions) (*pendingAppend, node.AppendResult, error) {
	if err := context.Cause(ctx); err != nil {
		return nil, node.AppendResult{}, err
	}
	n, err := b.stream(name)
	if err != nil {
		return nil, node.AppendResult{}, err
	}
	if err := b.admitWrite(); err != nil {
		return nil, node.AppendResult{}, err
	}
	n.mu.Lock()
	policy := n.policy
	n.mu.Unlock()

	partition := o.Partition
	if len(records) > 0 || !o.Close {
		keyed, err := stream.CheckBatch(policy, records)
		if err != nil {
			return nil, node.AppendResult{}, err
		}
		if partition < 0 {
			partition = keyed
		} else if keyed >= 0 && keyed != partition {
			return nil, node.AppendResult{}, stream.PartitionsMixed.With("index", 0, "partition", partition, "key_partition", keyed)
		}
	}
	if partition >= 0 {
		if err := stream.CheckPartition(partition, policy.Partitions); err != nil {
			return nil, node.AppendResult{}, err
		}
	}
	var group *meta.GroupOffset
	if o.Group != nil {
		if group, err = b.groupOffset(o.Group); err != nil {
			return nil, node.AppendResult{}, err
		}
	}
	a := admission{n: n, partition: partition, records: records, batchBytes: stream.BatchBytes(records), o: o, group: group}
	n.lastAccess.Store(max(n.lastAccess.Load(), b.now().UnixNano()))

	// Room under MaxBytes is signalled by trims, retention and commits of
	// this stream; nothing else makes it, so there is no poll.
	a.rw = stream.NewRoomWait(policy, 0)
	defer a.rw.Stop()
	for {
		p, next, err := b.admit(ctx, &a)
		if err != nil {
			return nil, next.res, err
		}
		switch {
		case next.room != nil:
			if o.NoRoomWait && policy.BlockTimeout > 0 {
				return nil, node.AppendResult{}, node.ErrWouldWait
			}
			if err := a.rw.Wait(ctx, next.room); err != nil {
				return nil, node.AppendResult{}, err
			}
		case next.open != nil:
			if err := b.openPart(ctx, n, next.open); err != nil {
				return nil, node.AppendResult{}, err
			}
		case p == nil:
			return nil, next.res, nil // a duplicate, answered without writing
		default:
			return p, node.AppendResult{}, nil
		}
	}
}

// groupOffset resolves a group offset riding with an append to the
// internal stream it names (0: the append's own partition).
func (b *Broker) groupOffset(g *node.GroupOffset) (*meta.GroupOffset, error) {
	if err := stream.CheckGroup(g.Group); err != nil {
		return nil, err
	}
	out := &meta.GroupOffset{Group: g.Group, Next: g.Next}
	if g.Stream != "" {
		_, id, err := b.partitionOf(g.Stream, g.Partition)
		if err != nil {
			return nil, err
		}
		out.Stream = id
	}
	return out, nil
}

// admission is one append on its way in: what admit checks, and what it
// decided on earlier passes.
type admission struct {
	n          *named
	partition  int // -1: the next round-robin turn, taken on the first pass
	records    []stream.RecordValue
	batchBytes int64
	o          node.AppendOptions
	group      *meta.GroupOffset
	rw         *stream.RoomWait
}

// admitNext tells admitAppend what to do when admit queued nothing: answer
// (res, a duplicate or a refusal's details), wait for room under MaxBytes,
// or open a partition first — each without the stream's lock — and then
// check the append again.
type admitNext struct {
	res  node.AppendResult
	room <-chan struct{}
	open *part
}

// admit runs the provisional checks under the stream's lock and, when they
// pass, assigns offsets and queues the append, which it returns. Otherwise
// it returns no append and what to do next.
func (b *Broker) admit(ctx context.Context, a *admission) (*pendingAppend, admitNext, error) {
	n, o := a.n, a.o
	n.mu.Lock()
	defer n.mu.Unlock()
	if a.partition < 0 {
		pt := n.parts[n.rr%len(n.parts)]
		if !pt.opened && o.NoOpen {
			// Refused before anything changed: the turn stays this partition's.
			return nil, admitNext{}, node.ErrNotOpen
		}
		a.partition = n.rr % len(n.parts)
		n.rr++
	}
	partition := a.partition
	pt := n.parts[partition]
	if !pt.opened && o.NoOpen {
		return nil, admitNext{}, node.ErrNotOpen
	}

	// Closed first: only the exact retry of the closing append is answered,
	// as the duplicate it is.
	if n.closed {
		if o.Producer != nil && n.closedBy != nil && tupleOf(o.Producer) == *n.closedBy {
			return nil, admitNext{res: node.AppendResult{Partition: partition, First: pt.next, Next: pt.next, Duplicate: true, Closed: true,
				Producer: producerOf(n.producers[o.Producer.ID])}}, nil
		}
		end := b.committedEnd(pt)
		return nil, admitNext{res: node.AppendResult{Partition: partition, Next: end, Closed: true}},
			meta.StreamClosed.With("name", n.name, "end", end)
	}
	if o.Producer != nil {
		cur, known := n.producers[o.Producer.ID]
		refused := admitNext{res: node.AppendResult{Producer: producerOf(cur)}}
		switch {
		case known && o.Producer.Epoch < cur.Epoch:
			return nil, refused, meta.ProducerFenced.With("producer", o.Producer.ID, "epoch", o.Producer.Epoch, "current", cur.Epoch)
		case known && o.Producer.Epoch == cur.Epoch && o.Producer.Seq <= cur.LastSeq:
			// A repeat: acknowledge once the original is committed.
			n.mu.Unlock()
			err := b.awaitProducer(ctx, n, tupleOf(o.Producer))
			n.mu.Lock()
			return nil, admitNext{res: node.AppendResult{Partition: partition, Duplicate: true, Producer: producerOf(cur), Next: b.committedEnd(pt)}}, err
		case !known && o.Producer.Seq != 0:
			return nil, refused, meta.ProducerSeqGap.With("producer", o.Producer.ID, "expected", 0, "received", o.Producer.Seq)
		case known && o.Producer.Epoch > cur.Epoch && o.Producer.Seq != 0:
			return nil, refused, meta.ProducerEpochSeq.With("producer", o.Producer.ID, "epoch", o.Producer.Epoch, "seq", o.Producer.Seq)
		case known && o.Producer.Epoch == cur.Epoch && o.Producer.Seq != cur.LastSeq+1:
			return nil, refused, meta.ProducerSeqGap.With("producer", o.Producer.ID, "expected", cur.LastSeq+1, "received", o.Producer.Seq)
		}
	}
	if o.StreamSeq != "" && o.StreamSeq <= n.lastSeq {
		return nil, admitNext{}, meta.StreamSeqOrder.With("name", n.name, "last", n.lastSeq, "received", o.StreamSeq)
	}
	if n.policy.MaxBytes > 0 && len(a.records) > 0 {
		if wait, err := a.rw.Check(b.heldBytesLocked(n), a.batchBytes); err != nil {
			return nil, admitNext{}, err
		} else if wait {
			return nil, admitNext{room: n.room}, nil
		}
	}
	if !pt.opened {
		return nil, admitNext{open: pt}, nil
	}

	// Admitted: hand out offsets and advance the provisional state.
	now := b.now()
	var producer *meta.ProducerTuple
	if o.Producer != nil {
		t := tupleOf(o.Producer)
		producer = &t
	}
	p := &pendingAppend{
		b: b, n: n, pt: pt, gen: n.gen, ensemble: pt.ensemble, count: len(a.records), bytes: a.batchBytes, at: now.UnixNano(),
		app:  meta.Append{Stream: pt.id, Epoch: pt.epoch, First: pt.next, Producer: producer, StreamSeq: o.StreamSeq, Close: o.Close},
		done: make(chan error, 1),
	}
	if len(a.records) > 0 {
		var buf []byte
		buf, p.recycled = b.batchBuffers.Get(int(a.batchBytes) + len(a.records)*24)
		p.payload = encodeBatch(buf, pt.next, now, a.records)
	}
	p.res = node.AppendResult{Partition: partition, First: pt.next, Next: pt.next + uint64(len(a.records)), Closed: o.Close}
	if len(a.records) > 0 {
		p.res.Last = p.res.Next - 1
	}
	if a.group != nil {
		g := *a.group
		if g.Stream == 0 { // no stream named: the append's own partition
			g.Stream = pt.id
		}
		p.group = &g
	}
	if err := b.flush.enqueue(p); err != nil {
		return nil, admitNext{}, err
	}
	pt.inflight++
	pt.next += uint64(len(a.records))
	n.pendingBytes += a.batchBytes
	if producer != nil {
		n.producers[producer.ID] = meta.Producer{Epoch: producer.Epoch, LastSeq: producer.Seq}
		p.res.Producer = node.Producer{Epoch: producer.Epoch, LastSeq: producer.Seq}
	}
	if o.StreamSeq != "" {
		n.lastSeq = o.StreamSeq
	}
	if o.Close {
		n.closed = true
		n.closedBy = producer
	}
	return p, admitNext{}, nil
}

// awaitProducer waits until the committed state of the stream holds the
// producer's tuple (the original append of a repeat), or the provisional
// state is rolled back (Aborted: the original never committed).
func (b *Broker) awaitProducer(ctx context.Context, n *named, t meta.ProducerTuple) error {
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
				return node.Aborted.With("name", n.name, "producer", t.ID, "seq", t.Seq)
			}
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// producerCommitted reports whether the committed state of name holds the
// producer at t or past it. It reads in place: no copy of the entry.
func (b *Broker) producerCommitted(name string, t meta.ProducerTuple) bool {
	done := false
	b.fsm.View(func(s *meta.State) {
		if e, ok := s.Names[name]; ok {
			cur, ok := e.Producers[t.ID]
			done = ok && (cur.Epoch > t.Epoch || cur.Epoch == t.Epoch && cur.LastSeq >= t.Seq)
			// Acknowledged by the journal and not checkpointed yet:
			// committed too (looked at in the same view as the state).
			done = done || b.tail.producerAt(e.Streams, t)
		}
	})
	return done
}

// committedEnd returns a partition's committed end.
func (b *Broker) committedEnd(p *part) uint64 {
	end := uint64(0)
	b.fsm.View(func(s *meta.State) {
		if in, ok := s.Streams[p.id]; ok {
			end = b.tail.ackedEnd(in)
		}
	})
	return end
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
			held += b.tail.heldBytes(id)
		}
	})
	return held
}
