package core

import (
	"context"

	"github.com/picomq/picomq/broker/meta"
	"github.com/picomq/picomq/broker/stream"
)

// Commit records next as the offset group reads next on a partition.
func (b *Broker) Commit(ctx context.Context, name, group string, partition int, next uint64) error {
	if err := context.Cause(ctx); err != nil {
		return err
	}
	if err := stream.CheckGroup(group); err != nil {
		return err
	}
	_, id, err := b.partitionOf(name, partition)
	if err != nil {
		return err
	}
	_, err = b.apply(ctx, &meta.Command{Op: meta.OpGroup, Group: &meta.GroupOffset{Stream: id, Group: group, Next: next}})
	return err
}

// Committed returns the offset group committed last on a partition.
func (b *Broker) Committed(ctx context.Context, name, group string, partition int) (uint64, error) {
	if err := context.Cause(ctx); err != nil {
		return 0, err
	}
	if err := stream.CheckGroup(group); err != nil {
		return 0, err
	}
	_, id, err := b.partitionOf(name, partition)
	if err != nil {
		return 0, err
	}
	var next uint64
	found, committed := false, false
	b.fsm.View(func(s *meta.State) {
		var in *meta.Internal
		if in, found = s.Streams[id]; found {
			next, committed = in.Groups[group]
		}
	})
	if !found {
		return 0, meta.StreamNotFound.With("name", name)
	}
	if !committed {
		return 0, stream.NoCommit(group, partition)
	}
	return next, nil
}
