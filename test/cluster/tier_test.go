package cluster_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/picomq/picomq/broker/client"
	"github.com/picomq/picomq/broker/httpapi/wire"
	"github.com/picomq/picomq/broker/stream"
	"github.com/picomq/picomq/broker/tier"
	"github.com/picomq/picomq/test/brokerstat"
	"github.com/picomq/picomq/test/clusterharness"
	"github.com/picomq/picomq/test/s3server"
	"github.com/picomq/picomq/test/workload"
)

var (
	tierTrials = flag.Int("cluster.tier-trials", envInt("PICOMQ_TIER_TRIALS", 0), "tiered-storage fault trials to run, cycling through their kinds (default 0: each kind once) (env PICOMQ_TIER_TRIALS)")
	tierOnly   = flag.String("cluster.tier-kinds", "", "comma-separated tiered-storage trial kinds to run (default: all)")
	tierCutFor = flag.Duration("cluster.tier-cut", 60*time.Second, "how long the bucket-cut trial keeps the bucket cut")
)

const (
	tierBucket = "tier"
	tierPrefix = "trial/"
	// tierOrphanGrace is the brokers' --tier-orphan-grace: short, so that
	// the kill trial sees an orphan go within it.
	tierOrphanGrace = 20 * time.Second
	// fillStream is the filler's stream: small segments, so that merges
	// write sealed segments (and they upload) within a trial.
	fillStream = "t/fill"
	// fillSegmentBytes is its SegmentBytes: above the merge's small-range
	// bound (MergeRangeBytes, 64 KiB), else every segment written counts as
	// a small range again and is merged again and again — each time a new
	// object, uploaded anew, the old key deleted (at 64 KiB a trial
	// uploaded 537 MB for 25 MB tiered, and uploads fell behind).
	fillSegmentBytes = 128 << 10
)

// tierKind is one kind of tiered-storage trial.
type tierKind struct {
	name string
	// inject applies the fault while the workload and the filler run and
	// returns what heals it (nil: nothing).
	inject func(tt *tierTrial) (heal func())
	// quiet: no broker is harmed, so no append may fail in the fault.
	quiet bool
	// fillBytes is the size of the filler's records (default 512).
	fillBytes int
}

// tierTrial is one tiered-storage trial in progress.
type tierTrial struct {
	trial
	s3    *s3server.Server
	proxy *s3server.Faults
	fill  *filler
	// final runs once the load has stopped, before the final reads; it
	// may leave a fault on through them (returns what ends it).
	final func()
	// afterReads runs once the final reads are done.
	afterReads func()
}

// tierFigures are one tier trial's numbers.
type tierFigures struct {
	trial, kind, note                  string
	acked, lost, dups, fillAcked       int
	linearizable                       bool
	lin                                workload.LinStats
	keys                               int
	uploadsOK, uploadsFailed, getsSeen float64
	recovery                           time.Duration
	failed                             bool
}

var tierKinds = []tierKind{
	{name: "bucket-cut", quiet: true, inject: func(tt *tierTrial) func() {
		// The bucket unreachable for -cluster.tier-cut under load: appends
		// go on (uploads wait, local copies stay), and uploads resume
		// once it is back.
		tt.proxy.Cut()
		began := time.Now()
		// A PUT whose body the server had whole when the cut came may
		// still land (its client saw it fail): count from once that is
		// settled. Not a wait for a condition: a request's grace.
		tt.hold(2 * time.Second)
		before := len(tt.keys())
		tt.appendsGoOn(began, *tierCutFor, 10, 10*time.Second)
		failed := tt.metric("picomq_tier_uploads_total", `result="failed"`)
		atHeal := len(tt.keys())
		tt.note += fmt.Sprintf("bucket cut %v: %d keys before, %d at the heal (no upload can land), %v failed uploads in it; ", time.Since(began).Round(time.Second), before, atHeal, failed)
		if atHeal > before {
			tt.t.Errorf("the bucket gained keys while cut (%d → %d): the proxy did not cut it", before, atHeal)
		}
		if failed == 0 {
			tt.t.Errorf("no upload failed in a %v cut: nothing was due to upload, so the trial proved nothing (%s)", *tierCutFor, tt.proxy)
		}
		return func() {
			tt.proxy.Pass()
			tt.after = func() { tt.waitKeysBeyond(atHeal, 90*time.Second, "uploads resume after the cut") }
		}
	}},
	{name: "bucket-503", quiet: true, inject: func(tt *tierTrial) func() {
		// Half the bucket's requests answered 503 SlowDown from here to
		// the trial's end, the final reads of tiered segments included.
		before := len(tt.keys())
		tt.proxy.Fail(http.StatusServiceUnavailable, 0.5)
		began := time.Now()
		tt.appendsGoOn(began, 30*time.Second, 10, 10*time.Second)
		tt.waitKeysBeyond(before, 60*time.Second, "uploads land through the 503s")
		tt.afterReads = func() {
			tt.note += fmt.Sprintf("503 on half the requests for %v (%s); ", time.Since(began).Round(time.Second), tt.proxy)
			tt.proxy.Pass()
		}
		return nil
	}},
	{name: "kill-uploader", inject: func(tt *tierTrial) func() {
		// Uploads slowed by 2 s per request (PUT and HEAD), so they are
		// in flight; the filler stream's owner — the first replica of
		// its segments, their uploader — kill -9'd mid-upload, an orphan
		// planted besides, then started again.
		victim, err := tt.c.Owner(context.Background(), fillStream, 0)
		if err != nil {
			tt.t.Fatalf("the filler stream's owner: %v", err)
		}
		tt.victim = victim
		tt.proxy.Slow(2 * time.Second)
		// An orphan whose id no object can have: an upload whose Tiered
		// never landed. Its LastModified starts the grace.
		orphan := tier.Keys{Prefix: tierPrefix}.Segment(0xfffffffffff00001)
		tt.s3.Put(tt.t, tierBucket, orphan, bytes.Repeat([]byte("orphan"), 2000))
		planted := time.Now()
		puts := tt.proxy.Counts()["PUT"].Seen
		if err := tt.c.WaitFor(60*time.Second, fmt.Sprintf("broker-%d uploading", victim), func(ctx context.Context) error {
			if st, err := brokerstat.Tier(tt.c.URL(victim)); err != nil || st.UploadsPending == 0 {
				return fmt.Errorf("no upload pending (%v)", err)
			}
			if tt.proxy.Counts()["PUT"].Seen == puts {
				return fmt.Errorf("no PUT since the slowdown")
			}
			return nil
		}); err != nil {
			tt.t.Errorf("%v", err)
		}
		// Not a wait for a condition: a random moment inside the 4 s a
		// slowed upload (PUT then HEAD) takes.
		tt.hold(time.Duration(200+tt.rng.IntN(3500)) * time.Millisecond)
		tt.c.Kill(victim)
		tt.note += fmt.Sprintf("broker-%d killed with %d PUTs in flight or sent; ", victim, tt.proxy.Counts()["PUT"].Seen-puts)
		tt.hold(tt.lease() + time.Second)
		tt.final = func() {
			// The orphan goes after the grace (the leader scans every
			// grace/4); every referenced key stays.
			if err := tt.c.WaitFor(tierOrphanGrace+60*time.Second-time.Since(planted), "the planted orphan deleted after the grace", func(context.Context) error {
				for _, k := range tt.keys() {
					if k == orphan {
						return fmt.Errorf("%s still there %v after it was put", k, time.Since(planted).Round(time.Second))
					}
				}
				return nil
			}); err != nil {
				tt.t.Errorf("%v", err)
			} else {
				tt.note += fmt.Sprintf("planted orphan gone %v after it was put; ", time.Since(planted).Round(time.Second))
			}
			orphans := tt.metric("picomq_tier_orphans_deleted_total", "")
			if orphans < 1 {
				tt.t.Errorf("picomq_tier_orphans_deleted_total = %v: no broker counted the orphan's deletion", orphans)
			}
			tt.note += fmt.Sprintf("orphans deleted: %v (1 planted); ", orphans)
		}
		return func() { tt.proxy.Pass(); tt.c.StartBroker(victim) }
	}},
	{name: "wipe-repair", fillBytes: 1024, inject: func(tt *tierTrial) func() {
		// A broker's data directory deleted: it joins as a new member and
		// repair copies it the objects it should hold — the untiered
		// ones only. Segments evicted before the wipe live in the bucket
		// alone and must never be copied to it.
		i := tt.rng.IntN(tt.c.N())
		tt.victim = i
		// Tiered bytes at least the local ones first, so that a repair
		// copying them too could not stay below the tiered bytes.
		var localBefore, tieredBefore int64
		if err := tt.c.WaitFor(120*time.Second, "tiered bytes at least the local ones", func(context.Context) error {
			localBefore, tieredBefore = 0, 0
			for _, p := range tt.partitions() {
				localBefore += p.LocalBytes
				tieredBefore += p.TieredBytes
			}
			if tieredBefore < localBefore {
				return fmt.Errorf("%d tiered, %d local", tieredBefore, localBefore)
			}
			return nil
		}); err != nil {
			tt.t.Fatalf("%v", err)
		}
		evicted := tt.evictedIDs()
		if len(evicted) == 0 {
			tt.t.Fatalf("no evicted segment before the wipe: the trial would prove nothing")
		}
		copiedBefore := tt.metric("picomq_repair_copy_bytes_total", "")
		dir := filepath.Join(tt.c.Broker(i).DataDir, "objects")
		// Watch the wiped broker's objects/ from its restart on: a file of
		// an evicted segment there even briefly is a tiered copy repaired.
		stop := make(chan struct{})
		var seen sync.Map
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for {
				ents, _ := os.ReadDir(dir)
				for _, e := range ents {
					if id, ok := objectID(e.Name()); ok && evicted[id] {
						seen.Store(id, true)
					}
				}
				select {
				case <-stop:
					return
				case <-tick.C:
				}
			}
		}()
		tt.c.Wipe(i)
		tt.after = func() {
			err := tt.c.WaitFor(120*time.Second, "repair done: nothing pending, copies made to the wiped broker", func(context.Context) error {
				if p := tt.metric("picomq_repair_pending_objects", ""); p > 0 {
					return fmt.Errorf("%v objects pending", p)
				}
				if d := tt.metric("picomq_repair_copy_bytes_total", "") - copiedBefore; d <= 0 {
					return fmt.Errorf("no bytes copied yet")
				}
				return nil
			})
			close(stop)
			wg.Wait()
			copied := int64(tt.metric("picomq_repair_copy_bytes_total", "") - copiedBefore)
			var evictedBytes int64
			for _, p := range tt.partitions() {
				evictedBytes += p.TieredBytes
			}
			tt.note += fmt.Sprintf("broker-%d wiped with %d segments evicted (%d bytes tiered, %d local): repair copied %d bytes; %d bytes tiered at the end; ", i, len(evicted), tieredBefore, localBefore, copied, evictedBytes)
			if err != nil {
				tt.t.Errorf("%v", err)
			}
			var bad []string
			seen.Range(func(k, _ any) bool { bad = append(bad, fmt.Sprintf("%016x", k)); return true })
			if len(bad) > 0 {
				tt.t.Errorf("repair copied evicted (tiered) segments to the wiped broker-%d: %v", i, bad)
			}
			// Copying the tiered segments would copy at least their bytes:
			// repair copies the untiered ones, fewer.
			if copied >= tieredBefore {
				tt.t.Errorf("repair copied %d bytes, not less than the %d tiered bytes before the wipe (%d untiered): tiered segments were copied", copied, tieredBefore, localBefore)
			}
		}
		return nil
	}},
}

// TestTierFaultTrials runs -cluster.tier-trials trials of a 3-broker
// cluster with tiered storage on against a real S3 server behind a fault
// proxy: the workload and checkers of the fault trials (0 acknowledged
// records lost, 0 duplicated, linearizable), a filler stream whose
// sealed segments upload and are evicted during the fault, and each
// kind's checks of the bucket.
func TestTierFaultTrials(t *testing.T) {
	needCluster(t)
	s3server.Require(t)
	if missing := probeCluster(t); missing != "" {
		if !*force {
			t.Skipf("cluster mode is not complete yet, so the fault trials skip (-cluster.force or PICOMQ_CLUSTER_FORCE=1 runs them): %s", missing)
		}
		t.Logf("cluster mode is not complete (%s); running the trials anyway (-cluster.force)", missing)
	}
	kinds := tierKinds
	if *tierOnly != "" {
		kinds = nil
		for _, name := range strings.Split(*tierOnly, ",") {
			found := false
			for _, k := range tierKinds {
				if k.name == strings.TrimSpace(name) {
					kinds, found = append(kinds, k), true
				}
			}
			if !found {
				t.Fatalf("-cluster.tier-kinds: no kind %q", name)
			}
		}
	}
	n := *tierTrials
	if n <= 0 {
		n = len(kinds)
	}
	t.Logf("seed %d (-cluster.seed to repeat), %d tier trials over %d kinds", *seed, n, len(kinds))
	var table []tierFigures
	defer func() {
		if len(table) == 0 {
			return
		}
		var sb strings.Builder
		fmt.Fprintf(&sb, "%-20s %-12s %7s %6s %5s %5s %-12s %6s %7s %7s %9s  %s\n", "trial", "kind", "acked", "fill", "lost", "dup", "linearizable", "keys", "uploads", "failed", "recovery", "note")
		for _, f := range table {
			status := ""
			if f.failed {
				status = " FAILED"
			}
			lin := fmt.Sprintf("%v %d/%d", f.linearizable, f.lin.Windows, f.lin.Ops)
			fmt.Fprintf(&sb, "%-20s %-12s %7d %6d %5d %5d %-12s %6d %7.0f %7.0f %9v  %s%s\n", f.trial, f.kind, f.acked, f.fillAcked, f.lost, f.dups, lin,
				f.keys, f.uploadsOK, f.uploadsFailed, f.recovery.Round(10*time.Millisecond), f.note, status)
		}
		t.Logf("tier trials (acked: workload appends; fill: filler appends; lost/dup: both; keys: segment keys in the bucket at the end; uploads/failed: picomq_tier_uploads_total summed over the brokers):\n%s", sb.String())
	}()
	for j := 0; j < n; j++ {
		k := kinds[j%len(kinds)]
		name := fmt.Sprintf("%02d-%s", j, k.name)
		t.Run(name, func(t *testing.T) {
			fig := &tierFigures{kind: k.name}
			defer func() {
				fig.trial, fig.failed = name, t.Failed()
				table = append(table, *fig)
			}()
			runTierTrial(t, k, rand.New(rand.NewPCG(*seed, 1000+uint64(j))), fig)
		})
	}
}

func runTierTrial(t *testing.T, k tierKind, rng *rand.Rand, fig *tierFigures) {
	ctx := context.Background()
	s3 := s3server.Start(t, s3server.Options{Buckets: []string{tierBucket}})
	proxy := s3.Proxy(t)
	creds := t.TempDir()
	if err := s3server.WriteCredentials(creds, s3server.DefaultCredential); err != nil {
		t.Fatal(err)
	}
	o := clusterOptions()
	o.ExtraFlags = []string{
		"--tier-endpoint", proxy.Endpoint(), "--tier-bucket", tierBucket, "--tier-path-style",
		"--tier-prefix", tierPrefix, "--tier-credentials-dir", creds,
		"--tier-local-retain-for", "0", "--tier-upload-stagger", "2s",
		"--tier-orphan-grace", tierOrphanGrace.String(), "--tier-cache-bytes", "8MiB",
	}
	c := clusterharness.Start(t, o)
	streams := defaultStreams
	cfg := workload.Config{URLs: c.URLs, Streams: streams, Seed: rng.Uint64()}
	if err := workload.Setup(ctx, cfg, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	fl := startFiller(t, c, max(k.fillBytes, 512))
	defer fl.stop()
	w := workload.Start(ctx, cfg)
	defer w.Stop()
	tt := &tierTrial{trial: trial{t: t, c: c, w: w, rng: rng, streams: streams, victim: -1}, s3: s3, proxy: proxy, fill: fl}
	defer func() {
		fig.note = tt.note
		if tt.victim >= 0 {
			fig.note = fmt.Sprintf("victim broker-%d; %s", tt.victim, fig.note)
		}
		fig.keys = len(tt.keys())
		fig.uploadsOK = tt.metric("picomq_tier_uploads_total", `result="ok"`)
		fig.uploadsFailed = tt.metric("picomq_tier_uploads_total", `result="failed"`)
		fig.fillAcked = fl.ackedCount()
	}()

	// Warm up: appends flow, and sealed segments are uploaded and evicted
	// before the fault, so that the fault meets both tiered ranges and
	// uploads under way.
	if err := waitAcked(c, w, 30, 30*time.Second); err != nil {
		t.Fatalf("before the fault: %v\n%s", err, c.LogTails(2048))
	}
	if err := c.WaitFor(120*time.Second, "segments uploaded and evicted before the fault", func(context.Context) error {
		if n := len(tt.keys()); n < 2 {
			return fmt.Errorf("%d keys in the bucket", n)
		}
		if len(tt.evictedIDs()) == 0 {
			return fmt.Errorf("no segment evicted yet")
		}
		return nil
	}); err != nil {
		t.Fatalf("%v (%s)\n%s", err, proxy, c.LogTails(2048))
	}
	injected := w.History().Now()
	heal := k.inject(tt)
	healedAt := w.History().Now()
	healed := time.Now()
	if heal != nil {
		heal()
	}
	if err := c.WaitReady(); err != nil {
		t.Fatalf("after healing: %v", err)
	}
	if err := waitAcked(c, w, 20, 60*time.Second); err != nil {
		t.Fatalf("after healing: %v", err)
	}
	fig.recovery = time.Since(healed)
	if tt.after != nil {
		tt.after()
	}
	// Not a wait for a condition: a second of load on the healed cluster.
	time.Sleep(time.Second)
	h := w.Stop()
	fl.stop()
	if tt.final != nil {
		tt.final()
	}

	all := make([]int, c.N())
	for i := range all {
		all[i] = i
	}
	gets := proxy.Counts()["GET"]
	final := workload.Snapshot(ctx, c.URLs(), all, streams, 20*time.Second)
	r := workload.Check(h, final, workload.Options{})
	fl.verify(c)
	if n := fl.retries.Load(); n > 0 {
		var codes []string
		fl.codes.Range(func(k, _ any) bool { codes = append(codes, k.(string)); return true })
		tt.note += fmt.Sprintf("%d filler reads retried after %v; ", n, codes)
	}
	got := proxy.Counts()["GET"]
	fig.getsSeen = float64((got.Seen - got.Failed) - (gets.Seen - gets.Failed))
	if tt.afterReads != nil {
		tt.afterReads()
	}
	// Quiescent: every segment due is uploaded and evicted, and the bucket
	// holds exactly what the state names: its keys' bytes are the
	// cluster's tiered bytes (the sum over the state's objects with a
	// tier copy). An orphan left over adds bytes; a key the state names
	// but the bucket lost takes some away: neither passes. Then the
	// filler's records once more, every segment of them evicted by now.
	tt.waitQuiescent(120 * time.Second)
	fl.verify(c)
	fig.acked, fig.lin = r.Stats.Acked, r.Lin
	fig.lost = r.Count(workload.CheckAcked) + fl.lost
	fig.dups = r.Count(workload.CheckDups) + fl.dups
	fig.linearizable = r.Count(workload.CheckLinearizable) == 0 && r.Lin.TimedOut == 0
	tt.note += fmt.Sprintf("%d GETs answered by the bucket in the final reads; ", int(fig.getsSeen))
	t.Logf("%s: %v; recovered %v after the heal; linearizability: %v; %s", k.name, r.Stats, fig.recovery.Round(10*time.Millisecond), r.Lin, tt.note)
	if err := r.Err(); err != nil {
		t.Errorf("%s: the checkers found:\n%v", k.name, err)
	}
	if fig.getsSeen == 0 {
		t.Errorf("the final reads made no GET of the bucket: the tiered ranges were not read from object storage (%s)", proxy)
	}
	if k.quiet {
		var failed []string
		for _, o := range h.Ops() {
			if o.Kind == workload.Append && o.Outcome != workload.OK && o.Start >= injected && o.Start <= healedAt {
				failed = append(failed, fmt.Sprintf("broker-%d at %v..%v: %s", o.Broker, o.Start, o.End, o.Err))
			}
		}
		if len(failed) > 0 {
			t.Errorf("%s harms no broker, yet %d appends failed in it:\n%s", k.name, len(failed), strings.Join(failed[:min(len(failed), 10)], "\n"))
		}
	}
	if r.Lin.TimedOut > 0 {
		t.Errorf("%d linearizability window(s) undecided in time", r.Lin.TimedOut)
	}
}

// keys are the segment keys in the bucket (asked of the server, not
// through the proxy: they are listed whatever the fault).
func (tt *tierTrial) keys() []string {
	return tt.s3.Keys(tt.t, tierBucket, tier.Keys{Prefix: tierPrefix}.Segments())
}

// bucketBytes sums the sizes of the segment keys in the bucket.
func (tt *tierTrial) bucketBytes() (n int64, count int, err error) {
	cl := tt.s3.Client(s3server.DefaultCredential)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for o := range cl.ListObjects(ctx, tierBucket, minio.ListObjectsOptions{Prefix: tier.Keys{Prefix: tierPrefix}.Segments(), Recursive: true}) {
		if o.Err != nil {
			return 0, 0, o.Err
		}
		n += o.Size
		count++
	}
	return n, count, nil
}

// waitKeysBeyond waits until the bucket holds more than n segment keys.
func (tt *tierTrial) waitKeysBeyond(n int, timeout time.Duration, what string) {
	tt.t.Helper()
	began := time.Now()
	if err := tt.c.WaitFor(timeout, what, func(context.Context) error {
		if got := len(tt.keys()); got <= n {
			return fmt.Errorf("%d keys, not more than %d (%s)", got, n, tt.proxy)
		}
		return nil
	}); err != nil {
		tt.t.Errorf("%v", err)
		return
	}
	tt.note += fmt.Sprintf("%s after %v; ", what, time.Since(began).Round(100*time.Millisecond))
}

// evictedIDs are the object ids of segment keys whose local copies are
// gone from every broker: evicted, read from the bucket only.
func (tt *tierTrial) evictedIDs() map[uint64]bool {
	out := map[uint64]bool{}
	for _, key := range tt.keys() {
		id, ok := tier.Keys{Prefix: tierPrefix}.ParseSegment(key)
		if !ok {
			continue
		}
		local := false
		for i := 0; i < tt.c.N(); i++ {
			if _, err := os.Stat(filepath.Join(tt.c.Broker(i).DataDir, "objects", fmt.Sprintf("%016x.obj", id))); err == nil {
				local = true
			}
		}
		if !local {
			out[id] = true
		}
	}
	return out
}

// localTiered names the segment keys not in evicted whose local files
// some broker still holds, and which brokers, with the files' ages.
func (tt *tierTrial) localTiered(evicted map[uint64]bool) string {
	var out []string
	for _, key := range tt.keys() {
		id, ok := tier.Keys{Prefix: tierPrefix}.ParseSegment(key)
		if !ok || evicted[id] {
			continue
		}
		var where []string
		for i := 0; i < tt.c.N(); i++ {
			if fi, err := os.Stat(filepath.Join(tt.c.Broker(i).DataDir, "objects", fmt.Sprintf("%016x.obj", id))); err == nil {
				where = append(where, fmt.Sprintf("broker-%d (%d bytes, written %v ago)", i, fi.Size(), time.Since(fi.ModTime()).Round(time.Second)))
			}
		}
		out = append(out, fmt.Sprintf("%016x on %s", id, strings.Join(where, ", ")))
	}
	return strings.Join(out, "; ")
}

// waitQuiescent waits, with the load stopped, until no broker has an
// upload pending, every key's segment is evicted, and the bucket's bytes
// equal the cluster's tiered bytes in the state, twice in a row.
func (tt *tierTrial) waitQuiescent(timeout time.Duration) {
	tt.t.Helper()
	began := time.Now()
	stable := 0
	err := tt.c.WaitFor(timeout, "the bucket holds exactly what the state names, nothing pending", func(context.Context) error {
		var tiered int64 = -1
		for i := 0; i < tt.c.N(); i++ {
			st, err := brokerstat.Tier(tt.c.URL(i))
			if err != nil {
				stable = 0
				return err
			}
			if st.UploadsPending > 0 {
				stable = 0
				return fmt.Errorf("broker-%d: %d uploads pending", i, st.UploadsPending)
			}
			if tiered >= 0 && st.TieredBytes != tiered {
				stable = 0
				return fmt.Errorf("brokers disagree on the tiered bytes: %d and %d", tiered, st.TieredBytes)
			}
			tiered = st.TieredBytes
		}
		b, n, err := tt.bucketBytes()
		if err != nil {
			stable = 0
			return err
		}
		if b != tiered {
			stable = 0
			return fmt.Errorf("the bucket holds %d keys of %d bytes, the state names %d tiered bytes", n, b, tiered)
		}
		if ev := tt.evictedIDs(); len(ev) != n {
			stable = 0
			return fmt.Errorf("%d of %d keys evicted; still on local disks: %s", len(ev), n, tt.localTiered(ev))
		}
		if stable++; stable < 2 {
			return fmt.Errorf("once")
		}
		return nil
	})
	if err != nil {
		tt.t.Errorf("%v", err)
		return
	}
	tt.note += fmt.Sprintf("bucket == state after %v; ", time.Since(began).Round(100*time.Millisecond))
}

// partitions are every partition of the workload's streams and the
// filler's, as broker 0 reports them.
func (tt *tierTrial) partitions() []wire.PartitionInfo {
	cl, err := client.New(tt.c.URL(0))
	if err != nil {
		tt.t.Fatal(err)
	}
	defer cl.Close()
	var out []wire.PartitionInfo
	names := []string{fillStream}
	for _, s := range tt.streams {
		names = append(names, s.Name)
	}
	for _, name := range names {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		info, err := cl.GetStream(ctx, name)
		cancel()
		if err != nil {
			tt.t.Errorf("stream %s: %v", name, err)
			continue
		}
		out = append(out, info.Partitions...)
	}
	return out
}

// metric sums metric name over the brokers, over its label sets holding
// label (every set when empty). A broker that does not answer adds 0.
func (tt *tierTrial) metric(name, label string) float64 {
	var sum float64
	for _, u := range tt.c.URLs() {
		v, _ := brokerstat.Metric(u, name, label)
		sum += v
	}
	return sum
}

// objectID parses a file name of objects/ (<16 hex>.obj).
func objectID(name string) (uint64, bool) {
	hex, ok := strings.CutSuffix(name, ".obj")
	if !ok || len(hex) != 16 {
		return 0, false
	}
	id, err := strconv.ParseUint(hex, 16, 64)
	return id, err == nil
}

// filler appends batches (one group commit each: a small range) to
// partition 0 of fillStream through the brokers in turn, so that merges
// write sealed segments that upload during the fault. It keeps what was
// acknowledged, to read back identical at the end.
type filler struct {
	t     *testing.T
	done  chan struct{}
	wg    sync.WaitGroup
	once  sync.Once
	mu    sync.Mutex
	acked map[int64]string // offset → payload
	batch int
	lost  int
	dups  int
	// retries are reads of the final check tried again after a coded
	// retriable (5xx) answer, with its codes.
	retries atomic.Int64
	codes   sync.Map
}

func startFiller(t *testing.T, c *clusterharness.Cluster, size int) *filler {
	f := &filler{t: t, done: make(chan struct{}), acked: map[int64]string{}}
	var cls []*client.Client
	for _, u := range c.URLs() {
		cl, err := client.New(u)
		if err != nil {
			t.Fatal(err)
		}
		cls = append(cls, cl)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var err error
	for try := 0; ; try++ {
		_, err = cls[try%len(cls)].Open(ctx, fillStream, client.StreamConfig{Policy: stream.PolicyValue{SegmentBytes: fillSegmentBytes}})
		if err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond) // a retry's pace while the cluster settles
	}
	if err != nil {
		t.Fatalf("creating %s: %v", fillStream, err)
	}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		defer func() {
			for _, cl := range cls {
				cl.Close()
			}
		}()
		streams := make([]*client.Stream, len(cls))
		for i := 0; ; i++ {
			select {
			case <-f.done:
				return
			default:
			}
			b := i % len(cls)
			if streams[b] == nil {
				sctx, scancel := context.WithTimeout(context.Background(), 3*time.Second)
				s, err := cls[b].Stream(sctx, fillStream)
				scancel()
				if err != nil {
					time.Sleep(50 * time.Millisecond) // a retry's pace
					continue
				}
				streams[b] = s
			}
			recs := make([]stream.RecordValue, 2)
			payloads := make([]string, len(recs))
			for j := range recs {
				unit := fmt.Sprintf("fill-%d-%d|", i, j)
				payloads[j] = strings.Repeat(unit, size/len(unit)+1)[:size]
				recs[j] = stream.RecordValue{Key: []byte(fmt.Sprintf("k%d", j)), Payload: []byte(payloads[j])}
			}
			actx, acancel := context.WithTimeout(context.Background(), 3*time.Second)
			res, err := streams[b].Append(actx, recs)
			acancel()
			if err != nil {
				time.Sleep(50 * time.Millisecond) // a retry's pace
				continue
			}
			f.mu.Lock()
			for j := range payloads {
				f.acked[int64(res.First)+int64(j)] = payloads[j]
			}
			f.batch++
			f.mu.Unlock()
			time.Sleep(2 * time.Millisecond) // pacing, leaving the workload room
		}
	}()
	return f
}

func (f *filler) stop() {
	f.once.Do(func() { close(f.done) })
	f.wg.Wait()
}

func (f *filler) ackedCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.acked)
}

// verify reads the filler's partition whole through every broker: every
// acknowledged record identical at its offset, no payload twice. Most of
// it is in evicted segments: read from the bucket.
func (f *filler) verify(c *clusterharness.Cluster) {
	f.t.Helper()
	for i, u := range c.URLs() {
		got, err := f.read(u)
		if err != nil {
			// A read that fails is reported as such, not as records lost.
			f.t.Errorf("reading %s back through broker-%d: %v", fillStream, i, err)
			continue
		}
		lost, dups := 0, 0
		var examples []string
		seen := map[string]int64{}
		for off, p := range got {
			if prev, ok := seen[p]; ok {
				dups++
				if len(examples) < 5 {
					examples = append(examples, fmt.Sprintf("%.20q at %d and %d", p, prev, off))
				}
			}
			seen[p] = off
		}
		for off, want := range f.acked {
			if got[off] != want {
				lost++
				if len(examples) < 5 {
					examples = append(examples, fmt.Sprintf("offset %d reads %.20q, acknowledged %.20q", off, got[off], want))
				}
			}
		}
		f.lost, f.dups = max(f.lost, lost), max(f.dups, dups)
		if lost+dups > 0 {
			f.t.Errorf("%s through broker-%d: %d acknowledged records lost or changed, %d duplicated: %v", fillStream, i, lost, dups, examples)
		}
	}
}

// read reads fillStream's partition 0 whole through url, retrying a page
// on a coded 5xx (retriable) answer only, up to 10 times with a growing
// pause: under a bucket failing half its requests the broker answers a
// read of an evicted chunk 503 TIER_UNREACHABLE about a quarter of the
// time (its S3 client tries each request twice); the retries are counted
// and reported.
func (f *filler) read(url string) (map[int64]string, error) {
	cl, err := client.New(url, client.WithAppendsInFlight(0))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	s, err := cl.Stream(ctx, fillStream)
	if err != nil {
		return nil, err
	}
	b, err := s.Bounds(ctx, 0)
	if err != nil {
		return nil, err
	}
	out := map[int64]string{}
	for at := b.First; at < b.Next; {
		var got []stream.EntryValue
		for try := 0; ; try++ {
			got, err = s.Read(ctx, 0, at, 1000)
			if err == nil {
				break
			}
			o, code := workload.Classify(err)
			if o != workload.Unknown || code == "" || try >= 9 {
				return out, fmt.Errorf("read at %d (try %d): %w", at, try+1, err)
			}
			f.retries.Add(1)
			f.codes.Store(code, true)
			time.Sleep(time.Duration(try+1) * 100 * time.Millisecond) // a retry's pace
		}
		if len(got) == 0 {
			return out, fmt.Errorf("read at %d returned nothing before the end %d", at, b.Next)
		}
		for _, e := range got {
			out[int64(e.Offset)] = string(e.Record.Payload)
		}
		at = got[len(got)-1].Offset + 1
	}
	return out, nil
}
