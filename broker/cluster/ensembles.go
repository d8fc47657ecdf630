package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/picomq/picomq/broker/core"
	"github.com/picomq/picomq/broker/ensemble"
	"github.com/picomq/picomq/broker/journal"
	"github.com/picomq/picomq/broker/journalpeer"
	"github.com/picomq/picomq/broker/replication"
)

// journalPeers is the core's reach to the other members' journals
// (core.Peers): an owner's ensemble among the live members, and the
// journal peer API at each member's peer address.
type journalPeers struct {
	c      *Cluster
	client *journalpeer.Client
}

var _ core.Peers = (*journalPeers)(nil)

// Ensemble is this owner's ensemble: itself and R-1 live others by
// rendezvous hashing (ensemble.Choose). Fewer than R when fewer are live,
// but never fewer than R's write quorum — nor than the write quorum of the
// current members, when they are fewer than R: an object then has as many
// copies as a metadata log entry would.
func (p *journalPeers) Ensemble() ([]string, error) {
	self := p.c.member.Identity().ID()
	var live []string
	for _, m := range p.c.liveMembers() {
		live = append(live, m.ID)
	}
	r := replication.EffectiveR(p.c.cfg.ReplicationFactor, max(len(live), 1))
	e := ensemble.Choose(self, live, r)
	need := ensemble.WriteQuorum(r)
	if b := p.c.broker(); b != nil {
		// A cluster whose members are fewer than R (the explicit recovery
		// of a lost quorum leaves one) writes to what its metadata log's
		// own quorum is: no worse than that log, as before ensembles.
		current := 0
		for _, m := range b.Members() {
			if m.Removed.IsZero() {
				current++
			}
		}
		if current > 0 {
			need = min(need, ensemble.WriteQuorum(current))
		}
	}
	if len(e) < need {
		return nil, replication.ReplicationFailed.With("reason", "too few live members for an ensemble", "live", len(live), "r", r, "need", need)
	}
	return e, nil
}

// addr is member id's peer address, while it is a member.
func (p *journalPeers) addr(id string) (string, error) {
	b := p.c.broker()
	if b == nil {
		return "", fmt.Errorf("cluster: not started")
	}
	m, ok := b.Member(id)
	if !ok || !m.Removed.IsZero() {
		// A member wiped or removed is another incarnation, or none: it
		// cannot answer for the copies the ensemble recorded.
		return "", replication.ReplicaRefused.With("member", id, "reason", "not a current member")
	}
	return m.PeerAddr, nil
}

func (p *journalPeers) Append(ctx context.Context, member string, o journal.Object) error {
	a, err := p.addr(member)
	if err != nil {
		return err
	}
	return p.client.Append(ctx, a, o)
}

func (p *journalPeers) Fence(ctx context.Context, member string, stream uint64, epoch int64) ([]journal.Ref, error) {
	a, err := p.addr(member)
	if err != nil {
		return nil, err
	}
	return p.client.Fence(ctx, a, stream, epoch)
}

func (p *journalPeers) Read(ctx context.Context, member string, id uint64) (journal.Object, error) {
	a, err := p.addr(member)
	if err != nil {
		return journal.Object{}, err
	}
	return p.client.Read(ctx, a, id)
}

// reensembleEvery is how often an owner looks for ensembles naming a
// member that is gone.
const reensembleEvery = 2 * time.Second

// reensemble moves this owner's partitions off ensembles that name a
// member removed, draining or without a live member Lease (core's
// Reensemble, which moves them only when a live replacement exists), and
// grows those opened while fewer members were live.
func (c *Cluster) reensemble(ctx context.Context, b *core.Broker) {
	live, draining := map[string]bool{}, map[string]bool{}
	for _, m := range c.owners.Members() {
		if rec, ok := b.Member(m.Identity); ok && rec.Removed.IsZero() {
			live[rec.ID] = true
			draining[rec.ID] = m.Draining
		}
	}
	if len(live) == 0 {
		return // no view of the members yet
	}
	n, err := b.Reensemble(ctx, func(member string) core.Gone {
		if rec, ok := b.Member(member); ok && !rec.Removed.IsZero() || draining[member] {
			return core.Leaving
		}
		if !live[member] {
			return core.Down
		}
		return core.Here
	})
	if err != nil && ctx.Err() == nil {
		c.log.Warn("moving partitions to a new ensemble", "moved", n, "err", err)
	}
}
