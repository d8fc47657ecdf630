package core

import (
	"cmp"
	"context"
	"fmt"
	"iter"
	"slices"
	"strings"
	"time"

	"github.com/picomq/picomq/broker/journal"
	"github.com/picomq/picomq/broker/meta"
	"github.com/picomq/picomq/broker/metalog"
	"github.com/picomq/picomq/broker/node"
	"github.com/picomq/picomq/broker/objstore"
)

// The cluster rooms' view of the core: the metadata log itself (for its
// membership operations), and the cluster's identity and members as the
// log records them, in the core's own types.

// Member is a member of the cluster: one broker incarnation.
type Member struct {
	// ID is the member's id in the log's configuration and in replica sets;
	// Node its node (pod) name; Incarnation what its data directory was
	// formatted as; Number what its object ids start from.
	ID, Node, Incarnation string
	Number                int
	// PeerAddr and ClientAddr are where it is reached (stable names).
	PeerAddr, ClientAddr string
	// Joined is when it was first recorded; Removed when it was removed for
	// good (zero: it is a member).
	Joined, Removed time.Time
	// Level is the command level its build applies (meta.Level; 0 when
	// recorded by a build from before levels).
	Level int
}

// Level is the command level this build's state machine applies: a
// member records it (Member.Level) so that a command newer than some
// member's build is not proposed (CanMoveReplicas).
const Level = meta.Level

func memberOf(m *meta.Member) Member {
	out := Member{
		ID: m.ID, Node: m.Node, Incarnation: m.Incarnation, Number: m.Number,
		PeerAddr: m.PeerAddr, ClientAddr: m.ClientAddr, Joined: timeOf(m.Joined), Level: m.Level,
	}
	if m.Removed != 0 {
		out.Removed = timeOf(m.Removed)
	}
	return out
}

// Log is the broker's metadata log, for the cluster's composition to hand
// on: membership reaches it through its own interface (membership.MetaLog).
func (b *Broker) Log() *metalog.Log { return b.log }

// Journal is this member's journal (nil on the log data path): its peers
// append to it and fence it through the journal peer API.
func (b *Broker) Journal() *journal.Journal { return b.journal }

// Objects is this node's object store: a replica of another member's
// object is written there by the replication room.
func (b *Broker) Objects() *objstore.Store { return b.objs }

// ObjectReplicas lists the committed objects and the members holding
// their files (none for an object every member holds through the log), as
// of now: what counts as under-replicated. Objects object storage holds
// are not listed — their copy there is the one that counts, and repair
// never copies them (ReplicatedObjects), so a lost member's name in their
// sets must not keep them under-replicated for ever.
func (b *Broker) ObjectReplicas() iter.Seq2[uint64, []string] {
	type obj struct {
		id       uint64
		replicas []string
	}
	var objs []obj
	b.fsm.View(func(s *meta.State) {
		objs = make([]obj, 0, len(s.Objects))
		for id, o := range s.Objects {
			if o.Tier == nil {
				objs = append(objs, obj{id, slices.Clone(o.Replicas)})
			}
		}
	})
	return func(yield func(uint64, []string) bool) {
		for _, o := range objs {
			if !yield(o.id, o.replicas) {
				return
			}
		}
	}
}

// ClusterID is the id the log's cluster was named with ("" before).
func (b *Broker) ClusterID() string {
	var id string
	b.fsm.View(func(s *meta.State) { id = s.ClusterID })
	return id
}

// NameCluster names the log's cluster id, unless it has a name already:
// it answers the name that holds.
func (b *Broker) NameCluster(ctx context.Context, id string) (string, error) {
	res, err := b.apply(ctx, &meta.Command{Op: meta.OpCluster, Cluster: &meta.Cluster{ID: id}})
	if err != nil {
		return "", err
	}
	r, ok := res.(*meta.ClusterResult)
	if !ok {
		return "", meta.BadCommand.With("op", "cluster", "reason", fmt.Sprintf("result %T", res))
	}
	return r.ID, nil
}

// Members returns the members the log records, removed ones included,
// sorted by node and then number.
func (b *Broker) Members() []Member {
	var out []Member
	b.fsm.View(func(s *meta.State) {
		for _, m := range s.Members {
			out = append(out, memberOf(m))
		}
	})
	slices.SortFunc(out, func(a, c Member) int {
		if n := strings.Compare(a.Node, c.Node); n != 0 {
			return n
		}
		return a.Number - c.Number
	})
	return out
}

// Member returns the member id, as recorded.
func (b *Broker) Member(id string) (Member, bool) {
	var out Member
	found := false
	b.fsm.View(func(s *meta.State) {
		if m, ok := s.Members[id]; ok {
			out, found = memberOf(m), true
		}
	})
	return out, found
}

// RecordMember records a member as it joins or as its addresses change,
// and returns it as recorded (its number given on first record). A removed
// member is refused (MEMBER_REMOVED).
func (b *Broker) RecordMember(ctx context.Context, m Member) (Member, error) {
	return b.memberChange(ctx, meta.Member{
		ID: m.ID, Node: m.Node, Incarnation: m.Incarnation, PeerAddr: m.PeerAddr, ClientAddr: m.ClientAddr, Level: m.Level,
	})
}

// RemoveMember records member id as removed for good: it is never let
// back in.
func (b *Broker) RemoveMember(ctx context.Context, id string) error {
	m, ok := b.Member(id)
	if !ok {
		return meta.BadCommand.With("op", "member", "reason", "no such member", "member", id)
	}
	if !m.Removed.IsZero() {
		return nil
	}
	_, err := b.memberChange(ctx, meta.Member{
		ID: m.ID, Node: m.Node, Incarnation: m.Incarnation, PeerAddr: m.PeerAddr, ClientAddr: m.ClientAddr, Level: m.Level, Removed: 1,
	})
	return err
}

func (b *Broker) memberChange(ctx context.Context, m meta.Member) (Member, error) {
	res, err := b.apply(ctx, &meta.Command{Op: meta.OpMember, Member: &meta.MemberChange{Member: m, Now: b.now().UnixNano()}})
	if err != nil {
		return Member{}, err
	}
	r, ok := res.(*meta.Member)
	if !ok {
		return Member{}, meta.BadCommand.With("op", "member", "reason", fmt.Sprintf("result %T", res))
	}
	return memberOf(r), nil
}

// CommittedObject is a committed object whose file members hold: its id,
// its size, and the members holding a copy (never empty).
type CommittedObject struct {
	ID       uint64
	Size     int64
	Replicas []string
}

// ReplicatedObjects lists the committed objects with a replica set, by id,
// as of now: what a repair or a drain moves. Objects every member holds
// through the log (their frames rode in their commit) are not listed, nor
// are those object storage holds (tier.go): their copy there is the one
// that counts, so a repair or a drain never copies them — a member that
// lost or leaves its copy of one costs nothing but a read from the bucket.
func (b *Broker) ReplicatedObjects() []CommittedObject {
	var out []CommittedObject
	b.fsm.View(func(s *meta.State) {
		for id, o := range s.Objects {
			if len(o.Replicas) > 0 && o.Tier == nil {
				out = append(out, CommittedObject{ID: id, Size: o.Size, Replicas: slices.Clone(o.Replicas)})
			}
		}
	})
	slices.SortFunc(out, func(a, c CommittedObject) int { return cmp.Compare(a.ID, c.ID) })
	return out
}

// MoveReplicas commits an object's new replica set, when its set is still
// old (REPLICAS_CHANGED otherwise): the copies new names beyond old must be
// durable before it is called.
func (b *Broker) MoveReplicas(ctx context.Context, id uint64, old, new []string) error {
	if err := b.CanMoveReplicas(); err != nil {
		return err
	}
	_, err := b.apply(ctx, &meta.Command{Op: meta.OpReplicas, Replicas: &meta.Replicas{Object: id, Old: old, New: new}})
	return err
}

// CanMoveReplicas answers LEVEL_TOO_LOW while a current member runs a
// build that cannot apply a move of replica sets (MoveReplicas): repairs
// and drains wait for the upgrade to finish.
func (b *Broker) CanMoveReplicas() error { return b.needLevel(meta.LevelReplicas, meta.OpReplicas) }

// needLevel answers LEVEL_TOO_LOW when a current member's build applies
// commands of a lower level than need (meta.Level): op must not be
// proposed until every member runs a build that knows it.
func (b *Broker) needLevel(need int, op meta.Op) error {
	have, who := meta.Level, ""
	b.fsm.View(func(s *meta.State) {
		for _, m := range s.Members {
			if m.Removed == 0 && m.EffectiveLevel() < have {
				have, who = m.EffectiveLevel(), m.ID
			}
		}
	})
	if have < need {
		return node.LevelTooLow.With("op", string(op), "need", need, "have", have, "member", who)
	}
	return nil
}

// CloseLeftOpen closes, in one command, the internal streams the log still
// records open with this member as their writer and that Ownership no
// longer lets it write: streams an earlier process of this member opened
// before it was killed, which its slots' hand-off (which closes what this
// process opened) never sees. Their next writer would open them at the
// next epoch anyway; a drain waits for none to be left. It returns how
// many it closed.
func (b *Broker) CloseLeftOpen(ctx context.Context) (int, error) {
	self := b.self()
	var mine []meta.Close
	b.fsm.View(func(s *meta.State) {
		for id, in := range s.Streams {
			if in.Open && in.Owner == self {
				mine = append(mine, meta.Close{Stream: id, Epoch: in.Epoch})
			}
		}
	})
	// Ownership asked outside the View: it reads the state itself
	// (placement), and a read lock taken again while the state machine
	// waits to write deadlocks.
	var parts []meta.Close
	for _, c := range mine {
		if b.cfg.Ownership.MayOpen(c.Stream) != nil {
			parts = append(parts, c)
		}
	}
	if len(parts) == 0 {
		return 0, nil
	}
	_, err := b.apply(ctx, &meta.Command{Op: meta.OpCloseMany, CloseMany: &meta.CloseMany{Streams: parts}})
	return len(parts), err
}
