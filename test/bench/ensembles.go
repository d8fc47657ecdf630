package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"path/filepath"
	"runtime"
	"sort"
	"time"

	"github.com/picomq/picomq/broker/client"
	"github.com/picomq/picomq/broker/stream"
	"github.com/picomq/picomq/test/clusterharness"
)

// Issue 29's figures beside the loads (cluster mode): the latency of one
// append to a stream owned off the metadata leader against one owned on
// it, and the to-owner load on a larger cluster, whose per-append costs
// say what N brokers on N machines would do.

var (
	projectN    = flag.Int("project-brokers", 6, "cluster mode: also run the 64-stream load to owners on a cluster of this many brokers (R=-replicas) and project from its per-append costs what as many machines would do (0: skip)")
	leaderProbe = flag.Int("leader-probes", 200, "cluster mode: sequential appends timed to a stream owned on the metadata leader and to one owned off it (0: skip)")
)

// leaderLatency is the off-leader probe's outcome.
type leaderLatency struct {
	on, off time.Duration // p50 of one append at a time
	onN     int           // appends timed on each
}

// probeLeader times *leaderProbe appends, one at a time, to a stream of
// names owned by the metadata leader and to one owned by another broker,
// each sent to its owner, alternating, so that both see the same machine.
func probeLeader(ctx context.Context, c *clusterharness.Cluster, cls []*client.Client, names []string, one []stream.RecordValue) (*leaderLatency, error) {
	if *leaderProbe <= 0 || len(names) == 0 {
		return nil, nil
	}
	leader := c.Leader()
	if leader < 0 {
		return nil, fmt.Errorf("no metadata leader")
	}
	owner, err := owners(ctx, c, names)
	if err != nil {
		return nil, err
	}
	on, off := -1, -1
	for j, o := range owner {
		if o == leader && on < 0 {
			on = j
		}
		if o != leader && off < 0 {
			off = j
		}
	}
	if on < 0 || off < 0 {
		return nil, fmt.Errorf("no stream owned on the leader broker-%d and one off it (owners %v)", leader, owner)
	}
	hOn, err := cls[owner[on]].Stream(ctx, names[on])
	if err != nil {
		return nil, err
	}
	hOff, err := cls[owner[off]].Stream(ctx, names[off])
	if err != nil {
		return nil, err
	}
	var lon, loff []time.Duration
	for i := 0; i < *leaderProbe; i++ {
		for _, x := range []struct {
			h   *client.Stream
			out *[]time.Duration
		}{{hOn, &lon}, {hOff, &loff}} {
			t0 := time.Now()
			if _, err := x.h.Append(ctx, one); err != nil {
				return nil, err
			}
			*x.out = append(*x.out, time.Since(t0))
		}
	}
	sort.Slice(lon, func(i, j int) bool { return lon[i] < lon[j] })
	sort.Slice(loff, func(i, j int) bool { return loff[i] < loff[j] })
	fmt.Printf("one append at a time to its owner: %s owned by the metadata leader broker-%d p50 %s p99 %s; %s owned by broker-%d p50 %s p99 %s\n",
		names[on], leader, ms(pct(lon, 0.5)), ms(pct(lon, 0.99)), names[off], owner[off], ms(pct(loff, 0.5)), ms(pct(loff, 0.99)))
	return &leaderLatency{on: pct(lon, 0.5), off: pct(loff, 0.5), onN: len(lon)}, nil
}

// projection is the larger cluster's run.
type projection struct {
	brokers      int
	r            loadResult
	cpuPerAppend float64 // broker CPU-seconds per acknowledged append, summed over the brokers
}

// projectCluster runs the to-owner load of *spreadN streams of 1 KiB
// appends on a cluster of *projectN brokers, and prints what its
// per-append CPU cost projects for as many machines.
func projectCluster(ctx context.Context, bin, dir string, one []stream.RecordValue) (*projection, error) {
	if *projectN <= 0 {
		return nil, nil
	}
	o := clusterOptions()
	o.Brokers = *projectN
	t0 := time.Now()
	c, tb, err := startBalanced("bench-projection", bin, filepath.Join(dir, fmt.Sprintf("cluster-%d", *projectN)), o)
	defer tb.RunCleanups()
	if err != nil {
		return nil, err
	}
	fmt.Printf("\ncluster of %d ready after %v, R=%d: the 1KiB-%dstreams load to owners, for its per-append costs\n", c.N(), time.Since(t0).Round(10*time.Millisecond), *replicas, *spreadN)
	cls := make([]*client.Client, c.N())
	for i := range cls {
		cl, err := client.New(c.URL(i), client.WithHTTPClient(&http.Client{Transport: &client.Transport{MaxIdlePerHost: 256}}))
		if err != nil {
			return nil, err
		}
		defer cl.Close()
		cls[i] = cl
	}
	names, err := createStreams(ctx, cls[0], "projection", *spreadN)
	if err != nil {
		return nil, err
	}
	// Every stream accepts an append (through any broker: its owner opens
	// it) before the owners are looked up and the clock starts.
	warm, _, err := handlesWithin(ctx, cls[0], names, 30*time.Second)
	if err != nil {
		return nil, err
	}
	for j := range names {
		if err := appendWithin(ctx, warm[j], one, time.Minute); err != nil {
			return nil, fmt.Errorf("warming %s up: %w", names[j], err)
		}
	}
	owner, err := owners(ctx, c, names)
	if err != nil {
		return nil, err
	}
	hs := make([]*client.Stream, len(names))
	for j, n := range names {
		h, _, err := handlesWithin(ctx, cls[owner[j]], []string{n}, 30*time.Second)
		if err != nil {
			return nil, err
		}
		hs[j] = h[0]
	}
	pids := brokerPids(c)
	m0 := scrapeAll(c.URLs())
	cpu0, w0 := sampleCPU(pids...), time.Now()
	r := spreadLoad(ctx, *writers, one, *duration, func(w, i int) (*client.Stream, bool) {
		return hs[(w+i**writers)%len(hs)], false
	})
	r.use, r.cpuOK = sampleCPU(pids...).since(cpu0, time.Since(w0))
	printLoad(fmt.Sprintf("%d to owner", c.N()), shape{fmt.Sprintf("1KiB-%dstreams", *spreadN), *spreadN, one}, r)
	fmt.Printf("%-15s   %s\n", "", describeMetrics(m0, scrapeAll(c.URLs()), r, *duration, c.N()))
	p := &projection{brokers: c.N(), r: r}
	if r.cpuOK && r.appendsPerSec > 0 {
		p.cpuPerAppend = r.use.brokerCores / r.appendsPerSec
	}
	if tb.Failed() {
		fmt.Printf("broker logs (tails):\n%s\n", c.LogTails(4096))
	}
	return p, nil
}

// printProjection prints the projection's arithmetic: a cluster bound by
// its processors does at most (machines × cores) / (CPU-seconds per
// append) appends per second; every broker added adds its cores.
func printProjection(p *projection, three loadResult, single loadResult) {
	if p == nil || p.cpuPerAppend <= 0 {
		return
	}
	cores := float64(runtime.NumCPU())
	fmt.Printf("\nprojection: on %d brokers R=%d one machine did %.0f appends/s, the brokers using %.2f cores: %.0f µs of broker CPU per append over the whole cluster.\n",
		p.brokers, *replicas, p.r.appendsPerSec, p.r.use.brokerCores, 1e6*p.cpuPerAppend)
	fmt.Printf("  %d such brokers on %d machines of %.0f cores, bound by CPU: %d × %.0f / %.0f µs = %.0f appends/s",
		p.brokers, p.brokers, cores, p.brokers, cores, 1e6*p.cpuPerAppend, float64(p.brokers)*cores/p.cpuPerAppend)
	if three.cpuOK && three.appendsPerSec > 0 {
		c3 := three.use.brokerCores / three.appendsPerSec
		fmt.Printf("; 3 brokers on 3 machines: 3 × %.0f / %.0f µs = %.0f appends/s", cores, 1e6*c3, 3*cores/c3)
	}
	if single.cpuOK && single.appendsPerSec > 0 {
		c1 := single.use.brokerCores / single.appendsPerSec
		fmt.Printf("; the single broker on one: %.0f / %.0f µs = %.0f appends/s", cores, 1e6*c1, cores/c1)
	}
	fmt.Println(" (the disk's fdatasyncs and the network are assumed to keep up: each broker fsyncs only its share).")
}
