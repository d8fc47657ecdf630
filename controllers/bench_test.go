package controllers

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
)

// TestStreamsAtScale creates PICOMQ_BENCH_STREAMS Streams (1,000 in the
// issue) against one broker and reports the time until all are Ready and
// the process's peak RSS and Go heap (the manager runs in this process;
// kube-apiserver and etcd do not). Skipped unless PICOMQ_BENCH_STREAMS is
// set:
//
//	PICOMQ_BENCH_STREAMS=1000 go test ./controllers -run TestStreamsAtScale -v
//
// PICOMQ_BENCH_QPS and PICOMQ_BENCH_BURST set the manager's client-side
// rate limit (default -1: none, as ctrl.GetConfig gives cmd/manager, which
// relies on the apiserver's priority and fairness); PICOMQ_BENCH_WORKERS
// its Stream MaxConcurrentReconciles (default 4, the manager's default).
func TestStreamsAtScale(t *testing.T) {
	needsEnvtest(t)
	n := envInt("PICOMQ_BENCH_STREAMS", 0)
	if n == 0 {
		t.Skip("set PICOMQ_BENCH_STREAMS=1000 to run")
	}
	qps, burst, workers := envInt("PICOMQ_BENCH_QPS", -1), envInt("PICOMQ_BENCH_BURST", 0), envInt("PICOMQ_BENCH_WORKERS", 4)
	b, err := startBroker()
	if err != nil {
		t.Fatal(err)
	}
	defer b.stop()
	ns := newNamespace(t)
	cfg := rest.CopyConfig(restCfg)
	cfg.QPS, cfg.Burst = float32(qps), burst
	h := startManagerWith(t, ns, cfg, Options{StreamConcurrency: workers})
	newCluster(t, ns, "demo", func(c *streamsv1alpha1.StreamCluster) {
		c.Annotations = map[string]string{AnnotationAdminURL: b.URL}
	})

	// Peak memory from here on.
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
	runtime.GC()
	var peakHeap atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		var ms runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				runtime.ReadMemStats(&ms)
				if ms.HeapInuse > peakHeap.Load() {
					peakHeap.Store(ms.HeapInuse)
				}
			}
		}
	})

	start := time.Now()
	work := make(chan int)
	var cwg sync.WaitGroup
	for range 16 {
		cwg.Go(func() {
			for i := range work {
				s := &streamsv1alpha1.Stream{
					ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("s-%04d", i)},
					Spec: streamsv1alpha1.StreamSpec{
						ClusterRef:   streamsv1alpha1.ClusterReference{Name: "demo"},
						Name:         fmt.Sprintf("%s/s-%04d", ns, i),
						StreamPolicy: streamsv1alpha1.StreamPolicy{Partitions: int32(1 + i%4)},
					},
				}
				if err := k8s.Create(context.Background(), s); err != nil {
					t.Error(err)
				}
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	cwg.Wait()
	created := time.Since(start)

	var ready int
	_ = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 15*time.Minute, true, func(ctx context.Context) (bool, error) {
		var list streamsv1alpha1.StreamList
		if err := k8s.List(ctx, &list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		ready = 0
		for i := range list.Items {
			if condition(list.Items[i].Status.Conditions, streamsv1alpha1.ConditionReady).Status == metav1.ConditionTrue {
				ready++
			}
		}
		return ready == n, nil
	})
	allReady := time.Since(start)
	close(stop)
	wg.Wait()
	if ready != n {
		t.Fatalf("%d of %d Streams Ready after %s", ready, n, allReady)
	}
	var reconciles int
	h.counts.mu.Lock()
	for k, v := range h.counts.n {
		if strings.HasPrefix(k, "stream/") {
			reconciles += v
		}
	}
	h.counts.mu.Unlock()
	t.Logf("%d Streams (1-4 partitions) against one broker, manager client %d qps / burst %d, %d Stream workers:", n, qps, burst, workers)
	t.Logf("  created through the API in %s; all Ready %s after the first create", created.Round(time.Millisecond), allReady.Round(time.Millisecond))
	t.Logf("  %d Stream reconciles (%.2f per Stream)", reconciles, float64(reconciles)/float64(n))
	t.Logf("  peak RSS of the test process (manager + test client) %s; peak Go heap in use %.1f MiB", vmHWM(), float64(peakHeap.Load())/(1<<20))
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

// vmHWM is the process's peak resident set size (Linux).
func vmHWM() string {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}
