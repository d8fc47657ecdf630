package main

import (
	"context"
	"fmt"

	"github.com/picomq/picomq/broker/httpapi/wire"
)

// The first stage of a broker's drain, behind /v1/admin/drain
// (httpapi.Drainer): the broker stops taking slots and hands those it holds
// off, so that it ends owning none of the streams and every request it
// receives is proxied to an owner. It never reports DrainDrained: a broker
// with no slot still holds its copies of objects and its place in the
// metadata log's configuration, and removing it would lose both. Moving
// the copies and leaving the configuration are the rest of the drain, not
// built yet, so the operator keeps holding a scale-down at Draining.

// drainLeft is what every drain status says is left once the slots are
// gone.
const drainLeft = "this broker still holds its copies of the cluster's objects and its place in the metadata log's Raft configuration; " +
	"re-replicating those copies and leaving the configuration are not built yet, so the broker cannot be removed without losing data and the drain stays Draining"

// StartDrain implements httpapi.Drainer: the slot Lease manager's fair share
// becomes 0 (it takes no slot, hands off those it holds) and the member
// Lease says so, so that the others take the slots at once and no new
// object is copied here. It is refused when the members that stay could
// not hold the replication factor's copies of new objects: every append
// writing a file would fail. Asked again while draining, it changes
// nothing.
func (c *cluster) StartDrain(ctx context.Context) error {
	if c.owners.Status().Draining {
		return nil
	}
	if err := c.drainAllowed(); err != nil {
		return err
	}
	if err := c.owners.SetDraining(ctx, true); err != nil {
		// The flag is set whatever the API server said; the loop writes
		// the member Lease again every period.
		c.log.Warn("draining: the member Lease is not written yet", "err", err)
	}
	c.log.Info("draining: taking no slot, handing off those held", "slotsHeld", c.owners.Status().SlotsHeld)
	return nil
}

// drainAllowed refuses a drain that would leave fewer other live members,
// not draining themselves, than the replication factor asks (or none at
// all, to hand the slots to).
func (c *cluster) drainAllowed() error {
	self := c.member.Identity().ID()
	others := 0
	for _, p := range c.liveMembers() {
		if p.ID != self {
			others++
		}
	}
	need := max(1, c.cfg.ReplicationFactor)
	if others < need {
		return wire.DrainRefused.With("liveOthers", others, "replicationFactor", c.cfg.ReplicationFactor,
			"reason", fmt.Sprintf("%d other live members not draining, and objects need %d copies on the members that stay: scale up first, or lower the replication factor", others, need))
	}
	return nil
}

// CancelDrain implements httpapi.Drainer: the broker is a full member
// again and takes its share of the slots back.
func (c *cluster) CancelDrain(ctx context.Context) error {
	if !c.owners.Status().Draining {
		return nil
	}
	if err := c.owners.SetDraining(ctx, false); err != nil {
		c.log.Warn("drain cancelled: the member Lease is not written yet", "err", err)
	}
	c.log.Info("drain cancelled: taking this broker's share of the slots again")
	return nil
}

// DrainStatus implements httpapi.Drainer.
func (c *cluster) DrainStatus() wire.DrainStatus {
	st := c.owners.Status()
	ds := wire.DrainStatus{SlotsHeld: st.SlotsHeld, OpenStreams: c.openStreams()}
	if !st.Draining {
		ds.Message = "not draining"
		return ds
	}
	ds.Phase = wire.DrainDraining
	if ds.SlotsHeld > 0 || ds.OpenStreams > 0 {
		ds.Message = fmt.Sprintf("handing off %d slots, %d streams open here; after that, %s", ds.SlotsHeld, ds.OpenStreams, drainLeft)
	} else {
		ds.Message = "owns no slot and no open stream: every request is proxied to an owner; but " + drainLeft
	}
	return ds
}

// openStreams counts the internal streams the metadata log has open with
// this broker as their writer.
func (c *cluster) openStreams() int {
	b := c.broker()
	if b == nil {
		return 0
	}
	self := c.member.Identity().ID()
	n := 0
	for _, e := range b.List() {
		for _, id := range e.Partitions {
			if p, ok := b.Partition(id); ok && p.Open && p.Owner == self {
				n++
			}
		}
	}
	return n
}
