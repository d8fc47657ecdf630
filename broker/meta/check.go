package meta

import "fmt"

// Check verifies the state's invariants and reports the first one broken:
// every internal stream has start <= end, ranges sorted, non-overlapping,
// below end and with a live object; every object's reference count equals
// the ranges naming it; garbage is referenced by no range; every entry's
// internal streams exist; every fork's source exists and counts it, a fork
// has one partition, and a soft-deleted entry has forks and no range. Tests run it after every command; the broker may
// run it at start-up.
func (s *State) Check() error {
	refs := map[uint64]int{}
	for id, in := range s.Streams {
		if in.ID != id {
			return fmt.Errorf("stream %d stored under id %d", in.ID, id)
		}
		if in.Start > in.End {
			return fmt.Errorf("stream %d: start %d > end %d", id, in.Start, in.End)
		}
		if in.HeadSkip < 0 || (in.HeadSkip > 0 && (len(in.Ranges) == 0 || in.Ranges[0].First >= in.Start || in.HeadSkip > in.Ranges[0].Bytes)) {
			return fmt.Errorf("stream %d: head skip %d does not fit its first range", id, in.HeadSkip)
		}
		if in.Epoch < -1 {
			return fmt.Errorf("stream %d: epoch %d below -1", id, in.Epoch)
		}
		var prev uint64
		for i, r := range in.Ranges {
			if r.Next <= r.First {
				return fmt.Errorf("stream %d range %d: empty [%d,%d)", id, i, r.First, r.Next)
			}
			if i > 0 && r.First < prev {
				return fmt.Errorf("stream %d range %d: starts at %d, below the previous range's end %d", id, i, r.First, prev)
			}
			if r.Next > in.End {
				return fmt.Errorf("stream %d range %d: ends at %d past end %d", id, i, r.Next, in.End)
			}
			if r.Next <= in.Start {
				return fmt.Errorf("stream %d range %d: wholly below start %d", id, i, in.Start)
			}
			if s.Garbage[r.Object] {
				return fmt.Errorf("stream %d range %d: references garbage object %d", id, i, r.Object)
			}
			if _, ok := s.Objects[r.Object]; !ok {
				return fmt.Errorf("stream %d range %d: references unknown object %d", id, i, r.Object)
			}
			refs[r.Object]++
			prev = r.Next
		}
		if e, ok := s.Names[in.Name]; !ok || in.Partition < 0 || in.Partition >= len(e.Streams) || e.Streams[in.Partition] != id {
			return fmt.Errorf("stream %d: not partition %d of entry %q", id, in.Partition, in.Name)
		}
	}
	for id, o := range s.Objects {
		if o.Refs != refs[id] || o.Refs <= 0 {
			return fmt.Errorf("object %d: refs %d, referenced by %d ranges", id, o.Refs, refs[id])
		}
		if s.Garbage[id] {
			return fmt.Errorf("object %d is both live and garbage", id)
		}
		if id > s.MaxObjectID {
			return fmt.Errorf("object %d above MaxObjectID %d", id, s.MaxObjectID)
		}
		if o.Evicted && o.Tier == nil {
			return fmt.Errorf("object %d evicted but not tiered", id)
		}
	}
	for id := range s.TieredGarbage {
		if !s.Garbage[id] {
			return fmt.Errorf("object %d: its key awaits deletion but it is not garbage", id)
		}
	}
	forks := map[string]int{}
	for _, e := range s.Names {
		if e.ForkOf != "" {
			forks[e.ForkOf]++
		}
	}
	for name, e := range s.Names {
		if e.Name != name {
			return fmt.Errorf("entry %q stored under %q", e.Name, name)
		}
		if e.Forks != forks[name] {
			return fmt.Errorf("entry %q: counts %d forks, %d entries name it", name, e.Forks, forks[name])
		}
		if e.ForkOf != "" {
			if _, ok := s.Names[e.ForkOf]; !ok {
				return fmt.Errorf("entry %q: forked from %q, which is gone", name, e.ForkOf)
			}
			if len(e.Streams) != 1 {
				return fmt.Errorf("fork %q has %d partitions", name, len(e.Streams))
			}
		}
		if e.Deleted {
			if e.Forks == 0 {
				return fmt.Errorf("entry %q: soft-deleted with no fork left", name)
			}
			for _, id := range e.Streams {
				if in, ok := s.Streams[id]; ok && len(in.Ranges) > 0 {
					return fmt.Errorf("entry %q: soft-deleted but stream %d holds %d ranges", name, id, len(in.Ranges))
				}
			}
		}
		for p, id := range e.Streams {
			if _, ok := s.Streams[id]; !ok {
				return fmt.Errorf("entry %q partition %d: no internal stream %d", name, p, id)
			}
		}
	}
	return nil
}
