package membership

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/picomq/picomq/broker/metalog"
)

// The deterministic tier's membership half (issue 19): metalog nodes on an
// in-memory network, stepped through random sequences of joins, planner
// steps, crashes and restarts, pauses, removals for good, returns of
// removed members and proposals, with the invariants of DESIGN.md's
// "Membership" checked throughout.
//
// The network is metalog's own clustered transport (Config.Network, the
// raft NetworkTransport the brokers use) over net.Pipe connections, not
// raft.NewInmemTransport: metalog connects in-memory transports to nothing,
// and a seam for them would have to be exported to reach this package,
// where the planner lives. The pipes cost no ports and no kernel, and a
// pause is exact: the node's connections are closed and dials to and from
// it refused, while its raft keeps running.
//
// Deterministic as far as raft allows: the seed fixes every choice the test
// makes (which event, which node, how many proposals), but raft's own
// timers — heartbeats, elections, leases — run on the real clock and
// raft's goroutines are scheduled as they are, so the same seed can take
// another path when an election lands elsewhere. That is accepted: every
// check is one that must hold on every path, and a failure prints the seed,
// the step history and the tail of the nodes' raft logs.

var (
	flagMemSeqs  = flag.Int("membership.seqs", 4, "random sequences the membership property test runs")
	flagMemSteps = flag.Int("membership.steps", 30, "events per random membership sequence")
	flagMemSeed  = flag.Uint64("membership.seed", 0, "run only the membership sequence of this seed (0: seeds 1..seqs)")
)

// TestPropertyMembershipSequences runs 3 to 6 metalog nodes through random
// sequences (seeded; -membership.seqs, -membership.steps, -membership.seed)
// and checks:
//
//   - at most one leader per term (sampled on every node every few ms);
//   - a leader appends a configuration only once the one before it is
//     committed (raft's one-change-at-a-time rule, as far as metalog's
//     Configuration index and raft's commit index show it), and two nodes
//     that hold a committed configuration at the same index hold the same;
//   - whenever the planner has nothing to do, the voters are at most 5 and
//     odd (unless too few servers have caught up to make the target);
//   - a server taken out — removed for good, or superseded by a new
//     incarnation — is never in a committed configuration again, and its
//     node never leads again, even when it comes back on its old data;
//   - a membership change acknowledged is in the leader's configuration;
//   - once the faults stop, the cluster converges within a bounded number
//     of planner steps to exactly the live members, the voters being the
//     voterTarget(live) lowest ordinals;
//   - every acknowledged proposal is in the state machine of every
//     surviving member, once, and every member applied the same entries in
//     the same order.
func TestPropertyMembershipSequences(t *testing.T) {
	var seeds []uint64
	if *flagMemSeed != 0 {
		seeds = append(seeds, *flagMemSeed)
	} else {
		for i := 1; i <= *flagMemSeqs; i++ {
			seeds = append(seeds, uint64(i))
		}
	}
	var changes, acks, maxVoters, hazards, skipped int
	for _, seed := range seeds {
		ok := t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			s := newMemSim(t, seed)
			defer func() { // also when the sequence is skipped
				changes += s.changes
				acks += len(s.acked)
				maxVoters = max(maxVoters, s.maxVoters)
				hazards += s.hazards
				if t.Skipped() {
					skipped++
				}
			}()
			s.run(*flagMemSteps)
		})
		if !ok {
			t.Logf("rerun with: go test ./broker/membership -run 'TestPropertyMembershipSequences' -membership.seed=%d -v", seed)
			return
		}
	}
	t.Logf("%d sequences of %d events (%d skipped, their quorum lost for good): %d membership changes made, %d proposals acknowledged, at most %d voters at once (add before remove)",
		len(seeds), *flagMemSteps, skipped, changes, acks, maxVoters)
	if hazards > 0 {
		t.Logf("planner hazard: %d demotions or removals took the running majority from the voters, another voter being down (see noteHazard)", hazards)
	}
}

// Timing of the simulated cluster: elections in a few hundred ms at most,
// snapshots small and frequent so that joiners and restarts install them.
const (
	simHeartbeat = 100 * time.Millisecond
	simOpTimeout = 2 * time.Second // one membership call or proposal
	// simElection is how long an event waits for a leader during the
	// faults: a few election timeouts. (Waits once the faults stop are
	// longer.)
	simElection = 5 * simHeartbeat
)

type procState int

const (
	running procState = iota
	paused
	crashed
)

func (st procState) String() string {
	return [...]string{"running", "paused", "crashed"}[st]
}

// proc is one incarnation of the node in a slot (its ordinal): its own ID
// and data directory. Fields other than the immutable ones are guarded by
// memSim.mu.
type proc struct {
	slot   int
	id     string // "b-<slot>~<incarnation>"
	number int    // its member number: incarnations of a slot count up
	dir    string
	boot   bool

	state procState
	log   *metalog.Log // nil when crashed
	fsm   *recordFSM
	end   *pipeEnd

	removed bool // removed for good: the state machine's record, as the planner sees it
	left    bool // removed and stopped after the configuration let it go
	zombie  bool // a removed incarnation brought back on its old data
	joining int  // joins in flight for it
	pending bool // a new incarnation not yet joined: its raft does not run
}

func nodeName(slot int) string { return fmt.Sprintf("b-%d", slot) }

type memSim struct {
	t    *testing.T
	seed uint64
	rng  *rand.Rand
	max  int // slots
	net  *pipeNet
	logs *lockedBuffer
	root string
	// step is the event being run; async proposals log it too.
	step atomic.Int64

	mu         sync.Mutex
	procs      []*proc // every incarnation ever started
	slots      []*proc // the newest incarnation of each slot (nil: none yet)
	history    []string
	violations []string
	acked      []string
	leaders    map[uint64]string // term → the node that led in it
	leadConf   map[string]uint64 // "id/term" → newest configuration index seen while it led
	committed  map[uint64]string // configuration index → its servers, once seen committed
	goneAt     map[string]uint64 // id → a committed configuration index no longer listing it
	goneTerm   map[string]uint64 // id → the leader's term then
	maxVoters  int
	changes    int
	cmds       int
	hazards    int // planner steps that left the voters without a running majority
	started    time.Time

	async       sync.WaitGroup
	stopSampler chan struct{}
	samplerDone chan struct{}
}

func newMemSim(t *testing.T, seed uint64) *memSim {
	s := &memSim{t: t, seed: seed, rng: rand.New(rand.NewPCG(seed, 0x6d656d62)), max: 3 + int(seed%4),
		net: &pipeNet{ends: map[string]*pipeEnd{}}, logs: &lockedBuffer{}, root: t.TempDir(),
		leaders: map[uint64]string{}, leadConf: map[string]uint64{}, committed: map[uint64]string{},
		goneAt: map[string]uint64{}, goneTerm: map[string]uint64{}, started: time.Now(),
		stopSampler: make(chan struct{}), samplerDone: make(chan struct{})}
	s.slots = make([]*proc, s.max)
	go s.sampler()
	t.Cleanup(func() {
		s.async.Wait()
		close(s.stopSampler)
		<-s.samplerDone
		for _, p := range s.procs {
			if p.log != nil {
				_ = p.log.Close()
				p.end.Close()
			}
		}
	})
	return s
}

// logf appends to the step history.
func (s *memSim) logf(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.history = append(s.history, fmt.Sprintf("%6.3fs [%2d] ", time.Since(s.started).Seconds(), s.step.Load())+fmt.Sprintf(format, args...))
}

// violate records a broken invariant; the main goroutine fails on it.
func (s *memSim) violate(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.mu.Lock()
	s.violations = append(s.violations, msg)
	s.mu.Unlock()
	s.logf("VIOLATION: %s", msg)
}

// fail ends the sequence with the seed, the history and the raft logs' tail.
func (s *memSim) fail(format string, args ...any) {
	s.t.Helper()
	s.mu.Lock()
	hist := strings.Join(s.history, "\n")
	s.mu.Unlock()
	s.t.Fatalf("seed %d (%d slots): %s\n--- history:\n%s\n--- nodes:\n%s\n--- raft logs (tail):\n%s\n--- rerun: go test ./broker/membership -run TestPropertyMembershipSequences -membership.seed=%d -v",
		s.seed, s.max, fmt.Sprintf(format, args...), hist, s.views(), s.logs.tail(150), s.seed)
}

// views describes every node: its state and its view of the cluster.
func (s *memSim) views() string {
	var b strings.Builder
	for _, p := range s.procs {
		l := s.logOf(p)
		fmt.Fprintf(&b, "%s: %s", p.id, p.state)
		for _, f := range []struct {
			on   bool
			what string
		}{{p.removed, "removed"}, {p.left, "left"}, {p.zombie, "zombie"}, {p.pending, "pending"}, {s.superseded(p), "superseded"}} {
			if f.on {
				b.WriteString(", " + f.what)
			}
		}
		if l != nil {
			st := l.Stats()
			fmt.Fprintf(&b, "; raft %s term %s, last index %s, commit %s", st["state"], st["term"], st["last_log_index"], st["commit_index"])
			if c, err := s.conf(l); err == nil {
				fmt.Fprintf(&b, "; configuration at %d: %v", c.Index, c.Servers)
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// check fails on the first violation recorded since the last check.
func (s *memSim) check() {
	s.t.Helper()
	s.mu.Lock()
	v := slices.Clone(s.violations)
	s.mu.Unlock()
	if len(v) > 0 {
		s.fail("%s", strings.Join(v, "; "))
	}
}

func (s *memSim) run(steps int) {
	// A cluster of three (or fewer slots) to start from: b-0 bootstraps,
	// the others join and the planner promotes them.
	b0 := s.newProc(0)
	b0.boot = true
	if err := s.start(b0); err != nil {
		s.fail("bootstrap b-0: %v", err)
	}
	for i := 1; i < min(3, s.max); i++ {
		p := s.newProc(i)
		if !s.join(p, simOpTimeout) {
			s.fail("%s cannot join", p.id)
		}
		if err := s.start(p); err != nil {
			s.fail("start %s: %v", p.id, err)
		}
	}
	s.converge("the initial cluster")

	for step := 1; step <= steps; step++ {
		s.step.Store(int64(step))
		s.event()
		s.noteGone()
		s.check()
	}
	s.step.Store(int64(steps + 1))
	s.logf("faults stop")
	s.settle()
	s.check()
}

// event makes one random event.
func (s *memSim) event() {
	faults := 0
	for _, p := range s.slots {
		if p != nil && !p.left && (p.state != running) {
			faults++
		}
	}
	if faults > 0 && s.rng.IntN(2) == 0 && s.leaderNow() == nil {
		// No leader: the quorum may be lost. Half the time the next event
		// ends a fault, so that a sequence does not spend itself waiting.
		if p := s.pick(func(p *proc) bool {
			return p.state == paused || p.state == crashed && !p.left && s.slots[p.slot] == p
		}); p != nil {
			if p.state == paused {
				s.resume(p)
			} else {
				s.restart(p)
			}
			return
		}
	}
	switch r := s.rng.IntN(100); {
	case r < 24:
		s.planStep(simElection)
	case r < 42:
		s.proposeAsync(1 + s.rng.IntN(4))
	case r < 52:
		s.joinEvent()
	case r < 60:
		if faults < 2 {
			if p := s.pick(func(p *proc) bool { return p.state != crashed }); p != nil {
				s.crash(p, "crash")
			}
		}
	case r < 70:
		if p := s.pick(func(p *proc) bool { return p.state == crashed && !p.left && s.slots[p.slot] == p }); p != nil {
			s.restart(p)
		}
	case r < 77:
		if faults < 2 {
			if p := s.pick(func(p *proc) bool { return p.state == running }); p != nil {
				s.pause(p)
			}
		}
	case r < 85:
		if p := s.pick(func(p *proc) bool { return p.state == paused }); p != nil {
			s.resume(p)
		}
	case r < 89:
		s.removeEvent()
	case r < 92:
		// A removed member comes back on its old data (a retained PVC):
		// nobody adds it, and it must never vote or lead again.
		if p := s.pick(func(p *proc) bool { return p.left && p.state == crashed && s.slots[p.slot] == p }); p != nil {
			p.zombie = true
			s.restart(p)
		}
	case r < 95:
		if l := s.awaitLeader(simElection); l != nil {
			ctx, cancel := context.WithTimeout(context.Background(), simOpTimeout)
			err := l.log.TransferLeadership(ctx, "")
			cancel()
			s.logf("transfer leadership away from %s: %v", l.id, errText(err))
		}
	default:
		l := s.awaitLeader(simElection)
		s.logf("wait for a leader: %v", idOf(l))
	}
}

// pick returns a random incarnation satisfying ok, or nil.
func (s *memSim) pick(ok func(*proc) bool) *proc {
	var c []*proc
	for _, p := range s.procs {
		if ok(p) {
			c = append(c, p)
		}
	}
	if len(c) == 0 {
		return nil
	}
	return c[s.rng.IntN(len(c))]
}

func (s *memSim) newProc(slot int) *proc {
	inc := 1
	for _, p := range s.procs {
		if p.slot == slot {
			inc++
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p := &proc{slot: slot, id: fmt.Sprintf("b-%d~%d", slot, inc), number: len(s.procs) + 1, state: crashed}
	p.dir = filepath.Join(s.root, p.id)
	s.procs = append(s.procs, p)
	s.slots[slot] = p
	return p
}

// start opens p's log on its directory, listening at its slot's address.
func (s *memSim) start(p *proc) error {
	end := s.net.listen(nodeName(p.slot))
	fsm := &recordFSM{}
	var l *metalog.Log
	var err error
	func() {
		defer func() {
			// raft panics when its log store fails it at start (Open has
			// released the directory by then): say so with the history.
			if r := recover(); r != nil {
				s.fail("opening %s on its directory panicked: %v", p.id, r)
			}
		}()
		l, err = metalog.Open(metalog.Config{
			Dir: p.dir, NodeID: p.id, Bootstrap: p.boot,
			Network:          end.network(),
			HeartbeatTimeout: simHeartbeat, ElectionTimeout: simHeartbeat,
			SegmentBytes:      1 << 20,
			SnapshotThreshold: 32, SnapshotInterval: 100 * time.Millisecond, TrailingLogs: 16,
			OpenTimeout: 10 * time.Second,
			Logger:      hclog.New(&hclog.LoggerOptions{Name: p.id, Level: hclog.Info, Output: s.logs}),
		}, fsm)
	}()
	if err != nil {
		end.Close()
		s.logf("open %s: %v", p.id, err)
		return err
	}
	s.mu.Lock()
	p.log, p.fsm, p.end, p.state = l, fsm, end, running
	s.mu.Unlock()
	return nil
}

func (s *memSim) restart(p *proc) {
	if p.pending {
		s.logf("%s: restarts, asks to join again", p.id)
		s.joinThenStart(p, simElection)
		return
	}
	what := "restart on its directory"
	if p.zombie {
		what = "a removed member comes back on its old data"
	}
	err := s.start(p)
	s.logf("%s: %s: %v", p.id, what, errText(err))
}

// crash stops p: its connections die first, then its raft.
func (s *memSim) crash(p *proc, why string) {
	s.net.setCut(p.end, true)
	s.mu.Lock()
	l := p.log
	p.log, p.state = nil, crashed
	s.mu.Unlock()
	err := l.Close()
	p.end.Close()
	s.logf("%s: %s (close: %v)", p.id, why, errText(err))
}

func (s *memSim) pause(p *proc) {
	s.net.setCut(p.end, true)
	s.mu.Lock()
	p.state = paused
	s.mu.Unlock()
	s.logf("%s: paused (cut from the network)", p.id)
}

func (s *memSim) resume(p *proc) {
	s.net.setCut(p.end, false)
	s.mu.Lock()
	p.state = running
	s.mu.Unlock()
	s.logf("%s: resumed", p.id)
}

// joinEvent: a new incarnation in a free slot, in the slot of a member
// that left, or in a crashed member's slot (its directory wiped).
func (s *memSim) joinEvent() {
	var fresh, wiped []int
	for slot, p := range s.slots {
		switch {
		case p == nil || p.left:
			fresh = append(fresh, slot)
		case p.state == crashed && !p.removed && !p.pending && s.wipeSafe(p):
			wiped = append(wiped, slot)
		}
	}
	switch {
	case len(wiped) > 0 && (len(fresh) == 0 || s.rng.IntN(2) == 0):
		s.newIncarnation(wiped[s.rng.IntN(len(wiped))], "its directory wiped: a new incarnation")
	case len(fresh) > 0:
		s.newIncarnation(fresh[s.rng.IntN(len(fresh))], "a new member")
	}
}

// wipeSafe reports whether p's directory can be lost without losing the
// quorum for good: in the configuration of every running member, p votes
// not at all or alongside a running majority of the voters. (Losing it
// otherwise is a quorum lost for good, whose remedy is the explicit
// recovery, not this test's subject: with the voters {b-0, b-1} and b-0
// wiped, or with a lagging b-2 whose configuration still has b-1 as a
// non-voter — raft refuses the votes of a candidate it does not see as a
// voter — nobody can be elected.)
func (s *memSim) wipeSafe(p *proc) bool {
	asked := 0
	for _, q := range s.procs {
		l := s.logOf(q)
		if q == p || l == nil || q.left || q.zombie {
			continue
		}
		conf, err := s.conf(l)
		if err != nil {
			return false
		}
		asked++
		voters := conf.Voters()
		if !slices.Contains(voters, p.id) {
			continue
		}
		alive := 0
		for _, v := range voters {
			if x := s.byID(v); v != p.id && x != nil && x.state == running {
				alive++
			}
		}
		if 2*alive <= len(voters) {
			return false
		}
	}
	return asked > 0
}

func (s *memSim) newIncarnation(slot int, what string) {
	if old := s.slots[slot]; old != nil && old.state != crashed {
		s.crash(old, "stopped: its slot is taken by a new incarnation")
	}
	p := s.newProc(slot)
	p.pending = true
	s.logf("%s: %s asks to join", p.id, what)
	s.joinThenStart(p, simElection)
}

// joinThenStart is a joiner's Prepare then Open: it joins through the
// leader and starts its raft only once it is a member — concurrently with
// a planner step half the time, as a join request meets the leader's own
// duties. A joiner that cannot join yet stays pending (Prepare retrying)
// and asks again when next restarted.
//
// The order matters: a node whose raft runs with an empty configuration
// grants its vote to any candidate, and a candidate that still lists the
// old incarnation at the same address counts that vote as the old
// incarnation's, which voted already in that term: two leaders in one
// term. serveJoin removes the old incarnation before the new one's raft
// starts, and so does this.
func (s *memSim) joinThenStart(p *proc, wait time.Duration) {
	var joined bool
	if s.rng.IntN(2) == 0 {
		done := make(chan bool)
		go func() { done <- s.join(p, wait) }()
		s.planStep(simElection)
		joined = <-done
	} else {
		joined = s.join(p, wait)
	}
	if !joined {
		return
	}
	p.pending = false
	if err := s.start(p); err == nil {
		s.logf("%s: started", p.id)
	}
}

// join does what a member's join request makes the leader do (serveJoin):
// take out the old incarnation at the same address, add the joiner as a
// non-voter.
func (s *memSim) join(p *proc, wait time.Duration) bool {
	s.mu.Lock()
	p.joining++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		p.joining--
		s.mu.Unlock()
	}()
	l := s.awaitLeader(wait)
	if l == nil {
		s.logf("%s: join: no leader", p.id)
		return false
	}
	log := s.logOf(l)
	if log == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), simOpTimeout)
	defer cancel()
	conf, err := log.Configuration(ctx)
	if err != nil {
		s.logf("%s: join via %s: %v", p.id, l.id, err)
		return false
	}
	addr := nodeName(p.slot)
	for _, old := range conf.Servers {
		if old.Address == addr && old.ID != p.id {
			err := log.RemoveServer(ctx, old.ID)
			s.logf("%s: join via %s: remove the old incarnation %s: %v", p.id, l.id, old.ID, errText(err))
			if err != nil {
				return false
			}
		}
	}
	err = log.AddNonvoter(ctx, p.id, addr)
	s.logf("%s: join via %s: add as a non-voter: %v", p.id, l.id, errText(err))
	return err == nil
}

func (s *memSim) logOf(p *proc) *metalog.Log {
	s.mu.Lock()
	defer s.mu.Unlock()
	return p.log
}

// removeEvent removes a member for good, as the state machine would
// record it: the planner takes it out, handing leadership over first.
func (s *memSim) removeEvent() {
	keep := 0
	for _, p := range s.slots {
		if p != nil && !p.removed {
			keep++
		}
	}
	if keep <= 2 {
		return
	}
	if p := s.pick(func(p *proc) bool { return !p.removed && s.slots[p.slot] == p && !s.isJoining(p) }); p != nil {
		s.mu.Lock()
		p.removed = true
		s.mu.Unlock()
		s.logf("%s: removed for good (recorded; the planner takes it out)", p.id)
	}
}

// proposeAsync proposes n commands on the leader, concurrently with
// whatever comes next, and records the acknowledged ones.
func (s *memSim) proposeAsync(n int) {
	l := s.leaderNow()
	if l == nil {
		s.logf("propose: no leader")
		return
	}
	s.mu.Lock()
	log := l.log
	s.mu.Unlock()
	var cmds []string
	for range n {
		s.cmds++
		cmds = append(cmds, fmt.Sprintf("cmd-%d", s.cmds))
	}
	step := s.step.Load()
	s.async.Add(1)
	go func() {
		defer s.async.Done()
		var waits []func(context.Context) (any, error)
		for _, c := range cmds {
			waits = append(waits, log.Propose([]byte(c)))
		}
		var errs []string
		ok := 0
		for i, w := range waits {
			ctx, cancel := context.WithTimeout(context.Background(), simOpTimeout)
			_, err := w(ctx)
			cancel()
			if err != nil {
				errs = append(errs, fmt.Sprintf("%s: %v", cmds[i], err))
				continue
			}
			ok++
			s.mu.Lock()
			s.acked = append(s.acked, cmds[i])
			s.mu.Unlock()
		}
		s.logf("(from step %d) proposed %s on %s: %d acknowledged %v", step, strings.Join(cmds, ","), l.id, ok, errs)
	}()
}

// leaderNow is the connected node leading in the highest term, or nil.
func (s *memSim) leaderNow() *proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	var best *proc
	var bestTerm uint64
	for _, p := range s.procs {
		if p.state != running || p.log == nil || !p.log.IsLeader() {
			continue
		}
		if term := statUint(p.log.Stats(), "term"); best == nil || term > bestTerm {
			best, bestTerm = p, term
		}
	}
	return best
}

// awaitLeader polls for a leader, up to within.
func (s *memSim) awaitLeader(within time.Duration) *proc {
	deadline := time.Now().Add(within)
	for {
		if l := s.leaderNow(); l != nil {
			return l
		}
		if time.Now().After(deadline) {
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (s *memSim) conf(l *metalog.Log) (metalog.Configuration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), simOpTimeout)
	defer cancel()
	return l.Configuration(ctx)
}

func (s *memSim) byID(id string) *proc {
	for _, p := range s.procs {
		if p.id == id {
			return p
		}
	}
	return nil
}

func (s *memSim) isJoining(p *proc) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return p.joining > 0
}

// superseded reports whether p's slot has a newer incarnation.
func (s *memSim) superseded(p *proc) bool { return s.slots[p.slot] != p }

// view is the planner's input, as leaderDuties builds it: the leader's
// configuration, what the state machine records (numbers, removals), and
// which non-voters answer and have caught up with the leader's applied
// index. eligible counts the servers the planner keeps that vote or could.
func (s *memSim) view(conf metalog.Configuration, leader *metalog.Log) (servers []seen, eligible, kept int) {
	applied := leader.AppliedIndex()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sv := range conf.Servers {
		p := s.byID(sv.ID)
		if p == nil {
			s.violations = append(s.violations, fmt.Sprintf("unknown server %s in the configuration", sv.ID))
			continue
		}
		x := seen{ID: sv.ID, Node: nodeName(p.slot), Ordinal: p.slot, Number: p.number, Voter: sv.Suffrage == metalog.Voter, Removed: p.removed,
			Answers: p.state == running && p.log != nil}
		if !x.Voter && !x.Removed && p.state == running && p.log != nil {
			x.CaughtUp = p.log.AppliedIndex()+caughtUpLag >= applied
		}
		servers = append(servers, x)
	}
	newest := map[string]int{}
	for _, x := range servers {
		if !x.Removed {
			newest[x.Node] = max(newest[x.Node], x.Number)
		}
	}
	for _, x := range servers {
		if !x.Removed && x.Number >= newest[x.Node] {
			kept++
			if x.Voter || x.CaughtUp {
				eligible++
			}
		}
	}
	return servers, eligible, kept
}

// planStep is the leader's duty: plan from what it sees and make the first
// step. It reports whether the planner had nothing to do.
func (s *memSim) planStep(wait time.Duration) (converged bool) {
	l := s.awaitLeader(wait)
	if l == nil {
		s.logf("plan: no leader")
		return false
	}
	s.mu.Lock()
	log := l.log
	s.mu.Unlock()
	if log == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), simOpTimeout)
	defer cancel()
	conf, err := log.Configuration(ctx)
	if err != nil {
		s.logf("plan on %s: %v", l.id, err)
		return false
	}
	servers, eligible, kept := s.view(conf, log)
	steps := planSteps(servers, l.id)
	voters := len(conf.Voters())
	s.mu.Lock()
	s.maxVoters = max(s.maxVoters, voters)
	s.mu.Unlock()
	if len(steps) == 0 {
		if step := s.step.Load(); step > 0 && step <= int64(*flagMemSteps) {
			s.logf("plan on %s (voters %v, index %d): nothing to do", l.id, conf.Voters(), conf.Index)
		}
		if target := voterTarget(kept); voters > 5 || voters%2 == 0 && eligible >= target {
			s.violate("the planner has converged on %s with %d voters (%d servers kept, target %d, %d eligible): %v",
				l.id, voters, kept, target, eligible, servers)
		}
		return true
	}
	st := steps[0]
	target := s.byID(st.ID)
	if target == nil {
		return false // reported by view
	}
	if st.Kind == stepPromote && (target.removed || s.superseded(target)) {
		s.violate("the planner promotes %s, which is taken out", st.ID)
	}
	if st.Kind == stepDemote || st.Kind == stepRemove {
		s.noteHazard(conf, st)
	}
	switch st.Kind {
	case stepPromote:
		err = log.Promote(ctx, st.ID)
	case stepDemote:
		err = log.DemoteVoter(ctx, st.ID)
	case stepRemove:
		err = log.RemoveServer(ctx, st.ID)
	case stepTransfer:
		err = log.TransferLeadership(ctx, st.ID)
	}
	s.logf("plan on %s (voters %v, index %d): %s %s: %v", l.id, conf.Voters(), conf.Index, st.Kind, st.ID, errText(err))
	if err != nil {
		return false
	}
	s.changes++
	if st.Kind == stepTransfer {
		return false
	}
	after, err := log.Configuration(ctx)
	if err != nil {
		return false
	}
	sv, in := after.Server(st.ID)
	switch {
	case st.Kind == stepPromote && !(in && sv.Suffrage == metalog.Voter) && !(!in && s.superseded(target)),
		st.Kind == stepDemote && in && sv.Suffrage == metalog.Voter,
		st.Kind == stepRemove && in:
		s.violate("%s %s acknowledged, but the leader's configuration at %d has %+v (listed: %v)", st.Kind, st.ID, after.Index, sv, in)
	}
	return false
}

// noteHazard counts a planner step that takes a vote away while another
// voter is down, such that the voters had a running majority before the
// step and have none after it: the cluster stops committing until the
// voter that is down comes back (and has lost its quorum for good if that
// voter's directory is lost meanwhile). The planner does not know which
// voters are down; etcd's strict reconfiguration check refuses such a
// change. Counted and reported, not failed: it is the planner's design.
func (s *memSim) noteHazard(conf metalog.Configuration, st step) {
	running := func(id string) bool {
		p := s.byID(id)
		return p != nil && p.state == running
	}
	voters := conf.Voters()
	if !slices.Contains(voters, st.ID) {
		return
	}
	before, after := 0, 0
	for _, v := range voters {
		if running(v) {
			before++
			if v != st.ID {
				after++
			}
		}
	}
	if 2*before > len(voters) && 2*after <= len(voters)-1 {
		s.hazards++
		s.logf("HAZARD: %s %s leaves %d running of %d voters", st.Kind, st.ID, after, len(voters)-1)
	}
}

// noteGone records, for every incarnation taken out, the first committed
// configuration of the leader that no longer lists it; a removed member
// still running then stops, as a drained broker does.
func (s *memSim) noteGone() {
	l := s.leaderNow()
	if l == nil {
		return
	}
	s.mu.Lock()
	log := l.log
	s.mu.Unlock()
	conf, err := s.conf(log)
	if err != nil {
		return
	}
	st := log.Stats()
	if conf.Index > statUint(st, "commit_index") {
		return
	}
	term := statUint(st, "term")
	var stop []*proc
	s.mu.Lock()
	for _, p := range s.procs {
		if _, done := s.goneAt[p.id]; done || p.joining > 0 || !(p.removed || s.superseded(p)) {
			continue
		}
		if _, in := conf.Server(p.id); in {
			continue
		}
		s.goneAt[p.id], s.goneTerm[p.id] = conf.Index, term
		s.history = append(s.history, fmt.Sprintf("%6.3fs [%2d] %s is out of the configuration at %d (term %d)", time.Since(s.started).Seconds(), s.step.Load(), p.id, conf.Index, term))
		if p.removed && !p.zombie {
			p.left = true
			if p.state != crashed {
				stop = append(stop, p)
			}
		}
	}
	s.mu.Unlock()
	for _, p := range stop {
		s.crash(p, "left the cluster (removed for good)")
	}
}

// converge runs the planner until it has nothing to do and the
// configuration is what the rules want, bounded in planner steps and time.
func (s *memSim) converge(what string) {
	s.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	changes0, attempts := s.changes, 0
	bound := 2*len(s.procs) + 6
	for {
		if time.Now().After(deadline) {
			s.fail("%s: no convergence within 30s", what)
		}
		l := s.awaitLeader(10 * time.Second)
		if l == nil {
			s.noLeader(what)
		}
		conf, err := s.conf(l.log)
		if err != nil {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		for _, p := range s.slots {
			if p == nil {
				continue
			}
			if _, in := conf.Server(p.id); !in && !p.removed && !p.left && p.state == running && !s.isJoining(p) {
				s.violate("%s runs, is no member and was not removed", p.id)
			}
		}
		attempts++
		done := s.planStep(simOpTimeout)
		s.noteGone()
		s.check()
		if s.changes-changes0 > bound || attempts > 4*bound+20 {
			s.fail("%s: %d membership changes in %d planner steps and still not converged (bound %d)", what, s.changes-changes0, attempts, bound)
		}
		if done && s.settled(l) {
			s.logf("%s: converged after %d changes in %d planner steps", what, s.changes-changes0, attempts)
			return
		}
		if done {
			time.Sleep(5 * time.Millisecond) // a non-voter catching up
		}
	}
}

// noLeader ends a sequence that has no leader once the faults stopped:
// skipped when the quorum is lost for good — every running member's
// configuration has a majority of voters that can never vote again (their
// directories are wiped), whose remedy
// is the explicit recovery — and failed otherwise.
func (s *memSim) noLeader(what string) {
	s.t.Helper()
	lost, why := s.lostForGood()
	if !lost {
		s.fail("%s: no leader within 10s, though the quorum is not lost for good", what)
	}
	s.mu.Lock()
	hist := strings.Join(s.history, "\n")
	s.mu.Unlock()
	s.t.Logf("history:\n%s\nnodes:\n%s", hist, s.views())
	s.t.Skipf("seed %d: %s: the quorum is lost for good (%s) after %d planner hazards: the explicit recovery's case, not this test's",
		s.seed, what, why, s.hazards)
}

// lostForGood reports whether no running member's configuration has a
// majority of voters that can still vote.
func (s *memSim) lostForGood() (bool, string) {
	var why []string
	for _, q := range s.procs {
		l := s.logOf(q)
		if l == nil || q.left || q.zombie {
			continue
		}
		conf, err := s.conf(l)
		if err != nil {
			return false, ""
		}
		voters, able := conf.Voters(), 0
		for _, v := range voters {
			if x := s.byID(v); x != nil && !x.left && !s.superseded(x) {
				able++
			}
		}
		if 2*able > len(voters) {
			return false, ""
		}
		why = append(why, fmt.Sprintf("%s has the voters %v, %d of them able to vote", q.id, voters, able))
	}
	return len(why) > 0, strings.Join(why, "; ")
}

// settled reports whether the leader's configuration is exactly the live
// members, the voters the lowest ordinals, voterTarget of them.
func (s *memSim) settled(l *proc) bool {
	conf, err := s.conf(l.log)
	if err != nil {
		return false
	}
	var live, ids []string
	for _, p := range s.slots {
		if p != nil && !p.removed && p.state == running {
			live = append(live, p.id)
		}
	}
	for _, sv := range conf.Servers {
		ids = append(ids, sv.ID)
	}
	slices.Sort(ids)
	voters := conf.Voters()
	slices.Sort(voters)
	return slices.Equal(ids, live) && slices.Equal(voters, live[:voterTarget(len(live))])
}

// settle ends the faults — paused nodes resume, crashed members restart,
// proposals in flight end — then checks convergence and the state machines.
func (s *memSim) settle() {
	for _, p := range s.procs {
		switch {
		case p.state == paused:
			s.resume(p)
		case p.state == crashed && !p.left && !p.pending && s.slots[p.slot] == p:
			if err := s.start(p); err != nil {
				s.fail("%s does not restart: %v", p.id, err)
			}
			s.logf("%s: restarted", p.id)
		}
	}
	for _, p := range s.procs {
		if p.pending && !p.left && s.slots[p.slot] == p {
			s.logf("%s: asks to join again", p.id)
			if s.awaitLeader(10*time.Second) == nil {
				s.noLeader("after the faults")
			}
			if !s.join(p, 10*time.Second) {
				s.fail("%s cannot join once the faults stopped", p.id)
			}
			p.pending = false
			if err := s.start(p); err != nil {
				s.fail("%s does not start: %v", p.id, err)
			}
			s.logf("%s: started", p.id)
		}
	}
	s.async.Wait()
	s.converge("after the faults")

	// A last proposal, acknowledged, fences what came before it.
	var leader *proc
	deadline := time.Now().Add(10 * time.Second)
	for leader == nil {
		if time.Now().After(deadline) {
			s.fail("the fence was never acknowledged")
		}
		l := s.awaitLeader(5 * time.Second)
		if l == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), simOpTimeout)
		_, err := l.log.Apply(ctx, []byte("fence"))
		cancel()
		if err == nil {
			leader = l
		}
	}
	conf, err := s.conf(leader.log)
	if err != nil {
		s.fail("configuration: %v", err)
	}
	s.mu.Lock()
	acked := slices.Clone(s.acked)
	s.mu.Unlock()
	var ref []string
	var refID string
	for _, sv := range conf.Servers {
		p := s.byID(sv.ID)
		var got []string
		deadline := time.Now().Add(10 * time.Second)
		for {
			got = p.fsm.snapshot()
			if slices.Contains(got, "fence") {
				break
			}
			if time.Now().After(deadline) {
				s.fail("%s (%s) has not applied the fence within 10s: %d entries", p.id, sv.Suffrage, len(got))
			}
			time.Sleep(5 * time.Millisecond)
		}
		seen := map[string]bool{}
		for _, e := range got {
			if seen[e] {
				s.fail("%s applied %s twice", p.id, e)
			}
			seen[e] = true
		}
		for _, a := range acked {
			if !seen[a] {
				s.fail("%s (%s) lacks the acknowledged %s (%d acknowledged, %d applied)", p.id, sv.Suffrage, a, len(acked), len(got))
			}
		}
		if ref == nil {
			ref, refID = got, p.id
		} else if !slices.Equal(got, ref) {
			s.fail("%s and %s applied different entries:\n%v\n%v", refID, p.id, got, ref)
		}
	}
	s.logf("%d acknowledged proposals in the state machines of all %d members (%d entries each)", len(acked), len(conf.Servers), len(ref))
	if testing.Verbose() {
		s.mu.Lock()
		s.t.Logf("history:\n%s", strings.Join(s.history, "\n"))
		s.mu.Unlock()
	}
}

// sampler watches every node every few ms for the invariants raft must
// keep whatever the test does.
func (s *memSim) sampler() {
	defer close(s.samplerDone)
	t := time.NewTicker(3 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-s.stopSampler:
			return
		case <-t.C:
		}
		type obs struct {
			p *proc
			l *metalog.Log
		}
		var list []obs
		s.mu.Lock()
		for _, p := range s.procs {
			if p.log != nil {
				list = append(list, obs{p, p.log})
			}
		}
		s.mu.Unlock()
		for _, o := range list {
			s.observe(o.p, o.l)
		}
	}
}

func (s *memSim) observe(p *proc, l *metalog.Log) {
	st1 := l.Stats()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	conf, confErr := l.Configuration(ctx)
	cancel()
	st2 := l.Stats()
	term1, term2 := statUint(st1, "term"), statUint(st2, "term")
	commit1, commit2 := statUint(st1, "commit_index"), statUint(st2, "commit_index")
	var v []string
	s.mu.Lock()
	// raft sets a stepping-down leader's state before its new term, so
	// the same term read before and after the state means the node led in
	// that term when the state was read.
	if st2["state"] == "Leader" && term1 == term2 {
		if other, ok := s.leaders[term2]; ok && other != p.id {
			v = append(v, fmt.Sprintf("two leaders in term %d: %s and %s", term2, other, p.id))
		} else {
			s.leaders[term2] = p.id
		}
		if gt, gone := s.goneTerm[p.id]; gone && term2 > gt {
			v = append(v, fmt.Sprintf("%s, out of the configuration since index %d (term %d), leads in term %d", p.id, s.goneAt[p.id], gt, term2))
		}
		if confErr == nil {
			key := p.id + "/" + strconv.FormatUint(term2, 10)
			if prev, ok := s.leadConf[key]; ok && conf.Index > prev && commit2 < prev {
				v = append(v, fmt.Sprintf("leader %s (term %d) has configuration %d while the one at %d is uncommitted (commit index %d)", p.id, term2, conf.Index, prev, commit2))
			}
			s.leadConf[key] = max(s.leadConf[key], conf.Index)
		}
	}
	if confErr == nil && conf.Index > 0 && conf.Index <= commit1 {
		desc := fmt.Sprint(conf.Servers)
		if prev, ok := s.committed[conf.Index]; ok && prev != desc {
			v = append(v, fmt.Sprintf("two committed configurations at index %d: %s and (on %s) %s", conf.Index, prev, p.id, desc))
		}
		s.committed[conf.Index] = desc
		for _, sv := range conf.Servers {
			if at, gone := s.goneAt[sv.ID]; gone && conf.Index > at {
				v = append(v, fmt.Sprintf("%s is back in the committed configuration at %d on %s (out since %d): %s", sv.ID, conf.Index, p.id, at, desc))
			}
		}
	}
	s.mu.Unlock()
	for _, m := range v {
		s.violate("%s", m)
	}
}

func statUint(st map[string]string, key string) uint64 {
	n, _ := strconv.ParseUint(st[key], 10, 64)
	return n
}

func errText(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

func idOf(p *proc) string {
	if p == nil {
		return "none"
	}
	return p.id
}

// recordFSM records the commands it applies, in order.
type recordFSM struct {
	mu      sync.Mutex
	entries []string
}

func (f *recordFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.entries = append(f.entries, string(l.Data))
	return nil
}

func (f *recordFSM) snapshot() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.entries)
}

func (f *recordFSM) Snapshot() (raft.FSMSnapshot, error) { return recordSnapshot(f.snapshot()), nil }

func (f *recordFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var entries []string
	if err := json.NewDecoder(rc).Decode(&entries); err != nil {
		return err
	}
	f.mu.Lock()
	f.entries = entries
	f.mu.Unlock()
	return nil
}

type recordSnapshot []string

func (r recordSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := json.NewEncoder(sink).Encode([]string(r)); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (recordSnapshot) Release() {}

// pipeNet is an in-memory network for metalog.Network: each address has
// at most one listener (the process in that slot now), a dial is a
// net.Pipe handed to it, and a node cut off has its connections closed and
// its dials, both ways, refused.
type pipeNet struct {
	mu   sync.Mutex
	ends map[string]*pipeEnd
}

type pipeEnd struct {
	net    *pipeNet
	addr   string
	accept chan net.Conn
	done   chan struct{}
	once   sync.Once
	cut    bool               // guarded by net.mu
	links  map[*pipeLink]bool // guarded by net.mu
}

type pipeLink struct {
	a, b net.Conn
	ends [2]*pipeEnd
}

// pipeConn is one end of a link; closing it closes the link.
type pipeConn struct {
	net.Conn
	link *pipeLink
	pn   *pipeNet
}

func (c *pipeConn) Close() error {
	c.pn.mu.Lock()
	c.pn.dropLocked(c.link)
	c.pn.mu.Unlock()
	return nil
}

func (n *pipeNet) dropLocked(l *pipeLink) {
	l.a.Close()
	l.b.Close()
	for _, e := range l.ends {
		delete(e.links, l)
	}
}

func (n *pipeNet) listen(addr string) *pipeEnd {
	e := &pipeEnd{net: n, addr: addr, accept: make(chan net.Conn, 16), done: make(chan struct{}), links: map[*pipeLink]bool{}}
	n.mu.Lock()
	if old := n.ends[addr]; old != nil {
		for l := range old.links {
			n.dropLocked(l)
		}
	}
	n.ends[addr] = e
	n.mu.Unlock()
	return e
}

func (n *pipeNet) setCut(e *pipeEnd, cut bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	e.cut = cut
	if cut {
		for l := range e.links {
			n.dropLocked(l)
		}
	}
}

func (e *pipeEnd) network() *metalog.Network {
	return &metalog.Network{Listener: e, Dial: e.dial, Advertise: e.addr}
}

func (e *pipeEnd) closed() bool {
	select {
	case <-e.done:
		return true
	default:
		return false
	}
}

func (e *pipeEnd) Accept() (net.Conn, error) {
	select {
	case c := <-e.accept:
		return c, nil
	case <-e.done:
		return nil, net.ErrClosed
	}
}

func (e *pipeEnd) Close() error {
	e.once.Do(func() { close(e.done) })
	e.net.mu.Lock()
	for l := range e.links {
		e.net.dropLocked(l)
	}
	e.net.mu.Unlock()
	return nil
}

func (e *pipeEnd) Addr() net.Addr { return pipeAddr(e.addr) }

func (e *pipeEnd) dial(ctx context.Context, addr string) (net.Conn, error) {
	n := e.net
	n.mu.Lock()
	to := n.ends[addr]
	switch {
	case e.cut || e.closed():
		n.mu.Unlock()
		return nil, fmt.Errorf("dial %s: %s is cut off", addr, e.addr)
	case to == nil || to.cut || to.closed():
		n.mu.Unlock()
		return nil, fmt.Errorf("dial %s: unreachable", addr)
	}
	a, b := net.Pipe()
	l := &pipeLink{a: a, b: b, ends: [2]*pipeEnd{e, to}}
	e.links[l], to.links[l] = true, true
	n.mu.Unlock()
	select {
	case to.accept <- &pipeConn{Conn: b, link: l, pn: n}:
		return &pipeConn{Conn: a, link: l, pn: n}, nil
	case <-to.done:
	case <-ctx.Done():
	}
	n.mu.Lock()
	n.dropLocked(l)
	n.mu.Unlock()
	return nil, errors.Join(fmt.Errorf("dial %s: not accepted", addr), ctx.Err())
}

type pipeAddr string

func (a pipeAddr) Network() string { return "pipe" }
func (a pipeAddr) String() string  { return string(a) }

// lockedBuffer collects the nodes' raft logs.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) tail(lines int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	all := strings.Split(strings.TrimRight(b.buf.String(), "\n"), "\n")
	return strings.Join(all[max(0, len(all)-lines):], "\n")
}
