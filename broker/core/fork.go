package core

import (
	"context"
	"time"

	"github.com/picomq/picomq/broker/meta"
	"github.com/picomq/picomq/broker/stream"
)

// ForkOptions describe a fork: see Broker.Fork.
type ForkOptions struct {
	// Source names the stream forked; it must have one partition.
	Source string
	// At is the offset of Source the fork starts at: it shares Source's
	// records below At.
	At uint64
	// SubOffset is what the client asked inside the record at At, kept for
	// comparing configurations; Initial carries its effect.
	SubOffset   int64
	ContentType string
	// TTL and ExpiresAt: neither set inherits Source's.
	TTL       time.Duration
	ExpiresAt time.Time
	Closed    bool
	// Initial are the records the fork starts with at At (a prefix
	// materialized from Source's record at At, a create body), landing with
	// the fork in one metadata command.
	Initial []stream.RecordValue
}

// Fork creates name as a fork of o.Source, sharing its objects below o.At
// (no record is copied), or returns the existing entry of name unchanged
// (created false): the caller compares configurations. A missing or
// expired source is StreamNotFound, a soft-deleted one StreamGone, an At
// past its end OffsetAhead.
func (b *Broker) Fork(ctx context.Context, name string, o ForkOptions) (*meta.Entry, bool, error) {
	if err := ValidateName(name); err != nil {
		return nil, false, err
	}
	if e, ok, err := b.existing(ctx, name); ok || err != nil {
		return e, false, err
	}
	src, err := b.Get(o.Source)
	if err != nil {
		return nil, false, err
	}
	if len(src.Streams) != 1 {
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
		in, ok := b.fsm.Internal(src.Streams[0])
		if !ok || o.At > in.End {
			// Refuse before writing an object nobody would reference.
			return nil, false, stream.OffsetAhead.With("partition", 0, "offset", o.At, "next", in.End)
		}
		obj, size, rs, err := b.writeInitial(o.At, o.Initial)
		if err != nil {
			return nil, false, err
		}
		c.Object, c.Size, c.Initial = obj, size, rs
	}
	res, err := b.apply(ctx, &meta.Command{Op: meta.OpFork, Fork: c})
	if err != nil {
		return nil, false, err
	}
	return createResult(res, "fork")
}

// writeInitial writes records from offset first on as one frame of a new,
// synced object, and returns the range naming them.
func (b *Broker) writeInitial(first uint64, records []stream.RecordValue) (uint64, int64, []meta.Range, error) {
	at := b.now().UnixNano()
	group := make([]record, len(records))
	for i, r := range records {
		group[i] = record{off: first + uint64(i), at: at, key: r.Key, value: r.Payload}
	}
	return b.writeRanges([][]record{group}, nil)
}

// Tail is a one-partition stream's committed state, read in one view.
type Tail struct {
	Entry *meta.Entry
	// Start and End bound the partition's offsets: End is the next one.
	Start, End uint64
}

// TailOf returns the entry of name and its partition's bounds, read
// together: a reader deciding whether it reached a closed stream's final
// offset compares against the End of the same state that says Closed. It
// does not count as an access (HEAD must not extend a sliding TTL).
func (b *Broker) TailOf(name string, partition int) (Tail, error) {
	var t Tail
	var err error
	now := b.now().UnixNano()
	b.fsm.View(func(s *meta.State) {
		e, ok := s.Names[name]
		if !ok {
			err = meta.StreamNotFound.With("name", name)
			return
		}
		if e.Deleted {
			err = meta.StreamGone.With("name", name)
			return
		}
		if partition < 0 || partition >= len(e.Streams) {
			err = stream.UnknownPartition.With("partition", partition, "partitions", len(e.Streams))
			return
		}
		in := s.Streams[e.Streams[partition]]
		t = Tail{Entry: e.Clone(), Start: in.Start, End: in.End}
	})
	if err != nil {
		return Tail{}, err
	}
	if b.expired(t.Entry, now) {
		return Tail{}, meta.StreamNotFound.With("name", name, "reason", "expired")
	}
	return t, nil
}
