package meta

import (
	"github.com/picomq/picomq/broker/stream"
)

// Op names a command.
type Op string

// The commands. Each is small and carries every value it needs (timestamps
// included), so that applying it is a pure function of the state.
const (
	OpCreate         Op = "create"
	OpDelete         Op = "delete"
	OpOpen           Op = "open"
	OpClose          Op = "close"
	OpCloseMany      Op = "closeMany"
	OpCommit         Op = "commit"
	OpTrim           Op = "trim"
	OpReplace        Op = "replace"
	OpGroup          Op = "group"
	OpObjectsDeleted Op = "objectsDeleted"
	OpTouch          Op = "touch"
	OpUpdatePolicy   Op = "updatePolicy"
	OpFork           Op = "fork"
	OpCluster        Op = "cluster"
	OpMember         Op = "member"
	OpReplicas       Op = "replicas"
	OpCheckpoint     Op = "checkpoint"
	OpTiered         Op = "tiered"
	OpEvict          Op = "evict"
	OpReplaceMany    Op = "replaceMany"
)

// Command is one entry of the metadata log: Op and the matching field.
type Command struct {
	Op             Op              `json:"op"`
	Create         *Create         `json:"create,omitempty"`
	Delete         *Delete         `json:"delete,omitempty"`
	Open           *Open           `json:"open,omitempty"`
	Close          *Close          `json:"close,omitempty"`
	CloseMany      *CloseMany      `json:"closeMany,omitempty"`
	Commit         *Commit         `json:"commit,omitempty"`
	Trim           *Trim           `json:"trim,omitempty"`
	Replace        *Replace        `json:"replace,omitempty"`
	Group          *GroupOffset    `json:"group,omitempty"`
	ObjectsDeleted *ObjectsDeleted `json:"objectsDeleted,omitempty"`
	Touch          *Touch          `json:"touch,omitempty"`
	UpdatePolicy   *UpdatePolicy   `json:"updatePolicy,omitempty"`
	Fork           *Fork           `json:"fork,omitempty"`
	Cluster        *Cluster        `json:"cluster,omitempty"`
	Member         *MemberChange   `json:"member,omitempty"`
	Replicas       *Replicas       `json:"replicas,omitempty"`
	Checkpoint     *Checkpoint     `json:"checkpoint,omitempty"`
	Tiered         *Tiered         `json:"tiered,omitempty"`
	Evict          *Evict          `json:"evict,omitempty"`
	ReplaceMany    *ReplaceMany    `json:"replaceMany,omitempty"`
}

// Create allocates one internal stream per partition and stores the entry
// under Name — unless Name exists, in which case nothing changes and the
// existing entry is returned: racing creates settle by log order, the loser
// adopting the winner's entry. The caller compares configurations.
type Create struct {
	Name        string             `json:"name"`
	ContentType string             `json:"contentType"`
	Policy      stream.PolicyValue `json:"policy"`
	TTL         int64              `json:"ttl,omitempty"`
	ExpiresAt   int64              `json:"expiresAt,omitempty"`
	Closed      bool               `json:"closed,omitempty"`
	Now         int64              `json:"now"`
	// Initial, when set, are the new stream's first records, written
	// beforehand as frames of Object (Size bytes): a create with a body lands
	// whole or not at all. Partition 0 gets them, from offset 0 on,
	// contiguous. When Name exists, Object is garbage at once.
	Object  uint64  `json:"object,omitempty"`
	Size    int64   `json:"size,omitempty"`
	Initial []Range `json:"initial,omitempty"`
	// Replicas names the members holding a durable copy of Object's file
	// (see Commit.Replicas).
	Replicas []string `json:"replicas,omitempty"`
}

// CreateResult is Create's answer.
type CreateResult struct {
	Entry   *Entry
	Created bool
}

// Delete removes the entry (the name is reusable at once) and its internal
// streams; their objects lose a reference each and become garbage when none
// is left. An entry that live forks were made from is only soft-deleted:
// it refuses every request (StreamGone), its name stays taken and its own
// ranges are released at once — the forks hold references of their own on
// the objects they share —, and it is removed with the last of its forks,
// which may in turn remove its own soft-deleted source (cascade). IfStreams, when set, must equal the entry's internal ids — so that
// an expiry decided on an old incarnation never deletes a new one.
type Delete struct {
	Name      string   `json:"name"`
	IfStreams []uint64 `json:"ifStreams,omitempty"`
}

// Open makes Owner the writer of an internal stream at the next epoch,
// fencing every writer of an older one.
//
// On the ensemble data path (LevelEnsemble) an open also carries its
// recovery, committed with it in one command: Expect is the epoch the
// opener fenced and read the stream at (the open is refused StaleEpoch if
// another open came first, so two recoveries never both commit), Recovered
// the appends of that epoch it adopted past the stream's end — applied as
// that epoch's commits before the epoch is raised —, and Ensemble the
// members that will hold the new epoch's objects. The new epoch starts at
// the end the recovery reached, so everything before it is in the state:
// the next recovery reads only this open's ensemble.
type Open struct {
	Stream    uint64   `json:"stream"`
	Owner     string   `json:"owner"`
	Ensemble  []string `json:"ensemble,omitempty"`
	Expect    *int64   `json:"expect,omitempty"`
	Recovered []Commit `json:"recovered,omitempty"`
}

// OpenResult is Open's answer: the stream as opened.
type OpenResult struct {
	Internal *Internal
}

// Close marks an internal stream closed (not owned) if Epoch is current.
//
// Drained (LevelEnsemble) says the owner closes it with every append it
// acknowledged in the state: its ensemble is forgotten, and the next open
// need read no journal. A close of streams a dead process left open is
// not drained: their tail is in the ensemble's journals only.
type Close struct {
	Stream  uint64 `json:"stream"`
	Epoch   int64  `json:"epoch"`
	Drained bool   `json:"drained,omitempty"`
}

// CloseMany closes many internal streams in one command (a broker shutting
// down or handing its streams off): those whose epoch is no longer the
// given one are skipped, as their new owner holds them.
type CloseMany struct {
	Streams []Close `json:"streams"`
}

// Commit records one object and the appends it holds, each continuing its
// stream at its end under its current epoch, together with the producer and
// Stream-Seq state those appends admit and the group offsets that ride with
// them. Appends are checked in order and independently: one refused does not
// refuse the others, but a later append of the same stream then fails its
// offset check, as it should — its offsets were computed on top of the
// refused one.
type Commit struct {
	Object  uint64        `json:"object,omitempty"`
	Size    int64         `json:"size,omitempty"`
	Appends []Append      `json:"appends"`
	Groups  []GroupOffset `json:"groups,omitempty"`
	Now     int64         `json:"now"`
	// Frames, when set, are the object's bytes after its header: its file
	// is not synced, or not written yet, and this entry is what keeps it
	// durable until it is (see core's inline commits). The state machine
	// ignores them.
	Frames []byte `json:"frames,omitempty"`
	// Replicas names the members (their ids) holding a durable copy of
	// Object's file, the writer's included, once every one of them has
	// synced it. Empty: the broker is alone, or the frames ride in this
	// entry, which every member of the log keeps.
	Replicas []string `json:"replicas,omitempty"`
}

// Append is one stream's part of a Commit. Range is nil for a close-only
// append (Close set, no records).
type Append struct {
	Stream    uint64         `json:"stream"`
	Epoch     int64          `json:"epoch"`
	First     uint64         `json:"first"`
	Range     *Range         `json:"range,omitempty"`
	Producer  *ProducerTuple `json:"producer,omitempty"`
	StreamSeq string         `json:"streamSeq,omitempty"`
	Close     bool           `json:"close,omitempty"`
}

// Checkpoint records, in one command, the group commits an owner has
// already made durable in its journal and acknowledged (see core's
// journal.go): each Commit applies exactly as the command of that name
// would, in order, and one refused changes nothing for the others. The
// log thus holds one command per checkpoint, not one per group commit.
// The commits carry no Frames: their objects are in the journal.
type Checkpoint struct {
	Commits []Commit `json:"commits"`
}

// CheckpointResult holds one CommitResult per Commit.
type CheckpointResult struct {
	Commits []*CommitResult
}

// CommitResult holds one error per Append (nil: accepted) and per group
// offset.
type CommitResult struct {
	Appends []error
	Groups  []error
}

// Trim raises an internal stream's start to Before and drops the ranges
// wholly below it. Before at or below start changes nothing; past end is
// OffsetAhead.
type Trim struct {
	Stream uint64 `json:"stream"`
	Before uint64 `json:"before"`
	// SkipBytes is the record bytes below Before in the range holding
	// Before, measured by the trimmer from the frame (0 at a range edge).
	SkipBytes int64 `json:"skipBytes,omitempty"`
}

// RangeRef names a range by where its frame is.
type RangeRef struct {
	Object uint64 `json:"object"`
	Pos    int64  `json:"pos"`
}

// Replace swaps ranges of an internal stream for rewritten ones (a merge
// into a segment, a compaction), in one step. Every Old range must still be
// present, or nothing changes (RangesChanged). The new ranges live in Object.
type Replace struct {
	Stream uint64     `json:"stream"`
	Old    []RangeRef `json:"old"`
	New    []Range    `json:"new,omitempty"`
	Object uint64     `json:"object,omitempty"`
	Size   int64      `json:"size,omitempty"`
	// Replicas names the members holding a durable copy of Object's file
	// (see Commit.Replicas).
	Replicas []string `json:"replicas,omitempty"`
}

// ReplaceMany applies its Replaces in one command, each exactly as the
// command of that name would, in order; one refused (a trim raced its
// merge) changes nothing for the others. A broker's maintenance pass sends
// all its merges as one: the log holds one command a pass, not one a
// merged stream (LevelReplaceMany).
type ReplaceMany struct {
	Replaces []Replace `json:"replaces"`
}

// ReplaceManyResult holds one error per Replace (nil: applied).
type ReplaceManyResult struct {
	Errs []error
}

// GroupOffset records Next as the offset Group reads next on Stream. Inside a
// Commit, After names the index of the append it rides with (-1: none): when
// that append is refused, so is the offset.
type GroupOffset struct {
	Stream uint64 `json:"stream"`
	Group  string `json:"group"`
	Next   uint64 `json:"next"`
	After  int    `json:"after,omitempty"`
}

// Replicas moves an object's copies (a repair, or a drain): when the
// object's replica set is still Old it becomes New. The copies New names
// and Old lacks are durable before the command is proposed; the members
// Old names and New lacks may delete theirs once it applied (their files
// are orphans then). Any other set, or a collected object, is refused with
// ReplicasChanged: two movers never both win.
type Replicas struct {
	Object uint64   `json:"object"`
	Old    []string `json:"old"`
	New    []string `json:"new"`
}

// Tiered records that object storage holds Object's file under Key: an
// upload whose size and MD5 the bucket confirmed. Proposed only after that
// confirmation, so the log never names a key that is not there. A second
// Tiered of the same key changes nothing; a collected object is refused
// ObjectGone (its key is then an orphan in the bucket, collected by the
// leader's scan), and so is a size that is not the object's.
type Tiered struct {
	Object uint64 `json:"object"`
	Key    string `json:"key"`
	Size   int64  `json:"size"`
	MD5    string `json:"md5"`
}

// Evict lets the members delete their copies of tiered objects: reads of
// them go to object storage from then on. Objects not tiered (or gone)
// are skipped, so a local copy never goes before its upload is recorded.
type Evict struct {
	Objects []uint64 `json:"objects"`
}

// ObjectsDeleted forgets garbage objects whose files are gone.
type ObjectsDeleted struct {
	IDs []uint64 `json:"ids"`
}

// Touch persists streams' last accesses (sliding TTL), lazily: name to Unix
// ns. A value below the stored one changes nothing.
type Touch struct {
	At map[string]int64 `json:"at"`
}

// UpdatePolicy changes a stream's policy; partitions may only grow, each new
// one getting a fresh internal stream.
type UpdatePolicy struct {
	Name   string             `json:"name"`
	Policy stream.PolicyValue `json:"policy"`
}

// Fork creates Name as a fork of Source: a one-partition stream that shares
// Source's offset space and records below At — its internal stream gets
// copies of Source's ranges below At (a range straddling At is cut at At:
// readers filter by a range's Next), each taking a reference on its object,
// so no record is copied — and continues at At with its own appends. Later
// appends to Source are not visible in the fork. Initial, when set, are
// records the fork starts with beyond At (a sub-offset prefix materialized
// from Source's record at At, then a create body), contiguous from At, in
// Object. When Name exists nothing changes and the existing entry is
// returned, as Create does. A fork with neither TTL nor ExpiresAt inherits
// Source's. Producer state and the closed flag start fresh.
type Fork struct {
	Name   string `json:"name"`
	Source string `json:"source"`
	// SourceStreams, when set, must equal Source's internal ids: a fork
	// decided on an incarnation never lands on another.
	SourceStreams []uint64 `json:"sourceStreams,omitempty"`
	At            uint64   `json:"at"`
	// SubOffset is what the client asked inside the record at At; it is
	// kept for comparing configurations, Initial carries its effect.
	SubOffset   int64   `json:"subOffset,omitempty"`
	ContentType string  `json:"contentType"`
	TTL         int64   `json:"ttl,omitempty"`
	ExpiresAt   int64   `json:"expiresAt,omitempty"`
	Closed      bool    `json:"closed,omitempty"`
	Now         int64   `json:"now"`
	Object      uint64  `json:"object,omitempty"`
	Size        int64   `json:"size,omitempty"`
	Initial     []Range `json:"initial,omitempty"`
	// Replicas names the members holding a durable copy of Object's file
	// (see Commit.Replicas).
	Replicas []string `json:"replicas,omitempty"`
}

// Cluster names the cluster this log belongs to, once: the first member
// proposes it right after bootstrapping, and a later Cluster changes
// nothing (ClusterResult says which id holds).
type Cluster struct {
	ID string `json:"id"`
}

// ClusterResult is Cluster's answer: the cluster's id.
type ClusterResult struct {
	ID string
}

// MemberChange records a member of the cluster (a broker incarnation) as it
// joins, as its addresses change, or as it is removed for good. A removed
// member stays in the registry, so that one coming back with its old data
// is recognised and refused; its id is never reused (a broker whose data
// was wiped joins under a new incarnation, hence a new id).
type MemberChange struct {
	Member Member `json:"member"`
	// Now is when the change was made (Unix ns).
	Now int64 `json:"now"`
}
