package cluster_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/picomq/picomq/test/clusterharness"
	"github.com/picomq/picomq/test/workload"
)

// trial is one fault trial in progress.
type trial struct {
	t       *testing.T
	c       *clusterharness.Cluster
	w       *workload.Run
	rng     *rand.Rand
	streams []workload.StreamSpec
	victim  int    // the broker the fault hit, -1 for none
	note    string // what the fault did, for the trial's log line
	after   func() // an extra check once the cluster recovered
}

// fault is one kind of trial.
type fault struct {
	name string
	// streams overrides the trial's streams.
	streams []workload.StreamSpec
	// inject applies the fault and holds it as long as the fault lasts;
	// it returns what heals it (nil: nothing to heal).
	inject func(tr *trial) (heal func())
	// planned: a planned move (SIGTERM, drain), not a fault: no append
	// may be refused or left unknown.
	planned bool
}

// The default streams: two single-partition streams (the SSE readers'),
// and one of three partitions.
var defaultStreams = []workload.StreamSpec{{Name: "t/one"}, {Name: "t/two"}, {Name: "t/three", Partitions: 3}}

// lease is the trials' lease duration.
func (tr *trial) lease() time.Duration { return tr.c.Options().LeaseDuration }

// hold keeps a fault in place for d: a period the cluster must ride out,
// not a wait for a condition.
func (tr *trial) hold(d time.Duration) { time.Sleep(d) }

// owner is the broker owning the first stream's partition 0, or a random
// broker (noted) when no broker names one.
func (tr *trial) owner() int {
	i, err := tr.c.Owner(context.Background(), tr.streams[0].Name, 0)
	if err != nil {
		i = tr.rng.IntN(tr.c.N())
		tr.note += fmt.Sprintf("(no owner reported: %v; broker-%d instead) ", err, i)
	}
	return i
}

// leader is the metadata leader, or a random broker (noted) if none says.
func (tr *trial) leader() int {
	i := tr.c.Leader()
	if i < 0 {
		i = tr.rng.IntN(tr.c.N())
		tr.note += fmt.Sprintf("(no leader reported; broker-%d instead) ", i)
	}
	return i
}

// waitMoved waits until a broker other than old owns the first stream's
// partition 0: the failover a paused or cut owner must cause.
func (tr *trial) waitMoved(old int, timeout time.Duration) {
	tr.t.Helper()
	name := tr.streams[0].Name
	began := time.Now()
	err := tr.c.WaitFor(timeout, fmt.Sprintf("%s/0 owned by another broker than broker-%d", name, old), func(ctx context.Context) error {
		i, err := tr.c.Owner(ctx, name, 0)
		if err != nil {
			return err
		}
		if i == old {
			return fmt.Errorf("still broker-%d", old)
		}
		return nil
	})
	if err != nil {
		tr.t.Errorf("failover: %v", err)
		return
	}
	tr.note += fmt.Sprintf("slot moved after %v; ", time.Since(began).Round(10*time.Millisecond))
}

// blackholeBetween blackholes every link, both directions, between a and
// the other brokers: a partition TCP does not notice.
func (tr *trial) blackholeBetween(a int) {
	for j := 0; j < tr.c.N(); j++ {
		if j != a {
			tr.c.Link(a, j).Blackhole()
			tr.c.Link(j, a).Blackhole()
		}
	}
}

// cutAPIServer makes the API server unreachable for every broker (on) or
// reachable again: to the brokers, as if it were stopped — every
// connection to it refused or cut — while the harness still reads it.
func (tr *trial) cutAPIServer(on bool) {
	for i := 0; i < tr.c.N(); i++ {
		if on {
			tr.c.APIServerLink(i).Cut()
		} else {
			tr.c.APIServerLink(i).Heal()
		}
	}
}

// appendsGoOn checks, window by window until d has passed since began,
// that appends are still acknowledged: n more in each window.
func (tr *trial) appendsGoOn(began time.Time, d time.Duration, n int64, window time.Duration) bool {
	tr.t.Helper()
	for time.Since(began) < d {
		if err := waitAcked(tr.c, tr.w, n, window); err != nil {
			tr.t.Errorf("%v into the outage, appends stopped: %v\n%s", time.Since(began).Round(time.Second), err, tr.c.LogTails(2048))
			return false
		}
	}
	return true
}

// failsafeBrokers lists the brokers whose node info reports failsafe.
func (tr *trial) failsafeBrokers() []int {
	var on []int
	for i := 0; i < tr.c.N(); i++ {
		if n, err := tr.c.Node(i); err == nil && n.Failsafe != nil {
			on = append(on, i)
		}
	}
	return on
}

// faults are the trial kinds of issues 19, 29 and 30, in the order trials
// cycle through them.
var faults = []fault{
	{name: "kill-random", inject: func(tr *trial) func() {
		i := tr.rng.IntN(tr.c.N())
		tr.victim = i
		tr.c.Kill(i)
		tr.hold(time.Duration(500+tr.rng.IntN(1500)) * time.Millisecond)
		return func() { tr.c.StartBroker(i) }
	}},
	{name: "kill-leader", inject: func(tr *trial) func() {
		i := tr.leader()
		tr.victim = i
		tr.c.Kill(i)
		tr.hold(tr.lease())
		return func() { tr.c.StartBroker(i) }
	}},
	{name: "kill-owner", inject: func(tr *trial) func() {
		i := tr.owner()
		tr.victim = i
		tr.c.Kill(i)
		tr.waitMoved(i, 4*tr.lease()+5*time.Second)
		return func() { tr.c.StartBroker(i) }
	}},
	{name: "pause-owner", inject: func(tr *trial) func() {
		// SIGSTOP past leaseDuration: its slots move; when it wakes, its
		// in-flight appends must fail (retriably) and nothing it proposes
		// may land after the new owner's open.
		i := tr.owner()
		tr.victim = i
		tr.c.Stop(i)
		tr.waitMoved(i, 4*tr.lease()+5*time.Second)
		tr.hold(tr.lease())
		return func() { tr.c.Cont(i) }
	}},
	{name: "owner-apiserver-cut", inject: func(tr *trial) func() {
		// Cut from the apiserver only: it loses its Leases while its peers
		// still hear it; there must never be a second writer.
		i := tr.owner()
		tr.victim = i
		tr.c.APIServerLink(i).Cut()
		tr.waitMoved(i, 4*tr.lease()+5*time.Second)
		tr.hold(tr.lease())
		return func() { tr.c.APIServerLink(i).Heal() }
	}},
	{name: "owner-peers-cut", inject: func(tr *trial) func() {
		// Cut from its peers, not from the apiserver: its commits fail,
		// its slots must move.
		i := tr.owner()
		tr.victim = i
		tr.c.Isolate(i)
		tr.waitMoved(i, 4*tr.lease()+5*time.Second)
		tr.hold(tr.lease())
		return tr.c.HealAll
	}},
	{name: "minority-partition", inject: func(tr *trial) func() {
		// One broker (the leader, half of the time) blackholed from the
		// other two: a silent partition, minority on one side.
		i := tr.rng.IntN(tr.c.N())
		if tr.rng.IntN(2) == 0 {
			i = tr.leader()
		}
		tr.victim = i
		tr.blackholeBetween(i)
		tr.hold(tr.lease() + 2*time.Second)
		return tr.c.HealAll
	}},
	{name: "rolling-restart", planned: true, inject: func(tr *trial) func() {
		// Every broker in turn, SIGTERM then start, each waiting for the
		// cluster to be ready again, under load. Requests stop going to
		// a broker before its SIGTERM and go to it again once it is
		// ready, as a Service's endpoints drop a terminating pod and add
		// a ready one: a planned move refuses no append.
		all := make([]int, tr.c.N())
		for i := range all {
			all[i] = i
		}
		for i := 0; i < tr.c.N(); i++ {
			tr.w.SetTargets(slices.DeleteFunc(slices.Clone(all), func(j int) bool { return j == i }))
			tr.c.Restart(i)
			if err := tr.c.WaitReady(); err != nil {
				tr.t.Fatalf("after restarting broker-%d: %v", i, err)
			}
			tr.w.SetTargets(all)
		}
		return nil
	}},
	{name: "restart-all-new-addresses", inject: func(tr *trial) func() {
		// Every broker stopped, then started with every address changed:
		// Raft addresses are names resolved at each dial, so it works.
		old := tr.c.URLs()
		tr.c.RestartAll()
		for i, u := range tr.c.URLs() {
			if u == old[i] {
				tr.t.Errorf("broker-%d kept its address %s", i, u)
			}
		}
		return nil
	}},
	{name: "wipe", inject: func(tr *trial) func() {
		// One broker's data directory deleted: it must join as a new
		// member, never as its old self, and catch up.
		i := tr.rng.IntN(tr.c.N())
		tr.victim = i
		before, _ := tr.c.Node(i)
		tr.c.Wipe(i)
		tr.after = func() {
			now, err := tr.c.Node(i)
			if err != nil {
				tr.t.Errorf("wiped broker-%d: %v", i, err)
				return
			}
			if before.MemberID != "" && now.MemberID == before.MemberID {
				tr.t.Errorf("wiped broker-%d came back as member %s, its old identity", i, now.MemberID)
			}
			if before.ClusterID != "" && now.ClusterID != before.ClusterID {
				tr.t.Errorf("wiped broker-%d is in cluster %s, not %s: it bootstrapped a new one", i, now.ClusterID, before.ClusterID)
			}
		}
		return nil
	}},
	{name: "kill-all", inject: func(tr *trial) func() {
		// A coordinated crash: every broker kill -9'd at once, under
		// load, then started again. Every acknowledged append was
		// durable on a write quorum of its ensemble's journals (or in
		// the metadata log); the opens after the restart recover them.
		for i := 0; i < tr.c.N(); i++ {
			tr.c.Kill(i)
		}
		tr.hold(500 * time.Millisecond)
		for i := 0; i < tr.c.N(); i++ {
			tr.c.Launch(i)
		}
		if err := tr.c.WaitReady(); err != nil {
			tr.t.Fatalf("after the coordinated crash: %v\n%s", err, tr.c.LogTails(4096))
		}
		return nil
	}},
	{name: "kill-replica", inject: func(tr *trial) func() {
		// One member of the owner's ensemble (with 3 brokers and R=3,
		// every other broker) kill -9'd under load: the owner goes on
		// with a write quorum of the two left, and the member's journal,
		// torn wherever the kill caught it, is opened again on restart.
		owner := tr.owner()
		i := (owner + 1 + tr.rng.IntN(tr.c.N()-1)) % tr.c.N()
		tr.victim = i
		tr.c.Kill(i)
		tr.hold(tr.lease() + time.Second)
		return func() { tr.c.StartBroker(i) }
	}},
	{name: "double-failover", inject: func(tr *trial) func() {
		// Two failovers of one stream back to back: its owner killed,
		// and the broker that took it over killed as soon as it owns it
		// (the first back meanwhile) — the second recovery reads what
		// the first adopted and wrote.
		first := tr.owner()
		tr.c.Kill(first)
		tr.waitMoved(first, 4*tr.lease()+5*time.Second)
		second := tr.owner()
		tr.c.StartBroker(first)
		tr.c.Kill(second)
		tr.victim = second
		tr.waitMoved(second, 4*tr.lease()+5*time.Second)
		return func() { tr.c.StartBroker(second) }
	}},
	{name: "recover-member-down", inject: func(tr *trial) func() {
		// A recovery while one member of the old ensemble is down. With 3
		// brokers and R=3 the ensemble is all of them, and the metadata
		// log needs two: a member is killed, then the owner is cut from
		// the apiserver, so its slots move while it still answers its
		// peers. (Until it is live again by its member Lease, the one
		// broker left cannot choose an ensemble with a write quorum: its
		// opens are refused, retriably.) Once the owner is back, the
		// stream's next open — by whichever broker holds its slot then —
		// fences and reads the old ensemble with the killed member still
		// down, and every acknowledged append must be in what it adopts.
		owner := tr.owner()
		down := (owner + 1 + tr.rng.IntN(tr.c.N()-1)) % tr.c.N()
		tr.victim = owner
		_, before, err := tr.c.OwnerAndEpoch(context.Background(), tr.streams[0].Name, 0)
		if err != nil {
			tr.t.Fatalf("the stream's epoch before the fault: %v", err)
		}
		tr.c.Kill(down)
		tr.c.APIServerLink(owner).Cut()
		tr.hold(tr.lease() + time.Second)
		tr.c.APIServerLink(owner).Heal()
		name := tr.streams[0].Name
		began := time.Now()
		err = tr.c.WaitFor(4*tr.lease()+5*time.Second, fmt.Sprintf("%s/0 opened again with broker-%d down", name, down), func(ctx context.Context) error {
			i, epoch, err := tr.c.OwnerAndEpoch(ctx, name, 0)
			if err != nil {
				return err
			}
			if epoch <= before {
				return fmt.Errorf("still epoch %d (broker-%d)", epoch, i)
			}
			tr.note += fmt.Sprintf("broker-%d down; reopened by broker-%d at epoch %d after %v; ", down, i, epoch, time.Since(began).Round(10*time.Millisecond))
			return nil
		})
		if err != nil {
			tr.t.Errorf("recovery: %v", err)
		}
		tr.hold(time.Second) // appends go on, recovered, the member still down
		return func() { tr.c.StartBroker(down) }
	}},
	{name: "apiserver-outage", inject: func(tr *trial) func() {
		// The API server unreachable for every broker for -cluster.outage
		// (60 s) under load. Every member confirms the holders' failsafe
		// rounds, so the appends go on, past every renew deadline and
		// lease duration, and no slot moves.
		name := tr.streams[0].Name
		owner, epoch, err := tr.c.OwnerAndEpoch(context.Background(), name, 0)
		if err != nil {
			tr.t.Fatalf("%s/0 before the outage: %v", name, err)
		}
		tr.victim = owner
		tr.cutAPIServer(true)
		began := time.Now()
		if !tr.appendsGoOn(began, tr.lease()+time.Second, 10, 10*time.Second) {
			return func() { tr.cutAPIServer(false) }
		}
		on := tr.failsafeBrokers()
		if len(on) == 0 {
			tr.t.Errorf("%v into the outage no broker reports failsafe", time.Since(began).Round(time.Second))
		}
		tr.appendsGoOn(began, *outage, 10, 10*time.Second)
		if o, e, err := tr.c.OwnerAndEpoch(context.Background(), name, 0); err != nil || o != owner || e != epoch {
			tr.t.Errorf("%s/0 at the outage's end: broker-%d at epoch %d (%v), want still broker-%d at epoch %d: it moved", name, o, e, err, owner, epoch)
		}
		tr.note += fmt.Sprintf("API server cut from every broker for %v, brokers %v in failsafe; ", time.Since(began).Round(time.Second), on)
		return func() { tr.cutAPIServer(false) }
	}},
	{name: "apiserver-outage-owner-killed", inject: func(tr *trial) func() {
		// The API server unreachable for every broker, then the owner of
		// the first stream killed. A member that cannot answer may be one
		// that reaches the API server, so failsafe rounds now fail: every
		// slot stops at its renew deadline and waits for the API server
		// (nothing may move without it). Once it is back, the killed
		// owner's slots move to the others, and nothing acknowledged is
		// lost.
		tr.cutAPIServer(true)
		began := time.Now()
		tr.appendsGoOn(began, tr.lease()+time.Second, 10, 10*time.Second)
		i := tr.owner()
		tr.victim = i
		tr.c.Kill(i)
		tr.hold(tr.lease() + 2*time.Second)
		if on := tr.failsafeBrokers(); len(on) > 0 {
			tr.t.Errorf("brokers %v still report failsafe with a member killed", on)
		}
		if o, err := tr.c.Owner(context.Background(), tr.streams[0].Name, 0); err == nil && o != i {
			tr.t.Errorf("%s/0 moved to broker-%d while the API server was unreachable", tr.streams[0].Name, o)
		}
		tr.cutAPIServer(false)
		tr.waitMoved(i, 4*tr.lease()+5*time.Second)
		tr.note += fmt.Sprintf("API server cut for %v, broker-%d killed in it; ", time.Since(began).Round(time.Second), i)
		return func() { tr.c.StartBroker(i) }
	}},
	{name: "proxied", streams: []workload.StreamSpec{{Name: "t/solo"}},
		// No fault: once the stream has an owner, every request goes to a
		// broker that owns none of it, so each one is proxied, SSE and
		// long-polls included.
		inject: func(tr *trial) func() {
			owner := tr.owner()
			var others []int
			for i := 0; i < tr.c.N(); i++ {
				if i != owner {
					others = append(others, i)
				}
			}
			if len(others) == 0 {
				tr.t.Fatal("a proxied trial needs a broker that owns nothing")
			}
			tr.w.SetTargets(others)
			tr.note += fmt.Sprintf("owner broker-%d, requests to %v; ", owner, others)
			tr.hold(4 * time.Second)
			return nil
		}},
}
