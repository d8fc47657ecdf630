package replication

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/picomq/picomq/broker/core"
	"github.com/picomq/picomq/broker/objstore"
)

// Store is the placement wrapper (core.Config.Placement): every object
// file it creates is written to this member's store and, at Sync, copied
// to R-1 live peers chosen by rendezvous hashing on (object, member).
type Store struct {
	r     *Replication
	local core.ObjectStore
}

// Placement wraps this member's store; it is core.Config.Placement.
func (r *Replication) Placement(local core.ObjectStore) core.ObjectStore {
	return &Store{r: r, local: local}
}

// Create starts an object on this member's store. Its replication factor
// is decided now (for R = 0, from the members live now); its peers at
// each Sync, from the members live then.
func (s *Store) Create() (core.ObjectWriter, error) {
	w, err := s.local.Create()
	if err != nil {
		return nil, err
	}
	want := s.r.cfg.R
	if want == 0 {
		want = EffectiveR(0, len(s.r.peers())+1)
	}
	if want == 1 {
		return soleWriter{ObjectWriter: w, self: []string{s.r.cfg.Self}}, nil
	}
	hdr := objstore.AppendObjectHeader(make([]byte, 0, objstore.HeaderSize), w.ID())
	return &writer{local: w, r: s.r, want: want, pieces: [][]byte{hdr}, size: objstore.HeaderSize}, nil
}

// soleWriter is an object of R = 1: this member's copy, named in the
// commit so that the others fetch from it.
type soleWriter struct {
	core.ObjectWriter
	self []string
}

func (w soleWriter) Replicas() []string { return append([]string(nil), w.self...) }

// writer writes an object locally and keeps what its peers must receive:
// the header, and each frame's header and payload (a copy for AppendFrame,
// the caller's own bytes for AppendFrameRef, which stay valid until Sync
// returns). It is used by one goroutine at a time, as core.ObjectWriter
// says. A Sync sends the whole object, so a frame after a Sync that sent
// frames by reference is refused (see errAppendAfterSync).
type writer struct {
	local core.ObjectWriter
	r     *Replication
	want  int // R for this object

	pieces [][]byte // the object as it will be sent
	hdrs   []byte   // frame headers of AppendFrameRef, sliced into pieces
	size   int64    // bytes in pieces: the object's size

	synced   int64    // size when the last Sync succeeded (0: none did)
	byRef    bool     // some pieces are callers' payloads (AppendFrameRef)
	replicas []string // this member, then the peers, after a Sync succeeded
	err      error    // the first failure; the writer is unusable after it
	closed   bool
}

func (w *writer) ID() uint64  { return w.local.ID() }
func (w *writer) Size() int64 { return w.local.Size() }

func (w *writer) AppendFrame(payload []byte) (int64, int64, error) {
	if err := w.appendable(); err != nil {
		return 0, 0, err
	}
	pos, n, err := w.local.AppendFrame(payload)
	if err != nil {
		return pos, n, err
	}
	// The caller may reuse payload at once: keep the frame as sent.
	frame := objstore.AppendFrame(make([]byte, 0, n), payload)
	return pos, n, w.kept(pos, n, frame)
}

func (w *writer) AppendFrameRef(payload []byte) (int64, int64, error) {
	if err := w.appendable(); err != nil {
		return 0, 0, err
	}
	pos, n, err := w.local.AppendFrameRef(payload)
	if err != nil {
		return pos, n, err
	}
	// Appending may move hdrs to a new array; the headers already in
	// pieces keep the old one, unchanged.
	at := len(w.hdrs)
	w.hdrs = objstore.AppendFrameHeader(w.hdrs, payload)
	w.byRef = true
	return pos, n, w.kept(pos, n, w.hdrs[at:len(w.hdrs):len(w.hdrs)], payload)
}

// kept records a frame the local store placed at pos; a position other
// than the end of what is kept means the two disagree on the object, and
// no copy of it may be made.
func (w *writer) kept(pos, n int64, pieces ...[]byte) error {
	if pos != w.size {
		w.err = fmt.Errorf("replication: object %016x: the local store placed a frame at %d, the copy ends at %d", w.ID(), pos, w.size)
		return w.err
	}
	w.pieces = append(w.pieces, pieces...)
	w.size += n
	return nil
}

func (w *writer) usable() error {
	if w.closed {
		return objstore.ErrClosed
	}
	return w.err
}

// errAppendAfterSync refuses a frame after a Sync that sent frames by
// reference: their bytes are the caller's again, and the next Sync would
// have to send the whole object anew. (The core appends, syncs once and
// closes.)
var errAppendAfterSync = errors.New("replication: a frame appended after a Sync of frames appended by reference: the object could not be copied whole again")

// appendable is usable for a new frame.
func (w *writer) appendable() error {
	if err := w.usable(); err != nil {
		return err
	}
	if w.byRef && w.replicas != nil {
		return fmt.Errorf("object %016x: %w", w.ID(), errAppendAfterSync)
	}
	return nil
}

// Sync makes the object durable on this member and on up to R-1 live
// peers, the local fdatasync and the copies at once; it returns nil when
// the local copy and a write quorum of R (a majority: 2 of 3) are durable,
// after every copy was answered. Fewer live peers than a quorum needs, or
// fewer copies durable, is REPLICATION_FAILED; a local failure is the
// local store's. After a failure the writer is unusable (Abort it); the
// copies some peers made are orphans there, collected after their grace.
func (w *writer) Sync() error {
	if err := w.usable(); err != nil {
		return err
	}
	if w.replicas != nil && w.synced == w.size {
		return nil // nothing appended since the last Sync
	}
	id := w.ID()
	live := w.r.peers()
	peers := choose(id, live, w.want-1)
	quorum := WriteQuorum(w.want)
	if len(peers)+1 < quorum {
		w.r.m.CopyFailures.WithLabelValues(reasonTooFew).Inc()
		w.err = ReplicationFailed.With("object", id, "wanted", w.want, "got", 0, "live", len(live)+1,
			"reason", fmt.Sprintf("%d live members, this one included; a write quorum of %d needed", len(live)+1, quorum))
		return w.err
	}
	if len(peers) < w.want-1 {
		w.r.m.CopyFailures.WithLabelValues(reasonTooFew).Inc()
	}

	failures := make([]error, len(peers))
	var wg sync.WaitGroup
	for i, p := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			failures[i] = w.r.copyTo(p, id, w.pieces, w.size)
		}()
	}
	lerr := w.local.Sync()
	wg.Wait()
	if lerr != nil {
		w.err = lerr
		return lerr
	}
	var failed []string
	var causes []error
	w.replicas = make([]string, 0, 1+len(peers))
	w.replicas = append(w.replicas, w.r.cfg.Self)
	for i, err := range failures {
		if err != nil {
			failed = append(failed, peers[i].ID)
			causes = append(causes, fmt.Errorf("%s: %w", peers[i].ID, err))
		} else {
			w.replicas = append(w.replicas, peers[i].ID)
		}
	}
	if got := len(w.replicas); got < quorum {
		cause := errors.Join(causes...)
		w.replicas = nil
		w.err = ReplicationFailed.Wrap(cause, "object", id, "wanted", w.want, "got", got,
			"failed", strings.Join(failed, ","), "reason", fmt.Sprintf("copies to peers failed: %d durable, a write quorum of %d needed", got, quorum))
		w.r.cfg.Logger.Warn("object not replicated", "object", id, "wanted", w.want, "failed", failed, "err", cause)
		return w.err
	}
	if len(w.replicas) < w.want {
		// Durable on a write quorum: committed with the copies it has;
		// repair makes the missing ones (UnderReplicated counts it).
		w.r.cfg.Logger.Info("object durable on a write quorum, not on every replica: repair makes the rest",
			"object", id, "wanted", w.want, "got", len(w.replicas), "failed", failed, "live", len(live)+1, "err", errors.Join(causes...))
	}
	w.synced = w.size
	return nil
}

// Replicas names this member and the peers holding a durable copy, once
// a Sync succeeded (nil before).
func (w *writer) Replicas() []string { return append([]string(nil), w.replicas...) }

// Close syncs what no Sync has yet (on every replica, as Sync does) and
// closes the local object.
func (w *writer) Close() error {
	if !w.closed {
		if w.err == nil && (w.replicas == nil || w.synced != w.size) {
			if err := w.Sync(); err != nil {
				return err
			}
		}
		if w.err != nil {
			return w.err
		}
		w.closed = true
		w.drop()
	}
	return w.local.Close()
}

// Abort discards the local object. Copies already made stay as orphans
// on their peers until collected: no commit will name them.
func (w *writer) Abort() {
	w.closed = true
	w.drop()
	w.local.Abort()
}

// drop forgets the pieces, so the writer no longer keeps its callers'
// payloads.
func (w *writer) drop() {
	clear(w.pieces)
	w.pieces, w.hdrs = nil, nil
}
