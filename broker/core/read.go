package core

import (
	"container/list"
	"context"
	"errors"
	"io/fs"
	"sync"

	"github.com/picomq/picomq/broker/meta"
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
	n, id, err := b.partitionOf(name, partition)
	if err != nil {
		return stream.BoundsValue{}, err
	}
	if err := b.retain(ctx, n, id); err != nil {
		return stream.BoundsValue{}, err
	}
	in, ok := b.fsm.Internal(id)
	if !ok {
		return stream.BoundsValue{}, meta.StreamNotFound.With("name", name)
	}
	return stream.BoundsValue{First: stream.Offset(in.Start), Next: stream.Offset(in.End)}, nil
}

// ReadOptions bound a read beyond its record count.
type ReadOptions struct {
	// MaxBytes stops the read once this many key+payload bytes are
	// gathered (at least one record is always returned). Zero: no bound.
	MaxBytes int64
}

// Read returns up to max committed records of a partition from offset from
// on, skipping the holes compaction left. It never blocks: at the end it
// returns no entry (wait with Wake).
func (b *Broker) Read(ctx context.Context, name string, partition int, from uint64, max int, o ReadOptions) ([]stream.EntryValue, stream.BoundsValue, error) {
	if err := context.Cause(ctx); err != nil {
		return nil, stream.BoundsValue{}, err
	}
	n, id, err := b.partitionOf(name, partition)
	if err != nil {
		return nil, stream.BoundsValue{}, err
	}
	if err := stream.CheckMax(max); err != nil {
		return nil, stream.BoundsValue{}, err
	}
	if err := b.retain(ctx, n, id); err != nil {
		return nil, stream.BoundsValue{}, err
	}
	n.lastAccess.Store(max64(n.lastAccess.Load(), b.now().UnixNano()))

	var out []stream.EntryValue
	var bounds stream.BoundsValue
	err = lookAgainIfCollected(func() (err error) {
		out, bounds, err = b.readOnce(name, id, partition, from, max, o)
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
func (b *Broker) readOnce(name string, id uint64, partition int, from uint64, max int, o ReadOptions) ([]stream.EntryValue, stream.BoundsValue, error) {
	var bounds stream.BoundsValue
	var ranges []meta.Range
	var checkErr error
	b.fsm.View(func(s *meta.State) {
		in, ok := s.Streams[id]
		if !ok {
			checkErr = meta.StreamNotFound.With("name", name)
			return
		}
		bounds = stream.BoundsValue{First: stream.Offset(in.Start), Next: stream.Offset(in.End)}
		if checkErr = stream.CheckRead(partition, stream.Offset(from), bounds); checkErr != nil {
			return
		}
		// Copy just the ranges the read may need: enough records, or bytes.
		// Records of the first range below the read's start do not count
		// (an upper bound of them, with compaction's holes).
		at := max64u(from, in.Start)
		var count, bytes, skip int64
		for i := in.RangeAt(at); i < len(in.Ranges); i++ {
			r := in.Ranges[i]
			if len(ranges) == 0 && at > r.First {
				skip = int64(at - r.First)
			}
			ranges = append(ranges, r)
			count += r.Count
			bytes += r.Bytes
			if count >= int64(max)+skip || (o.MaxBytes > 0 && bytes >= o.MaxBytes) {
				break
			}
		}
	})
	if checkErr != nil {
		return nil, bounds, checkErr
	}
	start := max64u(from, uint64(bounds.First))
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
			if len(out) >= max || (o.MaxBytes > 0 && gathered >= o.MaxBytes) {
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
	p, err := b.objs.ReadFrame(r.Object, r.Pos, r.Len)
	if err != nil {
		if errors.Is(err, objstore.ErrCorrupt) {
			return nil, b.corrupt(r, err)
		}
		return nil, err
	}
	b.frames.put(key, p)
	return p, nil
}

// corrupt reports a committed frame that failed its checks: logged, counted,
// and refused — never served.
func (b *Broker) corrupt(r meta.Range, cause error) error {
	b.cfg.Metrics.CorruptReads.Inc()
	b.cfg.Logger.Error("committed object failed its checksum; refusing to serve it", "object", r.Object, "pos", r.Pos, "first", r.First, "next", r.Next, "err", cause)
	return Corrupt.Wrap(cause, "object", r.Object, "pos", r.Pos, "first", r.First, "next", r.Next)
}

func clone(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return append([]byte(nil), b...)
}

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

func max64u(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}

// frameCache keeps recently read frame payloads (catch-up readers read the
// same frame many times), bounded by bytes, least recently used out first.
type frameCache struct {
	mu    sync.Mutex
	limit int64
	size  int64
	ll    *list.List
	// perObject indexes the cached frames by object, then position, so
	// that dropping an object costs its own frames, not a pass over the
	// whole cache.
	perObject map[uint64]map[int64]*list.Element
}

type frameKey struct {
	object uint64
	pos    int64
}

type frameItem struct {
	key frameKey
	p   []byte
}

func newFrameCache(limit int64) *frameCache {
	return &frameCache{limit: limit, ll: list.New(), perObject: map[uint64]map[int64]*list.Element{}}
}

func (c *frameCache) get(k frameKey) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.perObject[k.object][k.pos]; ok {
		c.ll.MoveToFront(el)
		return el.Value.(*frameItem).p, true
	}
	return nil, false
}

func (c *frameCache) put(k frameKey, p []byte) {
	if int64(len(p)) > c.limit/4 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	frames := c.perObject[k.object]
	if _, ok := frames[k.pos]; ok {
		return
	}
	if frames == nil {
		frames = map[int64]*list.Element{}
		c.perObject[k.object] = frames
	}
	frames[k.pos] = c.ll.PushFront(&frameItem{key: k, p: p})
	c.size += int64(len(p))
	for c.size > c.limit {
		c.remove(c.ll.Back())
	}
}

// dropObject forgets an object's frames (it is being deleted).
func (c *frameCache) dropObject(id uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, el := range c.perObject[id] {
		c.remove(el)
	}
}

// remove drops one cached frame. Called with c.mu held.
func (c *frameCache) remove(el *list.Element) {
	it := el.Value.(*frameItem)
	c.ll.Remove(el)
	c.size -= int64(len(it.p))
	frames := c.perObject[it.key.object]
	delete(frames, it.key.pos)
	if len(frames) == 0 {
		delete(c.perObject, it.key.object)
	}
}
