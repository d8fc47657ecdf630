// Command bench measures the PicoMQ broker as a client sees it: it builds
// and starts the real broker binary on loopback with a fresh data
// directory, drives it over HTTP, and reports appends/s, MB/s and latency
// percentiles, next to this machine's raw fdatasync latency and sequential
// write bandwidth measured in the same run, in the same directory. Each
// scenario also says how much CPU the broker and the bench's own clients
// used, and how busy the machine was: here they share its processors. After
// the batched scenario it measures the durability contract alone (see
// groupCommitAlone), for what any broker keeping it could reach here.
//
//	go run ./test/bench                 # every scenario
//	go run ./test/bench -duration 10s   # longer runs
//	go run ./test/bench -brokers 3      # cluster mode (cluster.go): one broker,
//	                                    # a 3-broker cluster R=3, failover over
//	                                    # 20 kills, NATS JetStream R3, ratios
//	go run ./test/bench -tier           # tiered storage (tier.go): reads from the
//	                                    # bucket, appends while uploading, repair
//
// Every append it counts was acknowledged, which the broker does only after
// the records were durable: a lone broker's in its journal, fdatasynced
// (the metadata log takes them later, many per checkpoint); a cluster's
// fdatasynced in an object, or for a small object carried in its commit,
// and committed in the metadata log.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/picomq/picomq/broker/client"
	"github.com/picomq/picomq/broker/httpapi/wire"
	"github.com/picomq/picomq/broker/stream"
	"github.com/picomq/picomq/test/brokerproc"
)

var (
	duration = flag.Duration("duration", 5*time.Second, "length of each timed scenario")
	dir      = flag.String("dir", "", "where the broker's data directory and the raw-disk probe go (default: a new temporary folder)")
	only     = flag.String("only", "", "run only the scenario with this name (cluster mode: only this load, e.g. 1KiB-64streams)")
	cpuprof  = flag.String("cpuprofile", "", "write the bench client's own CPU profile here (the broker's: run it with --pprof)")
)

func main() {
	flag.Parse()
	if *cpuprof != "" {
		f, err := os.Create(*cpuprof)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run() error {
	base := *dir
	if base == "" {
		d, err := os.MkdirTemp("", "picomq-bench")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		base = d
	}
	fmt.Printf("PicoMQ broker benchmark — %s, data in %s\n\n", time.Now().Format(time.RFC3339), base)

	if *tierOn {
		// Against a real S3 server: no raw-disk probe (the ratios are
		// against the same broker's own baselines).
		bin := filepath.Join(base, "broker")
		if err := brokerproc.BuildTo(bin); err != nil {
			return err
		}
		return tierBench(base, bin)
	}
	if *readersN > 0 {
		// Memory and wakes, not the disk: no raw-disk probe.
		bin := filepath.Join(base, "broker")
		if err := brokerproc.BuildTo(bin); err != nil {
			return err
		}
		return runReaders(base, bin)
	}
	raw, err := measureDisk(base)
	if err != nil {
		return err
	}
	fmt.Printf("raw disk: 4 KiB append+fdatasync p50 %s p99 %s; sequential write (fdatasync per MiB) %.0f MB/s for 256 MiB\n\n",
		ms(raw.syncP50), ms(raw.syncP99), raw.seqMBs)

	bin := filepath.Join(base, "broker")
	if err := brokerproc.BuildTo(bin); err != nil {
		return err
	}
	if *brokers > 1 {
		return runCompare(base, bin)
	}
	b, err := startBroker(bin, filepath.Join(base, "data"))
	if err != nil {
		return err
	}
	defer b.stop()
	c, err := client.New(b.URL, client.WithHTTPClient(&http.Client{Transport: &client.Transport{MaxIdlePerHost: 256}}))
	if err != nil {
		return err
	}
	ctx := context.Background()

	kib := make([]byte, 1024)
	one := []stream.RecordValue{{Payload: kib}}
	hundred := make([]stream.RecordValue, 100)
	for i := range hundred {
		hundred[i] = stream.RecordValue{Payload: kib}
	}
	type scenario struct {
		name            string
		streams, writer int
		batch           []stream.RecordValue
	}
	results := map[string]result{}
	before := scrape(b.URL)
	for _, s := range []scenario{
		{"single-writer", 1, 1, one},
		{"64-writers-1-stream", 1, 64, one},
		// Bandwidth: 64 writers (as for single records) keep 6.4 MiB in
		// flight, enough for the group commit to write objects of megabytes.
		{"batch-100x1KiB", 64, 64, hundred},
		// The same batches from 8 writers: at most 800 KiB in flight, so
		// bound by the round trip of each (two fsyncs), not by bandwidth.
		{"batch-100x1KiB-8w", 8, 8, hundred},
		{"streams-1", 1, 64, one},
		{"streams-100", 100, 64, one},
		{"streams-10000", 10000, 64, one},
	} {
		if *only != "" && *only != s.name {
			continue
		}
		names, err := createStreams(ctx, c, s.name, s.streams)
		if err != nil {
			return err
		}
		cpu0, t0 := sampleCPU(b.Pid()), time.Now()
		r, err := appendLoad(ctx, c, names, s.writer, s.batch, *duration)
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		use, cpuOK := sampleCPU(b.Pid()).since(cpu0, time.Since(t0))
		results[s.name] = r
		after := scrape(b.URL)
		fmt.Printf("%-22s %3d writers %5d streams: %9.0f appends/s %9.0f records/s %7.1f MB/s  p50 %s p99 %s p999 %s\n",
			s.name, s.writer, s.streams, r.appendsPerSec, r.recordsPerSec, r.mbPerSec, ms(r.p50), ms(r.p99), ms(r.p999))
		objects := after["picomq_flush_appends_count"] - before["picomq_flush_appends_count"]
		inline := after["picomq_inline_objects_total"] - before["picomq_inline_objects_total"]
		// Counted each maintenance pass: a scenario's late spills land in the next.
		spilled := after["picomq_held_objects_spilled_total"] - before["picomq_held_objects_spilled_total"]
		unzeroed := after["picomq_wal_segments_unzeroed_total"] - before["picomq_wal_segments_unzeroed_total"]
		fmt.Printf("%-22s   group commit: %.1f appends/object, %.0f%% of objects inline (no fsync of their own; held objects written to files meanwhile: %.0f), object write+sync %s, metadata commit %s; log segments without a zeroed spare: %.0f\n", "",
			after.delta(before, "picomq_flush_appends"), 100*inline/max(objects, 1), spilled, ms(time.Duration(after.delta(before, "picomq_object_fsync_seconds")*1e9)),
			ms(time.Duration(after.delta(before, "picomq_metadata_commit_seconds")*1e9)), unzeroed)
		// The journal's data path: a checkpoint takes many group commits,
		// so the log's commands per acknowledged append tend to zero.
		commands := after.sum("picomq_metadata_commands_total") - before.sum("picomq_metadata_commands_total")
		acked := after["picomq_appends_total"] - before["picomq_appends_total"]
		fmt.Printf("%-22s   metadata-log commands per 1,000 acknowledged appends: %.2f (%.0f commands, %.0f checkpoints)\n", "",
			1000*commands/max(acked, 1), commands, after["picomq_checkpoints_total"]-before["picomq_checkpoints_total"])
		if cpuOK {
			fmt.Printf("%-22s   %s\n", "", use.describe(r))
		}
		before = after
	}
	if *only == "" || *only == "catch-up" {
		mbs, err := catchUp(ctx, c, "streams-1-0")
		if err != nil {
			return err
		}
		results["catch-up"] = result{mbPerSec: mbs}
		fmt.Printf("%-22s %.1f MB/s\n", "catch-up read", mbs)
	}
	if *only == "" || *only == "live" {
		p50, p99, err := liveLatency(ctx, c)
		if err != nil {
			return err
		}
		fmt.Printf("%-22s p50 %s p99 %s (append acknowledged -> long-poll reader has it)\n", "append->live read", ms(p50), ms(p99))
	}

	fmt.Printf("\nratios (targets in brackets):\n")
	if r, ok := results["64-writers-1-stream"]; ok {
		fmt.Printf("  64 concurrent 1 KiB appends/s          %8.0f  [>= 20000]\n", r.appendsPerSec)
	}
	r64, ok64 := results["batch-100x1KiB"]
	r8, ok8 := results["batch-100x1KiB-8w"]
	if ok64 || ok8 {
		b.stop()
		if raw.plainMBs, err = measureSustained(base, *duration, false); err != nil {
			return err
		}
		if raw.sustainedMBs, err = measureSustained(base, *duration, true); err != nil {
			return err
		}
		fmt.Printf("  raw sequential write sustained for %s: %.0f MB/s (1 MiB + fdatasync, pages dropped behind; %.0f MB/s without dropping them)\n", *duration, raw.sustainedMBs, raw.plainMBs)
	}
	if ok64 {
		fmt.Printf("  batched MB/s / raw sequential MB/s     %8.2f  [>= 0.70]  (64 writers; against the writer that keeps its pages: %.2f; the 256 MiB burst: %.2f)\n", r64.mbPerSec/raw.sustainedMBs, r64.mbPerSec/raw.plainMBs, r64.mbPerSec/raw.seqMBs)
		perSec, err := groupCommitAlone(base, 64, wire.AppendRecords(nil, hundred), *duration)
		if err != nil {
			return err
		}
		alone := perSec * float64(len(hundred)*len(kib)) / 1e6
		fmt.Printf("  the group commit alone / raw           %8.2f  (no target: %.0f MB/s from 64 writers for the contract alone — frames fdatasynced in a new file, then a log fsync, over HTTP — with no broker behind it; the broker reached %.2f of it)\n", alone/raw.sustainedMBs, alone, r64.mbPerSec/alone)
	}
	if ok8 {
		fmt.Printf("  8 writers' batched MB/s / raw          %8.2f  (no target: bound by round trips, 800 KiB in flight)\n", r8.mbPerSec/raw.sustainedMBs)
	}
	if r, ok := results["single-writer"]; ok {
		fmt.Printf("  single-writer p99 / raw fdatasync p99  %8.2f  [<= 2.5]\n", float64(r.p99)/float64(raw.syncP99))
	}
	if a, ok := results["streams-10000"]; ok {
		if b, ok := results["streams-100"]; ok {
			fmt.Printf("  10,000-stream rate / 100-stream rate   %8.2f  [>= 0.50]\n", a.appendsPerSec/b.appendsPerSec)
		}
	}
	return nil
}

// metrics holds the sums and counts of the broker's histograms.
type metrics map[string]float64

// scrape reads the broker's /metrics (text format) for _sum, _count and
// _total.
func scrape(url string) metrics {
	return scrapeWith(http.DefaultClient, url, func(name string) bool {
		name, _, _ = strings.Cut(name, "{") // the metric's name, its labels aside
		return strings.HasSuffix(name, "_sum") || strings.HasSuffix(name, "_count") || strings.HasSuffix(name, "_total")
	})
}

// scrapeWith reads the broker's /metrics with hc for the samples whose
// name (labels included, as written) keep accepts.
func scrapeWith(hc *http.Client, url string, keep func(name string) bool) metrics {
	m := metrics{}
	resp, err := hc.Get(url + "/metrics")
	if err != nil {
		return m
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || strings.HasPrefix(f[0], "#") || !keep(f[0]) {
			continue
		}
		if v, err := strconv.ParseFloat(f[1], 64); err == nil {
			m[f[0]] = v
		}
	}
	return m
}

// delta is the mean of histogram h over the samples taken since before.
func (m metrics) delta(before metrics, h string) float64 {
	n := m[h+"_count"] - before[h+"_count"]
	if n <= 0 {
		return 0
	}
	return (m[h+"_sum"] - before[h+"_sum"]) / n
}

type result struct {
	appendsPerSec, recordsPerSec, mbPerSec float64
	p50, p99, p999                         time.Duration
}

func createStreams(ctx context.Context, c *client.Client, prefix string, n int) ([]string, error) {
	names := make([]string, n)
	var wg sync.WaitGroup
	errc := make(chan error, 1)
	sem := make(chan struct{}, 32)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%d", prefix, i)
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if _, _, err := c.CreateStream(ctx, names[i], client.StreamConfig{}); err != nil {
				select {
				case errc <- err:
				default:
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errc:
		return nil, err
	default:
	}
	return names, nil
}

// appendLoad runs writers appending batch in a closed loop for d, spreading
// them over the streams (writer w appends to stream (w + i*writers) mod n at
// its i-th append, so that every stream is active).
func appendLoad(ctx context.Context, c *client.Client, names []string, writers int, batch []stream.RecordValue, d time.Duration) (result, error) {
	streams := make([]*client.Stream, len(names))
	for i, n := range names {
		s, err := c.Stream(ctx, n)
		if err != nil {
			return result{}, err
		}
		streams[i] = s
	}
	var bytes int64
	for _, r := range batch {
		bytes += int64(len(r.Payload) + len(r.Key))
	}
	var count atomic.Int64
	lat := make([][]time.Duration, writers)
	errc := make(chan error, writers)
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(deadline); i++ {
				s := streams[(w+i*writers)%len(streams)]
				t0 := time.Now()
				if _, err := s.Append(ctx, batch); err != nil {
					errc <- err
					return
				}
				lat[w] = append(lat[w], time.Since(t0))
				count.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	select {
	case err := <-errc:
		return result{}, err
	default:
	}
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	n := float64(count.Load())
	return result{
		appendsPerSec: n / elapsed.Seconds(),
		recordsPerSec: n * float64(len(batch)) / elapsed.Seconds(),
		mbPerSec:      n * float64(bytes) / elapsed.Seconds() / 1e6,
		p50:           pct(all, 0.50), p99: pct(all, 0.99), p999: pct(all, 0.999),
	}, nil
}

// catchUp reads a stream from its start to its end in pages.
func catchUp(ctx context.Context, c *client.Client, name string) (float64, error) {
	s, err := c.Stream(ctx, name)
	if err != nil {
		return 0, err
	}
	b, err := s.Bounds(ctx, 0)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	var bytes int64
	for from := b.First; from < b.Next; {
		es, err := s.Read(ctx, 0, from, 10000)
		if err != nil {
			return 0, err
		}
		if len(es) == 0 {
			break
		}
		for _, e := range es {
			bytes += int64(len(e.Record.Payload) + len(e.Record.Key))
		}
		from = es[len(es)-1].Offset + 1
	}
	return float64(bytes) / time.Since(start).Seconds() / 1e6, nil
}

// liveLatency measures, 300 times, how long after an append is
// acknowledged a reader parked in a long-poll has the record.
func liveLatency(ctx context.Context, c *client.Client) (p50, p99 time.Duration, err error) {
	// A stream of its own each run: with -dir reused, one named "live"
	// already holds the offsets the reader waits for, and every read would
	// return at once (a negative latency).
	name := fmt.Sprintf("live-%d", time.Now().UnixNano())
	if _, _, err := c.CreateStream(ctx, name, client.StreamConfig{}); err != nil {
		return 0, 0, err
	}
	w, err := c.Stream(ctx, name)
	if err != nil {
		return 0, 0, err
	}
	rc, err := client.New(urlOf(c))
	if err != nil {
		return 0, 0, err
	}
	r, err := rc.Stream(ctx, name)
	if err != nil {
		return 0, 0, err
	}
	var lats []time.Duration
	for i := 0; i < 300; i++ {
		got := make(chan time.Time, 1)
		errc := make(chan error, 1)
		go func() {
			es, err := r.ReadWait(ctx, 0, stream.Offset(i), 1, 5*time.Second)
			if err != nil || len(es) == 0 {
				errc <- fmt.Errorf("live read %d: %v (%d entries)", i, err, len(es))
				return
			}
			got <- time.Now()
		}()
		time.Sleep(2 * time.Millisecond) // let the reader park
		t0 := time.Now()
		if _, err := w.Append(ctx, []stream.RecordValue{{Payload: []byte("tick")}}); err != nil {
			return 0, 0, err
		}
		select {
		case t := <-got:
			lats = append(lats, t.Sub(t0))
		case err := <-errc:
			return 0, 0, err
		}
	}
	sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
	return pct(lats, 0.5), pct(lats, 0.99), nil
}

var baseURL string

func urlOf(*client.Client) string { return baseURL }

// brokerProc is the broker the benchmark runs, with its output on
// standard error.
type brokerProc struct{ *brokerproc.Broker }

func startBroker(bin, dataDir string, flags ...string) (*brokerProc, error) {
	b, err := brokerproc.Run(brokerproc.Options{
		Binary: bin, DataDir: dataDir, ReadyTimeout: 30 * time.Second,
		Flags: append(append([]string{"--log-level", "warn"}, flags...), strings.Fields(*extraFlags)...),
	})
	if err != nil {
		return nil, err
	}
	baseURL = b.URL
	return &brokerProc{b}, nil
}

func (p *brokerProc) stop() { p.Stop(20 * time.Second) }

type disk struct {
	syncP50, syncP99 time.Duration
	seqMBs           float64 // a 256 MiB burst
	sustainedMBs     float64 // for as long as one scenario runs, pages dropped behind
	plainMBs         float64 // the same without dropping pages
}

// measureDisk times 2,000 appends of 4 KiB each followed by fdatasync, and
// 256 MiB written sequentially with an fdatasync per MiB, in dir.
func measureDisk(dir string) (disk, error) {
	f, err := os.CreateTemp(dir, "rawdisk")
	if err != nil {
		return disk{}, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 4096)
	var lats []time.Duration
	for i := 0; i < 2000; i++ {
		t0 := time.Now()
		if _, err := f.Write(buf); err != nil {
			return disk{}, err
		}
		if err := syscall.Fdatasync(int(f.Fd())); err != nil {
			return disk{}, err
		}
		lats = append(lats, time.Since(t0))
	}
	sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
	g, err := os.CreateTemp(dir, "rawseq")
	if err != nil {
		return disk{}, err
	}
	defer os.Remove(g.Name())
	defer g.Close()
	mib := make([]byte, 1<<20)
	t0 := time.Now()
	for i := 0; i < 256; i++ {
		if _, err := g.Write(mib); err != nil {
			return disk{}, err
		}
		if err := syscall.Fdatasync(int(g.Fd())); err != nil {
			return disk{}, err
		}
	}
	burst := 256 * (1 << 20) / time.Since(t0).Seconds() / 1e6
	return disk{syncP50: pct(lats, 0.5), syncP99: pct(lats, 0.99), seqMBs: burst}, nil
}

// measureSustained writes 1 MiB + fdatasync for d, as a scenario writes for
// d: a burst of 256 MiB, as measureDisk writes, may fit in caches between
// this machine and its disk. It runs after the scenarios: the gigabytes it
// writes would slow the disk for whatever ran next.
//
// With dropBehind, each MiB's pages leave the page cache once synced, as
// the broker drops its objects' (objstore's cached.go): every write then
// reuses freed pages. Without, every write lands on pages never used
// before, which on a virtual machine whose memory the host backs lazily
// costs more CPU than the copy and caps a plain writer well below the
// disk (here: 300-450 against 800-1,000 MB/s, the rate of O_DIRECT
// writes too) — a baseline the broker, which drops its pages, would beat.
func measureSustained(dir string, d time.Duration, dropBehind bool) (float64, error) {
	g, err := os.CreateTemp(dir, "rawsustained")
	if err != nil {
		return 0, err
	}
	defer os.Remove(g.Name())
	defer g.Close()
	mib := make([]byte, 1<<20)
	var n int64
	t0 := time.Now()
	for time.Since(t0) < d {
		if _, err := g.WriteAt(mib, n); err != nil {
			return 0, err
		}
		if err := syscall.Fdatasync(int(g.Fd())); err != nil {
			return 0, err
		}
		if dropBehind {
			if err := unix.Fadvise(int(g.Fd()), n, int64(len(mib)), unix.FADV_DONTNEED); err != nil {
				return 0, err
			}
		}
		n += int64(len(mib))
	}
	return float64(n) / time.Since(t0).Seconds() / 1e6, nil
}

func pct(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q * float64(len(sorted)-1))
	return sorted[i]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d)/1e6) }
