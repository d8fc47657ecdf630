package metalog

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Forwarding: any member of a cluster accepts metadata commands. On a
// follower, Apply and Propose send the command to the leader (Config.
// Forward), which appends it to the log as it came; the follower then waits
// until its own state machine applies it and answers with its own result.
// The state machine is deterministic, so that result is the leader's; and
// waiting for the local apply means a command a follower answered is
// visible in its state at once (an append acknowledged by its owner is
// readable there, an open has applied before the owner serves the stream).
//
// A forwarded command travels in an envelope that names it:
//
//	envelopeTag(1) nonce(8) command
//
// The tag is below the meta codec's JSON ('{') and above its binary tags,
// so an enveloped entry is never mistaken for a command; the state machine
// never sees the envelope (fsmWrapper strips it), and a replay of the log
// simply finds nobody waiting for its nonces.

const (
	envelopeTag = 0x1F
	envelopeLen = 9
)

// ErrNoLeader is returned (wrapped, with ErrNotLeader) when no leader is
// known: an election is on, or the quorum is lost. Nothing was appended.
var ErrNoLeader = errors.New("metalog: no leader known")

// ErrUnknownOutcome is returned (wrapped) when a forwarded command may or
// may not have been committed: the leader accepted it and then went away,
// or the wait ended first.
var ErrUnknownOutcome = errors.New("metalog: the command's outcome is unknown")

// Forwarder sends enveloped entries to the leader, in order, and returns
// once the leader has appended every one and committed it, with one error
// per entry (nil: committed). It returns an error wrapping ErrNotLeader
// when the node it reached is not the leader (nothing was appended), and
// any other error when the outcome is unknown.
type Forwarder func(ctx context.Context, leaderAddr, leaderID string, entries [][]byte) ([]error, error)

// fsmWrapper strips envelopes before the state machine applies an entry,
// and hands the result to the local caller waiting for that nonce.
type fsmWrapper struct {
	inner raft.FSM

	mu      sync.Mutex
	waiting map[uint64]chan any
}

func newFSMWrapper(inner raft.FSM) *fsmWrapper {
	return &fsmWrapper{inner: inner, waiting: map[uint64]chan any{}}
}

func (w *fsmWrapper) Apply(l *raft.Log) any {
	if len(l.Data) < envelopeLen || l.Data[0] != envelopeTag {
		return w.inner.Apply(l)
	}
	nonce := binary.BigEndian.Uint64(l.Data[1:envelopeLen])
	stripped := *l
	stripped.Data = l.Data[envelopeLen:]
	res := w.inner.Apply(&stripped)
	w.mu.Lock()
	ch := w.waiting[nonce]
	delete(w.waiting, nonce)
	w.mu.Unlock()
	if ch != nil {
		ch <- res
	}
	return res
}

func (w *fsmWrapper) Snapshot() (raft.FSMSnapshot, error) { return w.inner.Snapshot() }
func (w *fsmWrapper) Restore(rc io.ReadCloser) error      { return w.inner.Restore(rc) }

// await registers a wait for a nonce's apply; cancel drops it.
func (w *fsmWrapper) await(nonce uint64) (<-chan any, func()) {
	ch := make(chan any, 1)
	w.mu.Lock()
	w.waiting[nonce] = ch
	w.mu.Unlock()
	return ch, func() {
		w.mu.Lock()
		delete(w.waiting, nonce)
		w.mu.Unlock()
	}
}

// envelope wraps cmd under a fresh nonce.
func envelope(cmd []byte) ([]byte, uint64) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	nonce := binary.BigEndian.Uint64(b[:])
	out := make([]byte, 0, envelopeLen+len(cmd))
	out = append(out, envelopeTag)
	out = append(out, b[:]...)
	return append(out, cmd...), nonce
}

// forwarding is a follower's queue of commands for the leader. One
// goroutine sends them, in the order they were proposed, as batches of
// whatever queued while the previous batch was on its way: the order keeps
// a stream's commits in offset order, and the batches keep throughput
// under load as raft's own group commit does.
type forwarding struct {
	l   *Log
	fwd Forwarder

	mu     sync.Mutex
	queue  []*forwarded
	signal chan struct{}
}

// forwarded is one command on its way to the leader.
type forwarded struct {
	entry []byte
	ctx   context.Context
	sent  chan error // the leader's answer for this entry (buffered)
}

func newForwarding(l *Log, fwd Forwarder) *forwarding {
	f := &forwarding{l: l, fwd: fwd, signal: make(chan struct{}, 1)}
	go f.run()
	return f
}

func (f *forwarding) push(p *forwarded) {
	f.mu.Lock()
	f.queue = append(f.queue, p)
	f.mu.Unlock()
	select {
	case f.signal <- struct{}{}:
	default:
	}
}

// maxForwardBatch bounds one forwarded batch.
const maxForwardBatch = 256

func (f *forwarding) run() {
	for {
		select {
		case <-f.l.closed:
			f.failAll(ErrClosed)
			return
		case <-f.signal:
		}
		for {
			f.mu.Lock()
			n := min(len(f.queue), maxForwardBatch)
			batch := f.queue[:n:n]
			f.queue = f.queue[n:]
			f.mu.Unlock()
			if len(batch) == 0 {
				break
			}
			f.send(batch)
		}
	}
}

func (f *forwarding) failAll(err error) {
	f.mu.Lock()
	q := f.queue
	f.queue = nil
	f.mu.Unlock()
	for _, p := range q {
		p.sent <- err
	}
}

// send delivers a batch to the leader, following leadership changes while
// nothing was appended.
func (f *forwarding) send(batch []*forwarded) {
	// Entries whose caller gave up before they were sent are dropped: they
	// were never appended.
	live := batch[:0]
	for _, p := range batch {
		if err := p.ctx.Err(); err != nil {
			p.sent <- err
			continue
		}
		live = append(live, p)
	}
	if len(live) == 0 {
		return
	}
	entries := make([][]byte, len(live))
	for i, p := range live {
		entries[i] = p.entry
	}
	ctx, cancel := context.WithTimeout(context.Background(), forwardTimeout)
	defer cancel()
	for {
		addr, id := f.l.raft.LeaderWithID()
		var errs []error
		var err error
		switch {
		case id == "":
			err = fmt.Errorf("%w: %w", ErrNotLeader, ErrNoLeader)
		case id == f.l.self:
			// Leadership came here meanwhile: append directly.
			errs = f.l.appendEntries(ctx, entries)
		default:
			errs, err = f.fwd(ctx, string(addr), string(id), entries)
		}
		if errors.Is(err, ErrNotLeader) {
			// Nothing appended: wait for a (new) leader and send again,
			// within the batch's time.
			if !f.l.waitLeaderChange(ctx, string(id)) {
				for _, p := range live {
					p.sent <- fmt.Errorf("%w: %w", ErrNotLeader, ErrNoLeader)
				}
				return
			}
			continue
		}
		for i, p := range live {
			switch {
			case err != nil:
				p.sent <- fmt.Errorf("%w: forwarding to %s: %w", ErrUnknownOutcome, id, err)
			case i >= len(errs):
				p.sent <- fmt.Errorf("%w: the leader answered %d of %d entries", ErrUnknownOutcome, len(errs), len(live))
			case errs[i] != nil:
				// Appended and then not committed (leadership lost, a
				// shutdown): it may still commit under the next leader.
				p.sent <- fmt.Errorf("%w: %w", ErrUnknownOutcome, errs[i])
			default:
				p.sent <- nil
			}
		}
		return
	}
}

// forwardTimeout bounds one forwarded batch, leadership changes included:
// a cluster without a leader for this long answers with an error (503 at
// the front ends) rather than hold its writers.
const forwardTimeout = 10 * time.Second

// localApplyTimeout bounds how long a follower waits to apply a command the
// leader committed.
const localApplyTimeout = 30 * time.Second

// waitLeaderChange waits until a leader other than was is known (or any
// leader when was is ""), or ctx ends.
func (l *Log) waitLeaderChange(ctx context.Context, was string) bool {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		if _, id := l.raft.LeaderWithID(); id != "" && string(id) != was {
			return true
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return false
		case <-l.closed:
			return false
		}
	}
}

// appendEntries appends entries on the leader, in order, and waits until
// each is committed: the leader's side of forwarding.
func (l *Log) appendEntries(ctx context.Context, entries [][]byte) []error {
	futures := make([]raft.ApplyFuture, len(entries))
	for i, e := range entries {
		futures[i] = l.raft.Apply(e, enqueueTimeout(ctx))
	}
	errs := make([]error, len(entries))
	for i, f := range futures {
		if err := l.wait(ctx, f); err != nil {
			errs[i] = l.wrap("apply", err)
		}
	}
	return errs
}

// AcceptForwarded appends entries a follower forwarded, in order, and
// returns once each is committed, one error per entry. It is the leader's
// half of Config.Forward; on any other node it refuses the whole batch with
// an error wrapping ErrNotLeader, appending nothing.
func (l *Log) AcceptForwarded(ctx context.Context, entries [][]byte) ([]error, error) {
	if err := l.usable(ctx); err != nil {
		return nil, l.wrap("accept forwarded", err)
	}
	if l.raft.State() != raft.Leader {
		return nil, l.wrap("accept forwarded", raft.ErrNotLeader)
	}
	for _, e := range entries {
		if len(e) < envelopeLen || e[0] != envelopeTag {
			return nil, fmt.Errorf("metalog: accept forwarded: an entry without an envelope")
		}
	}
	return l.appendEntries(ctx, entries), nil
}

// forward proposes cmd through the leader and returns a function that waits
// for its local apply, as Propose does.
func (l *Log) forward(ctx context.Context, cmd []byte) func(ctx context.Context) (any, error) {
	entry, nonce := envelope(cmd)
	applied, cancel := l.fsm.await(nonce)
	p := &forwarded{entry: entry, ctx: ctx, sent: make(chan error, 1)}
	l.fwd.push(p)
	return func(wctx context.Context) (any, error) {
		defer cancel()
		wait := func() (any, error) {
			// Committed: this node applies it as soon as the leader's
			// commit reaches it. One that never does is cut from the
			// leader; its caller learns the outcome is unknown.
			t := time.NewTimer(localApplyTimeout)
			defer t.Stop()
			select {
			case res := <-applied:
				if err, isErr := res.(error); isErr {
					return nil, err
				}
				return res, nil
			case <-t.C:
				return nil, fmt.Errorf("%w: committed by the leader, not applied here within %v", ErrUnknownOutcome, localApplyTimeout)
			case <-wctx.Done():
				return nil, l.wrap("apply", wctx.Err())
			case <-l.closed:
				return nil, l.wrap("apply", ErrClosed)
			}
		}
		select {
		case res := <-applied: // applied before the leader's answer came back
			if err, isErr := res.(error); isErr {
				return nil, err
			}
			return res, nil
		case err := <-p.sent:
			if err != nil {
				if errors.Is(err, ErrUnknownOutcome) {
					// It may still come through: give the local apply a
					// moment before saying the outcome is unknown.
					tctx, tcancel := context.WithTimeout(wctx, time.Second)
					defer tcancel()
					select {
					case res := <-applied:
						if err, isErr := res.(error); isErr {
							return nil, err
						}
						return res, nil
					case <-tctx.Done():
					}
				}
				return nil, err
			}
			return wait()
		case <-wctx.Done():
			return nil, l.wrap("apply", wctx.Err())
		case <-l.closed:
			return nil, l.wrap("apply", ErrClosed)
		}
	}
}
