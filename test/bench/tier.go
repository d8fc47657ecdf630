package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/picomq/picomq/broker/client"
	"github.com/picomq/picomq/broker/httpapi/wire"
	"github.com/picomq/picomq/broker/stream"
	"github.com/picomq/picomq/test/brokerstat"
	"github.com/picomq/picomq/test/clusterharness"
	"github.com/picomq/picomq/test/s3server"
)

// The tiered-storage benchmark (issue 33), against a real S3 server
// (test/s3server: SeaweedFS's weed on loopback), every figure against its
// baseline measured in the same run:
//
//  1. catch-up reads of a range held only in the bucket, with an empty
//     cache (a broker just started on an empty --tier-cache-dir) and again
//     warm, against the same range read from the local disk (the same
//     broker before eviction, --tier-local-retain-for 1h);
//  2. appends with tiering uploading and evicting in the background
//     (--tier-local-retain-for 0) against the same load with tiering off;
//  3. the repair of a wiped broker of a 3-broker cluster whose data is
//     mostly tiered, against the same data with tiering off (a full copy).
var (
	tierOn          = flag.Bool("tier", false, "run only the tiered-storage benchmark (issue 33; needs SeaweedFS's weed, hack/seaweedfs.sh, and for the repair KUBEBUILDER_ASSETS)")
	tierReadBytes   = flag.Int64("tier-read-bytes", 128<<20, "tiered-storage benchmark: bytes of records the catch-up reads cover")
	tierAppendFor   = flag.Duration("tier-append-duration", 10*time.Second, "tiered-storage benchmark: length of each measured append run (after a third of it unmeasured)")
	tierAppendRound = flag.Int("tier-append-rounds", 2, "tiered-storage benchmark: rounds of the append runs (each: tiering off, then on, each on a fresh broker)")
	tierProfiles    = flag.String("tier-profiles", "", "tiered-storage benchmark: write the broker's CPU profile of each measured append run here (appends-<off|on>-<round>.pprof; the brokers get --pprof)")
	tierAppendW     = flag.Int("tier-append-writers", 4, "tiered-storage benchmark: writers of the append load, one stream each")
	tierRepairWait  = flag.Duration("tier-repair-wait", 5*time.Minute, "tiered-storage benchmark: how long a repair may take before the benchmark gives up")
	tierParts       = flag.String("tier-parts", "reads,appends,repair", "tiered-storage benchmark: which parts to run, comma-separated")
	tierUploadRate  = flag.String("tier-upload-rate", "", "tiered-storage benchmark: the brokers' --tier-upload-bytes-per-second in the append runs (empty: no bound)")
	tierRepairBytes = flag.Int64("tier-repair-bytes", 256<<20, "tiered-storage benchmark: bytes written to the 3-broker cluster before one broker is wiped (0: skip the repair; the issue's figure is 1073741824)")
)

// testing.Init registers the testing flags, so that s3server's Require
// may ask testing.Short (false) in a program.
func init() { testing.Init() }

const (
	benchBucket  = "tier"
	tierSegBytes = 16 << 20
	// tierBatch records of 1 KiB per append: 32 KiB, below the merge's
	// small-range bound (64 KiB), so the ranges are merged into segments,
	// the only objects that tier.
	tierBatch = 32
)

func tierBench(base, bin string) error {
	ctx := context.Background()
	tb := clusterharness.NewProgramTB("bench-tier", filepath.Join(base, "tier-harness"))
	defer tb.RunCleanups()
	if err := os.MkdirAll(filepath.Join(base, "tier-harness"), 0o755); err != nil {
		return err
	}
	load0 := loadavg()
	var s3 *s3server.Server
	t0 := time.Now()
	if err := tb.Do(func() error { s3 = s3server.Start(tb, s3server.Options{Buckets: []string{benchBucket}}); return nil }); err != nil {
		return fmt.Errorf("starting the S3 server: %w", err)
	}
	fmt.Printf("S3 server (SeaweedFS weed, loopback) up in %v\n", time.Since(t0).Round(100*time.Millisecond))
	creds := filepath.Join(base, "tier-creds")
	if err := s3server.WriteCredentials(creds, s3server.DefaultCredential); err != nil {
		return err
	}
	flags := func(prefix, retain string, extra ...string) []string {
		return append([]string{
			"--tier-endpoint", s3.Endpoint(), "--tier-bucket", benchBucket, "--tier-path-style",
			"--tier-prefix", prefix, "--tier-credentials-dir", creds,
			"--tier-local-retain-for", retain, "--tier-upload-stagger", "2s",
		}, extra...)
	}

	part := func(name string) bool { return slices.Contains(strings.Split(*tierParts, ","), name) }
	var rd *readResult
	if part("reads") {
		r, err := tierReads(ctx, base, bin, flags)
		if err != nil {
			return fmt.Errorf("catch-up reads: %w", err)
		}
		rd = &r
	}
	var ap *appendResult
	if part("appends") {
		a, err := tierAppends(ctx, base, bin, s3.Pid(), flags)
		if err != nil {
			return fmt.Errorf("appends: %w", err)
		}
		ap = &a
	}
	var rp *repairResult
	if part("repair") && *tierRepairBytes > 0 {
		var err error
		if err := ensureAssets(); err != nil {
			return err
		}
		if rp, err = tierRepair(ctx, base, bin, flags); err != nil {
			return fmt.Errorf("repair: %w", err)
		}
	}

	fmt.Printf("\ntiered storage, ratios measured in one run (targets in brackets); load average at the start %s, at the end %s:\n", load0, loadavg())
	fmt.Printf("  %-66s %12s %12s %8s\n", "", "tiered", "baseline", "ratio")
	if rd != nil {
		fmt.Printf("  %-66s %9.1f MB/s %7.1f MB/s %8.2f\n", fmt.Sprintf("catch-up read, cold cache (%d MiB evicted) / local disk", rd.bytes>>20), rd.cold, rd.local, rd.cold/rd.local)
		fmt.Printf("  %-66s %9.1f MB/s %7.1f MB/s %8.2f\n", "catch-up read, warm cache (same process) / local disk", rd.warm, rd.local, rd.warm/rd.local)
		fmt.Printf("  %-66s %9.1f MB/s %7.1f MB/s %8.2f\n", "catch-up read, warm disk cache (restarted) / local disk", rd.warmDisk, rd.local, rd.warmDisk/rd.local)
	}
	if ap != nil {
		fmt.Printf("  %-66s %9.1f MB/s %7.1f MB/s %8.2f  [>= 0.90]\n", fmt.Sprintf("appends, %d writers x 32 KiB, uploading / tiering off (mean of %d)", *tierAppendW, max(*tierAppendRound, 1)), ap.on.mbPerSec, ap.off.mbPerSec, ap.on.mbPerSec/ap.off.mbPerSec)
		fmt.Printf("  %-66s %9.0f /s   %9.0f /s %8.2f\n", "  the same in appends/s", ap.on.appendsPerSec, ap.off.appendsPerSec, ap.on.appendsPerSec/ap.off.appendsPerSec)
	}
	if rp != nil {
		fmt.Printf("  %-66s %12s %12s %8.2f\n", fmt.Sprintf("repair of a wiped broker, %d MiB, %.0f%% tiered / full copy", rp.bytes>>20, 100*rp.tieredShare),
			rp.tiered.Round(100*time.Millisecond), rp.full.Round(100*time.Millisecond), rp.tiered.Seconds()/rp.full.Seconds())
		fmt.Printf("  %-66s %9.1f MiB %8.1f MiB %8.2f\n", "  bytes the repair copied", float64(rp.tieredCopied)/(1<<20), float64(rp.fullCopied)/(1<<20), float64(rp.tieredCopied)/float64(max(rp.fullCopied, 1)))
		fmt.Printf("  %-66s %12.0f %12.0f\n", "  picomq_objects_under_replicated once repaired", rp.tieredUnder, rp.fullUnder)
	}
	return nil
}

// saveProfile writes the CPU profile of the broker at url over the next d
// (at least 1 s) to path (-broker-profiles, -tier-profiles).
func saveProfile(url, path string, d time.Duration) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	resp, err := http.Get(fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", url, max(int(d.Seconds()), 1)))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// tierRecords returns a batch of n 1 KiB records, incompressible.
func tierRecords(rng *rand.Rand, n int) []stream.RecordValue {
	recs := make([]stream.RecordValue, n)
	for i := range recs {
		p := make([]byte, 1024)
		for j := 0; j < len(p); j += 8 {
			binary.LittleEndian.PutUint64(p[j:], rng.Uint64())
		}
		recs[i] = stream.RecordValue{Payload: p}
	}
	return recs
}

// fillSeq appends total bytes to s, one 32 KiB batch at a time.
func fillSeq(ctx context.Context, s *client.Stream, total int64, seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, 33))
	batches := make([][]stream.RecordValue, 16)
	for i := range batches {
		batches[i] = tierRecords(rng, tierBatch)
	}
	for n, i := int64(0), 0; n < total; i++ {
		if err := appendWithin(ctx, s, batches[i%len(batches)], time.Minute); err != nil {
			return err
		}
		n += tierBatch * 1024
	}
	return nil
}

func partitionOf(ctx context.Context, c *client.Client, name string) (wire.PartitionInfo, error) {
	info, err := c.GetStream(ctx, name)
	if err != nil {
		return wire.PartitionInfo{}, err
	}
	if len(info.Partitions) == 0 {
		return wire.PartitionInfo{}, fmt.Errorf("stream %s: no partition", name)
	}
	return info.Partitions[0], nil
}

// waitFor polls cond every 500 ms until it holds or timeout passes.
func waitFor(timeout time.Duration, what string, cond func() (bool, string)) error {
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		ok, state := cond()
		if ok {
			return nil
		}
		if state != "" {
			last = state
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not within %v (last: %s)", what, timeout, last)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

type readResult struct {
	bytes             int64
	local, cold, warm float64 // MB/s
	warmDisk          float64 // MB/s, a restarted broker on the cache the cold read filled
}

// readRange reads partition 0 of s over [from, to) in pages and returns
// MB/s of record bytes.
func readRange(ctx context.Context, s *client.Stream, from, to stream.Offset) (float64, int64, error) {
	start := time.Now()
	var n int64
	for at := from; at < to; {
		es, err := s.Read(ctx, 0, at, int(min(to-at, 10000)))
		if err != nil {
			return 0, n, err
		}
		if len(es) == 0 {
			return 0, n, fmt.Errorf("read at %d returned nothing before %d", at, to)
		}
		for _, e := range es {
			n += int64(len(e.Record.Payload) + len(e.Record.Key))
		}
		at = es[len(es)-1].Offset + 1
	}
	return float64(n) / time.Since(start).Seconds() / 1e6, n, nil
}

func tierReads(ctx context.Context, base, bin string, flags func(prefix, retain string, extra ...string) []string) (readResult, error) {
	var res readResult
	data := filepath.Join(base, "tier-read")
	cache := filepath.Join(base, "tier-read-cache")
	local := flags("read/", "1h", "--tier-cache-dir", cache)
	evict := flags("read/", "0", "--tier-cache-dir", cache)
	b, err := startBroker(bin, data, local...)
	if err != nil {
		return res, err
	}
	defer func() { b.stop() }()
	restart := func(fl []string, wipeCache bool) error {
		b.stop()
		if wipeCache {
			if err := os.RemoveAll(cache); err != nil {
				return err
			}
		}
		nb, err := startBroker(bin, data, fl...)
		if err != nil {
			return err
		}
		b = nb
		return nil
	}
	cl := func() (*client.Client, error) { return client.New(b.URL) }
	c, err := cl()
	if err != nil {
		return res, err
	}
	s, err := c.Open(ctx, "catchup", client.StreamConfig{Policy: stream.PolicyValue{SegmentBytes: tierSegBytes}})
	if err != nil {
		return res, err
	}
	t0 := time.Now()
	if err := fillSeq(ctx, s, *tierReadBytes, 1); err != nil {
		return res, err
	}
	fmt.Printf("reads: appended %d MiB to one stream (16 MiB segments) in %v\n", *tierReadBytes>>20, time.Since(t0).Round(100*time.Millisecond))
	// Uploaded, kept locally (retain 1h): settled once nothing is pending
	// and the tiered bytes stay put for 3 s.
	var p wire.PartitionInfo
	stable, lastTiered := 0, int64(-1)
	err = waitFor(3*time.Minute, "segments uploaded", func() (bool, string) {
		p, err = partitionOf(ctx, c, "catchup")
		st, err2 := brokerstat.Tier(b.URL)
		if err != nil || err2 != nil {
			return false, fmt.Sprint(err, err2)
		}
		if p.TieredBytes > 0 && p.TieredBytes == lastTiered && st.UploadsPending == 0 {
			stable++
		} else {
			stable = 0
		}
		lastTiered = p.TieredBytes
		return stable >= 6, fmt.Sprintf("%+v %+v", p, st)
	})
	if err != nil {
		return res, err
	}
	// The range read: the records of the uploaded segments (the oldest:
	// records are all the same size, so a share of the offsets).
	from := stream.Offset(p.Start)
	// (LocalBytes, with nothing evicted yet, is every range's bytes.)
	to := from + stream.Offset(float64(p.End-p.Start)*float64(p.TieredBytes)/float64(p.LocalBytes))
	fmt.Printf("reads: %d of %d MiB uploaded in %v; the range read is offsets [%d, %d) of [%d, %d)\n",
		p.TieredBytes>>20, p.LocalBytes>>20, time.Since(t0).Round(100*time.Millisecond), from, to, p.Start, p.End)

	// Local: a fresh broker (nothing in its memory), segments on its disk.
	if err := restart(local, true); err != nil {
		return res, err
	}
	if c, err = cl(); err != nil {
		return res, err
	}
	if s, err = c.Stream(ctx, "catchup"); err != nil {
		return res, err
	}
	m0 := scrape(b.URL)
	if res.local, res.bytes, err = readRange(ctx, s, from, to); err != nil {
		return res, err
	}
	if m := scrape(b.URL); m["picomq_tier_read_bytes_total"] > m0["picomq_tier_read_bytes_total"] {
		return res, fmt.Errorf("the local read fetched %.0f bytes from the bucket", m["picomq_tier_read_bytes_total"]-m0["picomq_tier_read_bytes_total"])
	}
	fmt.Printf("reads: local disk %.1f MB/s (%d MiB)\n", res.local, res.bytes>>20)

	// Evicted: retain 0, then a fresh broker on an empty cache.
	if err := restart(evict, true); err != nil {
		return res, err
	}
	if c, err = cl(); err != nil {
		return res, err
	}
	err = waitFor(2*time.Minute, "uploaded segments evicted", func() (bool, string) {
		q, err := partitionOf(ctx, c, "catchup")
		if err != nil {
			return false, err.Error()
		}
		return q.LocalBytes <= p.LocalBytes-p.TieredBytes, fmt.Sprintf("%+v", q)
	})
	if err != nil {
		return res, err
	}
	if err := restart(evict, true); err != nil {
		return res, err
	}
	if c, err = cl(); err != nil {
		return res, err
	}
	if s, err = c.Stream(ctx, "catchup"); err != nil {
		return res, err
	}
	objects, _ := os.ReadDir(filepath.Join(data, "objects"))
	m0 = scrape(b.URL)
	var n int64
	if res.cold, n, err = readRange(ctx, s, from, to); err != nil {
		return res, err
	}
	m1 := scrape(b.URL)
	if res.warm, _, err = readRange(ctx, s, from, to); err != nil {
		return res, err
	}
	m2 := scrape(b.URL)
	fmt.Printf("reads: evicted (%d object files left locally), cold cache %.1f MB/s (%d MiB; %.0f MiB fetched from the bucket, %.0f chunk misses, %.0f hits), warm %.1f MB/s (%.0f MiB fetched, %.0f hits)\n",
		len(objects), res.cold, n>>20, (m1["picomq_tier_read_bytes_total"]-m0["picomq_tier_read_bytes_total"])/(1<<20),
		m1["picomq_tier_cache_misses_total"]-m0["picomq_tier_cache_misses_total"], m1["picomq_tier_cache_hits_total"]-m0["picomq_tier_cache_hits_total"],
		res.warm, (m2["picomq_tier_read_bytes_total"]-m1["picomq_tier_read_bytes_total"])/(1<<20), m2["picomq_tier_cache_hits_total"]-m1["picomq_tier_cache_hits_total"])
	if m1["picomq_tier_read_bytes_total"] == m0["picomq_tier_read_bytes_total"] {
		return res, fmt.Errorf("the cold read fetched nothing from the bucket: not a tiered read")
	}
	// The second read above may be served from the broker's memory: the
	// chunks again from the disk cache, by a broker just started on it.
	if err := restart(evict, false); err != nil {
		return res, err
	}
	if c, err = cl(); err != nil {
		return res, err
	}
	if s, err = c.Stream(ctx, "catchup"); err != nil {
		return res, err
	}
	m0 = scrape(b.URL)
	if res.warmDisk, _, err = readRange(ctx, s, from, to); err != nil {
		return res, err
	}
	m1 = scrape(b.URL)
	fmt.Printf("reads: restarted on the filled cache %.1f MB/s (%.0f MiB fetched from the bucket, %.0f chunk hits, %.0f misses)\n", res.warmDisk,
		(m1["picomq_tier_read_bytes_total"]-m0["picomq_tier_read_bytes_total"])/(1<<20), m1["picomq_tier_cache_hits_total"]-m0["picomq_tier_cache_hits_total"], m1["picomq_tier_cache_misses_total"]-m0["picomq_tier_cache_misses_total"])
	return res, nil
}

type appendResult struct{ off, on result }

// tierAppends runs the same load on a fresh lone broker with tiering off,
// then on with --tier-local-retain-for 0, -tier-append-rounds times: a
// warm-up of a third of the duration (unmeasured: the first segments
// merge, upload and evict), then the measured run. The rates are the
// rounds' means.
func tierAppends(ctx context.Context, base, bin string, weed int, flags func(prefix, retain string, extra ...string) []string) (appendResult, error) {
	var res appendResult
	rng := rand.New(rand.NewPCG(2, 33))
	batch := tierRecords(rng, tierBatch)
	rounds := max(*tierAppendRound, 1)
	for round := range rounds {
		for _, on := range []bool{false, true} {
			name := "off"
			var fl []string
			if on {
				name, fl = "on", flags(fmt.Sprintf("appends-%d/", round), "0")
				if *tierUploadRate != "" {
					fl = append(fl, "--tier-upload-bytes-per-second", *tierUploadRate)
				}
			}
			if *tierProfiles != "" {
				fl = append(fl, "--pprof")
			}
			b, err := startBroker(bin, filepath.Join(base, fmt.Sprintf("tier-append-%s-%d", name, round)), fl...)
			if err != nil {
				return res, err
			}
			r, err := func() (result, error) {
				defer b.stop()
				c, err := client.New(b.URL, client.WithHTTPClient(&http.Client{Transport: &client.Transport{MaxIdlePerHost: 256}}))
				if err != nil {
					return result{}, err
				}
				names := make([]string, *tierAppendW)
				for i := range names {
					names[i] = fmt.Sprintf("append-%d", i)
					if _, _, err := c.CreateStream(ctx, names[i], client.StreamConfig{Policy: stream.PolicyValue{SegmentBytes: tierSegBytes}}); err != nil {
						return result{}, err
					}
				}
				if _, err := appendLoad(ctx, c, names, len(names), batch, *tierAppendFor/3); err != nil {
					return result{}, err
				}
				m0 := scrape(b.URL)
				w0, _ := processCPU(weed)
				prof := make(chan error, 1)
				if *tierProfiles != "" {
					go func() {
						prof <- saveProfile(b.URL, filepath.Join(*tierProfiles, fmt.Sprintf("appends-%s-%d.pprof", name, round)), *tierAppendFor)
					}()
				} else {
					prof <- nil
				}
				cpu0, t0 := sampleCPU(b.Pid()), time.Now()
				r, err := appendLoad(ctx, c, names, len(names), batch, *tierAppendFor)
				if perr := <-prof; perr != nil {
					fmt.Fprintln(os.Stderr, "bench: profile:", perr)
				}
				if err != nil {
					return result{}, err
				}
				wall := time.Since(t0)
				use, cpuOK := sampleCPU(b.Pid()).since(cpu0, wall)
				w1, _ := processCPU(weed)
				m1 := scrape(b.URL)
				fmt.Printf("appends, round %d, tiering %-3s: %6.1f MB/s %5.0f appends/s p50 %s p99 %s; meanwhile %.0f small ranges merged into segments, %.0f MiB uploaded, %.0f segments evicted\n",
					round, name, r.mbPerSec, r.appendsPerSec, ms(r.p50), ms(r.p99),
					m1["picomq_merged_ranges_total"]-m0["picomq_merged_ranges_total"],
					(m1["picomq_tier_uploaded_bytes_total"]-m0["picomq_tier_uploaded_bytes_total"])/(1<<20),
					m1["picomq_tier_evictions_total"]-m0["picomq_tier_evictions_total"])
				if cpuOK {
					fmt.Printf("%32s %s; the S3 server (weed, same machine) %.2f cores\n", "", use.describe(r), (w1-w0).Seconds()/wall.Seconds())
				}
				return r, nil
			}()
			if err != nil {
				return res, fmt.Errorf("tiering %s: %w", name, err)
			}
			into := &res.off
			if on {
				into = &res.on
			}
			into.mbPerSec += r.mbPerSec / float64(rounds)
			into.appendsPerSec += r.appendsPerSec / float64(rounds)
		}
	}
	return res, nil
}

type repairResult struct {
	bytes                    int64
	tieredShare              float64
	tiered, full             time.Duration
	tieredCopied, fullCopied int64
	tieredUnder, fullUnder   float64 // picomq_objects_under_replicated once repaired
}

// tierRepair times, on a 3-broker cluster (R=3), the repair of a wiped
// broker: first with tiering off (every object copied to its new
// incarnation), then with tiering on, 90% of the bytes in three streams
// whose segments tier and evict and 10% in one stream with tiering
// Disabled.
func tierRepair(ctx context.Context, base, bin string, flags func(prefix, retain string, extra ...string) []string) (*repairResult, error) {
	res := &repairResult{bytes: *tierRepairBytes}
	for _, on := range []bool{false, true} {
		took, copied, share, under, err := repairOnce(ctx, base, bin, on, flags)
		if err != nil {
			return nil, err
		}
		if on {
			res.tiered, res.tieredCopied, res.tieredShare, res.tieredUnder = took, copied, share, under
		} else {
			res.full, res.fullCopied, res.fullUnder = took, copied, under
		}
	}
	return res, nil
}

func repairOnce(ctx context.Context, base, bin string, on bool, flags func(prefix, retain string, extra ...string) []string) (time.Duration, int64, float64, float64, error) {
	name := "off"
	o := clusterOptions()
	o.Brokers, o.ReplicationFactor = 3, 3
	if on {
		name = "on"
		o.ExtraFlags = append(o.ExtraFlags, flags("repair/", "0")...)
	}
	c, tb, err := startBalanced("bench-tier-repair-"+name, bin, filepath.Join(base, "tier-repair-"+name), o)
	defer tb.RunCleanups()
	if err != nil {
		return 0, 0, 0, 0, err
	}
	var took time.Duration
	var copied int64
	var share, under float64
	err = tb.Do(func() error {
		cls := make([]*client.Client, c.N())
		for i := range cls {
			cl, err := client.New(c.URL(i))
			if err != nil {
				return err
			}
			defer cl.Close()
			cls[i] = cl
		}
		// Three streams of 30% each (tiering follows the cluster), one of
		// 10% that never tiers: one writer each.
		type part struct {
			name  string
			share float64
			pol   stream.PolicyValue
		}
		parts := []part{
			{"tiered-0", 0.3, stream.PolicyValue{SegmentBytes: tierSegBytes}},
			{"tiered-1", 0.3, stream.PolicyValue{SegmentBytes: tierSegBytes}},
			{"tiered-2", 0.3, stream.PolicyValue{SegmentBytes: tierSegBytes}},
			{"local", 0.1, stream.PolicyValue{SegmentBytes: tierSegBytes, Tiering: stream.TieringDisabled}},
		}
		t0 := time.Now()
		var wg sync.WaitGroup
		errs := make([]error, len(parts))
		for i, p := range parts {
			wg.Go(func() {
				cl := cls[i%len(cls)]
				s, err := cl.Open(ctx, p.name, client.StreamConfig{Policy: p.pol})
				if err != nil {
					errs[i] = err
					return
				}
				errs[i] = fillSeq(ctx, s, int64(p.share*float64(*tierRepairBytes)), uint64(10+i))
			})
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				return fmt.Errorf("filling: %w", err)
			}
		}
		fmt.Printf("repair, tiering %-3s: wrote %d MiB over 4 streams in %v\n", name, *tierRepairBytes>>20, time.Since(t0).Round(100*time.Millisecond))
		// Settled: merges done and, tiering on, every sealed segment of the
		// tiered streams uploaded and evicted; the evicted share stays put
		// for 5 s.
		var total, evicted int64
		stable, last := 0, [2]int64{-1, -1}
		err := waitFor(5*time.Minute, "the data settled", func() (bool, string) {
			total, evicted = 0, 0
			var desc []string
			for _, p := range parts {
				q, err := partitionOf(ctx, cls[0], p.name)
				if err != nil {
					return false, err.Error()
				}
				// LocalBytes counts the ranges not evicted, TieredBytes
				// the uploaded ones: once settled (retain 0) every
				// uploaded range is evicted, and they add up to the whole.
				total += q.LocalBytes
				evicted += q.TieredBytes
				desc = append(desc, fmt.Sprintf("%s: %d MiB, %d local, %d tiered, %d ranges", p.name, q.Bytes>>20, q.LocalBytes>>20, q.TieredBytes>>20, q.Ranges))
			}
			pending := 0
			for i := range c.N() {
				if st, err := brokerstat.Tier(c.URL(i)); err == nil {
					pending += st.UploadsPending
				}
			}
			total += evicted
			if [2]int64{total, evicted} == last && pending == 0 {
				stable++
			} else {
				stable = 0
			}
			last = [2]int64{total, evicted}
			return stable >= 10, strings.Join(desc, "; ")
		})
		if err != nil {
			return err
		}
		share = float64(evicted) / float64(total)
		fmt.Printf("repair, tiering %-3s: settled after %v: %d MiB, %.1f%% evicted to the bucket\n", name, time.Since(t0).Round(100*time.Millisecond), total>>20, 100*share)

		// Wipe a broker that is not the metadata leader.
		victim := (c.Leader() + 1) % c.N()
		before, _ := c.Node(victim)
		copies0 := repairCopied(c)
		// The copies' timeline, sampled every 100 ms from before the
		// wipe: the first and the last time the copied bytes grew.
		var mu sync.Mutex
		var firstCopy, lastCopy time.Time
		stopPoll := make(chan struct{})
		polled := make(chan struct{})
		go func() {
			defer close(polled)
			prev := copies0
			for {
				select {
				case <-stopPoll:
					return
				case <-time.After(100 * time.Millisecond):
				}
				if n := repairCopied(c); n > prev {
					mu.Lock()
					if firstCopy.IsZero() {
						firstCopy = time.Now()
					}
					lastCopy, prev = time.Now(), n
					mu.Unlock()
				}
			}
		}()
		t0 = time.Now()
		c.Wipe(victim)
		restarted := time.Since(t0)
		// Done: the new incarnation joined, the leader's repair copied
		// and now reports nothing pending, and no copy landed for 4 s
		// (two rounds). The time is that of the last copy. The
		// under-replicated gauge is printed, not waited for: it counts
		// tiered objects too, which repair does not copy.
		lastCopied, lastChange := int64(-1), time.Now()
		lastPrint := time.Now()
		err = waitFor(*tierRepairWait, "the repair done", func() (bool, string) {
			n, err := c.Node(victim)
			if err != nil || n.MemberID == "" || n.MemberID == before.MemberID || !n.Ready {
				return false, fmt.Sprintf("wiped broker: %v %s", err, n.Raw)
			}
			pending := 0.0
			under = 0
			for i := range c.N() {
				m := scrapeWith(http.DefaultClient, c.URL(i), func(name string) bool {
					return name == "picomq_objects_under_replicated" || name == "picomq_repair_pending_objects"
				})
				under = max(under, m["picomq_objects_under_replicated"])
				pending = max(pending, m["picomq_repair_pending_objects"])
			}
			copied = repairCopied(c) - copies0
			if copied != lastCopied {
				lastCopied, lastChange = copied, time.Now()
			}
			state := fmt.Sprintf("%.0f under-replicated, %.0f pending, %d MiB copied", under, pending, copied>>20)
			if time.Since(lastPrint) > 15*time.Second {
				fmt.Printf("repair, tiering %-3s: after %v: %s\n", name, time.Since(t0).Round(time.Second), state)
				lastPrint = time.Now()
			}
			return copied > 0 && pending == 0 && time.Since(lastChange) >= 4*time.Second, state
		})
		close(stopPoll)
		<-polled
		if err != nil {
			return err
		}
		mu.Lock()
		took = lastCopy.Sub(t0)
		fmt.Printf("repair, tiering %-3s: broker-%d wiped (killed, deleted, back and ready in %v); copies from %v to %v after the wipe, then nothing pending; %.1f MiB copied; picomq_objects_under_replicated %.0f\n",
			name, victim, restarted.Round(100*time.Millisecond), firstCopy.Sub(t0).Round(100*time.Millisecond), took.Round(100*time.Millisecond), float64(copied)/(1<<20), under)
		mu.Unlock()
		return nil
	})
	return took, copied, share, under, err
}

// repairCopied sums the brokers' picomq_repair_copy_bytes_total (the
// metadata leader's runner copies).
func repairCopied(c *clusterharness.Cluster) int64 {
	var n float64
	for i := range c.N() {
		m := scrapeWith(http.DefaultClient, c.URL(i), func(name string) bool { return name == "picomq_repair_copy_bytes_total" })
		n += m["picomq_repair_copy_bytes_total"]
	}
	return int64(n)
}
