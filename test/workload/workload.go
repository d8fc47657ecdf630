package workload

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/picomq/picomq/broker/client"
	"github.com/picomq/picomq/broker/stream"
)

// StreamSpec is one stream of the workload. Every stream is created with
// content type application/json and every payload is a JSON string, so
// that single-partition streams can be read as Durable Streams SSE too,
// record by record.
type StreamSpec struct {
	Name       string
	Partitions int // default 1
}

func (s StreamSpec) partitions() int { return max(1, s.Partitions) }

// Config is a workload.
type Config struct {
	// URLs returns every broker's client URL by index, at the moment of
	// asking: addresses move when a cluster restarts on new ports.
	URLs func() []string
	// Targets are the brokers requests go to, each request to one picked
	// at random (default: all). A broker that owns none of the streams
	// makes every request a proxied one.
	Targets []int
	Streams []StreamSpec

	Appenders  int // plain appenders, each over every partition (default 4)
	Producers  int // idempotent producers, each on one partition (default 2)
	Readers    int // catch-up and long-poll readers, each on one partition (default 2)
	SSEReaders int // SSE readers on the single-partition streams (default 1 if there is one)

	// Think is the mean pause between two requests of one worker
	// (default 5ms): it paces the load and leaves moments where no request
	// of a partition is in flight, where the linearizability check can
	// cut its history into short windows.
	Think          time.Duration
	RequestTimeout time.Duration // one request's deadline (default 3s)
	LongPollWait   time.Duration // wait= of long-polls (default 250ms)
	// LargeEvery makes every n-th plain append carry one 8 KiB record, so
	// that objects travel as files, not only inline (default 16; < 0: never).
	LargeEvery int
	Seed       uint64
}

func (c Config) withDefaults() Config {
	if c.Appenders == 0 {
		c.Appenders = 4
	}
	if c.Producers == 0 {
		c.Producers = 2
	}
	if c.Readers == 0 {
		c.Readers = 2
	}
	if c.SSEReaders == 0 && len(c.singles()) > 0 {
		c.SSEReaders = 1
	}
	if c.Think <= 0 {
		c.Think = 5 * time.Millisecond
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = 3 * time.Second
	}
	if c.LongPollWait <= 0 {
		c.LongPollWait = 250 * time.Millisecond
	}
	if c.LargeEvery == 0 {
		c.LargeEvery = 16
	}
	if len(c.Targets) == 0 {
		for i := range c.URLs() {
			c.Targets = append(c.Targets, i)
		}
	}
	return c
}

// keys lists every partition of every stream.
func (c Config) keys() []Key {
	var out []Key
	for _, s := range c.Streams {
		for p := 0; p < s.partitions(); p++ {
			out = append(out, Key{s.Name, p})
		}
	}
	return out
}

// singles lists the single-partition streams (the ones SSE reads).
func (c Config) singles() []string {
	var out []string
	for _, s := range c.Streams {
		if s.partitions() == 1 {
			out = append(out, s.Name)
		}
	}
	return out
}

// ContentType is the workload's streams' content type.
const ContentType = "application/json"

// Setup creates the streams through the targets, retrying for up to
// timeout while the cluster settles.
func Setup(ctx context.Context, cfg Config, timeout time.Duration) error {
	cfg = cfg.withDefaults()
	deadline := time.Now().Add(timeout)
	for _, s := range cfg.Streams {
		for try := 0; ; try++ {
			url := cfg.URLs()[cfg.Targets[try%len(cfg.Targets)]]
			err := create(ctx, url, s)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("creating %s through %s: %w", s.Name, url, err)
			}
			t := time.NewTimer(50 * time.Millisecond) // a retry's pace, not a condition
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
			}
		}
	}
	return nil
}

func create(ctx context.Context, url string, s StreamSpec) error {
	c, err := client.New(url)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = c.Open(ctx, s.Name, client.StreamConfig{ContentType: ContentType, Policy: stream.PolicyValue{Partitions: s.partitions()}})
	return err
}

// Run is a running workload.
type Run struct {
	cfg   Config
	h     *History
	pool  *pool
	stop  chan struct{}
	ctx   context.Context // ends SSE responses at Stop
	end   context.CancelFunc
	wg    sync.WaitGroup
	acked atomic.Int64
	once  sync.Once

	targets atomic.Pointer[[]int] // the brokers requests go to now
}

// Start starts the workers; the streams must exist (Setup).
func Start(ctx context.Context, cfg Config) *Run {
	cfg = cfg.withDefaults()
	r := &Run{cfg: cfg, h: NewHistory(), pool: newPool(), stop: make(chan struct{})}
	r.ctx, r.end = context.WithCancel(ctx)
	r.SetTargets(cfg.Targets)
	keys := cfg.keys()
	seed := cfg.Seed
	for i := 0; i < cfg.Appenders; i++ {
		r.spawn(func() { r.appender(fmt.Sprintf("a%d", i), keys, rand.New(rand.NewPCG(seed, uint64(100+i)))) })
	}
	for i := 0; i < cfg.Producers; i++ {
		k := keys[i%len(keys)]
		r.spawn(func() { r.producer(fmt.Sprintf("p%d", i), k, rand.New(rand.NewPCG(seed, uint64(200+i)))) })
	}
	for i := 0; i < cfg.Readers; i++ {
		k := keys[i%len(keys)]
		r.spawn(func() { r.reader(fmt.Sprintf("r%d", i), k, rand.New(rand.NewPCG(seed, uint64(300+i)))) })
	}
	if singles := cfg.singles(); len(singles) > 0 {
		for i := 0; i < cfg.SSEReaders; i++ {
			name := singles[i%len(singles)]
			r.spawn(func() { r.sse(fmt.Sprintf("s%d", i), name, rand.New(rand.NewPCG(seed, uint64(400+i)))) })
		}
	}
	return r
}

func (r *Run) spawn(f func()) {
	r.wg.Add(1)
	go func() { defer r.wg.Done(); f() }()
}

// History is the history being recorded.
func (r *Run) History() *History { return r.h }

// Acked is how many appends were acknowledged so far: a trial waits for
// it to grow to know the cluster serves again.
func (r *Run) Acked() int64 { return r.acked.Load() }

// Stop lets every worker finish its request in flight (SSE responses are
// ended), waits for them, and closes the history.
func (r *Run) Stop() *History {
	r.once.Do(func() {
		close(r.stop)
		r.end()
		r.wg.Wait()
		r.pool.close()
		r.h.Close()
	})
	return r.h
}

func (r *Run) stopped() bool {
	select {
	case <-r.stop:
		return true
	default:
		return false
	}
}

// think pauses a worker for a random time around Think: it paces the
// workload (not a wait for a condition). It reports false once stopped.
func (r *Run) think(rng *rand.Rand) bool { return r.pause(rng, r.cfg.Think) }

// backoff is a worker's pause after failures in a row: it doubles from
// Think up to 200ms, so that a broker that is down or refusing gets
// requests at a bounded rate and the history stays short.
func (r *Run) backoff(rng *rand.Rand, failures int) bool {
	d := r.cfg.Think << min(failures, 6)
	return r.pause(rng, min(d, 200*time.Millisecond))
}

func (r *Run) pause(rng *rand.Rand, mean time.Duration) bool {
	t := time.NewTimer(time.Duration(rng.Int64N(int64(2*mean) + 1)))
	defer t.Stop()
	select {
	case <-r.stop:
		return false
	case <-t.C:
		return true
	}
}

// SetTargets changes the brokers the next requests go to: a trial first
// lets the streams get owners, then sends everything elsewhere.
func (r *Run) SetTargets(brokers []int) {
	t := append([]int(nil), brokers...)
	r.targets.Store(&t)
}

// target picks the broker of the next request.
func (r *Run) target(rng *rand.Rand) (int, string) {
	t := *r.targets.Load()
	b := t[rng.IntN(len(t))]
	return b, r.cfg.URLs()[b]
}

// payload is a unique record: a JSON string naming its writer, so that
// SSE can read it as a JSON message and the checkers can tell every
// record from every other.
func payload(id string, pad int) string {
	if pad <= 0 {
		return `"` + id + `"`
	}
	return `"` + id + "." + strings.Repeat("x", pad) + `"`
}

// finish fills in an op's outcome from err.
func finish(o *Op, err error) {
	o.Outcome, o.Code = Classify(err)
	o.Err = errText(err)
}

func (r *Run) appender(name string, keys []Key, rng *rand.Rand) {
	failures := 0
	for n := 0; !r.stopped(); n++ {
		k := keys[rng.IntN(len(keys))]
		b, url := r.target(rng)
		recs := make([]stream.RecordValue, 1+rng.IntN(3))
		o := &Op{Worker: name, Kind: Append, Mode: Plain, Stream: k.Stream, Partition: k.Partition, Broker: b, First: -1}
		for i := range recs {
			pad := rng.IntN(64)
			if r.cfg.LargeEvery > 0 && n%r.cfg.LargeEvery == 0 && i == 0 {
				pad = 8 << 10
			}
			p := payload(fmt.Sprintf("%s-%d-%d", name, n, i), pad)
			recs[i] = stream.RecordValue{Payload: []byte(p)}
			o.Payloads = append(o.Payloads, p)
		}
		st, err := r.pool.stream(r.ctx, url, k.Stream)
		if err != nil {
			if !r.think(rng) {
				return
			}
			continue // nothing was sent
		}
		ctx, cancel := context.WithTimeout(context.Background(), r.cfg.RequestTimeout)
		o.Start = r.h.Now()
		res, err := st.AppendWith(ctx, recs, client.AppendOptions{Partition: client.Partition(k.Partition)})
		o.End = r.h.Now()
		cancel()
		finish(o, err)
		if err == nil {
			o.First = int64(res.First)
			if res.Partition != k.Partition {
				o.Err = fmt.Sprintf("acknowledged in partition %d, asked for %d", res.Partition, k.Partition)
			}
			r.acked.Add(1)
		}
		r.h.Add(o)
		if failures = next(failures, err); !r.backoff(rng, failures) {
			return
		}
	}
}

// next counts failures in a row.
func next(failures int, err error) int {
	if err == nil {
		return 0
	}
	return failures + 1
}

// producer is an idempotent producer on one partition: it retries an
// append whose answer it did not get (or that was refused) with the same
// sequence number and payload until acknowledged, so the broker must
// write it exactly once.
func (r *Run) producer(id string, k Key, rng *rand.Rand) {
	const epoch = 1
	seq := int64(0)
	failures := 0
	for !r.stopped() {
		b, url := r.target(rng)
		p := payload(fmt.Sprintf("%s-e%d-s%d", id, epoch, seq), rng.IntN(32))
		o := &Op{Worker: id, Kind: Append, Mode: Idempotent, Stream: k.Stream, Partition: k.Partition, Broker: b,
			First: -1, Producer: id, Epoch: epoch, Seq: seq}
		st, err := r.pool.stream(r.ctx, url, k.Stream)
		if err != nil {
			if !r.think(rng) {
				return
			}
			continue
		}
		// A retry sends the same payload: fix it by the sequence.
		p = r.pool.payloadFor(id, seq, p)
		o.Payloads = []string{p}
		ctx, cancel := context.WithTimeout(context.Background(), r.cfg.RequestTimeout)
		o.Start = r.h.Now()
		res, err := st.AppendWith(ctx, []stream.RecordValue{{Payload: []byte(p)}}, client.AppendOptions{
			Partition: client.Partition(k.Partition),
			Producer:  &client.Producer{ID: id, Epoch: epoch, Seq: seq},
		})
		o.End = r.h.Now()
		cancel()
		finish(o, err)
		if err == nil {
			o.Duplicate = res.Duplicate
			if !res.Duplicate {
				o.First = int64(res.First)
			}
			r.acked.Add(1)
			seq++
		}
		r.h.Add(o)
		if failures = next(failures, err); !r.backoff(rng, failures) {
			return
		}
	}
}

// reader reads one partition from offset 0 to its tail page by page,
// long-polls at the tail, and now and then starts again from 0, so that
// records are re-read long after they were written.
func (r *Run) reader(id string, k Key, rng *rand.Rand) {
	pos := int64(0)
	atTail := false
	failures := 0
	for !r.stopped() {
		b, url := r.target(rng)
		max := 1 + rng.IntN(32)
		mode := CatchUp
		if atTail {
			mode = LongPoll
		}
		o := &Op{Worker: id, Kind: Read, Mode: mode, Stream: k.Stream, Partition: k.Partition, Broker: b, From: pos, Max: max, First: -1}
		st, err := r.pool.stream(r.ctx, url, k.Stream)
		if err != nil {
			if !r.think(rng) {
				return
			}
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), r.cfg.RequestTimeout+r.cfg.LongPollWait)
		o.Start = r.h.Now()
		var es []stream.EntryValue
		if mode == LongPoll {
			es, err = st.ReadWait(ctx, k.Partition, stream.Offset(pos), max, r.cfg.LongPollWait)
		} else {
			es, err = st.Read(ctx, k.Partition, stream.Offset(pos), max)
		}
		o.End = r.h.Now()
		cancel()
		finish(o, err)
		if errors.Is(err, stream.OffsetAhead) {
			o.Ahead = true
		}
		for _, e := range es {
			o.Records = append(o.Records, Record{Offset: int64(e.Offset), Payload: string(e.Record.Payload)})
		}
		r.h.Add(o)
		if err == nil {
			if n := len(es); n > 0 {
				pos = int64(es[n-1].Offset) + 1
			}
			atTail = len(es) < max
			if atTail && rng.IntN(8) == 0 {
				pos, atTail = 0, false // read it all again
			}
		}
		if o.Ahead {
			err = nil // an answer, not a failure: no backoff
		}
		if failures = next(failures, err); !r.backoff(rng, failures) {
			return
		}
	}
}

// pool shares clients and stream handles among the workers, by URL.
type pool struct {
	mu       sync.Mutex
	clients  map[string]*client.Client
	streams  map[[2]string]*client.Stream
	payloads map[string]string // producer/seq -> the payload it sends
}

func newPool() *pool {
	return &pool{clients: map[string]*client.Client{}, streams: map[[2]string]*client.Stream{}, payloads: map[string]string{}}
}

// stream returns a handle on name through the broker at url. The first
// call per URL asks the broker for the stream's partition count.
func (p *pool) stream(ctx context.Context, url, name string) (*client.Stream, error) {
	p.mu.Lock()
	if s := p.streams[[2]string{url, name}]; s != nil {
		p.mu.Unlock()
		return s, nil
	}
	c := p.clients[url]
	if c == nil {
		var err error
		// One request per append: the history's times are each append's
		// own, not a shared batch's.
		if c, err = client.New(url, client.WithAppendsInFlight(0)); err != nil {
			p.mu.Unlock()
			return nil, err
		}
		p.clients[url] = c
	}
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	s, err := c.Stream(ctx, name)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.streams[[2]string{url, name}] = s
	p.mu.Unlock()
	return s, nil
}

// payloadFor keeps the first payload chosen for a producer's sequence.
func (p *pool) payloadFor(id string, seq int64, fresh string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := fmt.Sprintf("%s/%d", id, seq)
	if old, ok := p.payloads[k]; ok {
		return old
	}
	p.payloads[k] = fresh
	return fresh
}

func (p *pool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.clients {
		c.Close()
	}
}
