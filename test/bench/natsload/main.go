// Command natsload is the bench's NATS JetStream reference on PicoMQ's own
// load shape: W writers over S streams (writer w publishes to stream
// w mod S), each publish synchronous — it waits for its PubAck, which a
// JetStream stream leader sends once a quorum of the stream's R replicas
// has stored it —, closed loop, for a duration. `nats bench js pub sync`
// measures one stream only, so one Raft group whose leader batches every
// writer's messages; over S streams NATS runs S Raft groups, as PicoMQ
// runs S streams.
//
// It lives in a module of its own so that the NATS client never becomes a
// dependency of PicoMQ's module; test/bench builds it (natsload.go there).
// It prints "load" on a line of its own when the timed load begins, then
// one JSON object with the figures.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// result is what the bench reads.
type result struct {
	Acks       int64   `json:"acks"`
	Errors     int64   `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
	Seconds    float64 `json:"seconds"`
	P50        int64   `json:"p50_ns"`
	P99        int64   `json:"p99_ns"`
	Replicas   int     `json:"replicas"` // of every stream, after the run (0: they differ)
	Storage    string  `json:"storage"`
}

func main() {
	servers := flag.String("servers", "", "comma-separated nats:// URLs; writer w connects to the (w mod n)-th first")
	streams := flag.Int("streams", 64, "streams, one subject each")
	writers := flag.Int("writers", 64, "closed-loop writers, one connection each")
	size := flag.Int("size", 1024, "message payload bytes")
	replicas := flag.Int("replicas", 3, "replicas of each stream")
	duration := flag.Duration("duration", 5*time.Second, "how long the writers publish")
	flag.Parse()
	if err := run(strings.Split(*servers, ","), *streams, *writers, *size, *replicas, *duration); err != nil {
		fmt.Fprintln(os.Stderr, "natsload:", err)
		os.Exit(1)
	}
}

func run(servers []string, streams, writers, size, replicas int, d time.Duration) error {
	if len(servers) == 0 || servers[0] == "" || streams < 1 || writers < 1 {
		return errors.New("want -servers, -streams ≥ 1 and -writers ≥ 1")
	}
	ctx := context.Background()
	conns := make([]*nats.Conn, writers)
	defer func() {
		for _, nc := range conns {
			if nc != nil {
				nc.Close()
			}
		}
	}()
	for w := range writers {
		// Rotated so that the writers spread over the servers evenly.
		k := w % len(servers)
		order := append(slices.Clone(servers[k:]), servers[:k]...)
		nc, err := nats.Connect(strings.Join(order, ","), nats.DontRandomize())
		if err != nil {
			return fmt.Errorf("connect %s: %w", order[0], err)
		}
		conns[w] = nc
	}
	js, err := jetstream.New(conns[0])
	if err != nil {
		return err
	}
	for s := range streams {
		cfg := jetstream.StreamConfig{
			Name: fmt.Sprintf("load-%d", s), Subjects: []string{fmt.Sprintf("load.%d", s)},
			// 64 MiB: far more than one stream takes in a bench load (8 s
			// of 10k/s over 64 streams is ~1.3 MB each), and 64 of them
			// fit JetStream's default file-store limit (1 GiB each did not).
			Storage: jetstream.FileStorage, Replicas: replicas, MaxBytes: 64 << 20, Discard: jetstream.DiscardOld,
		}
		if err := retry(ctx, 60*time.Second, func(ctx context.Context) error {
			_, err := js.CreateOrUpdateStream(ctx, cfg)
			return err
		}); err != nil {
			return fmt.Errorf("create stream %s: %w", cfg.Name, err)
		}
	}
	payload := make([]byte, size)
	jss := make([]jetstream.JetStream, writers)
	for w := range writers {
		if jss[w], err = jetstream.New(conns[w]); err != nil {
			return err
		}
	}
	// Every stream answers once (its Raft group has a leader) before the
	// clock starts.
	for s := range streams {
		subj := fmt.Sprintf("load.%d", s)
		if err := retry(ctx, 60*time.Second, func(ctx context.Context) error {
			_, err := js.Publish(ctx, subj, payload)
			return err
		}); err != nil {
			return fmt.Errorf("first publish to %s: %w", subj, err)
		}
	}

	fmt.Println("load") // the bench samples the servers' CPU from here
	var acks, errs atomic.Int64
	var firstErr atomic.Value
	lat := make([][]time.Duration, writers)
	stop := make(chan struct{})
	start := time.Now()
	time.AfterFunc(d, func() { close(stop) })
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			subj := fmt.Sprintf("load.%d", w%streams)
			for {
				select {
				case <-stop:
					return
				default:
				}
				pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				t0 := time.Now()
				_, err := jss[w].Publish(pctx, subj, payload)
				took := time.Since(t0)
				cancel()
				if err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					time.Sleep(10 * time.Millisecond)
					continue
				}
				acks.Add(1)
				lat[w] = append(lat[w], took)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)

	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	slices.Sort(all)
	r := result{Acks: acks.Load(), Errors: errs.Load(), Seconds: elapsed.Seconds(), P50: int64(pct(all, 0.50)), P99: int64(pct(all, 0.99))}
	if e, ok := firstErr.Load().(string); ok {
		r.FirstError = e
	}
	for s := range streams {
		st, err := js.Stream(ctx, fmt.Sprintf("load-%d", s))
		if err != nil {
			return err
		}
		c := st.CachedInfo().Config
		switch {
		case s == 0:
			r.Replicas, r.Storage = c.Replicas, c.Storage.String()
		case c.Replicas != r.Replicas || c.Storage.String() != r.Storage:
			r.Replicas, r.Storage = 0, "mixed"
		}
	}
	return json.NewEncoder(os.Stdout).Encode(r)
}

// retry calls f until it succeeds or total has passed.
func retry(ctx context.Context, total time.Duration, f func(context.Context) error) error {
	deadline := time.Now().Add(total)
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := f(cctx)
		cancel()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func pct(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(p*float64(len(sorted))))]
}
