package core

import (
	"bytes"
	"errors"
	"fmt"
	"sync"

	"github.com/picomq/picomq/broker/meta"
	"github.com/picomq/picomq/broker/objstore"
)

// Inline commits.
//
// An append is acknowledged once its object is durable and its commit
// applied: two fsyncs in series, the object's and the metadata log's. For
// a small object (up to Config.InlineBytes) the flusher instead puts the
// frames in the commit command, so the log's one fsync makes them durable,
// and holds the object in memory (objstore.Hold): no file is created,
// written or synced on the append's path. Reads are served from memory.
// Most such objects are merged into segments within seconds and never
// become files; the rest are written to files (objstore.Spill, without
// fdatasync) once held for Config.HoldFor, or when too many bytes are held.
//
// Before the log may drop their entries, such objects are made durable: a
// snapshot's Persist first writes every object committed inline since the
// last snapshot that is still held, then syncs them all, names included
// (objstore.SyncObjects), and raft compacts the log only after a snapshot
// is persisted. When the log is replayed at start — after a crash such an
// object's file may be torn, gone or never written — each object still
// referenced once the replay is done is held in memory again from its
// entry (objstore.Restore), as if just committed; those the log merged or
// deleted since are never written at all. (Writing a file for each during
// the replay made a start after a crash take seconds per ten thousand
// small objects, all before the broker could answer.) A read never sees
// the difference.
type inlineObjects struct {
	dir  string                               // the objects directory
	sync func(dir string, ids []uint64) error // Config.syncObjects

	mu       sync.Mutex
	store    *objstore.Store // set once the store is open (after the replay)
	unsynced []uint64        // committed inline, not yet fdatasynced
	logBytes int64           // frames applied since the last snapshot began

	// replayed holds the frames of the objects the replay met, in log
	// order, until restore holds them in the store.
	replayed []replayedObject
}

type replayedObject struct {
	id     uint64
	frames []byte
}

func newInlineObjects(dir string, sync func(dir string, ids []uint64) error) *inlineObjects {
	return &inlineObjects{dir: dir, sync: sync}
}

// restore gives the snapshots the store holding the objects, once the
// replay is done, and holds in it again every replayed object that st, the
// state the replay left, still references.
func (o *inlineObjects) restore(s *objstore.Store, st *meta.State) error {
	o.mu.Lock()
	replayed := o.replayed
	o.mu.Unlock()
	for _, r := range replayed {
		if _, ok := st.Objects[r.id]; !ok {
			continue // merged, trimmed or deleted later in the log
		}
		if _, err := s.Restore(r.id, r.frames); err != nil {
			return err
		}
	}
	// Only now may a snapshot let the log drop the entries: every object
	// is held (a snapshot spills it) or in its file.
	o.mu.Lock()
	o.store, o.replayed = s, nil
	o.mu.Unlock()
	return nil
}

// applied runs on the log's apply goroutine after each command. Another
// node's open of a partition this node writes fences it here. A commit
// carrying frames of an object this broker does not hold is one the
// replay at start meets: its frames wait for restore. Once the store is
// open, it is held (see below).
func (b *Broker) applied(c *meta.Command, res any) {
	b.cfg.Metrics.MetadataCommands.WithLabelValues(string(c.Op)).Inc()
	if c.Op == meta.OpOpen && c.Open != nil && c.Open.Owner != b.self() {
		if r, ok := res.(*meta.OpenResult); ok {
			b.fence(c.Open.Stream, r.Internal.Epoch)
		}
		return
	}
	if c.Op != meta.OpCommit || c.Commit == nil || len(c.Commit.Frames) == 0 {
		return
	}
	o, id := b.inline, c.Commit.Object
	o.mu.Lock()
	o.unsynced = append(o.unsynced, id)
	o.logBytes += int64(len(c.Commit.Frames))
	if o.logBytes >= b.cfg.InlineLogBytes {
		// Due now: a burst of appends fills the log with frames faster
		// than the maintenance loop ticks — 44 MiB in 0.6 s on a small
		// volume, all of it to be written out before the log may let it
		// go, more than the volume's headroom holds.
		select {
		case b.snapshotDue <- struct{}{}:
		default:
		}
	}
	store := o.store
	if store == nil {
		// The log may reuse the entry's buffer once Apply returns.
		o.replayed = append(o.replayed, replayedObject{id, bytes.Clone(c.Commit.Frames)})
		o.mu.Unlock()
		return
	}
	o.mu.Unlock()
	if store.Held(id) {
		return
	}
	// Another member's object (or this one's, spilled before its commit
	// applied): held in memory like the owner's own, and written by the
	// next snapshot or once older than HoldFor — not a file per commit,
	// which cost followers an open, a write and a close per group commit.
	// The log keeps its frames until then.
	if _, err := store.Restore(id, c.Commit.Frames); err != nil {
		// Reads of its ranges will report the object corrupt or missing;
		// the entry stays in the log, and the next start tries again.
		b.cfg.Logger.Error("keeping an object from its commit in the metadata log failed", "object", id, "err", err)
	}
}

// snapshotting runs as the log takes a snapshot of state st: the objects
// committed inline so far that st still references must be durable before
// the snapshot lets the log drop their entries.
func (b *Broker) snapshotting(st *meta.State) func() error {
	o := b.inline
	o.mu.Lock()
	if o.store == nil && len(o.replayed) > 0 {
		// A snapshot taken while the log replays (raft.RecoverCluster
		// takes one before the node starts): the objects met so far are
		// in memory only, so the snapshot writes the files of those st
		// references before the log may drop their entries. The store,
		// once open, finds them there (Restore keeps an identical file).
		var keep []replayedObject
		for _, r := range o.replayed {
			if _, ok := st.Objects[r.id]; ok {
				keep = append(keep, r)
			}
		}
		o.mu.Unlock()
		return func() error {
			ids := make([]uint64, 0, len(keep))
			for _, r := range keep {
				if err := objstore.EnsureObject(o.dir, r.id, r.frames); err != nil {
					return fmt.Errorf("%w: %w", errReplaying, err)
				}
				ids = append(ids, r.id)
			}
			if err := o.sync(o.dir, ids); err != nil {
				return fmt.Errorf("%w: %w", errReplaying, err)
			}
			return nil
		}
	}
	ids, store := o.unsynced, o.store
	o.unsynced, o.logBytes = nil, 0
	o.mu.Unlock()
	// An object no range references in st — merged into a segment or
	// deleted, its memory waiting out GarbageGrace — is never read from
	// this snapshot on (no command references an object again), so it needs
	// no file: writing one would create, write and delete a file for
	// nothing, and under small appends most held objects are such.
	live := ids[:0]
	for _, id := range ids {
		if _, ok := st.Objects[id]; ok {
			live = append(live, id)
		}
	}
	ids = live
	if len(ids) == 0 {
		return nil
	}
	return func() error {
		var err error
		if store != nil { // nil while the log replays an empty log
			err = store.Spill(ids)
		}
		if err == nil {
			err = o.sync(o.dir, ids)
		}
		if err != nil {
			o.mu.Lock()
			o.unsynced = append(o.unsynced, ids...)
			o.mu.Unlock()
			b.cfg.Logger.Error("syncing inline-committed objects failed; the snapshot waits", "objects", len(ids), "err", err)
			return err
		}
		return nil
	}
}

// errReplaying fails a snapshot taken while the log replays whose objects'
// files could not be written.
var errReplaying = errors.New("broker/core: writing the objects a replaying log holds for its snapshot failed; the snapshot waits")
