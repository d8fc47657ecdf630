package core

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/picomq/picomq/broker/meta"
	"github.com/picomq/picomq/broker/stream"
)

// retain applies the retention policy of one partition now: it trims the
// leading ranges (frames) whose records are all older than RetainFor, and
// those that keep the partition above RetainBytes. Reads and appends call
// it, so retention is exact at the moment anyone looks; it writes the log
// only when something is due, never per request.
func (b *Broker) retain(ctx context.Context, n *named, id uint64) error {
	n.mu.Lock()
	p := n.policy
	n.mu.Unlock()
	if p.RetainFor <= 0 && p.RetainBytes <= 0 {
		return nil
	}
	var before uint64
	var due bool
	now := b.now().UnixNano()
	b.fsm.View(func(s *meta.State) {
		in, ok := s.Streams[id]
		if !ok {
			return
		}
		before = in.Start
		bytes := in.Bytes()
		for _, r := range in.Ranges {
			old := p.RetainFor > 0 && r.MaxTime <= now-int64(p.RetainFor)
			over := p.RetainBytes > 0 && bytes > p.RetainBytes
			if !old && !over {
				break
			}
			before = r.Next
			bytes -= r.Bytes
			due = true
		}
	})
	if !due {
		return nil
	}
	if _, err := b.apply(ctx, &meta.Command{Op: meta.OpTrim, Trim: &meta.Trim{Stream: id, Before: before}}); err != nil {
		return err
	}
	b.cfg.Metrics.TrimmedRanges.Inc()
	n.freed()
	return nil
}

// Trim makes before the first offset of a partition.
func (b *Broker) Trim(ctx context.Context, name string, partition int, before uint64) error {
	if err := context.Cause(ctx); err != nil {
		return err
	}
	n, id, err := b.partitionOf(name, partition)
	if err != nil {
		return err
	}
	// A trim inside a range keeps the range: measure the bytes it makes
	// unreadable, so that MaxBytes and RetainBytes count only the rest.
	var skip int64
	err = lookAgainIfCollected(func() error {
		in, ok := b.fsm.Internal(id)
		if !ok {
			return meta.StreamNotFound.With("name", name)
		}
		if err := stream.CheckOffset(partition, stream.Offset(before), stream.BoundsValue{First: stream.Offset(in.Start), Next: stream.Offset(in.End)}); err != nil {
			return err
		}
		skip = 0
		if i := in.RangeAt(before); i < len(in.Ranges) && in.Ranges[i].First < before {
			recs, err := b.decodeRange(in.Ranges[i], 0)
			if err != nil {
				return err
			}
			for _, r := range recs {
				if r.off < before {
					skip += int64(len(r.key) + len(r.value))
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	res, err := b.apply(ctx, &meta.Command{Op: meta.OpTrim, Trim: &meta.Trim{Stream: id, Before: before, SkipBytes: skip}})
	if err != nil {
		return err
	}
	if err, ok := res.(error); ok {
		return err
	}
	n.freed()
	return nil
}

// OffsetAt returns the first offset of a partition appended at or after t.
func (b *Broker) OffsetAt(ctx context.Context, name string, partition int, t time.Time) (uint64, error) {
	if err := context.Cause(ctx); err != nil {
		return 0, err
	}
	n, id, err := b.partitionOf(name, partition)
	if err != nil {
		return 0, err
	}
	if err := b.retain(ctx, n, id); err != nil {
		return 0, err
	}
	var at uint64
	err = lookAgainIfCollected(func() (err error) {
		at, err = b.offsetAt(name, id, t)
		return err
	})
	return at, err
}

// offsetAt looks the ranges up and reads the frames OffsetAt needs.
func (b *Broker) offsetAt(name string, id uint64, t time.Time) (uint64, error) {
	in, ok := b.fsm.Internal(id)
	if !ok {
		return 0, meta.StreamNotFound.With("name", name)
	}
	ns := t.UnixNano()
	for _, r := range in.Ranges {
		if r.MaxTime < ns || r.Next <= in.Start {
			continue
		}
		payload, err := b.frame(r)
		if err != nil {
			return 0, err
		}
		found, at := false, uint64(0)
		if err := decodeFrame(payload, func(off uint64, ts int64, _, _ []byte) bool {
			if off >= in.Start && off < r.Next && ts >= ns {
				found, at = true, off
				return false
			}
			return true
		}); err != nil {
			return 0, b.corrupt(r, err)
		}
		if found {
			return at, nil
		}
	}
	return in.End, nil
}

// Commit records next as the offset group reads next on a partition.
func (b *Broker) Commit(ctx context.Context, name, group string, partition int, next uint64) error {
	if err := context.Cause(ctx); err != nil {
		return err
	}
	if err := stream.CheckGroup(group); err != nil {
		return err
	}
	_, id, err := b.partitionOf(name, partition)
	if err != nil {
		return err
	}
	res, err := b.apply(ctx, &meta.Command{Op: meta.OpGroup, Group: &meta.GroupOffset{Stream: id, Group: group, Next: next}})
	if err != nil {
		return err
	}
	if err, ok := res.(error); ok {
		return err
	}
	return nil
}

// Committed returns the offset group committed last on a partition.
func (b *Broker) Committed(ctx context.Context, name, group string, partition int) (uint64, error) {
	if err := context.Cause(ctx); err != nil {
		return 0, err
	}
	if err := stream.CheckGroup(group); err != nil {
		return 0, err
	}
	_, id, err := b.partitionOf(name, partition)
	if err != nil {
		return 0, err
	}
	in, ok := b.fsm.Internal(id)
	if !ok {
		return 0, meta.StreamNotFound.With("name", name)
	}
	next, ok := in.Groups[group]
	if !ok {
		return 0, stream.NoCommit(group, partition)
	}
	return next, nil
}

// expired reports whether a stream's lifetime is over at now.
func (b *Broker) expired(e *meta.Entry, now int64) bool {
	return b.expiredAt(e.Name, e.TTL, e.ExpiresAt, e.LastAccess, now)
}

// expiredAt is expired on the entry's lifetime fields: an absolute expiry
// passed, or a TTL since the later of the persisted and the in-memory last
// access. It takes b.mu, so it must not run inside a state machine View:
// there, use lifetimeOver with a snapshot of the views (loadedViews).
func (b *Broker) expiredAt(name string, ttl, expiresAt, lastAccess, now int64) bool {
	b.mu.Lock()
	n := b.named[name]
	b.mu.Unlock()
	return lifetimeOver(n, ttl, expiresAt, lastAccess, now)
}

// lifetimeOver is expiredAt's rule, taking no lock: n, the stream's loaded
// view or nil, supplies the in-memory last access.
func lifetimeOver(n *named, ttl, expiresAt, lastAccess, now int64) bool {
	if expiresAt > 0 && now >= expiresAt {
		return true
	}
	if ttl > 0 {
		if n != nil {
			lastAccess = max64(lastAccess, n.lastAccess.Load())
		}
		return now-lastAccess >= ttl
	}
	return false
}

// loadedViews copies the map of loaded stream views. Passes that walk the
// registry inside a View read it instead of taking b.mu there: a View
// holds the state machine's read lock, and a goroutine holding b.mu may be
// waiting, through n.mu, on a command that needs the write lock.
func (b *Broker) loadedViews() map[string]*named {
	b.mu.Lock()
	defer b.mu.Unlock()
	views := make(map[string]*named, len(b.named))
	for k, v := range b.named {
		views[k] = v
	}
	return views
}

// Touch records an access for the sliding TTL, in memory: the maintenance
// loop persists it lazily.
func (b *Broker) Touch(name string) {
	if n, err := b.stream(name); err == nil {
		n.lastAccess.Store(max64(n.lastAccess.Load(), b.now().UnixNano()))
	}
}

func (b *Broker) maintainLoop() {
	t := time.NewTicker(b.cfg.MaintenanceInterval)
	defer t.Stop()
	lastTouch, lastOrphanScan := time.Now(), time.Now()
	var lastSpilled, lastUnzeroed int64
	// A log replayed at start may be past its snapshot threshold already: a
	// broker that keeps crashing within its first pass would otherwise let
	// it grow, and each start replay more.
	b.snapshotIfDue()
	for {
		select {
		case <-b.stop:
			b.persistTouches(context.Background())
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		b.maintain(ctx)
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
		// inline.go).
		if err := b.objs.SpillOlder(b.cfg.HoldFor); err != nil {
			b.cfg.Logger.Warn("writing held objects failed", "err", err)
		}
		b.cfg.Metrics.HeldBytes.Set(float64(b.objs.HeldBytes()))
		addGrowth(b.cfg.Metrics.HeldSpilled, &lastSpilled, b.objs.Spilled())
		addGrowth(b.cfg.Metrics.WALUnzeroed, &lastUnzeroed, b.log.UnzeroedSegments())
		cancel()
	}
}

// addGrowth adds to c what the running count total has grown by since
// *last, and remembers total.
func addGrowth(c prometheus.Counter, last *int64, total int64) {
	c.Add(float64(total - *last))
	*last = total
}

// orphanScanEvery is how often the maintenance loop looks for orphans: a
// quarter of OrphanGrace, at most a minute, at least every pass. Orphans
// come only from failed or abandoned writes (a crash's are removed at
// start), so a late one costs a little disk for a little longer.
func orphanScanEvery(c Config) time.Duration {
	return max(min(c.OrphanGrace/4, time.Minute), c.MaintenanceInterval)
}

// maintain expires streams, applies retention and merges small ranges.
func (b *Broker) maintain(ctx context.Context) {
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
	for _, e := range expired {
		if err := b.deleteEntry(ctx, e); err == nil {
			b.cfg.Metrics.ExpiredStreams.Inc()
			b.cfg.Logger.Info("stream expired", "name", e.Name)
		}
	}
	for _, o := range loaded {
		for _, id := range o.streams {
			if err := b.retain(ctx, o.n, id); err != nil {
				b.cfg.Logger.Warn("retention failed", "name", o.n.name, "err", err)
			}
			if err := b.merge(ctx, o.n, id); err != nil {
				b.cfg.Logger.Warn("merge failed", "name", o.n.name, "err", err)
			}
		}
	}
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

// collectGarbage deletes the files of garbage objects and, when orphans is
// set, of objects older than grace that no command ever committed (at start,
// grace 0: every one). Finding orphans lists and stats the whole objects
// directory, so the maintenance loop does it only every orphanScanEvery.
func (b *Broker) collectGarbage(ctx context.Context, grace time.Duration, orphans bool) error {
	var garbage []uint64
	known := map[uint64]bool{}
	b.fsm.View(func(s *meta.State) {
		for id := range s.Garbage {
			garbage = append(garbage, id)
		}
		if orphans {
			for id := range s.Objects {
				known[id] = true
			}
		}
	})
	var deleted []uint64
	now := time.Now()
	b.gcMu.Lock()
	defer b.gcMu.Unlock()
	seen := map[uint64]time.Time{}
	for _, id := range garbage {
		// A read may have looked its ranges up just before they became
		// garbage: keep the file GarbageGrace longer (not at start, when
		// nothing reads yet). A held object, never a file, goes at once:
		// such a read finds it gone and looks again (lookAgainIfCollected),
		// and a spill in the meantime would write it for nothing.
		if grace > 0 && !b.objs.Held(id) {
			since, ok := b.garbageSince[id]
			if !ok {
				since = now
			}
			seen[id] = since
			if now.Sub(since) < b.cfg.GarbageGrace {
				continue
			}
		}
		delete(seen, id)
		b.frames.dropObject(id)
		if err := b.objs.Remove(id); err != nil {
			return err
		}
		deleted = append(deleted, id)
	}
	b.garbageSince = seen
	if len(deleted) > 0 {
		if _, err := b.apply(ctx, &meta.Command{Op: meta.OpObjectsDeleted, ObjectsDeleted: &meta.ObjectsDeleted{IDs: deleted}}); err != nil {
			return err
		}
		b.cfg.Metrics.ObjectsDeleted.Add(float64(len(deleted)))
	}
	if !orphans {
		return nil
	}
	infos, err := b.objs.List()
	if err != nil {
		return err
	}
	cutoff := time.Now().Add(-grace)
	for _, info := range infos {
		if _, waiting := seen[info.ID]; waiting || known[info.ID] || (grace > 0 && info.ModTime.After(cutoff)) {
			continue
		}
		// Never committed (or committed and already forgotten as garbage).
		if err := b.objs.Remove(info.ID); err != nil {
			return err
		}
		b.cfg.Metrics.ObjectsDeleted.Inc()
		b.cfg.Logger.Info("removed uncommitted object", "object", info.ID, "size", info.Size)
	}
	return nil
}
