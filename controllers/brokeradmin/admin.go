// Package brokeradmin is the operator's edge towards the brokers: the
// cluster-level admin calls (node status, drain) behind BrokerAdmin, and the
// stream admin calls behind StreamAdmin, each with an HTTP implementation
// over the broker's admin API. The controllers only see the interfaces, so
// tests put fakes here, at the edge.
package brokeradmin

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Broker addresses one broker pod.
type Broker struct {
	// Namespace and Cluster locate the StreamCluster; Pod is the broker's pod
	// name, which is also its node id.
	Namespace, Cluster, Pod string
	// URL is the broker's base URL (http://demo-0.demo-headless.ns.svc:4437).
	URL string
	// Credentials verify the broker (https) and authenticate the operator
	// to it (spec.auth).
	Credentials Credentials
}

func (b Broker) String() string { return b.Namespace + "/" + b.Pod }

// DrainPhase is where a broker is in leaving its cluster.
type DrainPhase string

const (
	// DrainNone: the broker is a full member (not draining).
	DrainNone DrainPhase = ""
	// DrainInProgress: the broker has stopped taking slots and is handing
	// its streams off.
	DrainInProgress DrainPhase = "Draining"
	// DrainComplete: the broker owns no slot, holds no stream and has left
	// the metadata log; its pod may be removed without losing data.
	DrainComplete DrainPhase = "Drained"
)

// DrainStatus is a broker's progress in draining.
type DrainStatus struct {
	Phase DrainPhase `json:"phase"`
	// Stay: a cordon someone asked for (kubectl picomq drain), not a
	// scale-down's leave: the broker stays a member until it is cancelled.
	Stay bool `json:"stay,omitempty"`
	// SlotsHeld is how many slot Leases the broker still holds.
	SlotsHeld int32 `json:"slotsHeld"`
	// OpenStreams is how many internal streams are still open on it.
	OpenStreams int32 `json:"openStreams"`
	// ObjectsHeld and BytesHeld are the copies of objects it holds that
	// must still move to the brokers that stay.
	ObjectsHeld int64 `json:"objectsHeld"`
	BytesHeld   int64 `json:"bytesHeld"`
	// Message says what the broker is waiting for, if anything.
	Message string `json:"message,omitempty"`
}

// Done reports whether the broker may be removed.
func (d DrainStatus) Done() bool { return d.Phase == DrainComplete }

// String is a short progress report for conditions and events.
func (d DrainStatus) String() string {
	s := fmt.Sprintf("%s, %d slots, %d open streams and %d objects (%d bytes) to move left", orNone(string(d.Phase)), d.SlotsHeld, d.OpenStreams, d.ObjectsHeld, d.BytesHeld)
	if d.Message != "" {
		s += ": " + d.Message
	}
	return s
}

func orNone(s string) string {
	if s == "" {
		return "not draining"
	}
	return s
}

// NodeStatus is one broker's view of itself and of the metadata log.
type NodeStatus struct {
	NodeID string
	// RaftState is the broker's role in the metadata log: Leader, Follower,
	// Candidate, Shutdown; Removed for a broker the cluster removed.
	RaftState string
	// Leader is the metadata leader this broker knows of ("" when none).
	Leader string
	// Ready is the broker's own readiness.
	Ready bool
	// Streams is how many named streams the broker's registry holds.
	Streams int
	// SlotsHeld is how many slot Leases the broker holds; nil when the broker
	// does not report slots (a single-node broker holds them all).
	SlotsHeld *int32
	// Slots are the slots the broker holds, when it lists them.
	Slots []int32

	// In cluster mode (empty from a single-node broker): the id of the
	// cluster the broker belongs to ("" until its metadata log names one),
	// its member id (pod name ~ incarnation), and the metadata log's
	// voters and non-voters as it sees them (member ids).
	ClusterID string
	MemberID  string
	Voters    []string
	NonVoters []string
	// UnderReplicated is how many committed objects of the whole cluster
	// have fewer copies on current members than the replication factor
	// asks, counted from this broker's copy of the metadata log; nil when
	// not reported.
	UnderReplicated *int32
	// Drain is the broker's drain state (DrainNone for a full member).
	Drain DrainStatus

	// Removed: the cluster removed this broker's member for good (it came
	// back with the data directory of a member taken out, after a recovery
	// of the metadata log say). It stays up but serves nothing: no log, no
	// slots, not ready (RaftState is "Removed"). Problem is the broker's
	// error text (MEMBER_REMOVED...). It joins again only as a new member:
	// its data directory set aside or wiped (its PVC deleted).
	Removed bool
	Problem string
	// FailsafeSince is set while the broker serves its slots through an
	// API server outage on failsafe rounds; FailsafeRounds counts them.
	FailsafeSince  time.Time
	FailsafeRounds int
}

// ErrNotSupported is returned by an admin call the broker does not
// implement (it answered 404, 405 or 501): the operator must not act as if
// the call had succeeded.
var ErrNotSupported = errors.New("the broker does not implement this admin call")

// BrokerAdmin is what the StreamCluster controller asks of individual
// brokers.
type BrokerAdmin interface {
	// Status returns the broker's node status.
	Status(ctx context.Context, b Broker) (NodeStatus, error)
	// Drain asks the broker to leave the cluster without losing data: stop
	// owning slots, hand its streams off, leave the metadata log. It is
	// idempotent: asked again, it reports progress. ErrNotSupported when the
	// broker does not implement it.
	Drain(ctx context.Context, b Broker) (DrainStatus, error)
	// CancelDrain makes a draining (or drained, still running) broker a full
	// member again: used when a scale-down is reverted before it completed.
	// ErrNotSupported when the broker does not implement it.
	CancelDrain(ctx context.Context, b Broker) error
}
