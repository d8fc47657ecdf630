package ownership

// The integration tier: three managers with real clocks against a real
// kube-apiserver (envtest's). Under -short it skips (the unit tier has no
// control plane); without -short a missing KUBEBUILDER_ASSETS fails it.

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/picomq/picomq/internal/testwait"
)

func startEnvtest(t *testing.T) *envtest.Environment {
	t.Helper()
	if testing.Short() {
		t.Skip("envtest: needs a kube-apiserver; skipped under -short (the unit tier runs without a control plane)")
	}
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run `make test`, or export KUBEBUILDER_ASSETS=$(hack/envtest-assets.sh); `go test -short` runs the unit tier alone")
	}
	env := &envtest.Environment{}
	if _, err := env.Start(); err != nil {
		t.Fatalf("starting envtest: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping envtest: %v", err)
		}
	})
	return env
}

// Three brokers, LeaseDuration 3s, RenewDeadline 2s, RetryPeriod 500ms, 16
// slots: they converge to 6/5/5; one crashes (its Run ends, nothing
// released) and the others take its slots once they expired; one drains
// and hands all it holds off. A sampler checks all along that no slot is
// served by two brokers at once, and the callbacks' times that no two
// brokers' writing episodes of a slot overlap.
func TestEnvtestThreeBrokers(t *testing.T) {
	env := startEnvtest(t)
	const (
		slots = 16
		ld    = 3 * time.Second
		rp    = 500 * time.Millisecond
		ns    = "ownership-test"
	)
	admin, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	var bs []*runBroker
	for i := range 3 {
		client, err := kubernetes.NewForConfig(RestConfigFor(env.Config, slots, rp))
		if err != nil {
			t.Fatal(err)
		}
		b := &runBroker{id: fmt.Sprintf("demo-%d/%d", i, time.Now().UnixNano()), done: make(chan error, 1)}
		m, err := New(Config{
			Client: client, Namespace: ns, Cluster: "demo", Node: fmt.Sprintf("demo-%d", i), Identity: b.id,
			Slots: slots, LeaseDuration: ld, RenewDeadline: 2 * time.Second, RetryPeriod: rp,
			Acquire: func(_ context.Context, slot int) error { b.began(slot); return nil },
			Release: func(_ context.Context, slot int) error { b.ended(slot, &b.releases); return nil },
			Revoke:  func(slot int) { b.ended(slot, &b.revokes) },
		})
		if err != nil {
			t.Fatal(err)
		}
		b.m = m
		rctx, cancel := context.WithCancel(ctx)
		b.cancel = cancel
		go func() { b.done <- m.Run(rctx) }()
		bs = append(bs, b)
	}
	defer func() {
		for _, b := range bs {
			b.cancel()
		}
	}()

	// The sampler: at any moment, at most one broker serves a slot.
	var (
		sampleMu sync.Mutex
		double   []string
		samples  int
	)
	stopSampler := make(chan struct{})
	samplerDone := make(chan struct{})
	go func() {
		defer close(samplerDone)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopSampler:
				return
			case <-tick.C:
			}
			for s := range slots {
				// Ask every broker, then again in reverse order: two that
				// serve in both passes served at one instant (a sampler
				// descheduled between two questions cannot fake it).
				first := map[string]bool{}
				for _, b := range bs {
					first[b.id] = b.m.Serving(s)
				}
				var who []string
				for i := len(bs) - 1; i >= 0; i-- {
					if b := bs[i]; b.m.Serving(s) && first[b.id] {
						who = append(who, b.id)
					}
				}
				sampleMu.Lock()
				samples++
				if len(who) > 1 {
					double = append(double, fmt.Sprintf("slot %d: %v", s, who))
				}
				sampleMu.Unlock()
			}
		}
	}()

	testwait.Until(t, 60*time.Second, "6/5/5", func() bool {
		c, ok := servingCounts(bs, slots)
		return ok && c[0]+c[1]+c[2] == slots && max(c[0], c[1], c[2]) == 6 && min(c[0], c[1], c[2]) == 5
	})
	// What kubectl get leases -l streams.picomq.io/cluster=demo shows.
	list, err := admin.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{LabelSelector: LabelCluster + "=demo"})
	if err != nil {
		t.Fatal(err)
	}
	holders := map[string]int{}
	for _, l := range list.Items {
		if l.Labels[LabelRole] == RoleSlot {
			holders[holderOf(&l)]++
		}
	}
	if len(list.Items) != slots+3 || len(holders) != 3 {
		t.Fatalf("Leases of the cluster: %d (want %d), slot holders %v", len(list.Items), slots+3, holders)
	}

	// A crash: Run ends with nothing released.
	crashed := bs[2]
	_, rel0, _ := crashed.counts()
	crashed.cancel()
	crashedAt := time.Now()
	if err := <-crashed.done; err != nil {
		t.Fatalf("Run returned %v", err)
	}
	rest := bs[:2]
	testwait.Until(t, 60*time.Second, "8/8 after the crash", func() bool {
		c, ok := servingCounts(rest, slots)
		return ok && c[0] == 8 && c[1] == 8
	})
	// Its last renew was at most a RetryPeriod before the crash, and its
	// slots could move only LeaseDuration after that.
	if took := time.Since(crashedAt); took < ld-rp {
		t.Fatalf("the crashed broker's slots moved %v after the crash", took)
	} else {
		t.Logf("crash taken over %v after it", took)
	}
	if _, rel, _ := crashed.counts(); rel != rel0 {
		t.Errorf("the crashed broker released %d slots as it stopped", rel-rel0)
	}

	// A drain: everything handed off, nothing revoked.
	drainer, keeper := rest[0], rest[1]
	_, relBefore, revBefore := drainer.counts()
	drainStart := time.Now()
	if err := drainer.m.SetDraining(ctx, true); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 60*time.Second, "the drain", func() bool {
		return len(drainer.m.Held()) == 0 && servingAll(keeper.m, slots)
	})
	t.Logf("drain of 8 slots done in %v", time.Since(drainStart))
	if _, rel, rev := drainer.counts(); rel-relBefore != 8 || rev != revBefore {
		t.Fatalf("drain: %d released, %d revoked", rel-relBefore, rev-revBefore)
	}
	if st := keeper.m.Status(); st.SlotsHeld != slots || st.Serving != slots || st.MembersLive != 1 {
		t.Errorf("keeper status %+v", st)
	}

	close(stopSampler)
	<-samplerDone
	sampleMu.Lock()
	defer sampleMu.Unlock()
	if len(double) > 0 {
		t.Fatalf("slots served twice at once (%d of %d samples): %v", len(double), samples, double[:min(len(double), 10)])
	}
	if o := overlaps(bs); len(o) > 0 {
		t.Fatalf("two writers of one slot at once (Acquire to Release or Revoke): %v", o)
	}
	t.Logf("%d samples, no slot served twice", samples)
	for _, b := range rest {
		b.cancel()
		if err := <-b.done; err != nil {
			t.Fatalf("Run returned %v", err)
		}
	}
}
