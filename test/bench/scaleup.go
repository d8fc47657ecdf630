package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"time"

	"github.com/picomq/picomq/broker/client"
	"github.com/picomq/picomq/test/clusterharness"
)

// The scale-up benchmark (issue 21): -scale-up N starts -brokers minus N
// brokers, opens -drain-streams streams under a light load, then launches
// the N others at once and reports how long until the slots are shared
// evenly (every broker within one slot of the others), and the appends'
// p99 meanwhile against the same load before.
var scaleUp = flag.Int("scale-up", 0, "cluster mode: run only the scale-up benchmark, adding this many brokers to -brokers minus it")

func scaleUpBench(ctx context.Context, bin, dir string) error {
	o := clusterOptions()
	o.Standby = *scaleUp
	c, tb, err := startBalanced("bench-scale-up", bin, dir, o)
	defer tb.RunCleanups()
	if err != nil {
		return err
	}
	first := c.N() - *scaleUp
	cl, err := client.New(c.URL(0), client.WithHTTPClient(&http.Client{Transport: &client.Transport{MaxIdlePerHost: 256}}))
	if err != nil {
		return err
	}
	defer cl.Close()
	names, err := createStreams(ctx, cl, "scale", *drainStreams)
	if err != nil {
		return err
	}
	hs, err := openByAppend(ctx, names, func(int) *client.Client { return cl })
	if err != nil {
		return err
	}
	stop := make(chan struct{})
	time.AfterFunc(10*time.Second, func() { close(stop) })
	steady := measureAppends(ctx, hs, *drainLoad, stop)

	stop = make(chan struct{})
	var during []time.Duration
	done := make(chan struct{})
	go func() { during = measureAppends(ctx, hs, *drainLoad, stop); close(done) }()
	t0 := time.Now()
	for i := first; i < c.N(); i++ {
		if err := tb.Do(func() error { c.Launch(i); return nil }); err != nil {
			close(stop)
			<-done
			return err
		}
	}
	err = c.WaitFor(settleTimeout(), "the new brokers holding their share", func(ctx context.Context) error {
		for i := first; i < c.N(); i++ {
			if !c.Broker(i).Serving() {
				return fmt.Errorf("broker-%d not running", i)
			}
		}
		return evenShares(c)(ctx)
	})
	took := time.Since(t0)
	close(stop)
	<-done
	if err != nil {
		return err
	}
	fmt.Printf("scale-up %d → %d brokers (%d slots, %d open streams): shares even within one slot after %v\n",
		first, c.N(), c.Options().Slots, len(names), took.Round(10*time.Millisecond))
	printAppendLatency("the scale-up", steady, during, took)
	return nil
}

// evenShares holds once the cluster is ready and the serving brokers'
// slot counts differ by at most one — the brokers' own rule, and what the
// operator's Ready waits for.
func evenShares(c *clusterharness.Cluster) func(context.Context) error {
	return func(ctx context.Context) error {
		if err := c.ClusterReady(ctx); err != nil {
			return err
		}
		lo, hi, n := c.Options().Slots, 0, 0
		for i := 0; i < c.N(); i++ {
			if !c.Broker(i).Serving() {
				continue
			}
			node, err := c.Node(i)
			if err != nil {
				return err
			}
			k, _, ok := node.Slots()
			if !ok {
				return fmt.Errorf("broker-%d reports no slots", i)
			}
			lo, hi, n = min(lo, k), max(hi, k), n+1
		}
		if hi-lo > 1 {
			return fmt.Errorf("%d brokers hold between %d and %d slots", n, lo, hi)
		}
		return nil
	}
}
