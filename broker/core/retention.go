package core

import (
	"context"

	"github.com/picomq/picomq/broker/meta"
	"github.com/picomq/picomq/broker/stream"
)

// Retention drops a partition's leading ranges (frames) whose records are
// all older than RetainFor, and those that keep it above RetainBytes.
//
// It is exact at the moment anyone looks, yet the read path never writes
// the metadata log: a reader's answer treats the records below the
// retention point as trimmed (retentionStart), and the maintenance loop
// persists the trim (persistRetention), as do the write paths that must
// not see those records again (a policy update, a compaction).

// retentionStart is the first offset of in that retention keeps under
// policy p at now (Unix ns): in.Start when nothing is due.
//
// past is the journal's acknowledged tail of in (see journal.go), which
// counts as the state's ranges do.
func retentionStart(in *meta.Internal, past []meta.Range, p stream.PolicyValue, now int64) uint64 {
	start := in.Start
	if p.RetainFor <= 0 && p.RetainBytes <= 0 {
		return start
	}
	bytes := in.Bytes()
	for _, r := range past {
		bytes += r.Bytes
	}
	for _, rs := range [][]meta.Range{in.Ranges, past} {
		for _, r := range rs {
			old := p.RetainFor > 0 && r.MaxTime <= now-int64(p.RetainFor)
			over := p.RetainBytes > 0 && bytes > p.RetainBytes
			if !old && !over {
				return start
			}
			start = r.Next
			bytes -= r.Bytes
		}
	}
	return start
}

// persistRetention trims partition id of n to its retention point, when
// one is due: one command, only then.
//
// The policy is the state's, not the view's: a view refreshes its policy
// only when a request loads it, and a stream whose retention was lowered
// by a policy update may see none for a long time.
func (b *Broker) persistRetention(ctx context.Context, n *named, id uint64) error {
	var before uint64
	due := false
	b.fsm.View(func(s *meta.State) {
		e, ok := s.Names[n.name]
		if !ok {
			return
		}
		p := e.Policy
		if in, ok := s.Streams[id]; ok && (p.RetainFor > 0 || p.RetainBytes > 0) {
			past, _ := b.tail.past(in)
			before = retentionStart(in, past, p, b.now().UnixNano())
			due = before > in.Start
		}
	})
	if !due {
		return nil
	}
	if _, err := b.apply(ctx, &meta.Command{Op: meta.OpTrim, Trim: &meta.Trim{Stream: id, Before: before}}); err != nil {
		return err
	}
	b.cfg.Metrics.TrimmedRanges.Inc()
	n.freed()
	return nil
}

// Trim makes before the first offset of a partition.
func (b *Broker) Trim(ctx context.Context, name string, partition int, before uint64) error {
	if err := context.Cause(ctx); err != nil {
		return err
	}
	n, id, err := b.partitionOf(name, partition)
	if err != nil {
		return err
	}
	// The offset may be one the journal acknowledged: the state holds it
	// once checkpointed.
	if err := b.checkpoint(ctx); err != nil {
		return err
	}
	// A trim inside a range keeps the range: measure the bytes it makes
	// unreadable, so that MaxBytes and RetainBytes count only the rest.
	var skip int64
	err = lookAgainIfCollected(func() error {
		in, ok := b.fsm.Internal(id)
		if !ok {
			return meta.StreamNotFound.With("name", name)
		}
		if err := stream.CheckOffset(partition, stream.Offset(before), stream.BoundsValue{First: stream.Offset(in.Start), Next: stream.Offset(in.End)}); err != nil {
			return err
		}
		skip = 0
		if i := in.RangeAt(before); i < len(in.Ranges) && in.Ranges[i].First < before {
			recs, err := b.decodeRange(in.Ranges[i], 0)
			if err != nil {
				return err
			}
			for _, r := range recs {
				if r.off < before {
					skip += int64(len(r.key) + len(r.value))
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if _, err := b.apply(ctx, &meta.Command{Op: meta.OpTrim, Trim: &meta.Trim{Stream: id, Before: before, SkipBytes: skip}}); err != nil {
		return err
	}
	n.freed()
	return nil
}
