package core

import (
	"slices"
	"testing"
	"time"

	"github.com/picomq/picomq/broker/meta"
	"github.com/picomq/picomq/broker/stream"
)

func TestPlanTier(t *testing.T) {
	t.Parallel()
	const hour = int64(time.Hour)
	now := 100 * hour
	seg := func(id uint64, size int64, tiered, evicted bool) *meta.Object {
		o := &meta.Object{ID: id, Size: size, Refs: 1, Segment: true, Evicted: evicted}
		if tiered {
			o.Tier = &meta.TierCopy{Key: "k", Size: size}
		}
		return o
	}
	r := func(first uint64, obj uint64, maxTime int64) meta.Range {
		return meta.Range{First: first, Next: first + 10, Object: obj, MaxTime: maxTime}
	}
	s := meta.NewState()
	s.Names["on"] = &meta.Entry{Name: "on", Streams: []uint64{1}}
	s.Names["off"] = &meta.Entry{Name: "off", Streams: []uint64{2}, Policy: stream.PolicyValue{Tiering: stream.TieringDisabled}}
	s.Names["bytes"] = &meta.Entry{Name: "bytes", Streams: []uint64{3}, Policy: stream.PolicyValue{LocalRetainFor: 1000 * time.Hour, LocalRetainBytes: 150}}
	s.Objects[10] = seg(10, 100, true, false)                // old, tiered: evict
	s.Objects[11] = seg(11, 100, true, false)                // new, tiered: keep
	s.Objects[12] = seg(12, 100, false, false)               // not tiered: upload
	s.Objects[13] = &meta.Object{ID: 13, Size: 100, Refs: 1} // a group commit: never
	s.Objects[14] = seg(14, 100, false, false)               // shared with "off" (a fork): neither
	s.Objects[15] = seg(15, 100, true, true)                 // evicted already
	s.Objects[20] = seg(20, 100, true, false)                // "bytes": the oldest beyond 150: evict
	s.Objects[21] = seg(21, 100, true, false)
	s.Objects[14].Refs = 2
	s.Streams[1] = &meta.Internal{ID: 1, Name: "on", Ranges: []meta.Range{r(0, 15, 0), r(10, 14, 0), r(20, 10, now-2*hour), r(30, 10, now-2*hour), r(40, 11, now-time.Minute.Nanoseconds()), r(50, 12, now), r(60, 13, now)}}
	s.Streams[2] = &meta.Internal{ID: 2, Name: "off", Ranges: []meta.Range{r(10, 14, 0)}}
	s.Streams[3] = &meta.Internal{ID: 3, Name: "bytes", Ranges: []meta.Range{r(0, 20, now), r(10, 21, now)}}
	p := planTier(s, TierDefaults{LocalRetainFor: time.Hour}, now)
	if !slices.Equal(p.upload, []uint64{12}) || !slices.Equal(p.evict, []uint64{10, 20}) {
		t.Fatalf("plan = %+v, want upload [12], evict [10 20]", p)
	}
	// With no local retention an upload is evicted at once.
	p = planTier(s, TierDefaults{}, now)
	if !slices.Equal(p.evict, []uint64{10, 11, 20}) {
		t.Fatalf("evict with no local retention = %v", p.evict)
	}
}
