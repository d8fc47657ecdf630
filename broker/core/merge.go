package core

import (
	"context"
	"fmt"
	"time"

	"github.com/picomq/picomq/broker/meta"
)

// merge rewrites a partition's small ranges — one per group-commit batch,
// in objects shared with other streams — into segment frames of up to
// FrameBytes, in objects of up to SegmentBytes, once MergeMinRanges of them
// have gathered. Shared objects are then freed as their other streams merge
// or trim too. It writes at most *budget bytes, and takes what it wrote
// from it; on a volume below its headroom only objects that free as much
// as they write are made (see Broker.background). With a batch, the
// replaces wait in it for one command (see mergeBatch); without, each goes
// at once.
func (b *Broker) merge(ctx context.Context, n *named, id uint64, budget *int64, batch *mergeBatch) error {
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
		if batch != nil && ctx.Err() != nil {
			// Out of time, or stopping: an object written now would only
			// wait for a command that cannot be sent (maintain sends
			// what the batch holds).
			return nil
		}
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
		if !b.background("merge", size, b.freedBy(take, batch.dropping())) {
			return nil // put off until there is room
		}
		*budget -= size
		obj, fresh, err := b.writeRanges(groups, nil)
		if err != nil {
			return err
		}
		c := replaceOf(id, take, obj, fresh)
		if batch != nil {
			batch.add(n.name, c, take)
			if batch.due() {
				b.flushMerges(ctx, batch)
			}
			continue
		}
		if _, err := b.apply(ctx, &meta.Command{Op: meta.OpReplace, Replace: c}); err != nil {
			return err
		}
		b.cfg.Metrics.MergedRanges.Add(float64(len(take)))
	}
	return nil
}

// A maintenance pass merges many streams (every stream a busy broker owns
// gathers MergeMinRanges ranges every few seconds): a command each was
// two thirds of what the metadata log carried under load. The pass sends
// its merges as one OpReplaceMany instead — each replace applies or is
// refused on its own, as it would alone — once every current member's
// build can apply it (LevelReplaceMany, checked again when it is sent;
// until then, one command each). A batch is sent when it names
// maxMergeBatchRefs ranges, when it is maxMergeBatchAge old, and at the
// end of the pass — its deadline or the broker's stop included (see
// maintain): an object written waits for its command at most that long,
// far below OrphanGrace, and a replace refused in the batch leaves its
// object an orphan as one refused alone did.
type mergeBatch struct {
	replaces []meta.Replace
	names    []string // the stream each replace is for, for the logs
	refs     int      // ranges the replaces name, which size the command
	since    time.Time
	// drops counts, by object, the ranges the replaces drop: the disk
	// check of the next merge counts an object they free as freed
	// already (freedBy).
	drops map[uint64]int
}

const (
	// maxMergeBatchRefs bounds the ranges one command replaces (a few
	// bytes each): 64 merges of MergeMinRanges (256) ranges, about
	// 100 KiB.
	maxMergeBatchRefs = 16384
	// maxMergeBatchAge bounds how long a merge waits for its command.
	maxMergeBatchAge = 2 * time.Second
)

// newMergeBatch returns a batch for a pass's merges, or nil when a
// current member's build could not apply OpReplaceMany.
func (b *Broker) newMergeBatch() *mergeBatch {
	if b.needLevel(meta.LevelReplaceMany, meta.OpReplaceMany) != nil {
		return nil
	}
	return &mergeBatch{drops: map[uint64]int{}}
}

// add puts c, the replace of the ranges old, in the batch.
func (m *mergeBatch) add(name string, c *meta.Replace, old []meta.Range) {
	if len(m.replaces) == 0 {
		m.since = time.Now()
	}
	m.replaces = append(m.replaces, *c)
	m.names = append(m.names, name)
	m.refs += len(c.Old) + len(c.New)
	for _, r := range old {
		m.drops[r.Object]++
	}
}

// due reports whether the batch is to be sent now.
func (m *mergeBatch) due() bool {
	return m.refs >= maxMergeBatchRefs || len(m.replaces) > 0 && time.Since(m.since) >= maxMergeBatchAge
}

// dropping is the ranges the batch drops, by object (nil: no batch).
func (m *mergeBatch) dropping() map[uint64]int {
	if m == nil {
		return nil
	}
	return m.drops
}

// flushMerges applies the batch's replaces in one command and empties it.
// A replace refused, or the command failing, is logged as a failed merge
// was: the next pass merges again. A member that recorded a build without
// OpReplaceMany since the batch began (a rollback under way) gets one
// replace a command.
func (b *Broker) flushMerges(ctx context.Context, m *mergeBatch) {
	if m == nil || len(m.replaces) == 0 {
		return
	}
	replaces, names := m.replaces, m.names
	*m = mergeBatch{drops: map[uint64]int{}}
	if b.needLevel(meta.LevelReplaceMany, meta.OpReplaceMany) != nil {
		for i := range replaces {
			if _, err := b.apply(ctx, &meta.Command{Op: meta.OpReplace, Replace: &replaces[i]}); err != nil {
				if !cutByStop(ctx) {
					b.cfg.Logger.Warn("merge failed", "name", names[i], "err", err)
				}
				continue
			}
			b.cfg.Metrics.MergedRanges.Add(float64(len(replaces[i].Old)))
		}
		return
	}
	res, err := b.apply(ctx, &meta.Command{Op: meta.OpReplaceMany, ReplaceMany: &meta.ReplaceMany{Replaces: replaces}})
	if err != nil {
		if !cutByStop(ctx) {
			b.cfg.Logger.Warn("merge failed", "streams", len(replaces), "err", err)
		}
		return
	}
	rm, ok := res.(*meta.ReplaceManyResult)
	if !ok || len(rm.Errs) != len(replaces) {
		b.cfg.Logger.Warn("merge failed", "streams", len(replaces), "err", fmt.Sprintf("unexpected result %T", res))
		return
	}
	for i, err := range rm.Errs {
		if err != nil {
			b.cfg.Logger.Warn("merge failed", "name", names[i], "err", err)
			continue
		}
		b.cfg.Metrics.MergedRanges.Add(float64(len(replaces[i].Old)))
	}
}
