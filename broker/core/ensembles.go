package core

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/picomq/picomq/broker/ensemble"
	"github.com/picomq/picomq/broker/journal"
	"github.com/picomq/picomq/broker/meta"
	"github.com/picomq/picomq/broker/objstore"
	"github.com/picomq/picomq/broker/stream"
)

// The ensemble data path: a cluster member's appends commit in the
// journals of its ensemble, and the metadata log takes them in
// checkpoints, as a lone broker's do in its one journal (journal.go). The
// decisions beyond journal.go's, each for a reason (DESIGN.md,
// "Ensembles", "Recovery on open"):
//
//  10. An owner's ensemble is chosen by Peers.Ensemble when it opens a
//      stream and recorded in the open (meta.Internal.Ensemble). An
//      object goes to every member of the ensembles of its streams —
//      itself through its own journal, the others through Peers.Append —
//      and is acknowledged once a write quorum of each has it durable
//      (replicate); the flusher settles objects in order, so an append is
//      never acknowledged before an earlier one of its stream. A member
//      that does not answer is sent the same bytes again until the ack
//      timeout; a refusal (fenced, conflict) is final. Those not durable
//      at the quorum go on receiving it in the background (straggleFor;
//      a restarting member gets it once back). Its checkpoint names among
//      its replicas the members that hold it or are still being sent it
//      (holders), as a member down less than repair's grace counts as a
//      copy; one whose straggling failed is never named for long: before
//      the checkpoint the tail leaves it out, after it the owner takes it
//      out of the set (unname.go) — repair counts each name as a copy and
//      copies from it, so a name without one would hide a missing copy. A
//      close (a hand-off, a stop) first lets the stragglers answer, for a
//      second at most: the next owner's fence would refuse them, after
//      the close's checkpoint named them, and a stopping owner would not
//      be there to take the names out.
//  11. An object that cannot reach a quorum answers its appends
//      APPEND_OUTCOME_UNKNOWN and rolls their streams back to a new epoch,
//      whose open recovers: it may adopt the object (it is durable
//      somewhere), never acknowledge it twice. Nothing latches: other
//      streams go on.
//  12. Recovery is one command: the opener fences the stream at the next
//      epoch on every member of its recorded ensemble, reads what a read
//      quorum hold past the stream's end (ensemble.Recover), makes each
//      adopted object readable here (a synced file), and proposes the open
//      with those appends (meta.Open.Expect, Recovered). Everything before
//      the new epoch is then in the state, so only the last open's
//      ensemble is ever read — never an older one's. Two openers both
//      fence; one commits, the other is refused STALE_EPOCH — and builds
//      its open again at the epoch now current if the slot is still its
//      own (the other's open was sent before a hand-off back; named.go
//      applyOpen). An open first lets the appends in flight at the epoch
//      it ends be answered (openPart): its fence would make them unknown.
//  13. A member holds its peers' objects in its journal until the state
//      says what they are: one a checkpoint names among its replicas is
//      written to a file of its own (then served as any replica is); one
//      no checkpoint names it for (none at all, a straggler's late copy,
//      a copy moved off it) whose every part is behind its stream's end
//      or epoch is dead. A segment is dropped once each of its objects is
//      one or the other — on metadata evidence, never by age.
//  14. A close by the owner after every acknowledged append is
//      checkpointed forgets the ensemble (meta.Close.Drained): the next
//      open need read nobody. A close of streams a dead process left open
//      keeps it.
//  15. A member removed for good never answers again: a recorded
//      ensemble whose removals leave fewer than a read quorum (the
//      explicit recovery of a lost quorum) recovers from every member left,
//      all of which must answer, and logs what it may have lost.
//  16. An ensemble changes by a reopen (Reensemble): when a member of it
//      is gone (removed, draining, down past its Lease) and a replacement
//      is live, the owner lets the partition's admitted appends finish
//      and opens it again — its own recovery at the next epoch, with the
//      new ensemble. One command, the same open every failover makes; no
//      append is acknowledged with a quorum of neither ensemble, because
//      none is in flight across it. Partitions the log records open that
//      no process here opened (an earlier process of this member, or the
//      slot's previous holder, opened them and no append came since) are
//      opened here the same way, in the slots this member holds. A drain
//      waits until no open partition names the leaver. An ensemble smaller
//      than the one Peers.Ensemble chooses now (opened while fewer members
//      were live) grows the same way: its objects would otherwise each
//      have fewer copies than R, for the repair to make again, one by one.

// Peers is the ensemble data path's reach to the other members' journals
// (the cluster room's, over journalpeer). Members are named by their ids.
type Peers interface {
	// Ensemble is the members that will hold this owner's new objects:
	// itself first, then R-1 live others.
	Ensemble() ([]string, error)
	// Append makes o durable in member's journal; an error that is no
	// refusal says nothing of whether it was written.
	Append(ctx context.Context, member string, o journal.Object) error
	// Fence raises stream's fence to epoch at member and returns the
	// parts of stream it holds from before the fence.
	Fence(ctx context.Context, member string, stream uint64, epoch int64) ([]journal.Ref, error)
	// Read returns object id as member holds it.
	Read(ctx context.Context, member string, id uint64) (journal.Object, error)
}

// Defaults of the ensemble path.
const (
	// DefaultAckTimeout is Config.AckTimeout unless set: how long an
	// object may wait for its write quorum before its appends are
	// answered APPEND_OUTCOME_UNKNOWN.
	DefaultAckTimeout = 5 * time.Second
	// straggleFor is how long an object is still sent, in the background,
	// to the members that were not durable at its quorum.
	straggleFor = 30 * time.Second
	// fenceGrace is how long a recovery waits for the rest of an ensemble
	// once a read quorum answered its fences.
	fenceGrace = 200 * time.Millisecond
)

// objectEnsembles are the distinct ensembles of a batch's appends.
func objectEnsembles(live []*pendingAppend) [][]string {
	var out [][]string
	for _, p := range live {
		e := p.ensemble
		if len(e) > 0 && !slices.ContainsFunc(out, func(o []string) bool { return slices.Equal(o, e) }) {
			out = append(out, e)
		}
	}
	return out
}

// replicate makes o durable on a write quorum of every ensemble (decision
// 10) and returns the members that hold it or are still being sent it,
// less those whose straggling fails later. A failure of this member's own
// journal is returned as it is (journal.go, decision 7); any other shortfall
// is ensemble.QuorumLost.
func (b *Broker) replicate(o journal.Object, ensembles [][]string) (*holders, error) {
	var members []string
	for _, e := range ensembles {
		for _, m := range e {
			if !slices.Contains(members, m) {
				members = append(members, m)
			}
		}
	}
	if !slices.Contains(members, b.self()) {
		members = append([]string{b.self()}, members...)
	}
	type answer struct {
		member string
		err    error
	}
	answers := make(chan answer, len(members))
	ctx, cancel := context.WithTimeout(context.Background(), straggleFor)
	ackBy := time.Now().Add(b.cfg.AckTimeout)
	for _, m := range members {
		go func() {
			if m == b.self() {
				answers <- answer{m, b.journal.Append(o)}
				return
			}
			answers <- answer{m, b.sendUntil(ctx, m, o)}
		}()
	}
	durable := map[string]bool{}
	failed := map[string]error{}
	held := newHolders(members)
	quorate := func() (bool, error) {
		for _, e := range ensembles {
			have, lost := 0, 0
			for _, m := range e {
				switch {
				case durable[m]:
					have++
				case failed[m] != nil:
					lost++
				}
			}
			need := ensemble.WriteQuorum(len(e))
			if have < need {
				if len(e)-lost < need {
					var first error
					for _, m := range e {
						if failed[m] != nil && first == nil {
							first = failed[m]
						}
					}
					return false, ensemble.QuorumLost.Wrap(first, "object", o.ID, "ensemble", e, "durable", have, "need", need)
				}
				return false, nil
			}
		}
		return true, nil
	}
	// A process paused (SIGSTOP) meets its timers first when it resumes:
	// the timeout decides only once this member's own journal answered —
	// its failure latches (decision 7), never the timer.
	timeout := time.NewTimer(time.Until(ackBy))
	defer timeout.Stop()
	timedOut := false
	pending := len(members)
	for {
		select {
		case a := <-answers:
			pending--
			held.answer(a.member, a.err)
			switch {
			case a.err == nil:
				durable[a.member] = true
			case a.member != b.self():
				failed[a.member] = a.err
			case errors.Is(a.err, journal.Fenced):
				// A new owner fenced this one's own journal: the stream
				// moved on, nothing is broken here.
				cancel()
				return nil, ensemble.QuorumLost.Wrap(a.err, "object", o.ID, "reason", "fenced here by a newer epoch")
			default:
				cancel()
				return nil, a.err
			}
		case <-timeout.C:
			timedOut = true
		}
		if !durable[b.self()] {
			continue // this member's journal answers first (it may have failed)
		}
		ok, err := quorate()
		if !ok && err == nil && timedOut {
			var waiting []string
			for _, m := range members {
				if !durable[m] && failed[m] == nil {
					waiting = append(waiting, m)
				}
			}
			err = ensemble.QuorumLost.With("object", o.ID, "waiting", waiting, "timeout", b.cfg.AckTimeout.String())
		}
		if ok || err != nil {
			go func() { // the stragglers go on until straggleFor
				var missing []string
				for ; pending > 0; pending-- {
					a := <-answers
					held.answer(a.member, a.err)
					if a.err != nil {
						missing = append(missing, a.member)
					}
				}
				cancel()
				if err == nil && len(missing) > 0 {
					b.unnames.add(o.ID, missing)
				}
			}()
			if err != nil {
				return nil, err
			}
			return held, nil
		}
	}
}

// holders are the members an object was sent to (this member first),
// less those that will not hold it — that refused it, or whose
// straggling ended —, as their answers come: the checkpoint names them
// (decision 10).
type holders struct {
	mu      sync.Mutex
	order   []string
	failed  map[string]bool
	left    int           // members yet to answer
	settled chan struct{} // closed once every member answered
}

func newHolders(order []string) *holders {
	return &holders{order: order, failed: map[string]bool{}, left: len(order), settled: make(chan struct{})}
}

// answer records member's answer: err nil once it holds the object
// durable; otherwise it will not (a refusal, or the straggling ended).
func (h *holders) answer(member string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil {
		h.failed[member] = true
	}
	if h.left--; h.left == 0 {
		close(h.settled)
	}
}

// list returns the members holding the object or still being sent it.
func (h *holders) list() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]string, 0, len(h.order))
	for _, m := range h.order {
		if !h.failed[m] {
			out = append(out, m)
		}
	}
	return out
}

// sendUntil sends o to member until it is durable there, it refuses it, or
// ctx ends. A resend is the same bytes: a member holding them answers at
// once.
func (b *Broker) sendUntil(ctx context.Context, member string, o journal.Object) error {
	wait := 50 * time.Millisecond
	for {
		err := b.cfg.Peers.Append(ctx, member, o)
		if err == nil || errors.Is(err, journal.Fenced) || errors.Is(err, journal.Conflict) || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

// recoverOpen is decision 12's reading half: it fences stream in at
// epoch+1 on its recorded ensemble, adopts what a read quorum hold past
// its end, makes each adopted object readable here, and returns the
// appends to commit with the open, each object's commit restricted to
// in's stream.
func (b *Broker) recoverOpen(ctx context.Context, in *meta.Internal) ([]meta.Commit, error) {
	if len(in.Ensemble) == 0 {
		return nil, nil
	}
	fence := in.Epoch + 1
	recorded := in.Ensemble
	need := ensemble.ReadQuorum(len(recorded))
	// Members removed for good never answer again. While enough others
	// are left, they only count as silent; when the removals leave fewer
	// than a read quorum — the explicit recovery of a quorum lost for
	// good, or ensembles' members lost with their disks —, waiting cannot
	// help: every member left must answer, and what only the removed ones
	// held is lost (decision 15).
	var left []string
	b.fsm.View(func(s *meta.State) {
		for _, m := range recorded {
			if rec, ok := s.Members[m]; m == b.self() || !ok || rec.Removed == 0 {
				left = append(left, m)
			}
		}
	})
	if len(left) < need {
		b.cfg.Logger.Error("a stream's ensemble lost its read quorum for good: recovering from the members left; what only the removed ones held is lost",
			"stream", in.ID, "ensemble", recorded, "left", left, "need", need)
		recorded, need = left, len(left)
		if need == 0 {
			return nil, nil
		}
	}
	type fenced struct {
		member string
		refs   []journal.Ref
		err    error
	}
	answers := make(chan fenced, len(recorded))
	fctx, cancel := context.WithTimeout(ctx, b.cfg.AckTimeout)
	defer cancel()
	for _, m := range recorded {
		go func() {
			var refs []journal.Ref
			var err error
			if m == b.self() && b.journal != nil {
				refs, err = b.journal.Fence(in.ID, fence)
			} else if b.cfg.Peers != nil {
				refs, err = b.cfg.Peers.Fence(fctx, m, in.ID, fence)
			} else {
				err = fmt.Errorf("no peers to reach %s", m)
			}
			answers <- fenced{m, refs, err}
		}()
	}
	var reads []ensemble.Read
	holders := map[uint64][]string{}
	var errsSeen []error
	// A read quorum is enough (any write quorum meets it); the rest get a
	// moment more, so that a member that is slow, not gone, still adds
	// its copies — but a stopped one does not hold the open up.
	var grace <-chan time.Time
	for range recorded {
		var a fenced
		select {
		case a = <-answers:
		case <-grace:
		}
		if grace != nil && a.member == "" {
			break
		}
		if a.err != nil {
			errsSeen = append(errsSeen, fmt.Errorf("%s: %w", a.member, a.err))
			continue
		}
		r := ensemble.Read{Member: a.member, Intact: true}
		for _, ref := range a.refs {
			if ref.Part.Stream != in.ID || ref.Part.Count == 0 {
				continue
			}
			r.Copies = append(r.Copies, ensemble.Copy{Object: ref.Object, Epoch: ref.Part.Epoch, First: ref.Part.First, Count: ref.Part.Count})
			if !slices.Contains(holders[ref.Object], a.member) {
				holders[ref.Object] = append(holders[ref.Object], a.member)
			}
		}
		reads = append(reads, r)
		if len(reads) >= need && grace == nil {
			grace = time.After(fenceGrace)
		}
	}
	if len(reads) < need {
		return nil, ensemble.TooFewFenced.Wrap(errors.Join(errsSeen...), "stream", in.ID, "ensemble", recorded, "fenced", len(reads), "need", need)
	}
	if len(recorded) < len(in.Ensemble) {
		recorded = in.Ensemble[:0:0] // every member left answered: a quorum of them is all of them
		for _, r := range reads {
			recorded = append(recorded, r.Member)
		}
	}
	chain, err := ensemble.Recover(ensemble.Checkpoint{End: in.End, Epoch: in.Epoch},
		[]ensemble.Epoch{{Epoch: in.Epoch, Ensemble: recorded, Start: in.End, Recovered: true}}, reads)
	if err != nil {
		return nil, err
	}
	var out []meta.Commit
	for _, cp := range chain.Objects {
		c, err := b.adoptObject(ctx, cp.Object, holders[cp.Object], in)
		if err != nil {
			return nil, err
		}
		out = append(out, *c)
	}
	if len(out) > 0 {
		b.cfg.Logger.Info("stream recovered", "stream", in.ID, "epoch", in.Epoch, "from", in.End, "to", chain.End, "objects", len(out))
	}
	return out, nil
}

// adoptObject reads object id from this member's journal or one of its
// holders, makes its frames a synced file here (an object in a file of its
// own is read from its replicas as it is), and returns its commit
// restricted to in's stream, naming the members that hold it.
func (b *Broker) adoptObject(ctx context.Context, id uint64, holders []string, in *meta.Internal) (*meta.Commit, error) {
	var o journal.Object
	var err error
	got := false
	if slices.Contains(holders, b.self()) && b.journal != nil {
		if _, payload, rerr := b.journal.Read(id); rerr == nil {
			o, got = journal.Object{ID: id, Payload: payload}, true
		}
	}
	for _, m := range holders {
		if got {
			break
		}
		if m == b.self() {
			continue
		}
		if o, err = b.cfg.Peers.Read(ctx, m, id); err == nil {
			got = true
		}
	}
	if !got {
		return nil, ensemble.TooFewFenced.Wrap(err, "stream", in.ID, "object", id, "reason", "no holder could be read")
	}
	frames, desc, kind, _, err := parseJournalPayload(id, o.Payload)
	if err != nil {
		return nil, err
	}
	c := *desc
	c.Frames, c.Groups = nil, nil
	c.Appends = slices.DeleteFunc(slices.Clone(desc.Appends), func(a meta.Append) bool { return a.Stream != in.ID })
	if kind == objectInJournal {
		if err := b.ensureFile(id, frames); err != nil {
			return nil, err
		}
		c.Replicas = slices.Clone(holders)
		if !slices.Contains(c.Replicas, b.self()) {
			c.Replicas = append([]string{b.self()}, c.Replicas...)
		}
	}
	return &c, nil
}

// ensureFile makes object id's frames a synced file of this member's
// store, unless one is there.
func (b *Broker) ensureFile(id uint64, frames []byte) error {
	return b.ensureFiles(map[uint64][]byte{id: frames})
}

// ensureFiles makes each object's frames a file of this member's store,
// and syncs them together.
func (b *Broker) ensureFiles(objects map[uint64][]byte) error {
	var ids []uint64
	for id, frames := range objects {
		if b.objs.HasFile(id) && !b.objs.Held(id) {
			continue
		}
		if _, err := b.objs.Restore(id, frames); err != nil {
			return err
		}
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		return nil
	}
	slices.Sort(ids)
	if err := b.objs.Spill(ids); err != nil {
		return err
	}
	return b.cfg.syncObjects(objectsDir(b.cfg.DataDir), ids)
}

// journalFrame reads a frame's payload of an object this member holds
// only in its journal (a peer's object not yet written to a file,
// decision 13).
func (b *Broker) journalFrame(r meta.Range) ([]byte, bool) {
	frames, ok := journalFrames(b.journal, r.Object)
	if !ok {
		return nil, false
	}
	_, payload, ok := frameAt(frames, r.Object, r.Pos, r.Len)
	return payload, ok
}

// JournalFrame returns the whole frame (header included, checked) at pos
// of object id, n bytes, when this member holds the object in its journal
// only: what the replication handler serves a peer's fetch from before
// the object is a file here.
func (b *Broker) JournalFrame(id uint64, pos, n int64) ([]byte, bool) {
	frames, ok := journalFrames(b.journal, id)
	if !ok {
		return nil, false
	}
	raw, _, ok := frameAt(frames, id, pos, n)
	return raw, ok
}

// JournalObject returns object id's bytes as its file would hold them
// (header and frames) when this member holds it in its journal: what the
// replication handler serves a repair's copy from before it is a file.
func (b *Broker) JournalObject(id uint64) ([]byte, bool) {
	frames, ok := journalFrames(b.journal, id)
	if !ok {
		return nil, false
	}
	return append(objstore.AppendHeader(make([]byte, 0, objstore.HeaderSize+len(frames)), id), frames...), true
}

// journalFrames are the frames of object id as journal j holds them,
// when it holds them (an object in a file of its own has none there).
func journalFrames(j *journal.Journal, id uint64) ([]byte, bool) {
	if j == nil {
		return nil, false
	}
	_, payload, err := j.Read(id)
	if err != nil {
		return nil, false
	}
	frames, _, kind, _, err := parseJournalPayload(id, payload)
	return frames, err == nil && kind == objectInJournal
}

// frameAt is the whole frame (header included) of n bytes at pos of
// object id, whose frames are frames, and its payload, once checked.
func frameAt(frames []byte, id uint64, pos, n int64) (raw, payload []byte, ok bool) {
	at := pos - objstore.HeaderSize
	if at < 0 || n <= 0 || at+n > int64(len(frames)) {
		return nil, nil, false
	}
	raw = frames[at : at+n]
	payload, err := objstore.CheckFrame(id, pos, raw)
	if err != nil {
		return nil, nil, false
	}
	return raw, payload, true
}

// journalObjectState says what the state makes of a journal object
// (decision 13): needed — referenced, and a file is wanted here —, dead,
// or neither yet (the tail of a live epoch).
func (b *Broker) journalObjectState(s *meta.State, id uint64, parts []journal.Part) (needed, dead bool) {
	if o, ok := s.Objects[id]; ok && (len(o.Replicas) == 0 || slices.Contains(o.Replicas, b.self())) {
		return true, false
	}
	// Not named here (a straggler's late copy, or none in the state):
	// dead once no part of it is a live epoch's tail.
	for _, p := range parts {
		in, ok := s.Streams[p.Stream]
		if !ok || in.Epoch > p.Epoch || p.First+p.Count <= in.End && in.Epoch == p.Epoch {
			continue
		}
		return false, false
	}
	return false, true
}

// openCommand is the open of internal stream id this member proposes: a
// plain one, or on the ensemble path (or for a stream whose last epoch
// wrote on one) one carrying its ensemble and its recovery (decision 12).
func (b *Broker) openCommand(ctx context.Context, id uint64) (*meta.Open, error) {
	open := &meta.Open{Stream: id, Owner: b.self()}
	if b.cfg.Cluster == nil {
		return open, nil
	}
	// This member's own tail checkpointed first: the state's end is then
	// where every append it acknowledged stops, and the recovery reads
	// from there.
	if err := b.checkpoint(ctx); err != nil {
		return nil, err
	}
	var in *meta.Internal
	b.fsm.View(func(s *meta.State) {
		if x, ok := s.Streams[id]; ok {
			in = x.Clone()
		}
	})
	if in == nil {
		return open, nil // refused by the log as it should be
	}
	if len(in.Ensemble) == 0 && b.cfg.Peers == nil {
		return open, nil
	}
	if err := b.needLevel(meta.LevelEnsemble, meta.OpOpen); err != nil {
		if len(in.Ensemble) == 0 {
			// A rolling upgrade: some member's build would apply this
			// open as a plain one. The stream stays on the log path
			// (its appends commit through the log, flusher.write) until
			// every member runs this build and it is opened again.
			return open, nil
		}
		return nil, err
	}
	// The new ensemble first: without one (too few live members) the open
	// cannot commit, and a recovery run for nothing would fence, read and
	// copy the tail again at every request.
	if b.journal != nil && b.cfg.Peers != nil {
		var err error
		if open.Ensemble, err = b.cfg.Peers.Ensemble(); err != nil {
			return nil, err
		}
		if open.Ensemble[0] != b.self() {
			return nil, meta.BadCommand.With("op", "open", "reason", "an ensemble not led by its owner", "ensemble", open.Ensemble)
		}
	}
	recovered, err := b.recoverOpen(ctx, in)
	if err != nil {
		return nil, err
	}
	expect := in.Epoch
	open.Expect, open.Recovered = &expect, recovered
	return open, nil
}

// Gone is how Reensemble sees a member: leaving for good (removed, or
// draining out of the cluster) or down (no live member Lease).
type Gone int

const (
	// Here: a member that answers.
	Here Gone = iota
	// Down: no live member Lease; it may come back with its journal.
	Down
	// Leaving: removed, or draining: it will not come back.
	Leaving
)

// Reensemble moves this owner's open partitions whose ensemble names a
// member gone, as gone says, to the ensemble Peers.Ensemble chooses now
// (decision 16), when that one names no gone member and — for a member
// only down — is no smaller (a member that comes back rejoins the old
// ensemble; a smaller one would only stall sooner): each is taken out of
// service once the appends admitted to it are answered, and opened again
// at the next epoch, whose recovery fences the old ensemble (a read
// quorum of it is still there) and records the new one. A member leaving
// for good is replaced even by a smaller ensemble (the cluster shrinks);
// an ensemble smaller than the one chosen now grows (the cluster grew
// back).
// It returns how many partitions moved.
func (b *Broker) Reensemble(ctx context.Context, gone func(member string) Gone) (int, error) {
	if b.journal == nil || b.cfg.Peers == nil || b.cfg.Cluster == nil {
		return 0, nil
	}
	next, err := b.cfg.Peers.Ensemble()
	if err != nil || slices.ContainsFunc(next, func(m string) bool { return gone(m) != Here }) {
		return 0, err
	}
	move := func(e []string) bool {
		leaving, down := false, false
		for _, m := range e {
			switch gone(m) {
			case Leaving:
				leaving = true
			case Down:
				down = true
			}
		}
		// An ensemble smaller than the one chosen now was opened while
		// the cluster had fewer live members (shrunk, then grown back):
		// each of its objects would have fewer copies than R, and the
		// repair would copy every one of them again, forever.
		return leaving || down && len(next) >= len(e) || len(next) > len(e)
	}
	// A partition open on an ensemble: gathered under a lock (the
	// stream's, the state's), judged by move outside it — gone and
	// Ownership may read the state themselves, and a read lock taken
	// again while the state machine waits to write deadlocks.
	type openOn struct {
		id       uint64
		ensemble []string
	}
	moved := 0
	for _, n := range b.views() {
		var opens []openOn
		n.mu.Lock()
		for _, p := range n.parts {
			if p.opened {
				opens = append(opens, openOn{p.id, p.ensemble})
			}
		}
		n.mu.Unlock()
		var ids []uint64
		for _, o := range opens {
			if move(o.ensemble) {
				ids = append(ids, o.id)
			}
		}
		if len(ids) == 0 {
			continue
		}
		taken := n.takeOpen(func(id uint64) bool { return slices.Contains(ids, id) })
		if err := n.awaitAnswered(ctx, taken); err != nil {
			return moved, err
		}
		for _, c := range taken {
			n.mu.Lock()
			var pt *part
			for _, p := range n.parts {
				if p.id == c.Stream {
					pt = p
				}
			}
			n.mu.Unlock()
			if pt == nil {
				continue
			}
			if err := b.openPart(ctx, n, pt); err != nil {
				return moved, err
			}
			moved++
		}
	}
	// Partitions the log records open on such an ensemble that no process
	// here has opened, in slots this member holds: opened by an earlier
	// process of this member (killed, then restarted) or by the slot's
	// previous holder, and left open since because no append came. No
	// hand-off or append would ever move them, and a drain waits for
	// them: the open here recovers them at the next epoch on the new
	// ensemble.
	var opens []openOn
	b.fsm.View(func(s *meta.State) {
		for id, in := range s.Streams {
			if in.Open && len(in.Ensemble) > 0 {
				opens = append(opens, openOn{id, in.Ensemble})
			}
		}
	})
	var failed error // one orphan that cannot open does not hold the others
	for _, o := range opens {
		if !move(o.ensemble) || b.cfg.Ownership.MayOpen(o.id) != nil {
			continue
		}
		already, err := b.openByID(ctx, o.id)
		if already {
			continue // moved above, or opened since by an append
		}
		if err != nil {
			if failed == nil {
				failed = err
			}
			continue
		}
		moved++
	}
	if moved > 0 {
		b.cfg.Logger.Info("partitions moved to a new ensemble", "partitions", moved, "ensemble", next)
	}
	return moved, failed
}

// EnsemblesNaming counts the open partitions, owned by another member,
// whose recorded ensemble names member: a draining member leaves only once
// none is left (decision 16).
func (b *Broker) EnsemblesNaming(member string) int {
	return b.othersNaming(member, func(*meta.Internal) bool { return true })
}

// EnsemblesNeeding counts the open partitions, owned by another member,
// whose recorded ensemble cannot reach its write quorum without member:
// an ensemble of two opened while a third member was away. A member
// stopping for a restart waits for their owners to move them (Reensemble
// sees it draining), or their appends would stall while it is away and
// those in flight be answered APPEND_OUTCOME_UNKNOWN.
func (b *Broker) EnsemblesNeeding(member string) int {
	return b.othersNaming(member, func(in *meta.Internal) bool {
		return len(in.Ensemble)-1 < ensemble.WriteQuorum(len(in.Ensemble))
	})
}

// othersNaming counts the open partitions owned by another member whose
// recorded ensemble names member and that keep selects.
func (b *Broker) othersNaming(member string, keep func(*meta.Internal) bool) int {
	n := 0
	b.fsm.View(func(s *meta.State) {
		for _, in := range s.Streams {
			if in.Open && in.Owner != member && slices.Contains(in.Ensemble, member) && keep(in) {
				n++
			}
		}
	})
	return n
}

// loneTail refuses a lone broker's directory opened as a cluster member
// never recorded before (ClusterConfig.Number 0): such a member's first
// start finds an empty journal, so one that holds objects is a lone
// broker's, whose streams have no ensemble to recover a tail from, and a
// cluster member adopts nothing from its own journal at start. (The log
// data path refused any journal before ensembles, and still does.)
func (b *Broker) loneTail() error {
	for _, seg := range b.journal.Segments() {
		if len(seg.Objects) > 0 {
			return stream.StreamDirectoryUnusable.With("path", journalDir(b.cfg.DataDir), "objects", len(seg.Objects),
				"reason", "the data directory holds a lone broker's journal, which a cluster member cannot adopt: open it as a lone broker")
		}
	}
	return nil
}
