package workload_test

import (
	"context"
	"flag"
	"testing"
	"time"

	"github.com/picomq/picomq/test/clusterharness"
	"github.com/picomq/picomq/test/workload"
)

func TestMain(m *testing.M) {
	flag.Parse()
	clusterharness.Main(m)
}

var streams = []workload.StreamSpec{{Name: "w/one"}, {Name: "w/three", Partitions: 3}}

// run drives one broker with the workload for d, calling fault halfway,
// then checks the history against the broker's final state.
func run(t *testing.T, d time.Duration, fault func(c *clusterharness.Cluster)) {
	if testing.Short() {
		t.Skip("process tier: skipped under -short (it runs the broker binary); the checkers' own tests run")
	}
	c := clusterharness.Start(t, clusterharness.Options{})
	ctx := context.Background()
	cfg := workload.Config{URLs: c.URLs, Streams: streams, Seed: uint64(time.Now().UnixNano())}
	if err := workload.Setup(ctx, cfg, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	w := workload.Start(ctx, cfg)
	// Not a wait for a condition: the load's duration is the test's.
	time.Sleep(d / 2)
	if fault != nil {
		fault(c)
		before := w.Acked()
		if err := c.WaitFor(30*time.Second, "appends acknowledged again", func(context.Context) error {
			if w.Acked() <= before+10 {
				return context.DeadlineExceeded
			}
			return nil
		}); err != nil {
			w.Stop()
			t.Fatal(err)
		}
	}
	time.Sleep(d / 2) // as above
	h := w.Stop()
	f := workload.Snapshot(ctx, c.URLs(), []int{0}, streams, 10*time.Second)
	r := workload.Check(h, f, workload.Options{})
	t.Logf("%v; linearizability: %v", r.Stats, r.Lin)
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	if r.Stats.Acked == 0 || r.Stats.ReadRecords == 0 || r.Lin.Ops == 0 {
		t.Fatal("nothing acknowledged or read: the run proved nothing")
	}
	sse := 0
	for _, o := range h.Ops() {
		if o.Mode == workload.SSE {
			sse += len(o.Records)
		}
	}
	if sse == 0 {
		t.Error("the SSE reader received no record")
	}
}

// TestSingleBrokerWorkloadIsClean: every appender and reader against one
// broker, no fault: every checker passes.
func TestSingleBrokerWorkloadIsClean(t *testing.T) {
	run(t, 3*time.Second, nil)
}

// TestSingleBrokerKill9: a SIGKILL mid-load makes unknown outcomes and
// idempotent retries; after the restart every checker still passes.
func TestSingleBrokerKill9(t *testing.T) {
	run(t, 3*time.Second, func(c *clusterharness.Cluster) {
		c.Kill(0)
		c.StartBroker(0)
	})
}
