package main

import (
	"context"
	"flag"
	"fmt"
	"sort"
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

// loadUntil is spreadLoad run until stop is closed instead of for a
// fixed time.
func loadUntil(ctx context.Context, writers int, batch []stream.RecordValue, stop <-chan struct{}, pick func(w, i int) (*client.Stream, bool)) loadResult {
	var count, errs atomic.Int64
	var mu sync.Mutex
	var first []string
	lat := make([][]time.Duration, writers)
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				s, _ := pick(w, i)
				actx, cancel := context.WithTimeout(ctx, 10*time.Second)
				t0 := time.Now()
				_, err := s.Append(actx, batch)
				took := time.Since(t0)
				cancel()
				if err != nil {
					errs.Add(1)
					mu.Lock()
					if msg := shorten(err.Error()); len(first) < 3 && !contains(first, msg) {
						first = append(first, msg)
					}
					mu.Unlock()
					time.Sleep(10 * time.Millisecond)
					continue
				}
				lat[w] = append(lat[w], took)
				count.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	n := float64(count.Load())
	return loadResult{
		result: result{
			appendsPerSec: n / elapsed.Seconds(),
			recordsPerSec: n * float64(len(batch)) / elapsed.Seconds(),
			p50:           pct(all, 0.50), p99: pct(all, 0.99), p999: pct(all, 0.999),
		},
		errs:      errs.Load(),
		firstErrs: first,
		proxied:   -1,
	}
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
