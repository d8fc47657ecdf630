package core

import (
	"context"

	"github.com/picomq/picomq/broker/meta"
)

// merge rewrites a partition's small ranges — one per group-commit batch,
// in objects shared with other streams — into segment frames of up to
// FrameBytes, in objects of up to SegmentBytes, once MergeMinRanges of them
// have gathered. Shared objects are then freed as their other streams merge
// or trim too. It writes at most *budget bytes, and takes what it wrote
// from it; on a volume below its headroom only objects that free as much
// as they write are made (see Broker.background).
func (b *Broker) merge(ctx context.Context, n *named, id uint64, budget *int64) error {
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
		// The first run of consecutive small ranges. A segment's small
		// range is merged again into a bigger one — unless the policy's
		// segments are small themselves (SegmentBytes at most
		// MergeRangeBytes): then it would be merged again for ever, and,
		// tiered, uploaded again for ever.
		for _, r := range in.Ranges {
			if o := s.Objects[r.Object]; r.Len < small && (segmentBytes > small || o == nil || !o.Segment) {
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
		limit := min(segmentBytes, *budget)
		for len(run) > 0 && (len(take) == 0 && run[0].Len <= *budget || size+run[0].Len <= limit) {
			take = append(take, run[0])
			size += run[0].Len
			run = run[1:]
		}
		if len(take) == 0 {
			return nil // no room this pass
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
		if !b.background("merge", size, b.freedBy(take)) {
			return nil // put off until there is room
		}
		*budget -= size
		obj, fresh, err := b.writeRanges(groups, nil)
		if err != nil {
			return err
		}
		if err := b.replace(ctx, id, take, obj, fresh); err != nil {
			return err
		}
		b.cfg.Metrics.MergedRanges.Add(float64(len(take)))
	}
	return nil
}
