// Package embedded is the file engine: a PicoMQ broker used in-process, on a
// directory of its own, as a stream.Stream with all five siblings. It is the
// same code the broker server runs — group commit, metadata log, objects —
// without HTTP.
package embedded

import (
	"context"
	"time"

	"github.com/picomq/picomq/broker/core"
	"github.com/picomq/picomq/broker/node"
	"github.com/picomq/picomq/broker/stream"
)

// DefaultName is the stream Open keeps when Options.Name is empty.
const DefaultName = "default"

// Options configure Open.
type Options struct {
	// Name is the stream's name in the directory (DefaultName when empty).
	Name string
	// Policy is the stream's policy, validated before anything is written.
	// A directory that already holds the stream keeps the policy it was
	// created with, except for the fields an update may change.
	Policy stream.PolicyValue
	// Clock dates records and measures ages (default time.Now).
	Clock func() time.Time
	// Broker tunes the broker underneath (DataDir and Clock are set by Open).
	Broker core.Config
}

// Stream is one named stream of a broker; it implements stream.Stream,
// Waker, Seeker, Trimmer, Compactor and Committer.
type Stream struct {
	b     *core.Broker
	name  string
	parts int
	owned bool // Close closes the broker too
}

var (
	_ stream.Stream    = (*Stream)(nil)
	_ stream.Waker     = (*Stream)(nil)
	_ stream.Seeker    = (*Stream)(nil)
	_ stream.Trimmer   = (*Stream)(nil)
	_ stream.Compactor = (*Stream)(nil)
	_ stream.Committer = (*Stream)(nil)
)

// Open opens (or creates) the broker directory dir and the stream in it.
// The policy is refused by field before the directory is touched; an
// unusable directory is STREAM_DIRECTORY_UNUSABLE.
func Open(dir string, o Options) (*Stream, error) {
	if err := o.Policy.Validate(); err != nil {
		return nil, err
	}
	cfg := o.Broker
	cfg.DataDir = dir
	if o.Clock != nil {
		cfg.Clock = o.Clock
	}
	b, err := core.Open(cfg)
	if err != nil {
		return nil, err
	}
	s, err := New(context.Background(), b, o.Name, o.Policy)
	if err != nil {
		_ = b.Close()
		return nil, err
	}
	s.owned = true
	return s, nil
}

// New returns the named stream of an open broker, creating it with policy
// when it does not exist.
func New(ctx context.Context, b *core.Broker, name string, policy stream.PolicyValue) (*Stream, error) {
	if name == "" {
		name = DefaultName
	}
	e, _, err := b.Create(ctx, name, node.CreateOptions{ContentType: "application/octet-stream", Policy: policy})
	if err != nil {
		return nil, err
	}
	return &Stream{b: b, name: name, parts: len(e.Partitions)}, nil
}

// Close closes the broker when Open opened it.
func (s *Stream) Close() error {
	if s.owned {
		return s.b.Close()
	}
	return nil
}

// Append implements stream.Stream.
func (s *Stream) Append(ctx context.Context, records []stream.RecordValue) (stream.AppendValue, error) {
	res, err := s.b.Append(ctx, s.name, records, node.AppendOptions{Partition: -1})
	if err != nil {
		return stream.AppendValue{}, err
	}
	return stream.AppendValue{Partition: res.Partition, First: stream.Offset(res.First), Last: stream.Offset(res.Last)}, nil
}

// Read implements stream.Stream.
func (s *Stream) Read(ctx context.Context, partition int, from stream.Offset, max int) ([]stream.EntryValue, error) {
	out, _, err := s.b.Read(ctx, s.name, partition, uint64(from), max, node.ReadOptions{})
	return out, err
}

// Bounds implements stream.Stream.
func (s *Stream) Bounds(ctx context.Context, partition int) (stream.BoundsValue, error) {
	return s.b.Bounds(ctx, s.name, partition)
}

// Partitions implements stream.Stream.
func (s *Stream) Partitions() int { return s.parts }

// Wake implements stream.Waker.
func (s *Stream) Wake() <-chan struct{} {
	ch, err := s.b.Wake(s.name)
	if err != nil {
		// The stream is gone: a closed channel sends the reader back to
		// Read, which reports why.
		c := make(chan struct{})
		close(c)
		return c
	}
	return ch
}

// OffsetAt implements stream.Seeker.
func (s *Stream) OffsetAt(ctx context.Context, partition int, t time.Time) (stream.Offset, error) {
	off, err := s.b.OffsetAt(ctx, s.name, partition, t)
	return stream.Offset(off), err
}

// Trim implements stream.Trimmer.
func (s *Stream) Trim(ctx context.Context, partition int, before stream.Offset) error {
	return s.b.Trim(ctx, s.name, partition, uint64(before))
}

// Compact implements stream.Compactor.
func (s *Stream) Compact(ctx context.Context, partition int) (stream.CompactValue, error) {
	return s.b.Compact(ctx, s.name, partition)
}

// Commit implements stream.Committer.
func (s *Stream) Commit(ctx context.Context, group string, partition int, next stream.Offset) error {
	return s.b.Commit(ctx, s.name, group, partition, uint64(next))
}

// Committed implements stream.Committer.
func (s *Stream) Committed(ctx context.Context, group string, partition int) (stream.Offset, error) {
	off, err := s.b.Committed(ctx, s.name, group, partition)
	return stream.Offset(off), err
}

// Entry returns the stream's registry entry (status, tests).
func (s *Stream) Entry() (*node.Entry, error) { return s.b.Get(s.name) }
