// Package disk runs the real broker binary on a small tmpfs it mounts
// (as root), fills it with appends and checks the broker's behaviour on a
// full volume: appends refused cleanly with STORAGE_FULL before the volume
// is full, a delete freeing space and appends accepted again without a
// restart, a restart on the full volume that opens and serves reads, and
// every acknowledged record read back.
package disk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/picomq/picomq/broker/client"
	"github.com/picomq/picomq/broker/diskspace"
	"github.com/picomq/picomq/broker/node"
	"github.com/picomq/picomq/broker/stream"
	"github.com/picomq/picomq/test/brokerproc"
)

const skipShort = "process tier: skipped under -short (it builds the broker binary and mounts a tmpfs, as root); go test without -short runs it"

var binary string

func TestMain(m *testing.M) {
	if !testingShort() {
		bin, cleanup, err := brokerproc.Build()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		binary = bin
		code := m.Run()
		cleanup()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// testingShort reads -short before flag parsing in TestMain has run.
func testingShort() bool {
	for _, a := range os.Args[1:] {
		if a == "-test.short" || a == "-test.short=true" {
			return true
		}
	}
	return false
}

const (
	recordBytes = 4096
	writers     = 16
	volume      = "64m"
)

// mountTmpfs mounts a tmpfs of size under a new directory and unmounts it
// at the end; it skips the test, saying why, where it cannot.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs for the data volume; run as root (CI's process tier does)")
	}
	dir := filepath.Join(t.TempDir(), "vol")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0700", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs (%v: %s): this test needs a real small filesystem", err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// growTmpfs remounts the tmpfs at dir with a new size, as growing a volume.
func growTmpfs(t *testing.T, dir, size string) {
	t.Helper()
	if out, err := exec.Command("mount", "-o", "remount,size="+size, dir).CombinedOutput(); err != nil {
		t.Fatalf("remount %s with size %s: %v: %s", dir, size, err, out)
	}
}

// leaveFree grows a file named name on the volume at dir until the volume
// has at most free bytes free. It writes a MiB at a time and measures
// again, since a running broker takes and frees space meanwhile (its
// reserve file comes back once space returns); a write the volume refuses
// (ENOSPC) means it is fuller still, and ends the filling.
func leaveFree(t *testing.T, dir, name string, free int64) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	for {
		avail := freeBytes(t, dir)
		if avail <= free {
			return
		}
		if _, err := f.Write(chunk[:min(avail-free, int64(len(chunk)))]); errors.Is(err, syscall.ENOSPC) {
			return
		} else if err != nil {
			t.Fatalf("filling the volume: %v", err)
		}
	}
}

// freeBytes is the volume's free space as the broker measures it.
func freeBytes(t *testing.T, dir string) int64 {
	t.Helper()
	u, err := diskspace.Statfs(dir)
	if err != nil {
		t.Fatal(err)
	}
	return u.Free
}

// settle waits until the free space of the volume at dir has not changed
// for 5 s: the broker's own clean-up after the writers stopped is done.
func settle(t *testing.T, dir string) {
	t.Helper()
	last, since := freeBytes(t, dir), time.Now()
	for began := time.Now(); time.Since(since) < 5*time.Second; time.Sleep(250 * time.Millisecond) {
		if time.Since(began) > time.Minute {
			t.Fatalf("the volume's free space still changes a minute after the writers stopped (now %d bytes)", last)
		}
		if a := freeBytes(t, dir); a != last {
			last, since = a, time.Now()
		}
	}
}

// start runs the broker on dataDir with extra flags and waits until it
// answers /readyz.
func start(t *testing.T, dataDir, logPath string, flags ...string) *broker {
	t.Helper()
	return &broker{brokerproc.Start(t, brokerproc.Options{
		Binary: binary, DataDir: dataDir, Log: logPath, NodeID: "disk-0",
		Flags: append([]string{"--log-level", "info"}, flags...),
	})}
}

type broker struct{ *brokerproc.Broker }

// metric returns a metric's value line from /metrics ("" when absent).
func (b *broker) metric(t *testing.T, name string) string {
	t.Helper()
	resp, err := http.Get(b.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == name {
			return f[1]
		}
	}
	return ""
}

// metricInt is a metric's value as an integer (Prometheus writes large
// ones in exponent form).
func (b *broker) metricInt(t *testing.T, name string) int64 {
	t.Helper()
	v, err := strconv.ParseFloat(b.metric(t, name), 64)
	if err != nil {
		t.Fatalf("metric %s: %v", name, err)
	}
	return int64(v)
}

// ledger is every acknowledged record: stream -> key -> offset. A record's
// payload is its key padded to recordBytes, so the key alone checks it.
type ledger struct {
	dir   string // the data directory, for failure messages
	log   string // the broker's log
	mu    sync.Mutex
	acked map[string]map[string]stream.Offset
}

func payload(key string) []byte {
	p := make([]byte, recordBytes)
	n := copy(p, key)
	for i := n; i < len(p); i++ {
		p[i] = 'a' + byte(i%26)
	}
	return p
}

// fill runs 16 writers over the streams (writer w on streams[w%len]) until
// each has met its first refusal, and returns the refusals; it fails the
// test if they do not all stop within the deadline.
func fill(t *testing.T, c *client.Client, streams []string, led *ledger, round int) []error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	handles := make([]*client.Stream, len(streams))
	for i, name := range streams {
		s, err := c.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		handles[i] = s
	}
	errs := make([]error, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := handles[w%len(handles)]
			for n := 0; ; n++ {
				key := fmt.Sprintf("r%d-w%02d-n%08d|", round, w, n)
				v, err := s.Append(ctx, []stream.RecordValue{{Payload: payload(key)}})
				if err != nil {
					errs[w] = err
					return
				}
				led.mu.Lock()
				led.acked[s.Name()][key] = v.First
				led.mu.Unlock()
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * time.Minute):
		cancel() // kill the writers before failing
		<-done
		t.Fatalf("the writers were not all refused within 3 minutes (a 64 MiB volume)")
	}
	return errs
}

// readBack reads the stream whole and checks every acknowledged record is
// there, at its offset, intact; it returns how many it checked.
func readBack(t *testing.T, c *client.Client, name string, led *ledger) int {
	t.Helper()
	ctx := context.Background()
	s, err := c.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Bounds(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := map[stream.Offset]string{}
	for from := b.First; from < b.Next; {
		es, err := s.Read(ctx, 0, from, 500)
		if err != nil {
			t.Fatalf("read %s from %d: %v", name, from, err)
		}
		if len(es) == 0 {
			t.Fatalf("read %s at %d returned nothing below next %d", name, from, b.Next)
		}
		for _, e := range es {
			key, _, ok := strings.Cut(string(e.Record.Payload), "|")
			if !ok || string(e.Record.Payload) != string(payload(key+"|")) {
				t.Fatalf("%s offset %d: a record that is not one the writers sent (%.40q)", name, e.Offset, e.Record.Payload)
			}
			got[e.Offset] = key + "|"
			from = e.Offset + 1
		}
	}
	led.mu.Lock()
	defer led.mu.Unlock()
	for key, off := range led.acked[name] {
		if got[off] != key {
			t.Fatalf("%s: acknowledged record %q at offset %d is missing (found %q)", name, key, off, got[off])
		}
	}
	return len(led.acked[name])
}

// waitAppend polls an append until the broker accepts it, and returns how
// long that took.
func waitAppend(t *testing.T, c *client.Client, name string, led *ledger, expected func(error) bool) time.Duration {
	t.Helper()
	began := time.Now()
	ctx := context.Background()
	s, err := c.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	var last error
	for i := 0; time.Since(began) < 60*time.Second; i++ {
		key := fmt.Sprintf("after-%d|", i)
		v, err := s.Append(ctx, []stream.RecordValue{{Payload: payload(key)}})
		if err == nil {
			led.mu.Lock()
			led.acked[name][key] = v.First
			led.mu.Unlock()
			return time.Since(began)
		}
		if !expected(err) {
			t.Fatalf("an append after space was freed failed otherwise than expected: %v", err)
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	du, _ := exec.Command("sh", "-c", "du -ak "+filepath.Dir(filepath.Dir(led.dir))+" | sort -n | tail -30; df -k "+led.dir).CombinedOutput()
	t.Fatalf("appends still refused 60s after space was freed: %v\n%s\nthe broker's log ends:\n%s", last, du, brokerproc.LogTail(led.log))
	return 0
}

func isFull(err error) bool { return errors.Is(err, node.StorageFull) }

func TestFullVolumeRefusesThenRecovers(t *testing.T) {
	if testing.Short() {
		t.Skip(skipShort)
	}
	vol := mountTmpfs(t, volume)
	dataDir := filepath.Join(vol, "data")
	logPath := filepath.Join(t.TempDir(), "broker.log")
	b := start(t, dataDir, logPath)
	c, err := client.New(b.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	keep, drop := "disk/keep", "disk/drop"
	for _, name := range []string{keep, drop} {
		if _, err := c.Open(ctx, name, client.StreamConfig{}); err != nil {
			t.Fatal(err)
		}
	}
	led := &ledger{dir: dataDir, log: logPath, acked: map[string]map[string]stream.Offset{keep: {}, drop: {}}}

	refusals := fill(t, c, []string{keep, drop}, led, 1)
	for w, err := range refusals {
		if !errors.Is(err, node.StorageFull) {
			t.Fatalf("writer %d stopped on %v, not STORAGE_FULL; the broker's log ends:\n%s", w, err, brokerproc.LogTail(logPath))
		}
	}
	t.Logf("full: %d + %d records acknowledged; refusal: %v", len(led.acked[keep]), len(led.acked[drop]), refusals[0])
	// Once appends stop the broker frees some space of its own: merges
	// rewrite small objects and remove them 2 s later, a full volume's
	// snapshot compacts the metadata log. Let that end, then take what it
	// freed back, so the volume is still full for the create and until
	// the delete — with 4 MiB more to free than the headroom.
	settle(t, vol)
	headroom := b.metricInt(t, "picomq_disk_headroom_bytes")
	leaveFree(t, vol, "filler", headroom-4<<20)
	if _, _, err := c.CreateStream(ctx, "disk/new", client.StreamConfig{}); !errors.Is(err, node.StorageFull) {
		t.Errorf("a create on a full volume answered %v, want STORAGE_FULL", err)
	}
	if got := b.metric(t, "picomq_disk_appends_refused"); got != "1" {
		t.Errorf("picomq_disk_appends_refused = %q while appends are refused, want 1", got)
	}
	if !b.Ready() {
		t.Errorf("/readyz not ready on a full volume: reads and deletes are still served")
	}

	// A delete is a metadata commit: it must go through and free space.
	if err := c.DeleteStream(ctx, drop); err != nil {
		t.Fatalf("deleting a stream on a full volume: %v", err)
	}
	delete(led.acked, drop)
	recovered := waitAppend(t, c, keep, led, isFull)
	t.Logf("appends accepted again %v after the delete, no restart", recovered.Round(time.Millisecond))
	if got := b.metric(t, "picomq_disk_appends_refused"); got != "0" {
		t.Errorf("picomq_disk_appends_refused = %q once appends are accepted, want 0", got)
	}
	if !strings.Contains(brokerproc.LogTail(logPath), "space returned") {
		t.Errorf("no log line said space returned; the log ends:\n%s", brokerproc.LogTail(logPath))
	}

	// Full again, then a restart on the full volume.
	for w, err := range fill(t, c, []string{keep}, led, 2) {
		if !errors.Is(err, node.StorageFull) {
			t.Fatalf("round 2: writer %d stopped on %v, not STORAGE_FULL; the broker's log ends:\n%s", w, err, brokerproc.LogTail(logPath))
		}
	}
	b.Kill()
	// The writers stopped as free space fell just below the headroom. A
	// file beside the data directory takes all but 1 MiB, so the restart
	// meets a volume full by any measure.
	leaveFree(t, vol, "filler-before-restart", 1<<20)
	logged, err := os.Stat(logPath)
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	b = start(t, dataDir, logPath)
	t.Logf("restarted on the full volume, ready in %v", time.Since(began).Round(time.Millisecond))
	restartLog, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	if restartLog = restartLog[logged.Size():]; !strings.Contains(string(restartLog), "data volume almost full") {
		t.Errorf("the restart did not say it met a full volume; its log:\n%s", restartLog)
	}
	c2, err := client.New(b.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	n := readBack(t, c2, keep, led)
	t.Logf("every acknowledged record of %s read back after the restart: %d", keep, n)
	s, err := c2.Stream(ctx, keep)
	if err != nil {
		t.Fatal(err)
	}
	// The restart's clean-up may have freed space of its own: objects a
	// merge replaced, kept for readers' grace, and appends' objects never
	// committed go at start (up to 15 MiB here). Take it back so the
	// append meets a full volume too.
	leaveFree(t, vol, "filler-after-restart", 1<<20)
	if _, err := s.Append(ctx, []stream.RecordValue{{Payload: payload("restarted|")}}); !errors.Is(err, node.StorageFull) {
		t.Errorf("an append after the restart on the full volume answered %v, want STORAGE_FULL", err)
	}
}

// TestWithoutHeadroom fills the volume with --disk-headroom=0: appends
// fail however the volume makes them (ENOSPC), but every acknowledged one
// survives, read back after the volume is grown and the broker restarted.
func TestWithoutHeadroom(t *testing.T) {
	if testing.Short() {
		t.Skip(skipShort)
	}
	vol := mountTmpfs(t, volume)
	dataDir := filepath.Join(vol, "data")
	logPath := filepath.Join(t.TempDir(), "broker.log")
	b := start(t, dataDir, logPath, "--disk-headroom=0")
	c, err := client.New(b.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	name := "disk/all"
	if _, err := c.Open(context.Background(), name, client.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	led := &ledger{dir: dataDir, log: logPath, acked: map[string]map[string]stream.Offset{name: {}}}
	refusals := fill(t, c, []string{name}, led, 1)
	t.Logf("without headroom: %d records acknowledged; first refusal: %v", len(led.acked[name]), refusals[0])
	if len(led.acked[name]) == 0 {
		t.Fatal("nothing was acknowledged: the test proved nothing")
	}
	// Grown and restarted (with no headroom, the volume may be too full
	// for the log to make its next segment: growing it is the way out).
	growTmpfs(t, vol, "128m")
	b.Kill()
	b = start(t, dataDir, logPath, "--disk-headroom=0")
	c2, err := client.New(b.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	t.Logf("read back after growing the volume and a restart: %d of %d", readBack(t, c2, name, led), len(led.acked[name]))
}
