package cluster

import (
	"context"

	"github.com/picomq/picomq/broker/core"
	"github.com/picomq/picomq/broker/ownership"
	"github.com/picomq/picomq/broker/repair"
	"github.com/picomq/picomq/broker/replication"
)

// repairCluster is the repair room's view of this broker's cluster: the
// core's objects and members, the member Leases' liveness and draining
// flags, and replication's copies between members.
type repairCluster struct {
	c *Cluster
	b *core.Broker
}

func (r repairCluster) IsLeader() bool { return r.b.Log().IsLeader() }

func (r repairCluster) Objects() []repair.Object {
	objs := r.b.ReplicatedObjects()
	out := make([]repair.Object, 0, len(objs))
	for _, o := range objs {
		out = append(out, repair.Object{ID: o.ID, Size: o.Size, Replicas: o.Replicas})
	}
	return out
}

func (r repairCluster) Members() []repair.Member {
	leases := map[string]ownership.MemberInfo{} // live members
	for _, m := range r.c.owners.Members() {
		leases[m.Identity] = m
	}
	var out []repair.Member
	for _, m := range r.b.Members() {
		l, live := leases[m.ID]
		out = append(out, repair.Member{ID: m.ID, Live: live, Draining: l.Draining, Leaving: l.Leaving, Removed: !m.Removed.IsZero()})
	}
	return out
}

// R is the replication factor over the members that stay: neither
// removed nor leaving (with the factor left to its default, a 3-broker
// cluster scaled to 2 keeps 2 copies of each object, not 3 it cannot have).
func (r repairCluster) R() int {
	leaving := map[string]bool{}
	for _, m := range r.c.owners.Members() {
		leaving[m.Identity] = m.Leaving
	}
	n := 0
	for _, m := range r.b.Members() {
		if m.Removed.IsZero() && !leaving[m.ID] {
			n++
		}
	}
	return replication.EffectiveR(r.c.cfg.ReplicationFactor, n)
}

func (r repairCluster) peer(id string) replication.Peer {
	m, _ := r.b.Member(id)
	return replication.Peer{ID: id, Addr: m.PeerAddr}
}

func (r repairCluster) Copy(ctx context.Context, id uint64, from, to string) error {
	return r.c.repl.CopyBetween(ctx, id, r.peer(from), r.peer(to))
}

func (r repairCluster) CanMove() error { return r.b.CanMoveReplicas() }

func (r repairCluster) Commit(ctx context.Context, id uint64, old, new []string) error {
	return r.b.MoveReplicas(ctx, id, old, new)
}
