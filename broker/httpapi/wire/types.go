package wire

import (
	"time"

	"github.com/picomq/picomq/broker/stream"
)

// Policy is stream.PolicyValue on the wire: durations as Go duration
// strings ("90s", "1h30m"), sizes in bytes. An empty duration is zero.
type Policy struct {
	Partitions     int    `json:"partitions"`
	MaxRecordBytes int    `json:"maxRecordBytes"`
	RetainFor      string `json:"retainFor,omitempty"`
	RetainBytes    int64  `json:"retainBytes"`
	MaxBytes       int64  `json:"maxBytes"`
	BlockTimeout   string `json:"blockTimeout,omitempty"`
	SegmentBytes   int64  `json:"segmentBytes"`
	CompactAfter   string `json:"compactAfter,omitempty"`
	// Tiering is "Enabled", "Disabled" or empty (follow the cluster).
	Tiering          string `json:"tiering,omitempty"`
	LocalRetainFor   string `json:"localRetainFor,omitempty"`
	LocalRetainBytes int64  `json:"localRetainBytes,omitempty"`
}

// PolicyOf writes p for the wire; zero durations are left out.
func PolicyOf(p stream.PolicyValue) Policy {
	return Policy{
		Partitions: p.Partitions, MaxRecordBytes: p.MaxRecordBytes, RetainFor: durationString(p.RetainFor),
		RetainBytes: p.RetainBytes, MaxBytes: p.MaxBytes, BlockTimeout: durationString(p.BlockTimeout),
		SegmentBytes: p.SegmentBytes, CompactAfter: durationString(p.CompactAfter),
		Tiering: p.Tiering, LocalRetainFor: durationString(p.LocalRetainFor), LocalRetainBytes: p.LocalRetainBytes,
	}
}

// Value reads the policy back. A duration that does not parse is refused
// as STREAM_MISCONFIGURED naming the PolicyValue field; the values are not
// validated (PolicyValue.Validate does that).
func (p Policy) Value() (stream.PolicyValue, error) {
	v := stream.PolicyValue{
		Partitions: p.Partitions, MaxRecordBytes: p.MaxRecordBytes, RetainBytes: p.RetainBytes,
		MaxBytes: p.MaxBytes, SegmentBytes: p.SegmentBytes,
		Tiering: p.Tiering, LocalRetainBytes: p.LocalRetainBytes,
	}
	var err error
	if v.RetainFor, err = ParseDuration("RetainFor", p.RetainFor); err != nil {
		return v, err
	}
	if v.BlockTimeout, err = ParseDuration("BlockTimeout", p.BlockTimeout); err != nil {
		return v, err
	}
	if v.CompactAfter, err = ParseDuration("CompactAfter", p.CompactAfter); err != nil {
		return v, err
	}
	if v.LocalRetainFor, err = ParseDuration("LocalRetainFor", p.LocalRetainFor); err != nil {
		return v, err
	}
	return v, nil
}

// PolicyPatch is a PATCH of a policy: the members present replace the
// current values, the others are kept.
type PolicyPatch struct {
	Partitions     *int    `json:"partitions,omitempty"`
	MaxRecordBytes *int    `json:"maxRecordBytes,omitempty"`
	RetainFor      *string `json:"retainFor,omitempty"`
	RetainBytes    *int64  `json:"retainBytes,omitempty"`
	MaxBytes       *int64  `json:"maxBytes,omitempty"`
	BlockTimeout   *string `json:"blockTimeout,omitempty"`
	SegmentBytes   *int64  `json:"segmentBytes,omitempty"`
	CompactAfter   *string `json:"compactAfter,omitempty"`
	// Tiering "" sets "follow the cluster".
	Tiering          *string `json:"tiering,omitempty"`
	LocalRetainFor   *string `json:"localRetainFor,omitempty"`
	LocalRetainBytes *int64  `json:"localRetainBytes,omitempty"`
}

// PatchOf is the patch that sets every field to p's.
func PatchOf(p stream.PolicyValue) PolicyPatch {
	w := PolicyOf(p)
	durs := func(s string) *string {
		if s == "" {
			s = "0s"
		}
		return &s
	}
	return PolicyPatch{
		Partitions: &w.Partitions, MaxRecordBytes: &w.MaxRecordBytes, RetainFor: durs(w.RetainFor),
		RetainBytes: &w.RetainBytes, MaxBytes: &w.MaxBytes, BlockTimeout: durs(w.BlockTimeout),
		SegmentBytes: &w.SegmentBytes, CompactAfter: durs(w.CompactAfter),
		Tiering: &w.Tiering, LocalRetainFor: durs(w.LocalRetainFor), LocalRetainBytes: &w.LocalRetainBytes,
	}
}

// Apply returns cur with the patch's members set.
func (pp PolicyPatch) Apply(cur stream.PolicyValue) (stream.PolicyValue, error) {
	if pp.Partitions != nil {
		cur.Partitions = *pp.Partitions
	}
	if pp.MaxRecordBytes != nil {
		cur.MaxRecordBytes = *pp.MaxRecordBytes
	}
	if pp.RetainBytes != nil {
		cur.RetainBytes = *pp.RetainBytes
	}
	if pp.MaxBytes != nil {
		cur.MaxBytes = *pp.MaxBytes
	}
	if pp.SegmentBytes != nil {
		cur.SegmentBytes = *pp.SegmentBytes
	}
	if pp.Tiering != nil {
		cur.Tiering = *pp.Tiering
	}
	if pp.LocalRetainBytes != nil {
		cur.LocalRetainBytes = *pp.LocalRetainBytes
	}
	for _, d := range []struct {
		field string
		in    *string
		out   *time.Duration
	}{
		{"RetainFor", pp.RetainFor, &cur.RetainFor},
		{"BlockTimeout", pp.BlockTimeout, &cur.BlockTimeout},
		{"CompactAfter", pp.CompactAfter, &cur.CompactAfter},
		{"LocalRetainFor", pp.LocalRetainFor, &cur.LocalRetainFor},
	} {
		if d.in == nil {
			continue
		}
		v, err := ParseDuration(d.field, *d.in)
		if err != nil {
			return cur, err
		}
		*d.out = v
	}
	return cur, nil
}

// ParseDuration reads a Go duration string naming field in its refusal;
// empty is zero.
func ParseDuration(field, s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, stream.StreamMisconfigured.With("field", field, "value", s, "reason", "not a Go duration such as 90s or 1h30m")
	}
	return d, nil
}

func durationString(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

// StreamConfig is the body of PUT /v1/admin/streams/{name}.
type StreamConfig struct {
	// ContentType defaults to application/octet-stream.
	ContentType string `json:"contentType,omitempty"`
	Policy      Policy `json:"policy"`
	// TTL is a sliding lifetime (Go duration); ExpiresAt an absolute one.
	TTL       string     `json:"ttl,omitempty"`
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
}

// PolicyUpdate is the body of PATCH /v1/admin/streams/{name}.
type PolicyUpdate struct {
	Policy PolicyPatch `json:"policy"`
}

// StreamInfo describes a named stream.
type StreamInfo struct {
	Name           string              `json:"name"`
	ContentType    string              `json:"contentType"`
	Policy         Policy              `json:"policy"`
	PartitionCount int                 `json:"partitionCount"`
	TTL            string              `json:"ttl,omitempty"`
	ExpiresAt      *time.Time          `json:"expiresAt,omitempty"`
	CreatedAt      time.Time           `json:"createdAt"`
	LastAccess     time.Time           `json:"lastAccess"`
	Closed         bool                `json:"closed,omitempty"`
	Producers      map[string]Producer `json:"producers,omitempty"`
	LastStreamSeq  string              `json:"lastStreamSeq,omitempty"`
	// Partitions is set by GET of one stream, not by the list.
	Partitions []PartitionInfo `json:"partitions,omitempty"`
}

// Producer is an idempotent producer's accepted state.
type Producer struct {
	Epoch   int64 `json:"epoch"`
	LastSeq int64 `json:"lastSeq"`
}

// PartitionInfo is one partition's internal stream.
type PartitionInfo struct {
	Partition int    `json:"partition"`
	ID        uint64 `json:"id"`
	Epoch     int64  `json:"epoch"`
	Owner     string `json:"owner,omitempty"`
	Open      bool   `json:"open"`
	Start     uint64 `json:"start"`
	End       uint64 `json:"end"`
	Bytes     int64  `json:"bytes"`
	Ranges    int    `json:"ranges"`
	// LocalBytes is what the partition's retained objects take on the
	// brokers' disks (one copy counted), TieredBytes what of them is in
	// object storage; an uploaded segment kept locally counts in both.
	LocalBytes  int64 `json:"localBytes"`
	TieredBytes int64 `json:"tieredBytes"`
	// Groups maps each consumer group that committed in the partition to
	// the offset it reads next (its lag is End minus it).
	Groups map[string]uint64 `json:"groups,omitempty"`
}

// StreamList is the answer of GET /v1/admin/streams.
type StreamList struct {
	Streams []StreamInfo `json:"streams"`
}

// NodeInfo is the answer of GET /v1/admin/node.
type NodeInfo struct {
	NodeID       string `json:"nodeId"`
	RaftState    string `json:"raftState"`
	Leader       string `json:"leader"`
	AppliedIndex uint64 `json:"appliedIndex"`
	LastIndex    uint64 `json:"lastIndex"`
	Streams      int    `json:"streams"`
	Ready        bool   `json:"ready"`

	// In cluster mode (left out on a lone broker): the cluster's id, this
	// broker's member id, the metadata log's voters and non-voters (member
	// ids), the slots this broker holds, and how many objects have fewer
	// copies on members than the replication factor asks.
	ClusterID       string   `json:"clusterId,omitempty"`
	MemberID        string   `json:"memberId,omitempty"`
	Voters          []string `json:"voters,omitempty"`
	NonVoters       []string `json:"nonVoters,omitempty"`
	SlotsHeld       *int     `json:"slotsHeld,omitempty"`
	Slots           []int    `json:"slots,omitempty"`
	UnderReplicated *int     `json:"underReplicated,omitempty"`

	// Removed: the cluster removed this broker's member for good (it came
	// back with the data of a member taken out); it serves nothing, and
	// Problem says what to do. RaftState is then RaftStateRemoved.
	Removed bool   `json:"removed,omitempty"`
	Problem string `json:"problem,omitempty"`

	// Drain is this broker's drain while it drains (what GET DrainPath
	// answers); absent otherwise.
	Drain *DrainStatus `json:"drain,omitempty"`

	// Failsafe is set while this broker serves its slots through an API
	// server outage on failsafe rounds every member confirmed.
	Failsafe *Failsafe `json:"failsafe,omitempty"`
}

// Failsafe is a broker's failsafe episode: since when, on how many
// confirmed rounds.
type Failsafe struct {
	Since  time.Time `json:"since"`
	Rounds int       `json:"rounds"`
}

// RaftStateRemoved is the RaftState of a broker the cluster removed.
const RaftStateRemoved = "Removed"

// AppendResult is the answer of an append.
type AppendResult struct {
	Partition int    `json:"partition"`
	First     uint64 `json:"first"`
	Last      uint64 `json:"last"`
	Next      uint64 `json:"next"`
	Duplicate bool   `json:"duplicate,omitempty"`
	// Producer is the producer's accepted state, for idempotent appends.
	Producer *Producer `json:"producer,omitempty"`
}

// BoundsResult is the answer of :bounds.
type BoundsResult struct {
	Partition int    `json:"partition"`
	First     uint64 `json:"first"`
	Next      uint64 `json:"next"`
}

// SeekResult is the answer of :seek.
type SeekResult struct {
	Partition int    `json:"partition"`
	Offset    uint64 `json:"offset"`
}

// CompactResult is the answer of :compact.
type CompactResult struct {
	Scanned int64 `json:"scanned"`
	Kept    int64 `json:"kept"`
	Dropped int64 `json:"dropped"`
}

// CommittedResult is the answer of :committed.
type CommittedResult struct {
	Group     string `json:"group"`
	Partition int    `json:"partition"`
	Next      uint64 `json:"next"`
}

// ReadJSON is a read's answer under Accept: application/json.
type ReadJSON struct {
	Partition int         `json:"partition"`
	First     uint64      `json:"first"`
	Next      uint64      `json:"next"`
	ReadNext  uint64      `json:"readNext"`
	Entries   []EntryJSON `json:"entries"`
}

// EntryJSON is one entry of ReadJSON; key and payload are base64.
type EntryJSON struct {
	Offset     uint64    `json:"offset"`
	AppendedAt time.Time `json:"appendedAt"`
	Key        []byte    `json:"key"`
	Payload    []byte    `json:"payload"`
}

// Operations after the ':' of /v1/log/{name}:op.
const (
	OpBounds    = "bounds"
	OpSeek      = "seek"
	OpTrim      = "trim"
	OpCompact   = "compact"
	OpCommit    = "commit"
	OpCommitted = "committed"
)

// Path prefixes.
const (
	LogPrefix     = "/v1/log/"
	StreamsPath   = "/v1/admin/streams"
	StreamsPrefix = "/v1/admin/streams/"
	NodePath      = "/v1/admin/node"
	ClockPath     = "/v1/admin/clock"
)
