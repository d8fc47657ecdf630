package core

import (
	"context"

	"github.com/picomq/picomq/broker/meta"
)

// Merging and compaction both rewrite ranges of one partition into a new
// object and swap them in with one Replace (a maintenance pass's merges
// go together, as one ReplaceMany: merge.go); every record keeps its
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
func (b *Broker) writeRanges(groups [][]record, bounds []meta.Range) (placed, []meta.Range, error) {
	w, err := b.out.Create()
	if err != nil {
		return placed{}, nil, err
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
			return placed{}, nil, err
		}
		r.Pos, r.Len = pos, n
		out = append(out, r)
	}
	if err := w.Sync(); err != nil {
		w.Abort()
		return placed{}, nil, err
	}
	p := placed{id: w.ID(), size: w.Size(), replicas: w.Replicas()}
	if err := w.Close(); err != nil {
		return placed{}, nil, err
	}
	return p, out, nil
}

// placed is an object file written and made durable through the
// ObjectStore: its id, its size and the members holding copies of it.
type placed struct {
	id       uint64
	size     int64
	replicas []string
}

// replace swaps old, ranges of internal stream id, for fresh, written in
// object obj, with one command.
func (b *Broker) replace(ctx context.Context, id uint64, old []meta.Range, obj placed, fresh []meta.Range) error {
	_, err := b.apply(ctx, &meta.Command{Op: meta.OpReplace, Replace: replaceOf(id, old, obj, fresh)})
	return err
}

// replaceOf is the Replace swapping old, ranges of internal stream id, for
// fresh, written in object obj.
func replaceOf(id uint64, old []meta.Range, obj placed, fresh []meta.Range) *meta.Replace {
	c := &meta.Replace{Stream: id, Object: obj.id, Size: obj.size, Replicas: obj.replicas, New: fresh}
	c.Old = make([]meta.RangeRef, 0, len(old))
	for _, r := range old {
		c.Old = append(c.Old, meta.RangeRef{Object: r.Object, Pos: r.Pos})
	}
	return c
}
