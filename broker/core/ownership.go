package core

import (
	"context"
	"time"

	"github.com/picomq/picomq/broker/meta"
)

// Ownership is the seam where a cluster decides which node writes an
// internal stream. Before a node first writes a partition it opens it
// through the metadata log, which makes it the writer at the next epoch
// (the current one plus one: the log, not Ownership, assigns it) and
// fences every writer of an older one — the state machine refuses their
// commits. Ownership only says whether this node may make that open now:
// on one node always; in a cluster, while it holds the partition's slot.
//
// Losing ownership is pushed the other way: the cluster calls
// Broker.Release to hand the partitions of a slot off through the log, or
// Broker.Revoke when it must stop writing them at once and cannot reach the
// log.
type Ownership interface {
	// MayOpen reports whether this node may open internal stream id for
	// writing; a refusal is a coded error the append answers with (in a
	// cluster, one naming the owner and retriable).
	MayOpen(id uint64) error
}

// SingleNode is the Ownership of a broker that is the only node: every
// internal stream is its own.
type SingleNode struct{}

// MayOpen always allows.
func (SingleNode) MayOpen(uint64) error { return nil }

// Release closes, through one metadata command, the partitions this node
// holds open whose internal ids which selects, after their appends already
// admitted are committed or answered; their next writer opens them at the
// next epoch without waiting. Appends admitted after Release reopen them,
// if Ownership allows. Closing a partition another node reopened meanwhile
// changes nothing.
//
// The last accesses held in memory are persisted first: the next owner
// judges sliding TTLs from the persisted ones, and must not find a stream
// read a moment ago idle since the last TouchInterval.
func (b *Broker) Release(ctx context.Context, which func(id uint64) bool) error {
	tctx, cancel := context.WithTimeout(ctx, 2*time.Second) // best effort
	b.persistTouches(tctx)
	cancel()
	return b.closeOpen(ctx, which)
}

// Revoke stops this node writing the partitions whose internal ids which
// selects at once, without the metadata log: their appends not yet
// proposed are aborted (a retriable refusal; nothing of them is written),
// those already proposed are answered as their commit says, and the next
// append must open them again. Use it when ownership is lost and the log
// cannot be reached in time; the epoch still fences whatever was in
// flight.
func (b *Broker) Revoke(which func(id uint64) bool) {
	for _, n := range b.views() {
		n.mu.Lock()
		revoked := false
		for _, p := range n.parts {
			if p.opened && which(p.id) {
				p.opened = false
				revoked = true
			}
		}
		if revoked {
			n.gen++ // appends queued under the old epoch are aborted
			n.pendingBytes = 0
			n.signal()
		}
		n.mu.Unlock()
	}
}

// closeSettle bounds how long a close waits for the stragglers of the
// objects not yet checkpointed (a healthy member answers within
// milliseconds; one that is away stays named, its copy still coming).
const closeSettle = time.Second

// closeOpen closes in the log every partition this node opened that which
// selects, once the appends admitted for them are answered (committed
// under the epoch they were admitted at, or refused).
func (b *Broker) closeOpen(ctx context.Context, which func(id uint64) bool) error {
	var parts []meta.Close
	for _, n := range b.views() {
		taken := n.takeOpen(which)
		if len(taken) == 0 {
			continue
		}
		if err := n.awaitAnswered(ctx, taken); err != nil {
			return err
		}
		parts = append(parts, taken...)
	}
	if len(parts) == 0 {
		return nil
	}
	if b.tail != nil {
		// The stragglers answer first, so that the checkpoint names only
		// members that hold its objects: the next owner's fence would
		// refuse them after it (ensembles.go, decision 10).
		b.tail.settle(ctx, time.Now().Add(closeSettle))
	}
	// Every append admitted is answered, and the apply checkpoints the
	// tail first: the closes are drained (ensembles.go, decision 14) —
	// once every member's build knows what that means.
	if b.journal != nil && b.cfg.Cluster != nil && b.needLevel(meta.LevelEnsemble, meta.OpCloseMany) == nil {
		for i := range parts {
			parts[i].Drained = true
		}
	}
	_, err := b.apply(ctx, &meta.Command{Op: meta.OpCloseMany, CloseMany: &meta.CloseMany{Streams: parts}})
	return err
}

// OpenForServing makes this node the writer of internal stream id, through
// the metadata log, unless it is already: a cluster member serves a
// partition's reads, tails and long-polls only once its open has applied
// here, so that what it answers holds everything the previous owner
// committed (the open is ordered after all of it). Ownership must allow
// the open. On a lone broker there is nothing to wait for.
func (b *Broker) OpenForServing(ctx context.Context, id uint64) error {
	if b.cfg.Cluster == nil {
		return nil
	}
	_, err := b.openByID(ctx, id)
	return err
}

// openByID opens internal stream id here unless this process has it open
// already, which it reports.
func (b *Broker) openByID(ctx context.Context, id uint64) (already bool, err error) {
	n, pt, err := b.partByID(id)
	if err != nil {
		return false, err
	}
	n.mu.Lock()
	already = pt.opened
	n.mu.Unlock()
	if already {
		return true, nil
	}
	return false, b.openPart(ctx, n, pt)
}

// partByID finds the view and partition of internal stream id, loading
// its stream's view if needed.
func (b *Broker) partByID(id uint64) (*named, *part, error) {
	var name string
	b.fsm.View(func(s *meta.State) {
		if in, ok := s.Streams[id]; ok {
			name = in.Name
		}
	})
	if name == "" {
		return nil, nil, meta.StreamNotFound.With("stream", id)
	}
	n, err := b.stream(name)
	if err != nil {
		return nil, nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, p := range n.parts {
		if p.id == id {
			return n, p, nil
		}
	}
	return nil, nil, meta.StreamNotFound.With("stream", id, "name", name)
}
