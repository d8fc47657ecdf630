package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"path/filepath"
	"runtime"
	"sort"
	"sync"
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
	memberKills = flag.Int("member-kills", 3, "cluster mode: kill -9s of a member of a stream's ensemble (not its owner) under appends to the owner, timing the longest pause (0: skip)")
)

// memberLossTarget is issue 29's bound on the pause of appends to an
// owner whose ensemble lost one member.
const memberLossTarget = 2 * time.Second

// memberLoss is one kill of an ensemble member under load.
type memberLoss struct {
	stream                string
	owner, victim         int
	leader                bool          // the victim was the metadata leader
	pause                 time.Duration // longest time without an acknowledgement from the kill on
	acked, failed, before int           // appends acknowledged and failed after the kill; acknowledged in the second before it
	firstErr              string
}

// measureMemberLoss kills, *memberKills times, a member of a stream's
// ensemble other than its owner (with R = the brokers, every other
// broker is one) while 8 writers append to that stream through its
// owner, one append at a time each, and takes the longest stretch from
// the kill on without an acknowledgement: with a write quorum left the
// owner goes on, and the pause is how long the data path took to notice.
// The victim is started again and the cluster let settle after each.
func measureMemberLoss(ctx context.Context, c *clusterharness.Cluster, tb *clusterharness.ProgramTB, cls []*client.Client, names []string, one []stream.RecordValue) ([]memberLoss, error) {
	if *memberKills <= 0 || len(names) == 0 {
		return nil, nil
	}
	fmt.Printf("\nensemble member lost: %d kill -9s of a member (not the owner) of a stream's ensemble, 8 writers appending to the stream through its owner; target: the longest pause from the kill on <= %v\n", *memberKills, memberLossTarget)
	var out []memberLoss
	for k := 0; k < *memberKills; k++ {
		if err := c.WaitFor(settleTimeout(), "every slot held, shares balanced", balanced(c)); err != nil {
			return out, fmt.Errorf("member kill %d: the cluster did not settle before it: %w", k, err)
		}
		name := names[k%len(names)]
		// Opened by an append first: after the last kill's restart and
		// hand-offs, the stream may have no open naming an owner.
		s0, err := cls[0].Stream(ctx, name)
		if err != nil {
			return out, err
		}
		if err := appendWithin(ctx, s0, one, time.Minute); err != nil {
			return out, fmt.Errorf("member kill %d: %s took no append before it: %w", k, name, err)
		}
		o, err := c.Owner(ctx, name, 0)
		if err != nil {
			return out, err
		}
		m := memberLoss{stream: name, owner: o, victim: (o + 1 + k%(c.N()-1)) % c.N()}
		m.leader = c.Leader() == m.victim
		s, err := cls[o].Stream(ctx, name)
		if err != nil {
			return out, err
		}
		var mu sync.Mutex
		var acks []time.Time
		var errsAfter []string
		lctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for lctx.Err() == nil {
					actx, cancel := context.WithTimeout(lctx, 10*time.Second)
					_, err := s.Append(actx, one)
					cancel()
					mu.Lock()
					if err == nil {
						acks = append(acks, time.Now())
					} else if lctx.Err() == nil {
						errsAfter = append(errsAfter, shorten(err.Error()))
					}
					mu.Unlock()
					if err != nil {
						time.Sleep(10 * time.Millisecond)
					}
				}
			})
		}
		time.Sleep(time.Second)
		t0 := time.Now()
		c.Kill(m.victim)
		time.Sleep(3 * time.Second)
		end := time.Now() // the appends in flight now are cut short: not a pause
		stop()
		wg.Wait()
		sort.Slice(acks, func(i, j int) bool { return acks[i].Before(acks[j]) })
		last := t0
		for _, a := range acks {
			switch {
			case a.Before(t0):
				if t0.Sub(a) <= time.Second {
					m.before++
				}
				continue
			case a.Sub(last) > m.pause:
				m.pause = a.Sub(last)
			}
			last = a
			m.acked++
		}
		if end.After(last) {
			m.pause = max(m.pause, end.Sub(last)) // none since: the pause lasts to the end
		}
		m.failed = len(errsAfter)
		if len(errsAfter) > 0 {
			m.firstErr = errsAfter[0]
		}
		role := ""
		if m.leader {
			role = " (metadata leader)"
		}
		fmt.Printf("  member kill %d: %s owned by broker-%d, broker-%d%s killed: longest pause %s; %d acknowledged in the 3 s after (%d in the second before), %d failed %s\n",
			k, m.stream, m.owner, m.victim, role, ms(m.pause), m.acked, m.before, m.failed, m.firstErr)
		out = append(out, m)
		if err := tb.Do(func() error { c.StartBroker(m.victim); return nil }); err != nil {
			return out, fmt.Errorf("member kill %d: restarting broker-%d: %v", k, m.victim, err)
		}
	}
	return out, nil
}

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
