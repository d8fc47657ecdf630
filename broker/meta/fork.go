package meta

import (
	"slices"

	"github.com/picomq/picomq/broker/stream"
)

// fork applies a Fork: see the command.
func (s *State) fork(c *Fork) any {
	if e, ok := s.Names[c.Name]; ok {
		if c.Object != 0 {
			s.addObject(c.Object, c.Size, c.Replicas)
			s.settleObject(c.Object)
		}
		return &CreateResult{Entry: e.Clone()}
	}
	src, ok := s.Names[c.Source]
	if !ok {
		return StreamNotFound.With("name", c.Source)
	}
	if c.SourceStreams != nil && !slices.Equal(c.SourceStreams, src.Streams) {
		return StreamNotFound.With("name", c.Source, "reason", "recreated since")
	}
	if src.Deleted {
		return StreamGone.With("name", c.Source)
	}
	if len(src.Streams) != 1 {
		return stream.StreamMisconfigured.With("field", "Partitions", "value", len(src.Streams), "reason", "only a one-partition stream can be forked")
	}
	if c.Name == "" {
		return BadCommand.With("op", "fork", "reason", "no name")
	}
	in := s.Streams[src.Streams[0]]
	if c.At > in.End {
		return stream.OffsetAhead.With("partition", 0, "offset", c.At, "next", in.End)
	}
	if c.At < in.Start {
		return stream.OffsetTrimmed.With("partition", 0, "offset", c.At, "first", in.Start)
	}
	if err := checkInitial(c.Initial, c.At, c.Object); err != nil {
		return err
	}

	e := &Entry{
		Name: c.Name, ContentType: c.ContentType, Policy: src.Policy,
		TTL: c.TTL, ExpiresAt: c.ExpiresAt, CreatedAt: c.Now, LastAccess: c.Now,
		Closed: c.Closed, ForkOf: c.Source, ForkOffset: c.At, ForkSubOffset: c.SubOffset,
	}
	if c.TTL == 0 && c.ExpiresAt == 0 {
		e.TTL, e.ExpiresAt = src.TTL, src.ExpiresAt
	}
	id := s.newInternal(c.Name, 0)
	e.Streams = []uint64{id}
	fin := s.Streams[id]
	fin.Start, fin.End = in.Start, c.At
	// Share every range holding records in [Start, At): a reference each,
	// the one straddling At cut there.
	for _, r := range in.Ranges {
		if r.First >= c.At {
			break
		}
		r.Next = min(r.Next, c.At)
		if r.Next <= fin.Start {
			continue
		}
		fin.Ranges = append(fin.Ranges, r)
		s.ref(r.Object)
	}
	if len(fin.Ranges) > 0 && fin.Ranges[0].First < fin.Start {
		// Source's first range, straddling Start: what Start hides of it
		// is hidden in the fork too.
		fin.HeadSkip = in.HeadSkip
	}
	s.Names[c.Name] = e
	src.Forks++
	s.addInitial(fin, c.Object, c.Size, c.Replicas, c.Initial)
	return &CreateResult{Entry: e.Clone(), Created: true}
}

// checkInitial checks a create's or a fork's first records: contiguous
// ranges from first on, each non-empty and in obj.
func checkInitial(rs []Range, first uint64, obj uint64) error {
	next := first
	for _, r := range rs {
		if r.First != next || r.Next <= r.First || r.Object != obj || obj == 0 {
			return BadCommand.With("reason", "initial ranges not contiguous from the stream's end, empty, or in another object", "first", r.First, "expected", next)
		}
		next = r.Next
	}
	return nil
}

// addInitial registers obj and appends the checked initial ranges to in.
func (s *State) addInitial(in *Internal, obj uint64, size int64, replicas []string, rs []Range) {
	if obj == 0 {
		return
	}
	s.addObject(obj, size, replicas)
	for _, r := range rs {
		in.Ranges = append(in.Ranges, r)
		in.End = r.Next
		s.ref(r.Object)
	}
	s.settleObject(obj)
}

// softDelete marks an entry with live forks deleted and releases its own
// ranges: the forks keep references of their own on what they share.
func (s *State) softDelete(e *Entry) {
	e.Deleted = true
	for _, id := range e.Streams {
		if in, ok := s.Streams[id]; ok {
			s.dropRanges(in, 0, len(in.Ranges))
			in.Start = in.End
			in.HeadSkip = 0
		}
	}
}

// remove deletes an entry and its internal streams for good, then releases
// its source: a soft-deleted source left with no fork goes too, and so on
// up the chain.
func (s *State) remove(e *Entry) {
	for {
		for _, id := range e.Streams {
			if in, ok := s.Streams[id]; ok {
				s.dropRanges(in, 0, len(in.Ranges))
				delete(s.Streams, id)
			}
		}
		delete(s.Names, e.Name)
		src, ok := s.Names[e.ForkOf]
		if e.ForkOf == "" || !ok {
			return
		}
		src.Forks--
		if !src.Deleted || src.Forks > 0 {
			return
		}
		e = src
	}
}
