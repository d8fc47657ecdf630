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
	OpCommit         Op = "commit"
	OpTrim           Op = "trim"
	OpReplace        Op = "replace"
	OpGroup          Op = "group"
	OpObjectsDeleted Op = "objectsDeleted"
	OpTouch          Op = "touch"
	OpUpdatePolicy   Op = "updatePolicy"
)

// Command is one entry of the metadata log: Op and the matching field.
type Command struct {
	Op             Op              `json:"op"`
	Create         *Create         `json:"create,omitempty"`
	Delete         *Delete         `json:"delete,omitempty"`
	Open           *Open           `json:"open,omitempty"`
	Close          *Close          `json:"close,omitempty"`
	Commit         *Commit         `json:"commit,omitempty"`
	Trim           *Trim           `json:"trim,omitempty"`
	Replace        *Replace        `json:"replace,omitempty"`
	Group          *GroupOffset    `json:"group,omitempty"`
	ObjectsDeleted *ObjectsDeleted `json:"objectsDeleted,omitempty"`
	Touch          *Touch          `json:"touch,omitempty"`
	UpdatePolicy   *UpdatePolicy   `json:"updatePolicy,omitempty"`
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
}

// CreateResult is Create's answer.
type CreateResult struct {
	Entry   *Entry
	Created bool
}

// Delete removes the entry (the name is reusable at once) and its internal
// streams; their objects lose a reference each and become garbage when none
// is left. IfStreams, when set, must equal the entry's internal ids — so that
// an expiry decided on an old incarnation never deletes a new one.
type Delete struct {
	Name      string   `json:"name"`
	IfStreams []uint64 `json:"ifStreams,omitempty"`
}

// Open makes Owner the writer of an internal stream at the next epoch,
// fencing every writer of an older one.
type Open struct {
	Stream uint64 `json:"stream"`
	Owner  string `json:"owner"`
}

// OpenResult is Open's answer: the stream as opened.
type OpenResult struct {
	Internal *Internal
}

// Close marks an internal stream closed (not owned) if Epoch is current.
type Close struct {
	Stream uint64 `json:"stream"`
	Epoch  int64  `json:"epoch"`
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

// ObjectsDeleted forgets garbage objects whose files are gone.
type ObjectsDeleted struct {
	IDs []uint64 `json:"ids"`
}

// Touch persists a stream's last access (sliding TTL), lazily.
type Touch struct {
	Names []string `json:"names"`
	At    int64    `json:"at"`
}

// UpdatePolicy changes a stream's policy; partitions may only grow, each new
// one getting a fresh internal stream.
type UpdatePolicy struct {
	Name   string             `json:"name"`
	Policy stream.PolicyValue `json:"policy"`
}
