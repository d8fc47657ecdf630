// Package memory is the in-memory stream engine: every record in the
// process's heap, gone with it. It implements stream.Stream and all five
// siblings — Waker, Seeker, Trimmer, Compactor and Committer — under a
// stream.PolicyValue, and runs the stream package's guard, so it refuses
// exactly what the durable engines refuse. That is what makes it the test
// double for them, and what the streamtest suite checks.
//
// One mutex guards the whole stream. An engine that keeps nothing but memory
// spends its time copying bytes, not waiting on a device, so finer locking
// would buy little and cost the plain ordering a single lock gives: offsets
// are handed out, records stored and wakers closed in one critical section.
package memory

import (
	"context"
	"sync"
	"time"

	"github.com/picomq/picomq/broker/stream"
)

// Options configure an engine beyond its policy. The zero Options are the
// production ones.
type Options struct {
	// Now is the engine's clock: it dates every batch (EntryValue.AppendedAt)
	// and measures every age retention and compaction read. Nil means
	// time.Now. Tests pass a clock they move by hand.
	//
	// A BlockTimeout wait is not measured on it: it runs on the runtime's
	// timers, as a ctx deadline does, so that a frozen test clock cannot
	// hang a producer.
	Now func() time.Time
}

// New returns an empty stream under policy, or the refusal of
// stream.PolicyValue.Validate. The value it returns also implements
// stream.Waker, stream.Seeker, stream.Trimmer, stream.Compactor and
// stream.Committer.
func New(policy stream.PolicyValue, opts Options) (stream.Stream, error) {
	if err := policy.Validate(); err != nil {
		return nil, err
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	return &engine{
		policy:     policy.Normalized(),
		now:        now,
		partitions: make(map[int]*partition),
		groups:     make(map[cursor]stream.Offset),
	}, nil
}

// pollEvery is how often an Append waiting for room looks again when the
// policy has a RetainFor: retention by age frees room as the clock moves, and
// a moving clock signals nothing.
const pollEvery = 5 * time.Millisecond

type engine struct {
	policy stream.PolicyValue // normalized
	now    func() time.Time

	mu sync.Mutex
	// partitions holds the partitions ever touched; one never touched is
	// empty, and is made on first use rather than up front, so that a large
	// Partitions costs nothing until it is used.
	partitions map[int]*partition
	held       int64 // bytes of records retained, over every partition (MaxBytes)
	turn       int   // the partition the next unkeyed batch goes to
	wake       chan struct{}
	room       chan struct{}
	groups     map[cursor]stream.Offset
}

// partition is one partition's retained records.
type partition struct {
	first, next stream.Offset
	// entries are the retained records in offset order. Compaction leaves
	// holes, so entries[i].offset need not be first+i.
	entries []entry
	bytes   int64 // RecordBytes of entries (RetainBytes)
}

type entry struct {
	offset stream.Offset
	at     time.Time
	record stream.RecordValue // owned by the engine, never handed out
}

type cursor struct {
	group     string
	partition int
}

var (
	_ stream.Waker     = (*engine)(nil)
	_ stream.Seeker    = (*engine)(nil)
	_ stream.Trimmer   = (*engine)(nil)
	_ stream.Compactor = (*engine)(nil)
	_ stream.Committer = (*engine)(nil)
)

func (e *engine) Partitions() int { return e.policy.Partitions }

func (e *engine) Append(ctx context.Context, records []stream.RecordValue) (stream.AppendValue, error) {
	if ctx.Err() != nil {
		return stream.AppendValue{}, context.Cause(ctx)
	}
	partition, err := stream.CheckBatch(e.policy, records)
	if err != nil {
		return stream.AppendValue{}, err
	}
	batch := stream.BatchBytes(records)
	// Copied before the lock: the caller may reuse its buffers the moment
	// Append returns, and the copy needs no lock.
	kept := append([]stream.RecordValue(nil), records...)
	own(len(kept), batch, func(i int) *stream.RecordValue { return &kept[i] })

	// Only retention by age makes room without a signal: poll for it then.
	var poll time.Duration
	if e.policy.RetainFor > 0 {
		poll = pollEvery
	}
	rw := stream.NewRoomWait(e.policy, poll)
	defer rw.Stop()
	for {
		e.mu.Lock()
		now := e.now()
		e.expireAll(now)
		wait, err := rw.Check(e.held, batch)
		if err != nil {
			e.mu.Unlock()
			return stream.AppendValue{}, err
		}
		if !wait {
			v := e.write(partition, kept, batch, now)
			e.mu.Unlock()
			return v, nil
		}
		if e.room == nil {
			e.room = make(chan struct{})
		}
		room := e.room
		e.mu.Unlock()
		if err := rw.Wait(ctx, room); err != nil {
			return stream.AppendValue{}, err
		}
	}
}

// write stores an admitted batch. The caller holds e.mu.
func (e *engine) write(partition int, records []stream.RecordValue, batch int64, now time.Time) stream.AppendValue {
	if partition < 0 {
		partition = e.turn
		e.turn = (e.turn + 1) % e.policy.Partitions
	}
	p := e.partition(partition)
	e.expire(p, now) // done already when MaxBytes made Append expire them all
	v := stream.AppendValue{Partition: partition, First: p.next}
	for _, r := range records {
		p.entries = append(p.entries, entry{offset: p.next, at: now, record: r})
		p.next++
	}
	v.Last = p.next - 1
	p.bytes += batch
	e.held += batch
	if limit := e.policy.RetainBytes; limit > 0 && p.bytes > limit {
		n := 0
		for over := p.bytes - limit; over > 0; n++ {
			over -= stream.RecordBytes(p.entries[n].record)
		}
		e.drop(p, n, p.entries[n-1].offset+1)
	}
	if e.wake != nil {
		close(e.wake)
		e.wake = nil
	}
	return v
}

func (e *engine) Read(ctx context.Context, partition int, from stream.Offset, max int) ([]stream.EntryValue, error) {
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	if err := stream.CheckPartition(partition, e.policy.Partitions); err != nil {
		return nil, err
	}
	if err := stream.CheckMax(max); err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	p := e.partition(partition)
	e.expire(p, e.now())
	if err := stream.CheckRead(partition, from, p.bounds()); err != nil {
		return nil, err
	}
	i := p.search(from)
	n := min(max, len(p.entries)-i)
	if n == 0 {
		return []stream.EntryValue{}, nil
	}
	out := make([]stream.EntryValue, n)
	var size int64
	for j, en := range p.entries[i : i+n] {
		out[j] = stream.EntryValue{AppendedAt: en.at, Record: en.record, Partition: partition, Offset: en.offset}
		size += stream.RecordBytes(en.record)
	}
	// The records are copied out: a caller that scribbles on what it read
	// must not change what the next reader reads.
	own(n, size, func(j int) *stream.RecordValue { return &out[j].Record })
	return out, nil
}

func (e *engine) Bounds(ctx context.Context, partition int) (stream.BoundsValue, error) {
	if ctx.Err() != nil {
		return stream.BoundsValue{}, context.Cause(ctx)
	}
	if err := stream.CheckPartition(partition, e.policy.Partitions); err != nil {
		return stream.BoundsValue{}, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	p := e.partition(partition)
	e.expire(p, e.now())
	return p.bounds(), nil
}

// Wake implements stream.Waker.
func (e *engine) Wake() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.wake == nil {
		e.wake = make(chan struct{})
	}
	return e.wake
}

// OffsetAt implements stream.Seeker.
func (e *engine) OffsetAt(ctx context.Context, partition int, t time.Time) (stream.Offset, error) {
	if ctx.Err() != nil {
		return 0, context.Cause(ctx)
	}
	if err := stream.CheckPartition(partition, e.policy.Partitions); err != nil {
		return 0, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	p := e.partition(partition)
	e.expire(p, e.now())
	// A scan rather than a binary search: AppendedAt follows the clock, and
	// an injected clock may be set back.
	for i, en := range p.entries {
		if !en.at.Before(t) {
			if i == 0 {
				return p.first, nil // a compacted head still starts at First
			}
			return en.offset, nil
		}
	}
	return p.next, nil
}

// Trim implements stream.Trimmer.
func (e *engine) Trim(ctx context.Context, partition int, before stream.Offset) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if err := stream.CheckPartition(partition, e.policy.Partitions); err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	p := e.partition(partition)
	e.expire(p, e.now())
	if err := stream.CheckOffset(partition, before, p.bounds()); err != nil {
		return err
	}
	if before > p.first {
		e.drop(p, p.search(before), before)
	}
	return nil
}

// Compact implements stream.Compactor.
func (e *engine) Compact(ctx context.Context, partition int) (stream.CompactValue, error) {
	if ctx.Err() != nil {
		return stream.CompactValue{}, context.Cause(ctx)
	}
	if err := stream.CheckPartition(partition, e.policy.Partitions); err != nil {
		return stream.CompactValue{}, err
	}
	window := e.policy.CompactAfter
	if window == 0 {
		return stream.CompactValue{}, nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	p := e.partition(partition)
	now := e.now()
	e.expire(p, now)

	old := func(en entry, d time.Duration) bool { return !now.Before(en.at.Add(d)) }
	// The last old record of each key: the one that supersedes every earlier
	// old record of it. A younger record does not count, as it may yet be
	// read by a reader inside the window.
	last := make(map[string]stream.Offset)
	var v stream.CompactValue
	for _, en := range p.entries {
		if old(en, window) {
			v.Scanned++
			if len(en.record.Key) > 0 {
				last[string(en.record.Key)] = en.offset
			}
		}
	}
	kept := p.entries[:0] // filtered in place: survivors only move down
	var released int64
	for _, en := range p.entries {
		drop := false
		if key := en.record.Key; len(key) > 0 && old(en, window) {
			superseded := last[string(key)] != en.offset
			expiredTombstone := stream.IsTombstone(en.record) && old(en, 2*window)
			drop = superseded || expiredTombstone
		}
		if drop {
			v.Dropped++
			released += stream.RecordBytes(en.record)
			continue
		}
		kept = append(kept, en)
	}
	clear(p.entries[len(kept):]) // let the dropped bytes go
	p.entries = kept
	v.Kept = v.Scanned - v.Dropped
	if released > 0 {
		p.bytes -= released
		e.held -= released
		e.signalRoom()
	}
	return v, nil
}

// Commit implements stream.Committer.
func (e *engine) Commit(ctx context.Context, group string, partition int, next stream.Offset) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if err := stream.CheckGroup(group); err != nil {
		return err
	}
	if err := stream.CheckPartition(partition, e.policy.Partitions); err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	p := e.partition(partition)
	e.expire(p, e.now())
	if err := stream.CheckOffset(partition, next, p.bounds()); err != nil {
		return err
	}
	// Below First is kept as it is: the group's next Read reports
	// OffsetTrimmed, and the reader decides, rather than a commit that
	// silently moved it on.
	e.groups[cursor{group, partition}] = next
	return nil
}

// Committed implements stream.Committer.
func (e *engine) Committed(ctx context.Context, group string, partition int) (stream.Offset, error) {
	if ctx.Err() != nil {
		return 0, context.Cause(ctx)
	}
	if err := stream.CheckGroup(group); err != nil {
		return 0, err
	}
	if err := stream.CheckPartition(partition, e.policy.Partitions); err != nil {
		return 0, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	next, ok := e.groups[cursor{group, partition}]
	if !ok {
		return 0, stream.NoCommit(group, partition)
	}
	return next, nil
}

// partition returns partition i, making it on first use. The caller holds
// e.mu and has checked i.
func (e *engine) partition(i int) *partition {
	p := e.partitions[i]
	if p == nil {
		p = &partition{}
		e.partitions[i] = p
	}
	return p
}

// expire trims p's records past RetainFor at now. Retention runs lazily, at
// every call that looks at p, rather than on a timer: the engine owns no
// goroutine, and a record nobody can observe need not be removed yet. The
// caller holds e.mu.
func (e *engine) expire(p *partition, now time.Time) {
	n := 0
	for n < len(p.entries) && stream.Expired(e.policy, p.entries[n].at, now) {
		n++
	}
	if n > 0 {
		e.drop(p, n, p.entries[n-1].offset+1)
	}
}

// expireAll expires every partition, so that held counts only the records
// still retained. Only MaxBytes needs it. The caller holds e.mu.
func (e *engine) expireAll(now time.Time) {
	if e.policy.RetainFor == 0 || e.policy.MaxBytes == 0 {
		return
	}
	for _, p := range e.partitions {
		e.expire(p, now)
	}
}

// drop removes p's first n entries and makes first the partition's first
// retained offset. The caller holds e.mu.
func (e *engine) drop(p *partition, n int, first stream.Offset) {
	var released int64
	for _, en := range p.entries[:n] {
		released += stream.RecordBytes(en.record)
	}
	// Zeroed so the dropped bytes can be collected; the slice's head moves,
	// and the next append that outgrows it reallocates without the prefix.
	clear(p.entries[:n])
	p.entries = p.entries[n:]
	p.first = max(p.first, first)
	if released > 0 {
		p.bytes -= released
		e.held -= released
		e.signalRoom()
	}
}

// signalRoom wakes the Appends waiting under MaxBytes. The caller holds e.mu.
func (e *engine) signalRoom() {
	if e.room != nil {
		close(e.room)
		e.room = nil
	}
}

func (p *partition) bounds() stream.BoundsValue {
	return stream.BoundsValue{First: p.first, Next: p.next}
}

// search returns the index of the first entry at or after offset.
func (p *partition) search(offset stream.Offset) int {
	lo, hi := 0, len(p.entries)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if p.entries[mid].offset < offset {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// own replaces the key and payload of each of n records, reached through at,
// with copies carved from one allocation of size bytes, their total: one
// allocation per batch rather than two per record. Empty keys and payloads
// become nil.
func own(n int, size int64, at func(int) *stream.RecordValue) {
	buf := make([]byte, 0, size)
	for i := range n {
		r := at(i)
		r.Key, buf = carve(buf, r.Key)
		r.Payload, buf = carve(buf, r.Payload)
	}
}

// carve appends b to buf and returns the appended part, capped so that
// appending to it cannot run into its neighbour.
func carve(buf, b []byte) ([]byte, []byte) {
	if len(b) == 0 {
		return nil, buf
	}
	start := len(buf)
	buf = append(buf, b...)
	return buf[start:len(buf):len(buf)], buf
}
