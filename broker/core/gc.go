package core

import (
	"context"
	"slices"
	"time"

	"github.com/picomq/picomq/broker/meta"
)

// orphanScanEvery is how often the maintenance loop looks for orphans: a
// quarter of OrphanGrace, at most a minute, at least every pass. Orphans
// come only from failed or abandoned writes (a crash's are removed at
// start), so a late one costs a little disk for a little longer.
func orphanScanEvery(c Config) time.Duration {
	return max(min(c.OrphanGrace/4, time.Minute), c.MaintenanceInterval)
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
	// Every member deletes its own copies; one, the metadata leader, tells
	// the log (a copy another member still holds then is an orphan there,
	// collected after OrphanGrace).
	// A tiered one is forgotten only once its key in object storage is
	// deleted too (tier.go's deleteTieredGarbage): the log is what names
	// the key.
	b.fsm.View(func(s *meta.State) {
		deleted = slices.DeleteFunc(deleted, func(id uint64) bool { return !b.tierKeyDeleted(s, id) })
	})
	if len(deleted) > 0 && b.log.IsLeader() {
		if _, err := b.apply(ctx, &meta.Command{Op: meta.OpObjectsDeleted, ObjectsDeleted: &meta.ObjectsDeleted{IDs: deleted}}); err != nil {
			return err
		}
		b.forgetDeleted(deleted)
		b.cfg.Metrics.ObjectsDeleted.Add(float64(len(deleted)))
	}
	if !orphans {
		return nil
	}
	if b.cfg.Cluster != nil {
		// A member's state is only as complete as its log's last contact
		// with the leader: at start a follower has applied nothing yet, and
		// a file it holds may be a replica it acknowledged whose commit it
		// has not applied. So a member collects orphans only while it is
		// in contact, only files older than OrphanGrace, and only once it
		// has run for OrphanGrace itself (a file's age says nothing of the
		// commits the member missed while it was down).
		if grace == 0 || time.Since(b.opened) < grace || !b.log.InContact(5*time.Second) {
			return nil
		}
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
		// Looked at again, the journal's tail first: an object leaves it
		// only once a checkpoint put it in the state, so one that left
		// after the look above is in the state now.
		if b.tail.holds(info.ID) {
			continue
		}
		committed := false
		b.fsm.View(func(s *meta.State) { _, committed = s.Objects[info.ID] })
		if committed {
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
