package core

import (
	"context"

	"github.com/picomq/picomq/broker/meta"
	"github.com/picomq/picomq/broker/node"
	"github.com/picomq/picomq/broker/stream"
)

// Fork creates name as a fork of o.Source, sharing its objects below o.At
// (no record is copied), or returns the existing entry of name unchanged
// (created false): the caller compares configurations. A missing or
// expired source is StreamNotFound, a soft-deleted one StreamGone, an At
// past its end OffsetAhead.
func (b *Broker) Fork(ctx context.Context, name string, o node.ForkOptions) (*node.Entry, bool, error) {
	if err := node.ValidateName(name); err != nil {
		return nil, false, err
	}
	if e, ok, err := b.existing(ctx, name); ok || err != nil {
		return e, false, err
	}
	src, ok := b.lookup(o.Source)
	switch {
	case !ok:
		return nil, false, meta.StreamNotFound.With("name", o.Source)
	case src.Deleted:
		return nil, false, meta.StreamGone.With("name", o.Source)
	case len(src.Streams) != 1:
		return nil, false, stream.StreamMisconfigured.With("field", "Partitions", "value", len(src.Streams), "reason", "only a one-partition stream can be forked")
	}
	c := &meta.Fork{
		Name: name, Source: o.Source, SourceStreams: src.Streams, At: o.At, SubOffset: o.SubOffset,
		ContentType: o.ContentType, TTL: int64(o.TTL), Closed: o.Closed, Now: b.now().UnixNano(),
	}
	if !o.ExpiresAt.IsZero() {
		c.ExpiresAt = o.ExpiresAt.UnixNano()
	}
	if len(o.Initial) > 0 {
		if _, err := stream.CheckBatch(stream.PolicyValue{MaxRecordBytes: src.Policy.MaxRecordBytes}, o.Initial); err != nil {
			return nil, false, err
		}
		if err := b.checkpoint(ctx); err != nil { // the fork point may be in the journal's tail
			return nil, false, err
		}
		in, ok := b.fsm.Internal(src.Streams[0])
		if !ok || o.At > in.End {
			// Refuse before writing an object nobody would reference.
			return nil, false, stream.OffsetAhead.With("partition", 0, "offset", o.At, "next", in.End)
		}
		obj, rs, err := b.writeInitial(o.At, o.Initial)
		if err != nil {
			return nil, false, err
		}
		c.Object, c.Size, c.Replicas, c.Initial = obj.id, obj.size, obj.replicas, rs
	}
	res, err := b.apply(ctx, &meta.Command{Op: meta.OpFork, Fork: c})
	if err != nil {
		return nil, false, err
	}
	return createResult(res, "fork")
}

// writeInitial writes records from offset first on as one frame of a new,
// synced object, and returns the range naming them.
func (b *Broker) writeInitial(first uint64, records []stream.RecordValue) (placed, []meta.Range, error) {
	at := b.now().UnixNano()
	group := make([]record, len(records))
	for i, r := range records {
		group[i] = record{off: first + uint64(i), at: at, key: r.Key, value: r.Payload}
	}
	return b.writeRanges([][]record{group}, nil)
}
