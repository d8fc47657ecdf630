package meta

import (
	"slices"
	"sort"

	"github.com/picomq/picomq/broker/stream"
)

// Apply applies one command and returns its result: a *CreateResult,
// *OpenResult, *CommitResult, *Entry, nil, or an error. A refused command
// changes nothing.
func (s *State) Apply(c *Command) any {
	switch c.Op {
	case OpCreate:
		if c.Create != nil {
			return s.create(c.Create)
		}
	case OpDelete:
		if c.Delete != nil {
			return s.delete(c.Delete)
		}
	case OpOpen:
		if c.Open != nil {
			return s.open(c.Open)
		}
	case OpClose:
		if c.Close != nil {
			return s.close(c.Close)
		}
	case OpCloseMany:
		if c.CloseMany != nil {
			for i := range c.CloseMany.Streams {
				s.close(&c.CloseMany.Streams[i]) // stale or gone: skipped
			}
			return nil
		}
	case OpCommit:
		if c.Commit != nil {
			return s.commit(c.Commit)
		}
	case OpTrim:
		if c.Trim != nil {
			return s.trim(c.Trim)
		}
	case OpReplace:
		if c.Replace != nil {
			return s.replace(c.Replace)
		}
	case OpReplaceMany:
		if c.ReplaceMany != nil {
			res := &ReplaceManyResult{Errs: make([]error, len(c.ReplaceMany.Replaces))}
			for i := range c.ReplaceMany.Replaces {
				res.Errs[i], _ = s.replace(&c.ReplaceMany.Replaces[i]).(error)
			}
			return res
		}
	case OpGroup:
		if c.Group != nil {
			return s.group(c.Group)
		}
	case OpObjectsDeleted:
		if c.ObjectsDeleted != nil {
			for _, id := range c.ObjectsDeleted.IDs {
				delete(s.Garbage, id)
				delete(s.TieredGarbage, id)
			}
			return nil
		}
	case OpTiered:
		if c.Tiered != nil {
			return s.tiered(c.Tiered)
		}
	case OpEvict:
		if c.Evict != nil {
			for _, id := range c.Evict.Objects {
				if o, ok := s.Objects[id]; ok && o.Tier != nil {
					o.Evicted = true
				}
			}
			return nil
		}
	case OpTouch:
		if c.Touch != nil {
			for n, at := range c.Touch.At {
				if e, ok := s.Names[n]; ok && at > e.LastAccess {
					e.LastAccess = at
				}
			}
			return nil
		}
	case OpUpdatePolicy:
		if c.UpdatePolicy != nil {
			return s.updatePolicy(c.UpdatePolicy)
		}
	case OpFork:
		if c.Fork != nil {
			return s.fork(c.Fork)
		}
	case OpCluster:
		if c.Cluster != nil {
			if s.ClusterID == "" {
				s.ClusterID = c.Cluster.ID
			}
			return &ClusterResult{ID: s.ClusterID}
		}
	case OpMember:
		if c.Member != nil {
			return s.member(c.Member)
		}
	case OpReplicas:
		if c.Replicas != nil {
			return s.replicas(c.Replicas)
		}
	case OpCheckpoint:
		if c.Checkpoint != nil {
			res := &CheckpointResult{Commits: make([]*CommitResult, len(c.Checkpoint.Commits))}
			for i := range c.Checkpoint.Commits {
				res.Commits[i], _ = s.commit(&c.Checkpoint.Commits[i]).(*CommitResult)
			}
			return res
		}
	}
	return BadCommand.With("op", string(c.Op), "reason", "unknown op or missing body")
}

func (s *State) create(c *Create) any {
	if e, ok := s.Names[c.Name]; ok {
		if c.Object != 0 {
			s.addObject(c.Object, c.Size, c.Replicas)
			s.settleObject(c.Object)
		}
		return &CreateResult{Entry: e.Clone()}
	}
	if err := c.Policy.Validate(); err != nil {
		return err
	}
	p := c.Policy.Normalized()
	if err := checkInitial(c.Initial, 0, c.Object); err != nil {
		return err
	}
	e := &Entry{
		Name: c.Name, ContentType: c.ContentType, Policy: c.Policy,
		TTL: c.TTL, ExpiresAt: c.ExpiresAt, CreatedAt: c.Now, LastAccess: c.Now,
		Closed: c.Closed,
	}
	for i := 0; i < p.Partitions; i++ {
		e.Streams = append(e.Streams, s.newInternal(c.Name, i))
	}
	s.Names[c.Name] = e
	s.addInitial(s.Streams[e.Streams[0]], c.Object, c.Size, c.Replicas, c.Initial)
	return &CreateResult{Entry: e.Clone(), Created: true}
}

func (s *State) newInternal(name string, partition int) uint64 {
	id := s.NextStreamID
	s.NextStreamID++
	s.Streams[id] = &Internal{ID: id, Name: name, Partition: partition, Epoch: -1}
	return id
}

func (s *State) delete(c *Delete) any {
	e, ok := s.Names[c.Name]
	if !ok {
		return StreamNotFound.With("name", c.Name)
	}
	if c.IfStreams != nil && !slices.Equal(c.IfStreams, e.Streams) {
		return StreamNotFound.With("name", c.Name, "reason", "recreated since")
	}
	if e.Deleted {
		return StreamGone.With("name", c.Name, "forks", e.Forks)
	}
	if e.Forks > 0 {
		s.softDelete(e)
		return e.Clone()
	}
	s.remove(e)
	return e
}

func (s *State) open(c *Open) any {
	in, ok := s.Streams[c.Stream]
	if !ok {
		return StreamNotFound.With("stream", c.Stream)
	}
	if c.Expect != nil && *c.Expect != in.Epoch {
		return StaleEpoch.With("stream", c.Stream, "epoch", *c.Expect, "current", in.Epoch)
	}
	// The recovery's appends are the fenced epoch's: each must continue
	// the stream at that epoch, as its owner's checkpoint would have.
	for i := range c.Recovered {
		rc := &c.Recovered[i]
		for j := range rc.Appends {
			if a := &rc.Appends[j]; a.Stream != c.Stream || a.Epoch != in.Epoch {
				return BadCommand.With("op", "open", "reason", "a recovered append of another stream or epoch", "stream", a.Stream, "epoch", a.Epoch)
			}
		}
	}
	for i := range c.Recovered {
		res, _ := s.commit(&c.Recovered[i]).(*CommitResult)
		if res == nil {
			return BadCommand.With("op", "open", "reason", "no result for a recovered commit")
		}
		for _, err := range res.Appends {
			if err != nil {
				// Checked by the opener against this same state: a
				// refusal means the copies contradict the log. The
				// appends before it stand (as a checkpoint's would); the
				// epoch is not raised, so the opener learns and retries.
				return err
			}
		}
	}
	in.Epoch++
	in.Owner = c.Owner
	in.Open = true
	in.Ensemble = slices.Clone(c.Ensemble)
	return &OpenResult{Internal: in.Clone()}
}

func (s *State) close(c *Close) any {
	in, ok := s.Streams[c.Stream]
	if !ok {
		return StreamNotFound.With("stream", c.Stream)
	}
	if in.Epoch != c.Epoch {
		return StaleEpoch.With("stream", c.Stream, "epoch", c.Epoch, "current", in.Epoch)
	}
	in.Open = false
	in.Owner = ""
	if c.Drained {
		in.Ensemble = nil
	}
	return nil
}

func (s *State) commit(c *Commit) any {
	if c.Object != 0 {
		s.addObject(c.Object, c.Size, c.Replicas)
	}
	res := &CommitResult{Appends: make([]error, len(c.Appends)), Groups: make([]error, len(c.Groups))}
	for i := range c.Appends {
		// A group offset riding with this append is checked first, so that
		// either both land or neither does.
		var err error
		for j := range c.Groups {
			if g := &c.Groups[j]; g.After == i && err == nil {
				err = s.checkGroup(g, &c.Appends[i])
			}
		}
		if err == nil {
			err = s.commitAppend(c, &c.Appends[i])
		}
		res.Appends[i] = err
		for j := range c.Groups {
			if g := &c.Groups[j]; g.After == i {
				res.Groups[j] = err
				if err == nil {
					s.setGroup(g)
				}
			}
		}
	}
	for j := range c.Groups {
		if g := &c.Groups[j]; g.After < 0 || g.After >= len(c.Appends) {
			if err, _ := s.group(g).(error); err != nil {
				res.Groups[j] = err
			}
		}
	}
	if c.Object != 0 {
		s.settleObject(c.Object)
	}
	return res
}

func (s *State) commitAppend(c *Commit, a *Append) error {
	in, ok := s.Streams[a.Stream]
	if !ok {
		return StreamNotFound.With("stream", a.Stream)
	}
	e, ok := s.Names[in.Name]
	if !ok {
		return StreamNotFound.With("stream", a.Stream, "name", in.Name)
	}
	if e.Deleted {
		return StreamGone.With("stream", a.Stream, "name", in.Name)
	}
	if !in.Open || a.Epoch != in.Epoch {
		return StaleEpoch.With("stream", a.Stream, "epoch", a.Epoch, "current", in.Epoch)
	}
	if a.First != in.End {
		return OffsetMismatch.With("stream", a.Stream, "first", a.First, "end", in.End)
	}
	if e.Closed {
		return StreamClosed.With("name", e.Name, "end", in.End)
	}
	if a.Range != nil && (a.Range.First != a.First || a.Range.Next <= a.Range.First || a.Range.Object != c.Object) {
		return BadCommand.With("stream", a.Stream, "reason", "range does not start at first, is empty, or names another object")
	}
	if a.Producer != nil {
		if err := checkProducer(e, a.Producer); err != nil {
			return err
		}
	}
	if a.StreamSeq != "" && a.StreamSeq <= e.LastStreamSeq {
		return StreamSeqOrder.With("name", e.Name, "last", e.LastStreamSeq, "received", a.StreamSeq)
	}

	// Every check passed: apply.
	if a.Range != nil {
		in.Ranges = append(in.Ranges, *a.Range)
		in.End = a.Range.Next
		s.ref(a.Range.Object)
	}
	if a.Producer != nil {
		if e.Producers == nil {
			e.Producers = map[string]Producer{}
		}
		e.Producers[a.Producer.ID] = Producer{Epoch: a.Producer.Epoch, LastSeq: a.Producer.Seq}
	}
	if a.StreamSeq != "" {
		e.LastStreamSeq = a.StreamSeq
	}
	if a.Close {
		e.Closed = true
		if a.Producer != nil {
			t := *a.Producer
			e.ClosedBy = &t
		}
	}
	if c.Now > e.LastAccess {
		e.LastAccess = c.Now
	}
	return nil
}

// checkProducer admits the next append of an idempotent producer: the
// next sequence at its epoch, or sequence 0 at a new, higher epoch.
// Duplicates never reach the log: the owner acknowledges them itself.
func checkProducer(e *Entry, t *ProducerTuple) error {
	p, known := e.Producers[t.ID]
	switch {
	case !known:
		if t.Seq != 0 {
			return ProducerSeqGap.With("producer", t.ID, "expected", 0, "received", t.Seq)
		}
	case t.Epoch > p.Epoch:
		if t.Seq != 0 {
			return ProducerEpochSeq.With("producer", t.ID, "epoch", t.Epoch, "seq", t.Seq)
		}
	case t.Epoch < p.Epoch:
		return ProducerFenced.With("producer", t.ID, "epoch", t.Epoch, "current", p.Epoch)
	case t.Seq != p.LastSeq+1:
		return ProducerSeqGap.With("producer", t.ID, "expected", p.LastSeq+1, "received", t.Seq)
	}
	return nil
}

func (s *State) trim(c *Trim) any {
	in, ok := s.Streams[c.Stream]
	if !ok {
		return StreamNotFound.With("stream", c.Stream)
	}
	if c.Before > in.End {
		return stream.OffsetAhead.With("partition", in.Partition, "offset", c.Before, "next", in.End)
	}
	if c.Before <= in.Start {
		return nil
	}
	in.Start = c.Before
	// Drop the ranges wholly below the new start; one that straddles it
	// stays, and readers skip its records below Start.
	s.dropRanges(in, 0, in.RangeAt(in.Start))
	in.HeadSkip = 0
	if len(in.Ranges) > 0 && in.Ranges[0].First < in.Start {
		in.HeadSkip = c.SkipBytes
	}
	return nil
}

func (s *State) replace(c *Replace) any {
	in, ok := s.Streams[c.Stream]
	if !ok {
		return StreamNotFound.With("stream", c.Stream)
	}
	drop := make(map[int]bool, len(c.Old))
	at := make(map[RangeRef]int, len(in.Ranges))
	for i, r := range in.Ranges {
		at[RangeRef{Object: r.Object, Pos: r.Pos}] = i
	}
	for _, ref := range c.Old {
		i, ok := at[ref]
		if !ok {
			i = -1
		}
		if i < 0 {
			return RangesChanged.With("stream", c.Stream, "object", ref.Object, "pos", ref.Pos)
		}
		if drop[i] {
			return BadCommand.With("stream", c.Stream, "reason", "a range named twice")
		}
		drop[i] = true
	}
	// Build the new list aside and check it before touching the state, so a
	// rewrite that would overlap its neighbours changes nothing.
	var kept []Range
	for i, r := range in.Ranges {
		if !drop[i] {
			kept = append(kept, r)
		}
	}
	for _, r := range c.New {
		if r.Object != c.Object || r.Next <= r.First || r.Next > in.End || r.Next <= in.Start {
			return BadCommand.With("stream", c.Stream, "reason", "new range empty, outside [start, end), or in another object")
		}
		at := sort.Search(len(kept), func(i int) bool { return kept[i].First >= r.First })
		kept = slices.Insert(kept, at, r)
	}
	for i := 1; i < len(kept); i++ {
		if kept[i].First < kept[i-1].Next {
			return BadCommand.With("stream", c.Stream, "reason", "new ranges overlap kept ones", "first", kept[i].First)
		}
	}
	if c.Object != 0 {
		s.addObject(c.Object, c.Size, c.Replicas)
		s.Objects[c.Object].Segment = true
	}
	for _, r := range c.New {
		s.ref(r.Object)
	}
	for i := range drop {
		s.unref(in.Ranges[i].Object)
	}
	if drop[0] {
		in.HeadSkip = 0 // rewrites keep no record below Start
	}
	in.Ranges = kept
	if c.Object != 0 {
		s.settleObject(c.Object)
	}
	return nil
}

func (s *State) group(g *GroupOffset) any {
	if err := s.checkGroup(g, nil); err != nil {
		return err
	}
	s.setGroup(g)
	return nil
}

// checkGroup checks a group offset; with, when set, is the append it rides
// with, whose records count as committed when both are on one stream.
func (s *State) checkGroup(g *GroupOffset, with *Append) error {
	in, ok := s.Streams[g.Stream]
	if !ok {
		return StreamNotFound.With("stream", g.Stream)
	}
	if g.Group == "" {
		return stream.StreamMisconfigured.With("field", "group")
	}
	end := in.End
	if with != nil && with.Stream == g.Stream && with.Range != nil {
		end = with.Range.Next
	}
	if g.Next > end {
		return stream.OffsetAhead.With("partition", in.Partition, "offset", g.Next, "next", end)
	}
	return nil
}

func (s *State) setGroup(g *GroupOffset) {
	in := s.Streams[g.Stream]
	if in.Groups == nil {
		in.Groups = map[string]uint64{}
	}
	in.Groups[g.Group] = g.Next
}

func (s *State) updatePolicy(c *UpdatePolicy) any {
	e, ok := s.Names[c.Name]
	if !ok {
		return StreamNotFound.With("name", c.Name)
	}
	if e.Deleted {
		return StreamGone.With("name", c.Name)
	}
	if err := c.Policy.Validate(); err != nil {
		return err
	}
	want := c.Policy.Normalized().Partitions
	if want < len(e.Streams) {
		return PartitionsShrink.With("name", c.Name, "partitions", len(e.Streams), "requested", want)
	}
	if want > 1 && (e.ForkOf != "" || e.Forks > 0) {
		// Forks share one offset space with their source: one partition.
		return stream.StreamMisconfigured.With("field", "Partitions", "value", want, "reason", "a fork, or a stream with forks, has one partition")
	}
	for i := len(e.Streams); i < want; i++ {
		e.Streams = append(e.Streams, s.newInternal(e.Name, i))
	}
	e.Policy = c.Policy
	return e.Clone()
}

// member records a member change and answers the member as recorded (its
// number given on its first change). A removed member stays removed: a
// change for it refuses (MemberRemoved), whatever it asks.
func (s *State) member(c *MemberChange) any {
	m := c.Member
	if m.ID == "" || m.Node == "" {
		return BadCommand.With("op", string(OpMember), "reason", "a member needs an id and a node")
	}
	cur, ok := s.Members[m.ID]
	if ok && cur.Removed != 0 {
		return MemberRemoved.With("member", m.ID, "node", m.Node)
	}
	if ok {
		m.Joined, m.Number = cur.Joined, cur.Number
	} else {
		if s.LastMember >= MaxMembers {
			return BadCommand.With("op", string(OpMember), "reason", "member numbers exhausted", "members", s.LastMember)
		}
		s.LastMember++
		m.Joined, m.Number = c.Now, s.LastMember
	}
	if m.Removed != 0 {
		m.Removed = c.Now
	}
	s.Members[m.ID] = &m
	out := m
	return &out
}

func (s *State) replicas(c *Replicas) any {
	if len(c.New) == 0 {
		return BadCommand.With("op", string(OpReplicas), "reason", "an object's new replica set is empty", "object", c.Object)
	}
	o, ok := s.Objects[c.Object]
	if !ok {
		return ReplicasChanged.With("object", c.Object, "want", c.Old)
	}
	if !slices.Equal(o.Replicas, c.Old) {
		return ReplicasChanged.With("object", c.Object, "want", c.Old, "have", o.Replicas)
	}
	o.Replicas = slices.Clone(c.New)
	return nil
}

func (s *State) tiered(c *Tiered) any {
	o, ok := s.Objects[c.Object]
	if !ok {
		return ObjectGone.With("object", c.Object, "key", c.Key)
	}
	if c.Key == "" || c.Size != o.Size {
		return BadCommand.With("object", c.Object, "reason", "empty key, or a size that is not the object's", "size", c.Size, "objectSize", o.Size)
	}
	if o.Tier != nil {
		if o.Tier.Key != c.Key {
			return BadCommand.With("object", c.Object, "reason", "tiered under another key", "key", c.Key, "has", o.Tier.Key)
		}
		return nil
	}
	o.Tier = &TierCopy{Key: c.Key, Size: c.Size, MD5: c.MD5}
	return nil
}
