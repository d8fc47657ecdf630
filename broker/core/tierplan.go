package core

import (
	"slices"
	"time"

	"github.com/picomq/picomq/broker/meta"
	"github.com/picomq/picomq/broker/stream"
)

// TierDefaults are the cluster's defaults for streams that say nothing of
// tiering in their policy.
type TierDefaults struct {
	// LocalRetainFor is how long an uploaded segment stays on local disks,
	// from its newest record (0: evicted once uploaded).
	LocalRetainFor time.Duration
	// LocalRetainBytes bounds a partition's uploaded bytes kept locally
	// too, newest first (0: no bound).
	LocalRetainBytes int64
}

// tierPolicy is what one stream's policy and the defaults make of tiering.
type tierPolicy struct {
	on          bool
	retainFor   time.Duration
	retainBytes int64
}

func tierPolicyOf(p stream.PolicyValue, d TierDefaults) tierPolicy {
	t := tierPolicy{on: p.Tiering != stream.TieringDisabled, retainFor: p.LocalRetainFor, retainBytes: p.LocalRetainBytes}
	if t.retainFor == 0 {
		t.retainFor = d.LocalRetainFor
	}
	if t.retainBytes == 0 {
		t.retainBytes = d.LocalRetainBytes
	}
	return t
}

// tierPlan is what a pass of the tier loop may do, decided from one view
// of the state: the segments to upload and the uploaded ones whose local
// copies may go.
type tierPlan struct {
	upload []uint64
	evict  []uint64
}

// planTier reads the state (inside a View): a segment is uploaded when a
// stream with tiering on references it and none with tiering off does
// (tiebreak for forks: off wins); an uploaded segment is evicted when
// every stream referencing it is past its local retention for it — by
// the age of the segment's newest record, or by the partition's uploaded
// bytes kept locally, newest first. Everything in the state is below its
// stream's checkpointed end (the journal's tail is not in it), so only
// sealed segments are named.
func planTier(s *meta.State, d TierDefaults, now int64) tierPlan {
	want := map[uint64]bool{}
	block := map[uint64]bool{}
	evict := map[uint64]bool{}
	keep := map[uint64]bool{}
	for _, in := range s.Streams {
		e, ok := s.Names[in.Name]
		if !ok {
			continue
		}
		pol := tierPolicyOf(e.Policy, d)
		if !pol.on {
			for _, r := range in.Ranges {
				block[r.Object] = true
				keep[r.Object] = true
			}
			continue
		}
		// Newest first: the bytes bound keeps the newest uploaded ones.
		var kept int64
		seen := map[uint64]bool{}
		for i := len(in.Ranges) - 1; i >= 0; i-- {
			r := in.Ranges[i]
			o, ok := s.Objects[r.Object]
			if !ok || !o.Segment || seen[o.ID] {
				continue
			}
			seen[o.ID] = true
			if o.Tier == nil {
				want[o.ID] = true
				continue
			}
			if o.Evicted {
				continue
			}
			newest := segmentNewest(in, o.ID, i)
			kept += o.Size
			old := now-newest >= int64(pol.retainFor)
			over := pol.retainBytes > 0 && kept > pol.retainBytes
			if old || over {
				evict[o.ID] = true
			} else {
				keep[o.ID] = true
			}
		}
	}
	var p tierPlan
	for id := range want {
		if !block[id] {
			p.upload = append(p.upload, id)
		}
	}
	for id := range evict {
		if !keep[id] {
			p.evict = append(p.evict, id)
		}
	}
	slices.Sort(p.upload)
	slices.Sort(p.evict)
	return p
}

// segmentNewest is the newest record instant of object id's ranges in
// in, whose last one is at index last.
func segmentNewest(in *meta.Internal, id uint64, last int) int64 {
	var newest int64
	for i := last; i >= 0; i-- {
		r := in.Ranges[i]
		if r.Object != id {
			if newest != 0 {
				break // a segment's ranges are consecutive
			}
			continue
		}
		newest = max(newest, r.MaxTime)
	}
	return newest
}
