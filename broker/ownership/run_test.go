package ownership

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/picomq/picomq/internal/testwait"
)

// runBroker is one Manager under Run, with its callbacks counted.
type runBroker struct {
	id     string
	m      *Manager
	down   atomic.Bool
	cancel context.CancelFunc
	done   chan error

	mu                          sync.Mutex
	acquires, releases, revokes int
	open                        map[int]time.Time // slot -> when its episode began (Acquire)
	episodes                    []episode         // ended ones (Release or Revoke)
}

// episode is one broker's stretch of writing a slot, on the real clock:
// from Acquire's call to Release's or Revoke's, which contains the time
// it served the slot.
type episode struct {
	who        string
	slot       int
	start, end time.Time
}

func (b *runBroker) began(slot int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.acquires++
	if b.open == nil {
		b.open = map[int]time.Time{}
	}
	b.open[slot] = time.Now()
}

func (b *runBroker) ended(slot int, p *int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	*p++
	if start, ok := b.open[slot]; ok {
		b.episodes = append(b.episodes, episode{b.id, slot, start, time.Now()})
		delete(b.open, slot)
	}
}

// overlaps returns the episodes of one slot on two brokers that overlap in
// time: two writers at once.
func overlaps(bs []*runBroker) []string {
	var all []episode
	now := time.Now()
	for _, b := range bs {
		b.mu.Lock()
		all = append(all, b.episodes...)
		for slot, start := range b.open {
			all = append(all, episode{b.id, slot, start, now})
		}
		b.mu.Unlock()
	}
	var out []string
	for i, x := range all {
		for _, y := range all[i+1:] {
			if x.slot == y.slot && x.who != y.who && x.start.Before(y.end) && y.start.Before(x.end) {
				out = append(out, fmt.Sprintf("slot %d: %s [%v, %v] and %s [%v, %v]", x.slot, x.who,
					x.start.Format(time.StampMicro), x.end.Format(time.StampMicro), y.who, y.start.Format(time.StampMicro), y.end.Format(time.StampMicro)))
			}
		}
	}
	return out
}

func (b *runBroker) counts() (acq, rel, rev int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.acquires, b.releases, b.revokes
}

func servingCounts(bs []*runBroker, slots int) ([]int, bool) {
	counts := make([]int, len(bs))
	for s := range slots {
		k := 0
		for i, b := range bs {
			if b.m.Serving(s) {
				counts[i]++
				k++
			}
		}
		if k != 1 {
			return counts, false
		}
	}
	return counts, true
}

// Run drives the same steps on its timer, with a real informer (here on
// the fake clientset) feeding the cache: three brokers converge to 6/5/5,
// one crashes (its Run ends without releasing) and the others take its
// slots once they expire, one drains and hands everything off.
func TestRunWithInformerOnFakeClock(t *testing.T) {
	const slots = 16
	clk := testingclock.NewFakeClock(time.Unix(1_700_000_000, 0))
	api := newFakeAPI(3*time.Second, clk.Now)
	var bs []*runBroker
	for i := range 3 {
		b := &runBroker{id: fmt.Sprintf("demo-%d/run", i), done: make(chan error, 1)}
		m, err := New(Config{
			Client:    api.client(func() string { return b.id }, &b.down),
			Namespace: simNS, Cluster: "demo", Node: fmt.Sprintf("demo-%d", i), Identity: b.id,
			Slots: slots, LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 500 * time.Millisecond,
			Clock:   clk,
			Acquire: func(_ context.Context, slot int) error { b.began(slot); return nil },
			Release: func(_ context.Context, slot int) error { b.ended(slot, &b.releases); return nil },
			Revoke:  func(slot int) { b.ended(slot, &b.revokes) },
		})
		if err != nil {
			t.Fatal(err)
		}
		b.m = m
		ctx, cancel := context.WithCancel(context.Background())
		b.cancel = cancel
		go func() { b.done <- m.Run(ctx) }()
		bs = append(bs, b)
	}
	defer func() {
		for _, b := range bs {
			b.cancel()
		}
	}()

	alive := len(bs)
	// step moves the fake clock once every live loop waits on its timer.
	step := func() {
		testwait.Until(t, 10*time.Second, "every loop to wait", func() bool { return clk.Waiters() >= alive })
		clk.Step(100 * time.Millisecond)
	}
	advanceUntil := func(limit time.Duration, what string, cond func() bool) time.Duration {
		t.Helper()
		start := clk.Now()
		for !cond() {
			if clk.Since(start) > limit {
				t.Fatalf("%s: not within %v of the fake clock", what, limit)
			}
			step()
		}
		return clk.Since(start)
	}
	checkAPI := func() {
		t.Helper()
		if v := api.takeViolations(); len(v) > 0 {
			t.Fatalf("protocol violated: %v", v)
		}
	}

	advanceUntil(20*time.Second, "6/5/5", func() bool {
		c, ok := servingCounts(bs, slots)
		return ok && c[0]+c[1]+c[2] == 16 && max(c[0], c[1], c[2]) == 6 && min(c[0], c[1], c[2]) == 5
	})
	checkAPI()

	// A crash: the loop ends, nothing is released.
	crashed := bs[2]
	held := len(crashed.m.Held())
	_, rel0, rev0 := crashed.counts()
	crashed.cancel()
	if err := <-crashed.done; err != nil {
		t.Fatalf("Run returned %v", err)
	}
	alive--
	if _, rel, rev := crashed.counts(); rev-rev0 != held || rel != rel0 || len(crashed.m.Held()) != 0 || crashed.m.Serving(0) {
		t.Fatalf("after Run ended: revokes %d of %d held, releases %d, held %v", rev-rev0, held, rel-rel0, crashed.m.Held())
	}
	rest := bs[:2]
	took := advanceUntil(20*time.Second, "8/8 after the crash", func() bool {
		c, ok := servingCounts(rest, slots)
		return ok && c[0] == 8 && c[1] == 8
	})
	if took < 3*time.Second-500*time.Millisecond {
		t.Fatalf("the crashed broker's slots moved %v after the crash, before LeaseDuration since its last renew", took)
	}
	checkAPI()

	// A drain: every slot handed off, none revoked.
	drainer, keeper := rest[0], rest[1]
	_, relBefore, revBefore := drainer.counts()
	if err := drainer.m.SetDraining(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	advanceUntil(20*time.Second, "the drain", func() bool {
		return len(drainer.m.Held()) == 0 && servingAll(keeper.m, slots)
	})
	if _, rel, rev := drainer.counts(); rel-relBefore != 8 || rev != revBefore {
		t.Fatalf("drain: %d released, %d revoked", rel-relBefore, rev-revBefore)
	}
	checkAPI()
	if o := overlaps(bs); len(o) > 0 {
		t.Fatalf("two writers of one slot at once: %v", o)
	}
	t.Logf("crash taken over in %v of the fake clock; %d writes", took, api.writeCount())

	for _, b := range rest {
		b.cancel()
		if err := <-b.done; err != nil {
			t.Fatalf("Run returned %v", err)
		}
	}
}

func servingAll(m *Manager, slots int) bool {
	for s := range slots {
		if !m.Serving(s) {
			return false
		}
	}
	return true
}
