package ownership

// The deterministic tier's simulated cluster: brokers are Managers driven
// by their wake step (what Run does when its timer fires), each on its own
// FakeClock with its own offset, all against one fakeAPI. Global time moves
// in steps that never skip a broker's next wake, so every renew deadline
// and expiry happens at its exact instant. Each broker decides from its own
// view of the Leases, refreshed (or not: an informer that lags) before it
// wakes.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	testingclock "k8s.io/utils/clock/testing"
)

const simNS = "picomq"

type nodeState int

const (
	running nodeState = iota
	paused            // not scheduled, its clock stopped; on resume the clock jumps (as CLOCK_MONOTONIC after SIGCONT)
	dead              // crashed: never scheduled again
)

type simNode struct {
	name, id string
	clk      *testingclock.FakeClock
	offset   time.Duration // clk - global, while running
	m        *Manager
	down     atomic.Bool
	state    nodeState
	pausedAt time.Time // global
	next     time.Time // own clock
	view     []*coordinationv1.Lease

	// Episodes: Acquire returned nil and neither Release returned nil nor
	// Revoke was called since.
	open map[int]bool
	// owes: slots another broker acquired while this one, paused, still
	// had them open: its first wake after resuming must Revoke them.
	owes map[int]bool

	failAcquire, failRelease    bool
	acquires, releases, revokes int
	// onRelease, when set, runs at the start of each Release.
	onRelease func(slot int)
}

type sim struct {
	t      testing.TB
	rng    *rand.Rand
	now    time.Time
	api    *fakeAPI
	nodes  []*simNode
	slots  int
	ld, rd time.Duration
	rp     time.Duration
	seq    int // incarnations made
	wakes  int
	// failsafeRounds counts the rounds every member confirmed.
	failsafeRounds int
	// refresh is the chance a broker's view is refreshed before it wakes;
	// below 1 models an informer that lags.
	refresh float64
	ctx     context.Context
	log     []string // what happened, for a failure report
}

func newSim(t testing.TB, seed uint64, slots int, ld, rd, rp time.Duration) *sim {
	s := &sim{t: t, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), now: time.Unix(1_700_000_000, 0),
		slots: slots, ld: ld, rd: rd, rp: rp, ctx: context.Background(), refresh: 0.85}
	s.api = newFakeAPI(ld, func() time.Time { return s.now })
	return s
}

func (s *sim) logf(format string, args ...any) {
	s.log = append(s.log, fmt.Sprintf("%v ", s.now.Sub(time.Unix(1_700_000_000, 0)))+fmt.Sprintf(format, args...))
}

// fail reports a broken invariant with the recent history.
func (s *sim) fail(format string, args ...any) {
	s.t.Helper()
	hist := s.log
	if len(hist) > 60 {
		hist = hist[len(hist)-60:]
	}
	s.t.Fatalf("%s\nrecent history:\n  %s", fmt.Sprintf(format, args...), joinLines(hist))
}

func joinLines(l []string) string {
	out := ""
	for i, x := range l {
		if i > 0 {
			out += "\n  "
		}
		out += x
	}
	return out
}

// start adds a broker: node name, and a new incarnation unless identity
// is given (a restart on the same data directory).
func (s *sim) start(name, identity string) *simNode {
	s.t.Helper()
	return s.startWith(name, identity, nil)
}

// startWith is start with a change to the broker's Config.
func (s *sim) startWith(name, identity string, tweak func(*Config)) *simNode {
	s.t.Helper()
	if identity == "" {
		s.seq++
		identity = fmt.Sprintf("%s/inc-%d", name, s.seq)
	}
	offset := time.Duration(s.rng.IntN(48*3600)) * time.Second // clocks disagree by hours
	n := &simNode{name: name, id: identity, offset: offset, clk: testingclock.NewFakeClock(s.now.Add(offset)),
		open: map[int]bool{}, owes: map[int]bool{}}
	cfg := Config{
		Client:    s.api.client(func() string { return n.id }, &n.down),
		Namespace: simNS, Cluster: "demo", Node: name, Identity: identity,
		Slots: s.slots, LeaseDuration: s.ld, RenewDeadline: s.rd, RetryPeriod: s.rp,
		Clock:    n.clk,
		Acquire:  func(_ context.Context, slot int) error { return s.onAcquire(n, slot) },
		Release:  func(_ context.Context, slot int) error { return s.onRelease(n, slot) },
		Revoke:   func(slot int) { s.onRevoke(n, slot) },
		Failsafe: func(context.Context) error { return s.failsafe(n) },
	}
	if tweak != nil {
		tweak(&cfg)
	}
	m, err := New(cfg)
	if err != nil {
		s.t.Fatal(err)
	}
	m.source = func() ([]*coordinationv1.Lease, error) { return n.view, nil }
	n.m = m
	n.next = n.clk.Now()
	s.nodes = append(s.nodes, n)
	s.logf("start %s", identity)
	return n
}

func (s *sim) onAcquire(n *simNode, slot int) error {
	if n.failAcquire {
		return errors.New("acquire refused (test)")
	}
	if n.open[slot] {
		s.fail("%s: Acquire(%d) with an episode already open", n.id, slot)
	}
	if n.owes[slot] {
		s.fail("%s: Acquire(%d) before Revoking the episode another broker's Acquire ended", n.id, slot)
	}
	if h := s.api.holder(simNS, SlotLeaseName("demo", slot)); h != n.id {
		s.fail("%s: Acquire(%d) while the Lease names %q", n.id, slot, h)
	}
	for _, o := range s.nodes {
		if o == n || o.state == dead || !o.open[slot] {
			continue
		}
		if o.state != paused {
			s.fail("%s: Acquire(%d) while %s (running) has not Released or Revoked it", n.id, slot, o.id)
		}
		o.owes[slot] = true
	}
	n.open[slot] = true
	n.acquires++
	s.logf("%s acquire %d", n.id, slot)
	return nil
}

func (s *sim) onRelease(n *simNode, slot int) error {
	if !n.open[slot] {
		s.fail("%s: Release(%d) without an open episode", n.id, slot)
	}
	if n.onRelease != nil {
		n.onRelease(slot)
	}
	if n.failRelease {
		return errors.New("release failed (test)")
	}
	n.open[slot] = false
	n.releases++
	s.logf("%s release %d", n.id, slot)
	return nil
}

func (s *sim) onRevoke(n *simNode, slot int) {
	if !n.open[slot] {
		s.fail("%s: Revoke(%d) without an open episode (twice, or never acquired)", n.id, slot)
	}
	n.open[slot] = false
	delete(n.owes, slot)
	n.revokes++
	s.logf("%s revoke %d", n.id, slot)
}

// failsafe is n's failsafe round: every member — the latest incarnation
// of each node name, as the metadata log's configuration lists the
// members — but n itself must be running and confirm. A paused or
// crashed member does not answer.
func (s *sim) failsafe(n *simNode) error {
	latest := map[string]*simNode{}
	var names []string
	for _, o := range s.nodes {
		if _, ok := latest[o.name]; !ok {
			names = append(names, o.name)
		}
		latest[o.name] = o
	}
	for _, name := range names {
		o := latest[name]
		if o == n {
			continue
		}
		if o.state != running {
			s.logf("%s failsafe round: %s does not answer", n.id, o.id)
			return fmt.Errorf("%s does not answer", o.id)
		}
		if err := o.m.AnswerFailsafe(n.id); err != nil {
			s.logf("%s failsafe round: %s refuses", n.id, o.id)
			return err
		}
	}
	s.failsafeRounds++
	s.logf("%s failsafe round confirmed", n.id)
	return nil
}

// wake runs one broker's step at its clock's now, then checks.
func (s *sim) wake(n *simNode) {
	s.t.Helper()
	if !n.down.Load() && s.rng.Float64() < s.refresh {
		n.view = s.api.snapshot(simNS)
	}
	at := n.clk.Now()
	n.next = n.m.wake(s.ctx)
	s.wakes++
	if !n.next.After(at) {
		d, ok := n.m.earliestDeadline()
		s.fail("%s: wake at %v returned %v, not later (tick %v pass %v round %v deadline %v %v)", n.id, at, n.next, n.m.nextTick, n.m.nextPass, n.m.roundAt, d, ok)
	}
	s.check()
}

// setNow moves global time to t; running brokers' clocks follow.
func (s *sim) setNow(t time.Time) {
	d := t.Sub(s.now)
	s.now = t
	for _, n := range s.nodes {
		if n.state == running {
			n.clk.Step(d)
		}
	}
}

// advance moves global time by d, waking every running broker at each of
// its wake times on the way, in random order when several are due at once.
func (s *sim) advance(d time.Duration) {
	s.t.Helper()
	end := s.now.Add(d)
	for guard := 0; ; guard++ {
		if guard > 100000 {
			s.fail("advance: no progress")
		}
		t := end
		for _, n := range s.nodes {
			if n.state == running {
				if g := n.next.Add(-n.offset); g.Before(t) {
					t = g
				}
			}
		}
		if t.After(s.now) {
			s.setNow(t)
		}
		due := []*simNode{}
		for _, n := range s.nodes {
			if n.state == running && !n.clk.Now().Before(n.next) {
				due = append(due, n)
			}
		}
		if len(due) == 0 {
			if !s.now.Before(end) {
				return
			}
			continue
		}
		s.rng.Shuffle(len(due), func(i, j int) { due[i], due[j] = due[j], due[i] })
		for _, n := range due {
			if n.state == running && !n.clk.Now().Before(n.next) {
				s.wake(n)
			}
		}
	}
}

func (s *sim) pause(n *simNode) {
	n.state, n.pausedAt = paused, s.now
	s.logf("pause %s", n.id)
}

// resume restarts a paused broker: its clock jumps by the time it was
// stopped, and it wakes at once; the first thing it must do is Revoke what
// others took meanwhile.
func (s *sim) resume(n *simNode) {
	s.t.Helper()
	n.clk.Step(s.now.Sub(n.pausedAt))
	n.state = running
	s.logf("resume %s after %v", n.id, s.now.Sub(n.pausedAt))
	s.wake(n)
	for slot := range n.owes {
		s.fail("%s resumed and did not Revoke slot %d, which another broker acquired while it was paused", n.id, slot)
	}
}

func (s *sim) crash(n *simNode) {
	n.state = dead
	s.logf("crash %s", n.id)
}

// check is every instant's invariants: at most one running broker serves
// a slot; a serving broker is the holder on the server; MayOpen agrees with
// Serving; and the fake server saw no write against the protocol.
func (s *sim) check() {
	s.t.Helper()
	if v := s.api.takeViolations(); len(v) > 0 {
		s.fail("protocol violated: %v", v)
	}
	for slot := range s.slots {
		var servers []string
		for _, n := range s.nodes {
			if n.state != running {
				continue
			}
			serving := n.m.Serving(slot)
			id := uint64(slot + s.slots*s.rng.IntN(1000))
			if err := n.m.MayOpen(id); (err == nil) != serving {
				s.fail("%s: MayOpen(%d) = %v but Serving(%d) = %v", n.id, id, err, slot, serving)
			}
			if serving {
				servers = append(servers, n.id)
				if h := s.api.holder(simNS, SlotLeaseName("demo", slot)); h != n.id {
					s.fail("%s serves slot %d, whose Lease names %q", n.id, slot, h)
				}
			}
		}
		if len(servers) > 1 {
			s.fail("slot %d served by %v at once", slot, servers)
		}
	}
}

func (s *sim) pick(f func(*simNode) bool) *simNode {
	var c []*simNode
	for _, n := range s.nodes {
		if f(n) {
			c = append(c, n)
		}
	}
	if len(c) == 0 {
		return nil
	}
	return c[s.rng.IntN(len(c))]
}

func (s *sim) count(f func(*simNode) bool) int {
	k := 0
	for _, n := range s.nodes {
		if f(n) {
			k++
		}
	}
	return k
}

func isRunning(n *simNode) bool { return n.state == running }

// setOffset puts a broker's clock d away from global time.
func (s *sim) setOffset(n *simNode, d time.Duration) {
	n.clk.SetTime(s.now.Add(d))
	n.next = n.next.Add(d - n.offset)
	n.offset = d
}

// settle ends every fault (pauses, outages, failing callbacks), keeps one
// broker not draining, and lets time run until the cluster converges, or
// fails after a bound.
func (s *sim) settle() {
	s.t.Helper()
	for _, n := range s.nodes {
		if n.state == paused {
			s.resume(n)
		}
		n.down.Store(false)
		n.failAcquire, n.failRelease = false, false
	}
	if s.count(func(n *simNode) bool { return n.state == running && !n.m.Status().Draining }) == 0 {
		if n := s.pick(isRunning); n != nil {
			_ = n.m.SetDraining(s.ctx, false)
		} else {
			s.start(fmt.Sprintf("demo-%d", len(s.nodes)), "")
		}
	}
	var why string
	for range 20 {
		s.advance(s.ld + 4*s.rp)
		if why = s.converged(); why == "" {
			return
		}
	}
	s.fail("did not converge: %s", why)
}

// converged says why the cluster has not settled, "" once it has: every
// slot served by one running broker, draining brokers holding none, and
// the others holding their fair shares (even within one).
func (s *sim) converged() string {
	var ids []string
	for _, n := range s.nodes {
		if n.state == running && !n.m.Status().Draining {
			ids = append(ids, n.id)
		}
	}
	slices.Sort(ids)
	for slot := range s.slots {
		k := s.count(func(n *simNode) bool { return n.state == running && n.m.Serving(slot) })
		if k != 1 {
			return fmt.Sprintf("slot %d served by %d brokers", slot, k)
		}
	}
	lo, hi := s.slots, 0
	for _, n := range s.nodes {
		if n.state != running {
			continue
		}
		held := len(n.m.Held())
		want := targetShare(n.id, ids, s.slots)
		if n.m.Status().Draining {
			want = 0
		} else {
			lo, hi = min(lo, held), max(hi, held)
		}
		if held != want {
			return fmt.Sprintf("%s holds %d, wants %d", n.id, held, want)
		}
	}
	if hi-lo > 1 {
		return fmt.Sprintf("shares %d..%d differ by more than one", lo, hi)
	}
	return ""
}
