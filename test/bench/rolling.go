package main

import (
	"context"
	"flag"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/picomq/picomq/broker/client"
	"github.com/picomq/picomq/broker/stream"
	"github.com/picomq/picomq/test/clusterharness"
)

var rollOn = flag.Bool("rolling-restart", true, "cluster mode: restart every broker in turn (SIGTERM, start, ready) under the 1 KiB load through any broker, counting refused appends and the latency meanwhile (issue 30)")

// rollResult is a rolling restart under load: what the writers saw during
// it, and during as long a stretch before it.
type rollResult struct {
	took             time.Duration
	before, during   loadResult
	refused          int64
	firstErrs        []string
	restarts         int
	perBrokerReadyIn []time.Duration // SIGTERM sent → the cluster ready again, per broker
}

// rollingRestart restarts every broker in turn under a load of -writers
// writers appending batch to the streams names through any broker — but
// not to the one stopping, as a Service's endpoints drop a terminating
// pod — each restart waiting for the cluster to be ready again (a broker
// is ready once it serves its share of the slots), as a StatefulSet's
// rolling update waits for each pod. It measures the same load for 10 s
// before, for the p99 to compare with.
func rollingRestart(ctx context.Context, c *clusterharness.Cluster, cls []*client.Client, names []string, batch []stream.RecordValue) (*rollResult, error) {
	hs := make([][]*client.Stream, len(cls))
	for i, cl := range cls {
		var err error
		if hs[i], err = handles(ctx, cl, names); err != nil {
			return nil, err
		}
	}
	var down atomic.Int32
	down.Store(-1)
	pick := func(w, i int) (*client.Stream, bool) {
		b := (w + i) % len(cls)
		if int32(b) == down.Load() {
			b = (b + 1) % len(cls)
		}
		return hs[b][(w+i**writers)%len(names)], false
	}
	res := &rollResult{before: spreadLoad(ctx, *writers, batch, 10*time.Second, pick)}
	stop := make(chan struct{})
	var during loadResult
	var wg sync.WaitGroup
	wg.Add(1)
	start := time.Now()
	go func() {
		defer wg.Done()
		during = loadUntil(ctx, *writers, batch, stop, pick)
	}()
	for i := range cls {
		t0 := time.Now()
		down.Store(int32(i))
		c.Restart(i)
		if err := c.WaitReady(); err != nil {
			close(stop)
			wg.Wait()
			return nil, fmt.Errorf("after restarting broker-%d: %w", i, err)
		}
		down.Store(-1)
		res.perBrokerReadyIn = append(res.perBrokerReadyIn, time.Since(t0))
		res.restarts++
		time.Sleep(time.Second) // the load on the whole cluster again between two
	}
	close(stop)
	wg.Wait()
	res.took = time.Since(start)
	res.during, res.refused, res.firstErrs = during, during.errs, during.firstErrs
	return res, nil
}

// printRolling prints a rolling restart's figures.
func printRolling(r *rollResult) {
	if r == nil {
		return
	}
	fmt.Printf("\nrolling restart of %d brokers under %d writers through any broker (not the one stopping), 1 KiB appends: %v; ready again after %v\n",
		r.restarts, *writers, r.took.Round(100*time.Millisecond), r.perBrokerReadyIn)
	fmt.Printf("  during: %.0f appends/s, p50 %s, p99 %s, p99.9 %s, %d refused %q\n", r.during.appendsPerSec, ms(r.during.p50), ms(r.during.p99), ms(r.during.p999), r.refused, r.firstErrs)
	fmt.Printf("  before it (the same load for 10 s): %.0f appends/s, p50 %s, p99 %s, p99.9 %s, %d refused\n", r.before.appendsPerSec, ms(r.before.p50), ms(r.before.p99), ms(r.before.p999), r.before.errs)
}
