package core

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/picomq/picomq/broker/meta"
)

// The maintenance loop: every MaintenanceInterval it expires streams,
// persists retention and merges small ranges of the streams this node
// loaded, persists last accesses, collects garbage (gc.go), spills held
// objects and takes a snapshot when the log holds many inline frames.

func (b *Broker) maintainLoop() {
	t := time.NewTicker(b.cfg.MaintenanceInterval)
	defer t.Stop()
	lastTouch, lastOrphanScan := time.Now(), time.Now()
	var lastSpilled, lastUnzeroed int64
	// A log replayed at start may be past its snapshot threshold already: a
	// broker that keeps crashing within its first pass would otherwise let
	// it grow, and each start replay more.
	b.snapshotIfDue()
	// A pass under way when the broker stops ends at once.
	stopping, stopped := b.untilStopped()
	defer stopped()
	for {
		select {
		case <-b.stop:
			// Best effort, and short: a broker stopping with the rest
			// of its cluster has no quorum to wait for.
			if _, leader := b.log.Leader(); leader != "" {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				b.persistTouches(ctx)
				cancel()
			}
			return
		case <-b.snapshotDue:
			b.snapshotIfDue()
			continue
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(stopping, 30*time.Second)
		b.maintain(ctx)
		if cutByStop(ctx) {
			// Stopping: the rest of the pass would only fail (and warn);
			// the stop case above persists the touches.
			cancel()
			continue
		}
		b.snapshotIfDue()
		if time.Since(lastTouch) >= b.cfg.TouchInterval {
			b.persistTouches(ctx)
			lastTouch = time.Now()
		}
		scan := time.Since(lastOrphanScan) >= orphanScanEvery(b.cfg)
		if scan {
			lastOrphanScan = time.Now()
		}
		if err := b.collectGarbage(ctx, b.cfg.OrphanGrace, scan); err != nil {
			b.cfg.Logger.Warn("garbage collection failed", "err", err)
		}
		// Held objects the merge has not freed by now become files (see
		// inline.go) — unless that would eat the headroom: they are
		// durable in the log, and a snapshot writes them when it lets the
		// log go.
		if b.background("spill", b.objs.HeldBytes(), 0) {
			if err := b.objs.SpillOlder(b.cfg.HoldFor); err != nil {
				b.cfg.Logger.Warn("writing held objects failed", "err", err)
			}
		}
		b.releaseJournal()
		if b.tail != nil {
			b.cfg.Metrics.UncheckpointedBytes.Set(float64(b.tail.size()))
		}
		b.cfg.Metrics.HeldBytes.Set(float64(b.objs.HeldBytes()))
		addGrowth(b.cfg.Metrics.HeldSpilled, &lastSpilled, b.objs.Spilled())
		addGrowth(b.cfg.Metrics.WALUnzeroed, &lastUnzeroed, b.log.UnzeroedSegments())
		cancel()
	}
}

// cutByStop reports whether a maintenance pass's ctx ended because the
// broker is stopping (maintainLoop cancels it), not because the pass ran
// out of time: what fails then is no failure to report.
func cutByStop(ctx context.Context) bool { return errors.Is(ctx.Err(), context.Canceled) }

// addGrowth adds to c what the running count total has grown by since
// *last, and remembers total.
func addGrowth(c prometheus.Counter, last *int64, total int64) {
	if total > *last { // a counter must not decrease: a count restarted adds nothing
		c.Add(float64(total - *last))
	}
	*last = total
}

// maintain expires streams, applies retention and merges small ranges.
func (b *Broker) maintain(ctx context.Context) {
	// Retention, merges and compaction work on the log's state: what the
	// journal acknowledged joins it first.
	if err := b.checkpoint(ctx); err != nil && !cutByStop(ctx) {
		b.cfg.Logger.Warn("checkpoint before maintenance failed", "err", err)
	}
	now := b.now().UnixNano()
	type owned struct {
		n       *named
		streams []uint64
	}
	var expired []*meta.Entry
	var loaded []owned
	views := b.loadedViews()
	// Copy only what the passes need: with many streams, cloning every
	// entry (producer maps included) each second would dominate.
	b.fsm.View(func(s *meta.State) {
		for name, e := range s.Names {
			if e.Deleted { // kept for its forks: nothing to expire or retain
				continue
			}
			n, ok := views[name]
			if lifetimeOver(n, e.TTL, e.ExpiresAt, e.LastAccess, now) {
				expired = append(expired, e.Clone())
				continue
			}
			if ok {
				loaded = append(loaded, owned{n, append([]uint64(nil), e.Streams...)})
			}
		}
	})
	switch {
	case b.cfg.Cluster != nil:
		// In a cluster the owner of a stream's first partition expires
		// it: the accesses it served extend a sliding TTL in its memory
		// only (persisted every TouchInterval), so another node, the
		// metadata leader included, may see a stream being read as idle.
		expired = slices.DeleteFunc(expired, func(e *meta.Entry) bool {
			return len(e.Streams) == 0 || b.cfg.Ownership.MayOpen(e.Streams[0]) != nil
		})
	case !b.log.IsLeader():
		expired = nil
	}
	for _, e := range expired {
		if err := b.deleteEntry(ctx, e); err == nil {
			b.cfg.Metrics.ExpiredStreams.Inc()
			b.cfg.Logger.Info("stream expired", "name", e.Name)
		}
	}
	// What the merges of this pass may write, in all (the disk's headroom).
	budget := b.backgroundBudget()
	merges := b.newMergeBatch()
	for _, o := range loaded {
		for _, id := range o.streams {
			if ctx.Err() != nil {
				// The broker is stopping (maintainLoop), or the pass is
				// out of time: it ends here, and sends the merges
				// written so far. A stop cuts no failure to report (one
				// warning a stream was what a stop logged); running out
				// of time is one.
				if !cutByStop(ctx) {
					b.cfg.Logger.Warn("maintenance pass out of time: retention and merges of the streams left wait for the next pass", "err", ctx.Err())
				}
				b.sendMerges(ctx, merges)
				return
			}
			if b.cfg.Ownership.MayOpen(id) != nil {
				continue // another node writes it, and rewrites and trims it
			}
			if err := b.persistRetention(ctx, o.n, id); err != nil && !cutByStop(ctx) {
				b.cfg.Logger.Warn("retention failed", "name", o.n.name, "err", err)
			}
			if err := b.merge(ctx, o.n, id, &budget, merges); err != nil && !cutByStop(ctx) {
				b.cfg.Logger.Warn("merge failed", "name", o.n.name, "err", err)
			}
		}
	}
	b.sendMerges(ctx, merges)
}

// sendMerges sends the merges a pass batched. A pass that ended (out of
// time, or the broker stopping) gives them a moment of their own, when a
// leader is known — a cluster stopping as a whole may have no quorum left
// to wait for —: their objects are written, and would otherwise wait as
// orphans for OrphanGrace.
func (b *Broker) sendMerges(ctx context.Context, merges *mergeBatch) {
	if merges == nil || len(merges.replaces) == 0 {
		return
	}
	if ctx.Err() != nil {
		if _, leader := b.log.Leader(); leader == "" {
			return
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
	}
	b.flushMerges(ctx, merges)
}

// persistTouches writes, in one command, the in-memory last accesses that
// moved since they were last persisted: sliding TTLs survive a restart
// within TouchInterval, and no read writes the log.
func (b *Broker) persistTouches(ctx context.Context) {
	at := map[string]int64{}
	var ns []*named
	b.mu.Lock()
	for name, n := range b.named {
		if la := n.lastAccess.Load(); la > n.persistedAccess.Load() {
			at[name] = la
			ns = append(ns, n)
		}
	}
	b.mu.Unlock()
	if len(at) == 0 {
		return
	}
	if _, err := b.apply(ctx, &meta.Command{Op: meta.OpTouch, Touch: &meta.Touch{At: at}}); err != nil {
		b.cfg.Logger.Warn("persisting last accesses failed", "err", err)
		return
	}
	for _, n := range ns {
		n.persistedAccess.Store(at[n.name])
	}
}

// snapshotIfDue takes a snapshot once the log holds InlineLogBytes of frames
// past the last one. (raft's own SnapshotThreshold counts entries, and
// checks them only every SnapshotInterval.)
func (b *Broker) snapshotIfDue() {
	full := b.cfg.Disk != nil && b.cfg.Disk.Full()
	o := b.inline
	o.mu.Lock()
	due := o.logBytes >= b.cfg.InlineLogBytes
	// On a full volume the log's segments hold what deletes and trims
	// released until a snapshot lets them go: take one, at most every 5 s.
	if full && o.logBytes > 0 && time.Since(b.fullSnapshot) >= 5*time.Second {
		b.fullSnapshot, due = time.Now(), true
	}
	o.mu.Unlock()
	if !due {
		return
	}
	snapshot := b.log.Snapshot
	if full {
		// The entries kept for followers' catch-up can hold more bytes
		// than deletes free: a follower behind them gets the snapshot.
		snapshot = func() error { return b.log.SnapshotKeeping(fewTrailingLogs) }
	}
	// A snapshot writes the held objects the log's entries still carry —
	// no more than the log then lets go — so it runs on a full volume
	// too; what it wrote there is counted.
	spilled := b.objs.SpilledBytes()
	err := snapshot()
	if full {
		b.cfg.Disk.WroteWhileFull("snapshot", b.objs.SpilledBytes()-spilled)
	}
	if err != nil {
		b.cfg.Logger.Warn("snapshot of the metadata log failed", "err", err)
	}
}

// Log entries may carry objects' frames (inline commits), so the entries
// kept past a snapshot can be most of the log's bytes: a member keeps
// enough for a follower's short absence, a lone broker, with no follower
// to catch up, only a few (raft's count of entries, not bytes: 1024
// entries of 32 KiB commits were 32 MiB, half a 64 MiB volume).
const (
	fewTrailingLogs    = 32
	memberTrailingLogs = 1024
)

func trailingLogs(cl *ClusterConfig) uint64 {
	if cl == nil {
		return fewTrailingLogs
	}
	return memberTrailingLogs
}
