package core

import (
	"context"

	"github.com/picomq/picomq/broker/meta"
	"github.com/picomq/picomq/broker/node"
	"github.com/picomq/picomq/broker/stream"
)

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
	// Every record acknowledged so far is compacted: those in the
	// journal's tail join the state first.
	if err := b.checkpoint(ctx); err != nil {
		return stream.CompactValue{}, err
	}
	// Records retention already dropped in a reader's eyes go first.
	if err := b.persistRetention(ctx, n, id); err != nil {
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
	var writes int64
	for _, g := range groups {
		for _, rec := range g {
			writes += int64(len(rec.key) + len(rec.value) + 24)
		}
	}
	if !b.background("compaction", writes, b.freedBy(old, nil)) {
		// Into the headroom a compaction must free what it writes; this
		// one would not (its objects hold other streams' ranges too).
		d := b.cfg.Disk
		return stream.CompactValue{}, node.StorageFull.With("free", d.Free(), "headroom", d.HeadroomBytes(), "dir", objectsDir(b.cfg.DataDir), "work", "compaction", "writes", writes)
	}
	obj, fresh, err := b.writeRanges(groups, bounds)
	if err != nil {
		return stream.CompactValue{}, err
	}
	if err := b.replace(ctx, id, old, obj, fresh); err != nil {
		return stream.CompactValue{}, err
	}
	n.freed()
	return v, nil
}
