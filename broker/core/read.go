package core

import (
	"context"
	"errors"
	"io/fs"
	"slices"
	"sort"
	"time"

	"github.com/picomq/picomq/broker/meta"
	"github.com/picomq/picomq/broker/node"
	"github.com/picomq/picomq/broker/objstore"
	"github.com/picomq/picomq/broker/stream"
)

// partitionOf resolves a named stream's partition to its internal stream.
func (b *Broker) partitionOf(name string, partition int) (*named, uint64, error) {
	n, err := b.stream(name)
	if err != nil {
		return nil, 0, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := stream.CheckPartition(partition, len(n.streams)); err != nil {
		return nil, 0, err
	}
	return n, n.streams[partition], nil
}

// Bounds returns a partition's first retained offset and next offset.
func (b *Broker) Bounds(ctx context.Context, name string, partition int) (stream.BoundsValue, error) {
	if err := context.Cause(ctx); err != nil {
		return stream.BoundsValue{}, err
	}
	_, id, err := b.partitionOf(name, partition)
	if err != nil {
		return stream.BoundsValue{}, err
	}
	var bounds stream.BoundsValue
	found := false
	b.fsm.View(func(s *meta.State) {
		var in *meta.Internal
		if in, found = s.Streams[id]; found {
			bounds = b.boundsOf(s, in, b.now().UnixNano())
		}
	})
	if !found {
		return stream.BoundsValue{}, meta.StreamNotFound.With("name", name)
	}
	return bounds, nil
}

// boundsOf is what a reader sees of an internal stream at now: its first
// offset raised to the retention point (see retention.go), and its end —
// the journal's acknowledged tail included. Called inside a View.
func (b *Broker) boundsOf(s *meta.State, in *meta.Internal, now int64) stream.BoundsValue {
	past, end := b.tail.past(in)
	start := in.Start
	if e, ok := s.Names[in.Name]; ok {
		start = retentionStart(in, past, e.Policy, now)
	}
	return stream.BoundsValue{First: stream.Offset(start), Next: stream.Offset(end)}
}

// Read returns up to limit committed records of a partition from offset from
// on, skipping the holes compaction left. It never blocks: at the end it
// returns no entry (wait with Wake).
func (b *Broker) Read(ctx context.Context, name string, partition int, from uint64, limit int, o node.ReadOptions) ([]stream.EntryValue, stream.BoundsValue, error) {
	if err := context.Cause(ctx); err != nil {
		return nil, stream.BoundsValue{}, err
	}
	n, id, err := b.partitionOf(name, partition)
	if err != nil {
		return nil, stream.BoundsValue{}, err
	}
	if err := stream.CheckMax(limit); err != nil {
		return nil, stream.BoundsValue{}, err
	}
	n.lastAccess.Store(max(n.lastAccess.Load(), b.now().UnixNano()))

	var out []stream.EntryValue
	var bounds stream.BoundsValue
	err = lookAgainIfCollected(func() (err error) {
		out, bounds, err = b.readOnce(name, id, partition, from, limit, o)
		return err
	})
	return out, bounds, err
}

// readAttempts bounds the lookups of one read whose objects keep being
// collected under it; each retry needs a collection between its lookup and
// its read, which GarbageGrace makes rare.
const readAttempts = 3

// lookAgainIfCollected runs read, which looks ranges up and reads their
// frames, again while it fails on a missing object file: a range may be
// merged, trimmed or compacted away and its object collected between the
// lookup and the read. The state has moved on by then, so look again.
func lookAgainIfCollected(read func() error) error {
	for attempt := 1; ; attempt++ {
		err := read()
		if err == nil || !errors.Is(err, fs.ErrNotExist) || attempt == readAttempts {
			return err
		}
	}
}

// readOnce looks the ranges up and reads their frames.
func (b *Broker) readOnce(name string, id uint64, partition int, from uint64, limit int, o node.ReadOptions) ([]stream.EntryValue, stream.BoundsValue, error) {
	var bounds stream.BoundsValue
	var ranges []meta.Range
	var checkErr error
	now := b.now().UnixNano()
	b.fsm.View(func(s *meta.State) {
		in, ok := s.Streams[id]
		if !ok {
			checkErr = meta.StreamNotFound.With("name", name)
			return
		}
		bounds = b.boundsOf(s, in, now)
		past, _ := b.tail.past(in)
		if checkErr = stream.CheckRead(partition, stream.Offset(from), bounds); checkErr != nil {
			return
		}
		// Copy just the ranges the read may need: enough records, or bytes.
		// Records of the first range below the read's start do not count
		// (an upper bound of them, with compaction's holes).
		at := max(from, uint64(bounds.First))
		var count, bytes, skip int64
		// The journal's acknowledged tail (past) continues the state's ranges.
		take := func(rs []meta.Range, from int) bool {
			for i := from; i < len(rs); i++ {
				r := rs[i]
				if len(ranges) == 0 && at > r.First {
					skip = int64(at - r.First)
				}
				ranges = append(ranges, r)
				count += r.Count
				bytes += r.Bytes
				if count >= int64(limit)+skip || (o.MaxBytes > 0 && bytes >= o.MaxBytes) {
					return true
				}
			}
			return false
		}
		if !take(in.Ranges, in.RangeAt(at)) && len(past) > 0 {
			take(past, sort.Search(len(past), func(i int) bool { return past[i].Next > at }))
		}
	})
	if checkErr != nil {
		return nil, bounds, checkErr
	}
	start := max(from, uint64(bounds.First))
	out := []stream.EntryValue{} // empty, not nil, at the end: "no entry yet"
	var gathered int64
	for _, r := range ranges {
		payload, err := b.frame(r)
		if err != nil {
			return nil, bounds, err
		}
		done := false
		derr := decodeFrame(payload, func(off uint64, at int64, key, value []byte) bool {
			if off < start || off >= r.Next {
				return true
			}
			out = append(out, stream.EntryValue{
				AppendedAt: timeOf(at), Partition: partition, Offset: stream.Offset(off),
				Record: stream.RecordValue{Key: clone(key), Payload: clone(value)},
			})
			gathered += int64(len(key) + len(value))
			if len(out) >= limit || (o.MaxBytes > 0 && gathered >= o.MaxBytes) {
				done = true
				return false
			}
			return true
		})
		if derr != nil {
			return nil, bounds, b.corrupt(r, derr)
		}
		if done {
			break
		}
	}
	return out, bounds, nil
}

// frame returns a range's frame payload, from the cache or the object.
func (b *Broker) frame(r meta.Range) ([]byte, error) {
	key := frameKey{r.Object, r.Pos}
	if p, ok := b.frames.get(key); ok {
		return p, nil
	}
	var tc *meta.TierCopy
	evicted := false
	if b.tiering != nil {
		b.fsm.View(func(s *meta.State) {
			if o, ok := s.Objects[r.Object]; ok && o.Tier != nil {
				t := *o.Tier
				tc, evicted = &t, o.Evicted
			}
		})
	}
	var p []byte
	err := fs.ErrNotExist
	if !evicted {
		p, err = b.objs.ReadFrame(r.Object, r.Pos, r.Len)
	}
	if errors.Is(err, fs.ErrNotExist) {
		// A peer's object this member holds only in its journal yet
		// (ensembles.go, decision 13).
		if jp, ok := b.journalFrame(r); ok {
			p, err = jp, nil
		}
	}
	if errors.Is(err, fs.ErrNotExist) && !evicted && b.cfg.Fetcher != nil {
		p, err = b.fetch(r, err)
	}
	if err != nil && tc != nil {
		// Evicted, or no copy a broker holds answered well: object
		// storage's is the copy left (tier.go).
		local := err
		p, err = b.tierFrame(r, tc)
		if err != nil && !evicted {
			b.cfg.Logger.Warn("no copy of a tiered segment could be read", "object", r.Object, "local", local, "tier", err)
		}
	}
	if err != nil {
		if errors.Is(err, objstore.ErrCorrupt) {
			return nil, b.corrupt(r, err)
		}
		return nil, err
	}
	b.frames.put(key, p)
	return p, nil
}

// fetch reads a frame this node holds no copy of from the replicas the
// state names for its object. An object the state no longer holds is
// answered with notHere, the local miss: it was collected, and the reader
// looks its ranges up again.
func (b *Broker) fetch(r meta.Range, notHere error) ([]byte, error) {
	var replicas []string
	b.fsm.View(func(s *meta.State) {
		o, ok := s.Objects[r.Object]
		if !ok {
			return
		}
		for _, id := range o.Replicas {
			if id != b.self() {
				replicas = append(replicas, id)
			}
		}
		if len(o.Replicas) == 0 {
			// Committed inline: every member that applied its entry wrote
			// it, but one that joined from a snapshot taken after never
			// saw the entry. Any other member has it.
			for id, m := range s.Members {
				if id != b.self() && m.Removed == 0 {
					replicas = append(replicas, id)
				}
			}
			slices.Sort(replicas) // the same order on every reader
		}
	})
	if len(replicas) == 0 {
		return nil, notHere
	}
	return b.cfg.Fetcher.FetchFrame(r.Object, replicas, r.Pos, r.Len)
}

// corrupt reports a committed frame that failed its checks: logged, counted,
// and refused — never served.
func (b *Broker) corrupt(r meta.Range, cause error) error {
	b.cfg.Metrics.CorruptReads.Inc()
	b.cfg.Logger.Error("committed object failed its checksum; refusing to serve it", "object", r.Object, "pos", r.Pos, "first", r.First, "next", r.Next, "err", cause)
	return node.Corrupt.Wrap(cause, "object", r.Object, "pos", r.Pos, "first", r.First, "next", r.Next)
}

func clone(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return append([]byte(nil), b...)
}

// OffsetAt returns the first offset of a partition appended at or after t.
func (b *Broker) OffsetAt(ctx context.Context, name string, partition int, t time.Time) (uint64, error) {
	if err := context.Cause(ctx); err != nil {
		return 0, err
	}
	_, id, err := b.partitionOf(name, partition)
	if err != nil {
		return 0, err
	}
	var at uint64
	err = lookAgainIfCollected(func() (err error) {
		at, err = b.offsetAt(name, id, t)
		return err
	})
	return at, err
}

// offsetAt looks the ranges up and reads the frames OffsetAt needs.
func (b *Broker) offsetAt(name string, id uint64, t time.Time) (uint64, error) {
	var in *meta.Internal
	var start uint64
	b.fsm.View(func(s *meta.State) {
		if cur, ok := s.Streams[id]; ok {
			in = cur.Clone()
			start = uint64(b.boundsOf(s, cur, b.now().UnixNano()).First)
			past, end := b.tail.past(cur)
			in.Ranges, in.End = append(in.Ranges, past...), end
		}
	})
	if in == nil {
		return 0, meta.StreamNotFound.With("name", name)
	}
	ns := t.UnixNano()
	for _, r := range in.Ranges {
		if r.MaxTime < ns || r.Next <= start {
			continue
		}
		payload, err := b.frame(r)
		if err != nil {
			return 0, err
		}
		found, at := false, uint64(0)
		if err := decodeFrame(payload, func(off uint64, ts int64, _, _ []byte) bool {
			if off >= start && off < r.Next && ts >= ns {
				found, at = true, off
				return false
			}
			return true
		}); err != nil {
			return 0, b.corrupt(r, err)
		}
		if found {
			return at, nil
		}
	}
	return in.End, nil
}
