package core

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/picomq/picomq/broker/meta"
	"github.com/picomq/picomq/broker/node"
)

// Unnaming (ensembles.go, decision 10): a checkpoint names the members an
// object was sent to that hold it or are still being sent it. One whose
// straggling then fails (it refused the object, or stayed away past
// straggleFor) never holds it, yet its name would count as a copy for
// repair, and be copied from. The owner takes such names out of the
// object's replica set, one replicas command an object, by one loop: a
// member away for long leaves many objects behind, and their commands go
// one after another rather than all at once.

const (
	// unnameEvery is how often the loop looks at the objects waiting.
	unnameEvery = 500 * time.Millisecond
	// unnameFor bounds how long an object waits to have names taken out
	// (its checkpoint not taken yet, the log without a leader, a move of
	// replicas refused during an upgrade) before it is only logged.
	unnameFor = 5 * time.Minute
)

// unnames are the objects whose replica sets must stop naming members
// that never held them.
type unnames struct {
	mu      sync.Mutex
	pending map[uint64]unname
	// failing is the failure the last pass stopped at, logged when it
	// changes ("" when the pass went through).
	failing string
}

type unname struct {
	missing []string
	since   time.Time
}

func newUnnames() *unnames { return &unnames{pending: map[uint64]unname{}} }

// add records that missing will never hold object id.
func (u *unnames) add(id uint64, missing []string) {
	if u == nil {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	e, ok := u.pending[id]
	if !ok {
		e.since = time.Now()
	}
	for _, m := range missing {
		if !slices.Contains(e.missing, m) {
			e.missing = append(e.missing, m)
		}
	}
	u.pending[id] = e
}

// unnameLoop takes the names out, until the broker stops.
func (b *Broker) unnameLoop() {
	ctx, cancel := b.untilStopped() // a command in flight ends with the stop
	defer cancel()
	t := time.NewTicker(unnameEvery)
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
		}
		b.unnamePass(ctx)
	}
}

// unnamePass takes out what it can now. It stops at the first failure
// other than a set that changed meanwhile: the log is not taking commands
// (no leader, an upgrade), and the next pass tries again.
func (b *Broker) unnamePass(ctx context.Context) {
	u := b.unnames
	u.mu.Lock()
	ids := slices.Sorted(maps.Keys(u.pending))
	entries := maps.Clone(u.pending)
	u.mu.Unlock()
	for _, id := range ids {
		e := entries[id]
		done, err := b.unnameOne(ctx, id, e.missing)
		if done || time.Since(e.since) > unnameFor {
			if !done {
				b.cfg.Logger.Warn("members an object was sent to never held it, and its replica set still names them", "object", id, "missing", e.missing, "err", err)
			}
			u.mu.Lock()
			delete(u.pending, id)
			u.mu.Unlock()
		}
		if err != nil && !errors.Is(err, node.ReplicasChanged) {
			if msg := err.Error(); msg != u.failing {
				u.failing = msg
				b.cfg.Logger.Warn("taking members that never held an object out of its replica set failed; tried again shortly",
					"object", id, "missing", e.missing, "waiting", len(ids), "err", err)
			}
			return
		}
	}
	u.failing = ""
}

// unnameOne takes missing out of object id's replica set. done is false
// while its checkpoint is not taken, or the move failed.
func (b *Broker) unnameOne(ctx context.Context, id uint64, missing []string) (done bool, err error) {
	if b.tail.holds(id) {
		return false, nil // not checkpointed yet: the tail names them no more
	}
	var cur []string
	b.fsm.View(func(s *meta.State) {
		if o, ok := s.Objects[id]; ok {
			cur = slices.Clone(o.Replicas)
		}
	})
	next := slices.DeleteFunc(slices.Clone(cur), func(m string) bool { return slices.Contains(missing, m) })
	if len(next) == len(cur) || len(next) == 0 {
		return true, nil // merged, collected or moved meanwhile, or never named them
	}
	ctx, cancel := context.WithTimeout(ctx, applyTimeout)
	defer cancel()
	if err := b.MoveReplicas(ctx, id, cur, next); err != nil {
		return false, err
	}
	b.cfg.Logger.Info("members an object was sent to never held it: its replica set names them no more; repair makes the copies",
		"object", id, "missing", missing, "replicas", next)
	return true, nil
}
