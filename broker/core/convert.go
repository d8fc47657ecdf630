package core

import (
	"maps"
	"slices"
	"time"

	"github.com/picomq/picomq/broker/meta"
	"github.com/picomq/picomq/broker/node"
)

// The state machine's types stay inside the core: its API answers in
// package node's.

// entryOf describes a registry entry in the API's terms. It copies what it
// keeps, so that e may be the state's own.
func entryOf(e *meta.Entry) *node.Entry {
	out := &node.Entry{
		Name: e.Name, Partitions: slices.Clone(e.Streams), ContentType: e.ContentType, Policy: e.Policy,
		TTL: time.Duration(e.TTL), CreatedAt: timeOf(e.CreatedAt), LastAccess: timeOf(e.LastAccess),
		Closed: e.Closed, LastStreamSeq: e.LastStreamSeq,
		ForkOf: e.ForkOf, ForkOffset: e.ForkOffset, ForkSubOffset: e.ForkSubOffset,
	}
	if e.ExpiresAt > 0 {
		out.ExpiresAt = timeOf(e.ExpiresAt)
	}
	if e.ClosedBy != nil {
		out.ClosedBy = &node.ProducerTuple{ID: e.ClosedBy.ID, Epoch: e.ClosedBy.Epoch, Seq: e.ClosedBy.Seq}
	}
	if len(e.Producers) > 0 {
		out.Producers = make(map[string]node.Producer, len(e.Producers))
		for id, p := range e.Producers {
			out.Producers[id] = producerOf(p)
		}
	}
	return out
}

// entryOf is entryOf with what the journal acknowledged and no checkpoint
// took yet: producers, Stream-Seq, the close.
func (b *Broker) entryOf(e *meta.Entry) *node.Entry {
	out := entryOf(e)
	b.tail.overlay(e.Streams, out)
	return out
}

// partitionStateOf describes an internal stream in the API's terms.
func partitionStateOf(s *meta.State, in *meta.Internal) node.PartitionState {
	ps := node.PartitionState{
		ID: in.ID, Partition: in.Partition, Epoch: in.Epoch, Owner: in.Owner, Open: in.Open,
		Start: in.Start, End: in.End, Bytes: in.Bytes(), Ranges: len(in.Ranges),
		Groups: maps.Clone(in.Groups),
	}
	for _, r := range in.Ranges {
		o := s.Objects[r.Object]
		if o == nil || !o.Evicted {
			ps.LocalBytes += r.Len
		}
		if o != nil && o.Tier != nil {
			ps.TieredBytes += r.Len
		}
	}
	return ps
}

func producerOf(p meta.Producer) node.Producer {
	return node.Producer{Epoch: p.Epoch, LastSeq: p.LastSeq}
}

func tupleOf(t *node.ProducerTuple) meta.ProducerTuple {
	return meta.ProducerTuple{ID: t.ID, Epoch: t.Epoch, Seq: t.Seq}
}

// timeOf is a Unix-nanosecond instant of the state as a time.
func timeOf(ns int64) time.Time { return time.Unix(0, ns) }
