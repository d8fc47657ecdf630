package core

import (
	"context"

	"github.com/picomq/picomq/broker/meta"
	"github.com/picomq/picomq/broker/stream"
)

// Merging and compaction both rewrite ranges of one partition into a new
// object and swap them in with one Replace command; every record keeps its
// offset. A rewrite that raced a trim is refused (RANGES_CHANGED) and its
// object is collected as an orphan; the next pass tries again.

// record is one decoded record kept by a rewrite.
type record struct {
	off   uint64
	at    int64
	key   []byte
	value []byte
}

// decodeRange returns a range's records at or above start.
func (b *Broker) decodeRange(r meta.Range, start uint64) ([]record, error) {
	payload, err := b.frame(r)
	if err != nil {
		return nil, err
	}
	return b.appendRecords(nil, r, payload, start)
}

// appendRecords appends to out the records at or above start of range r,
// whose frame payload is given.
func (b *Broker) appendRecords(out []record, r meta.Range, payload []byte, start uint64) ([]record, error) {
	err := decodeFrame(payload, func(off uint64, at int64, key, value []byte) bool {
		if off >= start && off < r.Next {
			out = append(out, record{off, at, key, value})
		}
		return true
	})
	if err != nil {
		return nil, b.corrupt(r, err)
	}
	return out, nil
}

// maxRunBytes bounds one read of consecutive frames while merging.
const maxRunBytes = 4 << 20

// runEnd returns the end of the run of ranges starting at rs[i] whose
// frames follow each other in one object: one read fetches them all.
func runEnd(rs []meta.Range, i int) int {
	j, size := i+1, rs[i].Len
	for j < len(rs) && rs[j].Object == rs[i].Object && rs[j].Pos == rs[j-1].Pos+rs[j-1].Len && size+rs[j].Len <= maxRunBytes {
		size += rs[j].Len
		j++
	}
	return j
}

// decodeRun returns the records at or above start of ranges whose frames
// follow each other in one object, read at once. If that read fails a
// check, the ranges are read one by one, so the error names the range.
func (b *Broker) decodeRun(rs []meta.Range, start uint64) ([]record, error) {
	if len(rs) == 1 {
		return b.decodeRange(rs[0], start)
	}
	lens := make([]int64, len(rs))
	for i, r := range rs {
		lens[i] = r.Len
	}
	payloads, err := b.objs.ReadFrames(rs[0].Object, rs[0].Pos, lens)
	if err != nil {
		var out []record
		for _, r := range rs {
			recs, err := b.decodeRange(r, start)
			if err != nil {
				return nil, err
			}
			out = append(out, recs...)
		}
		return out, nil
	}
	var out []record
	for i, r := range rs {
		if out, err = b.appendRecords(out, r, payloads[i], start); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// writeRanges writes groups of records as frames of one new object and
// returns their ranges. bounds[i], when its Next is set, is the [First,
// Next) range i keeps (compaction keeps a range's bounds around its holes);
// otherwise the range spans its records.
func (b *Broker) writeRanges(groups [][]record, bounds []meta.Range) (uint64, int64, []meta.Range, error) {
	w, err := b.objs.Create()
	if err != nil {
		return 0, 0, nil, err
	}
	var out []meta.Range
	var buf []byte
	for i, g := range groups {
		if len(g) == 0 {
			continue
		}
		buf = buf[:0]
		r := meta.Range{Object: w.ID(), First: g[0].off, Next: g[len(g)-1].off + 1, MinTime: g[0].at, MaxTime: g[0].at}
		if bounds != nil && bounds[i].Next != 0 {
			r.First, r.Next = bounds[i].First, bounds[i].Next
		}
		for _, rec := range g {
			buf = appendRecord(buf, rec.off, rec.at, rec.key, rec.value)
			r.Count++
			r.Bytes += int64(len(rec.key) + len(rec.value))
			r.MinTime = min(r.MinTime, rec.at)
			r.MaxTime = max(r.MaxTime, rec.at)
		}
		pos, n, err := w.AppendFrame(buf)
		if err != nil {
			w.Abort()
			return 0, 0, nil, err
		}
		r.Pos, r.Len = pos, n
		out = append(out, r)
	}
	if err := w.Sync(); err != nil {
		w.Abort()
		return 0, 0, nil, err
	}
	size := w.Size()
	if err := w.Close(); err != nil {
		return 0, 0, nil, err
	}
	return w.ID(), size, out, nil
}

func (b *Broker) replace(ctx context.Context, id uint64, old []meta.Range, obj uint64, size int64, fresh []meta.Range) error {
	c := &meta.Replace{Stream: id, Object: obj, Size: size, New: fresh}
	for _, r := range old {
		c.Old = append(c.Old, meta.RangeRef{Object: r.Object, Pos: r.Pos})
	}
	res, err := b.apply(ctx, &meta.Command{Op: meta.OpReplace, Replace: c})
	if err != nil {
		return err
	}
	if err, ok := res.(error); ok {
		return err
	}
	return nil
}

// merge rewrites a partition's small ranges — one per group-commit batch,
// in objects shared with other streams — into segment frames of up to
// FrameBytes, in objects of up to SegmentBytes, once MergeMinRanges of them
// have gathered. Shared objects are then freed as their other streams merge
// or trim too.
func (b *Broker) merge(ctx context.Context, n *named, id uint64) error {
	n.mu.Lock()
	segmentBytes := n.policy.SegmentBytes
	n.mu.Unlock()
	small := b.cfg.MergeRangeBytes
	var run []meta.Range
	var start uint64
	b.fsm.View(func(s *meta.State) {
		in, ok := s.Streams[id]
		if !ok {
			return
		}
		start = in.Start
		// The first run of consecutive small ranges.
		for _, r := range in.Ranges {
			if r.Len < small {
				run = append(run, r)
			} else if len(run) >= b.cfg.MergeMinRanges {
				break
			} else {
				run = run[:0]
			}
		}
	})
	if len(run) < b.cfg.MergeMinRanges {
		return nil
	}
	// Cut the run into objects of at most SegmentBytes, frames of at most
	// FrameBytes.
	for len(run) > 0 {
		var take []meta.Range
		var size int64
		for len(run) > 0 && (len(take) == 0 || size+run[0].Len <= segmentBytes) {
			take = append(take, run[0])
			size += run[0].Len
			run = run[1:]
		}
		var groups [][]record
		var cur []record
		var curBytes int64
		for i := 0; i < len(take); {
			j := runEnd(take, i)
			recs, err := b.decodeRun(take[i:j], start)
			if err != nil {
				return err
			}
			i = j
			for _, rec := range recs {
				sz := int64(len(rec.key) + len(rec.value) + 24)
				if len(cur) > 0 && curBytes+sz > b.cfg.FrameBytes {
					groups = append(groups, cur)
					cur, curBytes = nil, 0
				}
				cur = append(cur, rec)
				curBytes += sz
			}
		}
		if len(cur) > 0 {
			groups = append(groups, cur)
		}
		obj, osize, fresh, err := b.writeRanges(groups, nil)
		if err != nil {
			return err
		}
		if err := b.replace(ctx, id, take, obj, osize, fresh); err != nil {
			return err
		}
		b.cfg.Metrics.MergedRanges.Add(float64(len(take)))
	}
	return nil
}

// Compact drops from a partition every keyed record at least CompactAfter
// old that a later record of its key, as old, supersedes, and every
// tombstone at least twice CompactAfter old; survivors keep their offsets.
func (b *Broker) Compact(ctx context.Context, name string, partition int) (stream.CompactValue, error) {
	if err := context.Cause(ctx); err != nil {
		return stream.CompactValue{}, err
	}
	n, id, err := b.partitionOf(name, partition)
	if err != nil {
		return stream.CompactValue{}, err
	}
	n.mu.Lock()
	after := n.policy.CompactAfter
	n.mu.Unlock()
	if after <= 0 {
		return stream.CompactValue{}, nil
	}
	if err := b.retain(ctx, n, id); err != nil {
		return stream.CompactValue{}, err
	}
	in, ok := b.fsm.Internal(id)
	if !ok {
		return stream.CompactValue{}, meta.StreamNotFound.With("name", name)
	}
	now := b.now().UnixNano()
	cutoff, tombCutoff := now-int64(after), now-2*int64(after)

	decoded := make([][]record, len(in.Ranges))
	latest := map[string]uint64{}
	var v stream.CompactValue
	for i, r := range in.Ranges {
		recs, err := b.decodeRange(r, in.Start)
		if err != nil {
			return stream.CompactValue{}, err
		}
		decoded[i] = recs
		for _, rec := range recs {
			if rec.at > cutoff {
				continue
			}
			v.Scanned++
			if len(rec.key) > 0 {
				latest[string(rec.key)] = rec.off
			}
		}
	}
	var old []meta.Range
	var groups [][]record
	var bounds []meta.Range
	for i, r := range in.Ranges {
		var keep []record
		dropped := false
		for _, rec := range decoded[i] {
			drop := rec.at <= cutoff && len(rec.key) > 0 &&
				(latest[string(rec.key)] != rec.off || (len(rec.value) == 0 && rec.at <= tombCutoff))
			if drop {
				v.Dropped++
				dropped = true
				continue
			}
			keep = append(keep, rec)
		}
		if dropped {
			old = append(old, r)
			groups = append(groups, keep)
			bounds = append(bounds, meta.Range{First: r.First, Next: r.Next})
		}
	}
	v.Kept = v.Scanned - v.Dropped
	if len(old) == 0 {
		return v, nil
	}
	obj, size, fresh, err := b.writeRanges(groups, bounds)
	if err != nil {
		return stream.CompactValue{}, err
	}
	if err := b.replace(ctx, id, old, obj, size, fresh); err != nil {
		return stream.CompactValue{}, err
	}
	n.freed()
	return v, nil
}
