// Package meta is the broker's metadata state machine: the registry of named
// streams, the internal streams behind their partitions (epoch, owner, start,
// end, the ranges of objects holding their records), consumer-group offsets
// and object reference counts.
//
// It is applied by the Raft log (broker/metalog) and so it is deterministic:
// Apply reads no clock, file or network — every timestamp travels in the
// command — and replaying the log from zero yields the same state. It knows
// nothing of files or HTTP: objects are ids and byte positions.
package meta

import (
	"slices"
	"sort"

	"github.com/picomq/picomq/broker/stream"
)

// Entry is a named stream: the registry's value for a path name.
type Entry struct {
	Name string `json:"name"`
	// Streams holds the internal stream id of every partition, in order.
	Streams     []uint64           `json:"streams"`
	ContentType string             `json:"contentType"`
	Policy      stream.PolicyValue `json:"policy"`
	// TTL is a sliding lifetime in nanoseconds (0: none); ExpiresAt an
	// absolute one in Unix nanoseconds (0: none).
	TTL       int64 `json:"ttl,omitempty"`
	ExpiresAt int64 `json:"expiresAt,omitempty"`
	// CreatedAt and LastAccess are Unix nanoseconds from the commands that
	// set them. LastAccess is persisted lazily by the owner (Touch), so it
	// may trail the owner's in-memory value by the touch interval.
	CreatedAt  int64 `json:"createdAt"`
	LastAccess int64 `json:"lastAccess"`
	// Closed: the stream refuses appends for good; ClosedBy is the producer
	// tuple whose append closed it, so that its retry is acknowledged.
	Closed   bool           `json:"closed,omitempty"`
	ClosedBy *ProducerTuple `json:"closedBy,omitempty"`
	// Producers: idempotent producer state, committed with the data it admits.
	Producers map[string]Producer `json:"producers,omitempty"`
	// LastStreamSeq is the last accepted Stream-Seq (byte-wise ordered).
	LastStreamSeq string `json:"lastStreamSeq,omitempty"`
	// ForkOf names the entry this one was forked from (empty: not a fork),
	// ForkOffset the offset of the source it was forked at and
	// ForkSubOffset what the client asked inside the record there.
	ForkOf        string `json:"forkOf,omitempty"`
	ForkOffset    uint64 `json:"forkOffset,omitempty"`
	ForkSubOffset int64  `json:"forkSubOffset,omitempty"`
	// Forks counts the entries whose ForkOf names this one (soft-deleted
	// ones included): while it is above zero a delete only soft-deletes.
	Forks int `json:"forks,omitempty"`
	// Deleted: soft-deleted, kept only because forks of it live. It refuses
	// every request and holds no range of its own.
	Deleted bool `json:"deleted,omitempty"`
}

// Producer is one idempotent producer's accepted state.
type Producer struct {
	Epoch   int64 `json:"epoch"`
	LastSeq int64 `json:"lastSeq"`
}

// ProducerTuple identifies one producer append.
type ProducerTuple struct {
	ID    string `json:"id"`
	Epoch int64  `json:"epoch"`
	Seq   int64  `json:"seq"`
}

// Internal is an internal stream: one partition's offsets and records.
type Internal struct {
	ID        uint64 `json:"id"`
	Name      string `json:"name"`
	Partition int    `json:"partition"`
	// Epoch is -1 until the stream is first opened and grows by one at every
	// open; a commit under any other epoch is refused, which fences a writer
	// that lost ownership.
	Epoch int64  `json:"epoch"`
	Owner string `json:"owner,omitempty"`
	Open  bool   `json:"open,omitempty"`
	// Ensemble is the members holding the current epoch's objects past
	// End (the ensemble data path; empty when its appends commit through
	// the log): what the next open fences and reads.
	Ensemble []string `json:"ensemble,omitempty"`
	// Start is the first readable offset, End the next one to assign.
	Start uint64 `json:"start"`
	End   uint64 `json:"end"`
	// Ranges hold the records, sorted by First and not overlapping. They may
	// leave holes (compaction) and the first may begin below Start (a trim
	// inside a range): readers filter by offset.
	Ranges []Range `json:"ranges,omitempty"`
	// HeadSkip is the record bytes of the first range below Start (a trim
	// inside a range), so that Bytes counts only what is readable.
	HeadSkip int64 `json:"headSkip,omitempty"`
	// Groups maps a consumer group to the offset it reads next.
	Groups map[string]uint64 `json:"groups,omitempty"`
}

// Range is a run of one internal stream's records stored in one frame of an
// object: offsets [First, Next), possibly with holes left by compaction.
type Range struct {
	First  uint64 `json:"first"`
	Next   uint64 `json:"next"`
	Object uint64 `json:"object"`
	Pos    int64  `json:"pos"`
	Len    int64  `json:"len"`
	// Bytes is the records' key+payload bytes (retention and MaxBytes count
	// these); Count how many records the frame holds.
	Bytes int64 `json:"bytes"`
	Count int64 `json:"count"`
	// MinTime and MaxTime bound the records' append instants (Unix ns):
	// retention by age and seek by time read them without the frame.
	MinTime int64 `json:"minTime"`
	MaxTime int64 `json:"maxTime"`
}

// Object is a committed object file and how many ranges reference it.
type Object struct {
	ID   uint64 `json:"id"`
	Size int64  `json:"size"`
	Refs int    `json:"refs"`
	// Replicas names the members holding a copy of its file (empty: every
	// member of the log holds its frames, or the broker is alone).
	Replicas []string `json:"replicas,omitempty"`
	// Segment: a merge or a compaction wrote it (Replace), for one stream;
	// only segments move to object storage.
	Segment bool `json:"segment,omitempty"`
	// Tier is where object storage holds it, once an upload is confirmed
	// (Tiered). Evicted: the members' copies may be deleted (Evict), and
	// reads go to object storage.
	Tier    *TierCopy `json:"tier,omitempty"`
	Evicted bool      `json:"evicted,omitempty"`
}

// TierCopy is an object's copy in object storage.
type TierCopy struct {
	Key  string `json:"key"`
	Size int64  `json:"size"`
	// MD5 (hex) is the content checksum the upload was confirmed with.
	MD5 string `json:"md5"`
}

// Member is one broker incarnation in the cluster. Its ID — the node's name
// and the incarnation written in its data directory when it was first
// formatted — is its id in the metadata log's configuration and in object
// replica sets.
type Member struct {
	ID          string `json:"id"`
	Node        string `json:"node"`
	Incarnation string `json:"incarnation"`
	// Number is the member's number, given by the state machine when it is
	// first recorded and never reused: the member's object ids start at
	// Number<<ObjectIDBits, so that members allocate ids without asking.
	Number int `json:"number"`
	// PeerAddr is where the member's peer port is dialled (a stable name,
	// resolved at each dial); ClientAddr where its client API is.
	PeerAddr   string `json:"peerAddr"`
	ClientAddr string `json:"clientAddr,omitempty"`
	// Joined is when the member was first recorded, Removed when it was
	// removed for good (0: it is a member). Unix ns.
	Joined  int64 `json:"joined"`
	Removed int64 `json:"removed,omitempty"`
	// Level is the command level its build applies (see Level), as it
	// last recorded itself; 0 for a build from before levels (LevelBase).
	Level int `json:"level,omitempty"`
}

// Command levels: what a build's state machine can apply. A command a
// current member's level lacks is never proposed — that member would
// refuse it where the others apply it, and the states would part — so a
// rolling upgrade uses a new command only once every member runs a build
// that knows it (each records its level when it starts).
const (
	// LevelBase: every command up to the replica sets' moves.
	LevelBase = 1
	// LevelReplicas: OpReplicas (repair and drain move copies).
	LevelReplicas = 2
	// LevelCheckpoint: OpCheckpoint (owners commit appends in their
	// journals and checkpoint them in batches).
	LevelCheckpoint = 3
	// LevelEnsemble: an Open carrying its ensemble and its recovery
	// (Open.Ensemble, Expect, Recovered), which a build before it would
	// apply as a plain open.
	LevelEnsemble = 4
	// LevelTier: OpTiered and OpEvict (segments in object storage).
	LevelTier = 5
	// LevelReplaceMany: OpReplaceMany (a maintenance pass's merges in one
	// command).
	LevelReplaceMany = 6
	// Level is this build's.
	Level = LevelReplaceMany
)

// EffectiveLevel is m's level, a build from before levels counting as
// LevelBase.
func (m *Member) EffectiveLevel() int { return max(m.Level, LevelBase) }

// State is everything the metadata log holds.
type State struct {
	// NextStreamID is the next internal stream id to allocate.
	NextStreamID uint64 `json:"nextStreamID"`
	// MaxObjectID is the highest object id any command ever named, so a
	// restarted store never reuses one the log may still mention.
	MaxObjectID uint64               `json:"maxObjectID"`
	Names       map[string]*Entry    `json:"names"`
	Streams     map[uint64]*Internal `json:"streams"`
	Objects     map[uint64]*Object   `json:"objects"`
	// Garbage holds objects no range references any more: their files may be
	// deleted, after which ObjectsDeleted forgets them.
	Garbage map[uint64]bool `json:"garbage"`
	// TieredGarbage holds, by id, the keys of garbage objects that object
	// storage holds: the leader deletes each key before ObjectsDeleted
	// forgets the object.
	TieredGarbage map[uint64]string `json:"tieredGarbage,omitempty"`
	// ClusterID names the cluster ("" on a lone broker's log), Members its
	// members, removed ones included, by id.
	ClusterID string             `json:"clusterID,omitempty"`
	Members   map[string]*Member `json:"members,omitempty"`
	// LastMember is the number the latest member recorded got.
	LastMember int `json:"lastMember,omitempty"`
}

// ObjectIDBits is how many low bits of an object id a member counts in:
// member n allocates its ids from n<<ObjectIDBits on (a lone broker is
// member 0).
const ObjectIDBits = 48

// MaxMembers bounds the members a cluster records over its life.
const MaxMembers = 1<<(64-ObjectIDBits) - 1

// NewState returns an empty state.
func NewState() *State {
	return &State{
		NextStreamID: 1,
		Names:        map[string]*Entry{},
		Streams:      map[uint64]*Internal{},
		Objects:      map[uint64]*Object{},
		Garbage:      map[uint64]bool{},
		Members:      map[string]*Member{},
	}
}

// Bytes returns the record bytes an internal stream holds at or above Start.
func (in *Internal) Bytes() int64 {
	n := -in.HeadSkip
	for _, r := range in.Ranges {
		n += r.Bytes
	}
	return n
}

// RangeAt returns the index of the first range whose Next is above off, or
// len(Ranges): the range a read from off starts in.
func (in *Internal) RangeAt(off uint64) int {
	return sort.Search(len(in.Ranges), func(i int) bool { return in.Ranges[i].Next > off })
}

// ref and unref keep object reference counts; an object left with none is
// garbage.
func (s *State) ref(id uint64) {
	if o, ok := s.Objects[id]; ok {
		o.Refs++
	}
}

func (s *State) unref(id uint64) {
	o, ok := s.Objects[id]
	if !ok {
		return
	}
	o.Refs--
	if o.Refs <= 0 {
		s.toGarbage(o)
	}
}

// addObject registers a new object with no references yet, its file held
// by replicas.
func (s *State) addObject(id uint64, size int64, replicas []string) {
	if id > s.MaxObjectID {
		s.MaxObjectID = id
	}
	if _, ok := s.Objects[id]; !ok {
		s.Objects[id] = &Object{ID: id, Size: size, Replicas: slices.Clone(replicas)}
	}
}

// settleObject sends an object that ended up with no reference (every range
// of its command was refused) straight to garbage.
func (s *State) settleObject(id uint64) {
	if o, ok := s.Objects[id]; ok && o.Refs == 0 {
		s.toGarbage(o)
	}
}

// toGarbage forgets a live object and marks it garbage, keeping its key
// in object storage for deletion.
func (s *State) toGarbage(o *Object) {
	delete(s.Objects, o.ID)
	s.Garbage[o.ID] = true
	if o.Tier != nil {
		if s.TieredGarbage == nil {
			s.TieredGarbage = map[uint64]string{}
		}
		s.TieredGarbage[o.ID] = o.Tier.Key
	}
}

// dropRanges removes the ranges [i, j) of in, releasing their objects.
func (s *State) dropRanges(in *Internal, i, j int) {
	for _, r := range in.Ranges[i:j] {
		s.unref(r.Object)
	}
	in.Ranges = append(in.Ranges[:i], in.Ranges[j:]...)
}

// Clone returns a deep copy (snapshots and tests).
func (s *State) Clone() *State {
	c := &State{
		NextStreamID: s.NextStreamID,
		MaxObjectID:  s.MaxObjectID,
		Names:        make(map[string]*Entry, len(s.Names)),
		Streams:      make(map[uint64]*Internal, len(s.Streams)),
		Objects:      make(map[uint64]*Object, len(s.Objects)),
		Garbage:      make(map[uint64]bool, len(s.Garbage)),
		ClusterID:    s.ClusterID,
		LastMember:   s.LastMember,
		Members:      make(map[string]*Member, len(s.Members)),
	}
	for k, e := range s.Names {
		c.Names[k] = e.Clone()
	}
	for k, in := range s.Streams {
		c.Streams[k] = in.Clone()
	}
	for k, o := range s.Objects {
		oc := *o
		oc.Replicas = slices.Clone(o.Replicas)
		if o.Tier != nil {
			t := *o.Tier
			oc.Tier = &t
		}
		c.Objects[k] = &oc
	}
	for k, m := range s.Members {
		mc := *m
		c.Members[k] = &mc
	}
	for k := range s.Garbage {
		c.Garbage[k] = true
	}
	if s.TieredGarbage != nil {
		c.TieredGarbage = make(map[uint64]string, len(s.TieredGarbage))
		for k, v := range s.TieredGarbage {
			c.TieredGarbage[k] = v
		}
	}
	return c
}

// Clone returns a deep copy of the entry.
func (e *Entry) Clone() *Entry {
	c := *e
	c.Streams = append([]uint64(nil), e.Streams...)
	if e.ClosedBy != nil {
		t := *e.ClosedBy
		c.ClosedBy = &t
	}
	if e.Producers != nil {
		c.Producers = make(map[string]Producer, len(e.Producers))
		for k, v := range e.Producers {
			c.Producers[k] = v
		}
	}
	return &c
}

// Clone returns a deep copy of the internal stream.
func (in *Internal) Clone() *Internal {
	c := *in
	c.Ranges = append([]Range(nil), in.Ranges...)
	c.Ensemble = slices.Clone(in.Ensemble)
	if in.Groups != nil {
		c.Groups = make(map[string]uint64, len(in.Groups))
		for k, v := range in.Groups {
			c.Groups[k] = v
		}
	}
	return &c
}
