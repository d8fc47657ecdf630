package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/picomq/picomq/broker/client"
	"github.com/picomq/picomq/broker/httpapi/wire"
	"github.com/picomq/picomq/broker/stream"
	"github.com/picomq/picomq/test/clusterharness"
)

// The drain benchmark (issue 21): -drain-bytes fills a cluster of
// -brokers (R=-replicas) with that many bytes of object files over
// -drain-streams open streams, then drains the last broker to leave while
// a light load appends, and reports how long the drain took and the
// appends' p99 during it against the same load before it.
var (
	drainBytes   = flag.Int64("drain-bytes", 0, "cluster mode: run only the drain benchmark, filling the brokers with this many bytes first (e.g. 1073741824)")
	drainStreams = flag.Int("drain-streams", 1000, "drain benchmark: open streams the bytes are spread over")
	drainLoad    = flag.Int("drain-writers", 8, "drain benchmark: writers of the light load measured before and during the drain")
)

func drainBench(ctx context.Context, bin, dir string) error {
	c, tb, err := startBalanced("bench-drain", bin, dir, clusterOptions())
	defer tb.RunCleanups()
	if err != nil {
		return err
	}
	cls := make([]*client.Client, c.N())
	for i := range cls {
		cl, err := client.New(c.URL(i), client.WithHTTPClient(&http.Client{Transport: &client.Transport{MaxIdlePerHost: 256}}))
		if err != nil {
			return err
		}
		defer cl.Close()
		cls[i] = cl
	}
	names, err := createStreams(ctx, cls[0], "drain", *drainStreams)
	if err != nil {
		return err
	}
	// Handles through the brokers that stay; every stream opened by a
	// first append.
	leaving := c.N() - 1
	hs, err := openByAppend(ctx, names, func(j int) *client.Client { return cls[j%leaving] })
	if err != nil {
		return err
	}

	// Fill: 256 KiB records (object files, replicated), 16 writers.
	rec := []stream.RecordValue{{Payload: bytes.Repeat([]byte{'d'}, 256<<10)}}
	var written atomic.Int64
	t0 := time.Now()
	var wg sync.WaitGroup
	var fillErr atomic.Value
	for w := range 16 {
		wg.Go(func() {
			for i := w; written.Load() < *drainBytes; i += 16 {
				if _, err := hs[i%len(hs)].Append(ctx, rec); err != nil {
					fillErr.Store(err)
					return
				}
				written.Add(int64(len(rec[0].Payload)))
			}
		})
	}
	wg.Wait()
	if err, _ := fillErr.Load().(error); err != nil {
		return fmt.Errorf("filling: %w", err)
	}
	fmt.Printf("filled %d MiB over %d streams in %v\n", written.Load()>>20, len(names), time.Since(t0).Round(10*time.Millisecond))

	measure := func(stop <-chan struct{}) []time.Duration { return measureAppends(ctx, hs, *drainLoad, stop) }
	stop := make(chan struct{})
	time.AfterFunc(10*time.Second, func() { close(stop) })
	steady := measure(stop)

	before, err := c.DrainStatus(ctx, leaving)
	if err != nil {
		return err
	}
	stop = make(chan struct{})
	var during []time.Duration
	done := make(chan struct{})
	go func() { during = measure(stop); close(done) }()
	t0 = time.Now()
	if _, err := c.Drain(ctx, leaving); err != nil {
		close(stop)
		<-done
		return err
	}
	err = c.WaitFor(30*time.Minute, "the drain", func(ctx context.Context) error {
		ds, err := c.DrainStatus(ctx, leaving)
		if err != nil {
			return err
		}
		if ds.Phase != wire.DrainDrained {
			return fmt.Errorf("%+v", ds)
		}
		return nil
	})
	took := time.Since(t0)
	close(stop)
	<-done
	if err != nil {
		return err
	}
	fmt.Printf("drained broker-%d holding %d copies (%d MiB), %d open streams, %d slots: %v\n",
		leaving, before.ObjectsHeld, before.BytesHeld>>20, before.OpenStreams, before.SlotsHeld, took.Round(10*time.Millisecond))
	printAppendLatency("the drain", steady, during, took)
	return nil
}

// startBalanced starts a benchmark cluster of o with the broker binary
// bin, its logs in dir, and waits until every slot is held and the shares
// balanced. The caller runs tb's cleanups, whatever the error.
func startBalanced(name, bin, dir string, o clusterharness.Options) (*clusterharness.Cluster, *clusterharness.ProgramTB, error) {
	tb := clusterharness.NewProgramTB(name, dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, tb, err
	}
	os.Setenv(clusterharness.BinaryEnv, bin)
	var c *clusterharness.Cluster
	if err := tb.Do(func() (err error) { c, err = clusterharness.TryStart(tb, o); return err }); err != nil {
		return nil, tb, fmt.Errorf("starting the cluster: %w", err)
	}
	if err := c.WaitFor(settleTimeout(), "every slot held, shares balanced", balanced(c)); err != nil {
		return nil, tb, err
	}
	return c, tb, nil
}

// openByAppend returns a handle on each stream of names, through the
// client via picks for it, each stream opened by a first append (so that
// a broker holds it open, as a drain or a rebalance must hand it off).
func openByAppend(ctx context.Context, names []string, via func(j int) *client.Client) ([]*client.Stream, error) {
	hs := make([]*client.Stream, len(names))
	for j, n := range names {
		var err error
		if hs[j], err = via(j).Stream(ctx, n); err != nil {
			return nil, err
		}
		if err := appendWithin(ctx, hs[j], []stream.RecordValue{{Payload: []byte("open")}}, time.Minute); err != nil {
			return nil, err
		}
	}
	return hs, nil
}

// printAppendLatency prints the light load's latencies before (steady,
// 10 s) and during a change that took took, and their p99 ratio.
func printAppendLatency(change string, steady, during []time.Duration, took time.Duration) {
	fmt.Printf("appends of 1 KiB by %d writers: steady p50 %s p99 %s (%d appends in 10s); during %s p50 %s p99 %s (%d in %v); p99 ratio %.2fx\n",
		*drainLoad, ms(pct(steady, 0.5)), ms(pct(steady, 0.99)), len(steady), change,
		ms(pct(during, 0.5)), ms(pct(during, 0.99)), len(during), took.Round(time.Second),
		float64(pct(during, 0.99))/float64(max(pct(steady, 0.99), 1)))
}

// measureAppends runs the light load — writers appending 1 KiB records to
// the streams hs, round robin — until stop closes, and returns the
// latencies of the appends that succeeded, sorted.
func measureAppends(ctx context.Context, hs []*client.Stream, writers int, stop <-chan struct{}) []time.Duration {
	small := []stream.RecordValue{{Payload: bytes.Repeat([]byte{'s'}, 1024)}}
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := w; ; i += writers {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				actx, cancel := context.WithTimeout(ctx, 10*time.Second)
				_, err := hs[i%len(hs)].Append(actx, small)
				cancel()
				if err == nil {
					mu.Lock()
					lat = append(lat, time.Since(start))
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	sort.Slice(lat, func(a, b int) bool { return lat[a] < lat[b] })
	return lat
}
