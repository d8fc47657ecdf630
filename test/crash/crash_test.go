// Package crash kills the real broker binary with SIGKILL while appenders
// run, restarts it, and checks that nothing acknowledged was lost or
// changed, that offsets have no gap, and that no idempotent append was
// written twice.
package crash

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/picomq/picomq/broker/client"
	"github.com/picomq/picomq/broker/stream"
	"github.com/picomq/picomq/test/brokerproc"
	"github.com/picomq/picomq/test/records"
)

var (
	trials = flag.Int("crash.trials", envInt("PICOMQ_CRASH_TRIALS", 20), "kill -9 trials (env PICOMQ_CRASH_TRIALS)")
	seed   = flag.Uint64("crash.seed", uint64(time.Now().UnixNano()), "random seed; printed, so that a failing run can be repeated")
	binary string
)

func envInt(k string, d int) int {
	if v, err := strconv.Atoi(os.Getenv(k)); err == nil && v > 0 {
		return v
	}
	return d
}

// skipShort is why the crash test skips under -short: it builds and runs
// the broker binary.
const skipShort = "process tier: skipped under -short (it builds the broker binary and kills it with SIGKILL); `make test` or go test without -short runs it"

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		// The unit tier: build nothing; the test skips, saying why.
		os.Exit(m.Run())
	}
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

// start runs the broker on dataDir, its log beside it, until ready.
func start(t *testing.T, dataDir string) *brokerproc.Broker {
	t.Helper()
	return brokerproc.Start(t, brokerproc.Options{
		Binary: binary, DataDir: dataDir, Log: filepath.Join(filepath.Dir(dataDir), "broker.log"),
		NodeID: "crash-0", Flags: []string{"--log-level", "warn"}, ReadyTimeout: 30 * time.Second,
	})
}

// ledger is what the appenders were told: every acknowledged record.
type ledger struct {
	mu    sync.Mutex
	plain map[string]loc // payload -> where it was acknowledged
	idem  map[string]loc
}

type loc struct {
	partition int
	offset    stream.Offset
}

// producer is an idempotent producer that survives the broker's death: it
// retries its unacknowledged append with the same sequence after a restart.
type producer struct {
	id      string
	epoch   int64
	next    int64
	pending string // payload of seq next, sent but not acknowledged
}

const (
	plainName  = "crash/plain"
	idemName   = "crash/idempotent"
	partitions = 3
)

func TestKill9KeepsEveryAcknowledgedRecord(t *testing.T) {
	if testing.Short() {
		t.Skip(skipShort)
	}
	t.Logf("seed %d, %d trials", *seed, *trials)
	r := rand.New(rand.NewPCG(*seed, 1))
	dataDir := filepath.Join(t.TempDir(), "data")
	led := &ledger{plain: map[string]loc{}, idem: map[string]loc{}}
	producers := make([]*producer, 4)
	for i := range producers {
		producers[i] = &producer{id: fmt.Sprintf("p%d", i), epoch: 1}
	}
	var counter int64
	var slowest time.Duration // the longest a restart took to be ready
	slowestTrial := 0
	var restarts []time.Duration
	defer func() {
		if len(restarts) == 0 {
			return
		}
		slices.Sort(restarts)
		t.Logf("restarts until ready: median %v, slowest %v (trial %d)",
			restarts[len(restarts)/2].Round(time.Millisecond), slowest.Round(time.Millisecond), slowestTrial)
	}()
	for trial := 0; trial < *trials; trial++ {
		began := time.Now()
		b := start(t, dataDir)
		d := time.Since(began)
		restarts = append(restarts, d)
		if d > slowest {
			slowest, slowestTrial = d, trial
		}
		ctx := context.Background()
		c, err := client.New(b.URL)
		if err != nil {
			b.Kill()
			t.Fatal(err)
		}
		plain, err := c.Open(ctx, plainName, client.StreamConfig{Policy: stream.PolicyValue{Partitions: partitions}})
		if err != nil {
			b.Kill()
			t.Fatalf("trial %d: open %s: %v", trial, plainName, err)
		}
		idem, err := c.Open(ctx, idemName, client.StreamConfig{})
		if err != nil {
			b.Kill()
			t.Fatalf("trial %d: open %s: %v", trial, idemName, err)
		}
		verify(t, trial, plain, idem, led)

		// Load, then SIGKILL at a random moment.
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					led.mu.Lock()
					counter++
					n := counter
					led.mu.Unlock()
					// Batches of 1..3 records, 100 B to 4 KiB each.
					batch := make([]stream.RecordValue, 1+n%3)
					payloads := make([]string, len(batch))
					for i := range batch {
						payloads[i] = fmt.Sprintf("w%d-n%d-i%d-%s", w, n, i, pad(int(100+(n*37+int64(i)*911)%4000)))
						batch[i] = stream.RecordValue{Payload: []byte(payloads[i])}
					}
					v, err := plain.Append(ctx, batch)
					if err != nil {
						return // the broker is gone
					}
					led.mu.Lock()
					for i, p := range payloads {
						led.plain[p] = loc{v.Partition, v.First + stream.Offset(i)}
					}
					led.mu.Unlock()
				}
			}()
		}
		for _, p := range producers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					if p.pending == "" {
						p.pending = fmt.Sprintf("%s-e%d-s%d", p.id, p.epoch, p.next)
					}
					res, err := idem.AppendWith(ctx, []stream.RecordValue{{Payload: []byte(p.pending)}},
						client.AppendOptions{Producer: &client.Producer{ID: p.id, Epoch: p.epoch, Seq: p.next}})
					if err != nil {
						return // unacknowledged: retried after the restart
					}
					led.mu.Lock()
					if !res.Duplicate {
						led.idem[p.pending] = loc{res.Partition, res.First}
					} else if _, ok := led.idem[p.pending]; !ok {
						// A repeat of an append that committed before the
						// crash but whose answer was lost: find it at check.
						led.idem[p.pending] = loc{partition: -1}
					}
					led.mu.Unlock()
					p.pending = ""
					p.next++
				}
			}()
		}
		// Not a wait for a condition: the moment of the SIGKILL is the
		// trial's random variable, 50 to 750ms into the load.
		time.Sleep(time.Duration(50+r.IntN(700)) * time.Millisecond)
		b.Kill()
		close(stop)
		wg.Wait()
		c.Close()
		if trial == 0 {
			// A torn object nobody committed: the restart must discard it.
			torn := filepath.Join(dataDir, "objects", "7fffffffffffffff.obj")
			if err := os.WriteFile(torn, []byte("PMQO\x01\x00\x00\x00"), 0o600); err != nil {
				t.Fatal(err)
			}
			defer func() {
				if _, err := os.Stat(torn); !os.IsNotExist(err) {
					t.Errorf("torn uncommitted object still present after restarts: %v", err)
				}
			}()
		}
	}
	b := start(t, dataDir)
	defer b.Kill()
	c, err := client.New(b.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	plain, err := c.Stream(context.Background(), plainName)
	if err != nil {
		t.Fatal(err)
	}
	idem, err := c.Stream(context.Background(), idemName)
	if err != nil {
		t.Fatal(err)
	}
	verify(t, *trials, plain, idem, led)
	t.Logf("%d acknowledged plain records, %d idempotent, all intact", len(led.plain), len(led.idem))
	if len(led.plain) == 0 || len(led.idem) == 0 {
		t.Fatal("no append was acknowledged: the test proved nothing")
	}
}

// verify reads both streams whole and checks them against the ledger.
func verify(t *testing.T, trial int, plain, idem *client.Stream, led *ledger) {
	t.Helper()
	led.mu.Lock()
	defer led.mu.Unlock()
	seen := map[string]loc{}
	for p := 0; p < partitions; p++ {
		for _, e := range readAll(t, plain, p) {
			s := string(e.Record.Payload)
			if prev, dup := seen[s]; dup {
				t.Fatalf("trial %d: payload %.20q stored twice (%v and %d/%d)", trial, s, prev, p, e.Offset)
			}
			seen[s] = loc{p, e.Offset}
		}
	}
	for s, want := range led.plain {
		if got, ok := seen[s]; !ok || got != want {
			t.Fatalf("trial %d: acknowledged record %.20q at %v: found %v (present %v)", trial, s, want, got, ok)
		}
	}
	seenIdem := map[string]loc{}
	for _, e := range readAll(t, idem, 0) {
		s := string(e.Record.Payload)
		if prev, dup := seenIdem[s]; dup {
			t.Fatalf("trial %d: idempotent append %q written twice (offsets %d and %d)", trial, s, prev.offset, e.Offset)
		}
		seenIdem[s] = loc{0, e.Offset}
	}
	for s, want := range led.idem {
		got, ok := seenIdem[s]
		if !ok || (want.partition >= 0 && got != want) {
			t.Fatalf("trial %d: acknowledged idempotent append %q at %v: found %v (present %v)", trial, s, want, got, ok)
		}
	}
}

// readAll reads a partition from its first offset to its end and checks
// that the offsets have no gap.
func readAll(t *testing.T, s *client.Stream, partition int) []stream.EntryValue {
	t.Helper()
	ctx := context.Background()
	b, err := s.Bounds(ctx, partition)
	if err != nil {
		t.Fatal(err)
	}
	if b.First != 0 {
		t.Fatalf("partition %d starts at %d: nothing trims these streams", partition, b.First)
	}
	out, err := records.ReadAll(ctx, s, partition)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func pad(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = 'a' + byte(i%26)
	}
	return string(b)
}
