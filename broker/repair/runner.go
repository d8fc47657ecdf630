package repair

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/picomq/picomq/broker/node"
	"github.com/picomq/picomq/broker/replication"
)

// Cluster is what the runner reads and does, in the cluster's terms (the
// broker's wiring implements it over the core, the member Leases and
// replication).
type Cluster interface {
	// IsLeader: rounds run on the metadata leader only, so that one mover
	// plans at a time (a mover on a stale leader loses the commit).
	IsLeader() bool
	Objects() []Object
	// Members are the recorded members, removed ones included, with their
	// Live and Draining flags (DownFor is the runner's own).
	Members() []Member
	// R is the replication factor now.
	R() int
	// Copy makes a durable copy of object id on member to from member
	// from's file.
	Copy(ctx context.Context, id uint64, from, to string) error
	// Commit commits an object's new replica set if its set is still old.
	Commit(ctx context.Context, id uint64, old, new []string) error
	// CanMove is nil when replica sets may be moved now; else why not (a
	// member's build cannot apply the commit: an upgrade under way).
	CanMove() error
}

// Config configures a Runner.
type Config struct {
	// Period is the pause between two rounds (default 2s).
	Period time.Duration
	// DownGrace is how long a member may be down before its copies are
	// made elsewhere (default DefaultDownGrace).
	DownGrace time.Duration
	// Concurrency bounds the copies in flight (default 4); MaxPerRound the
	// moves one round plans (default 64).
	Concurrency, MaxPerRound int
	Logger                   *slog.Logger
	Metrics                  prometheus.Registerer
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// DefaultDownGrace is how long a member that is down keeps counting as a
// copy: a restart or a node's reboot is back well within it, and copying
// everything it held each time would cost more than the risk of waiting.
const DefaultDownGrace = 5 * time.Minute

// Runner moves copies, round after round, on the metadata leader.
type Runner struct {
	cfg Config
	cl  Cluster
	m   metrics

	mu        sync.Mutex
	downSince map[string]time.Time
	last      Summary
	held      string // why the last round moved nothing ("" when it could)
}

type metrics struct {
	copies, bytes prometheus.Counter
	failures      *prometheus.CounterVec
	pending       prometheus.Gauge
	pendingBytes  prometheus.Gauge
	stuck         prometheus.Gauge
}

// New returns a runner for cl.
func New(cfg Config, cl Cluster) *Runner {
	if cfg.Period <= 0 {
		cfg.Period = 2 * time.Second
	}
	if cfg.DownGrace <= 0 {
		cfg.DownGrace = DefaultDownGrace
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 4
	}
	if cfg.MaxPerRound <= 0 {
		cfg.MaxPerRound = 64
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	m := metrics{
		copies: prometheus.NewCounter(prometheus.CounterOpts{Name: "picomq_repair_copies_total",
			Help: "Copies of objects made by repairs and drains (on the metadata leader)."}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "picomq_repair_copy_bytes_total",
			Help: "Bytes of the copies repairs and drains made."}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "picomq_repair_failures_total",
			Help: "Moves of copies that did not complete, by stage: copy (the bytes), commit (the new replica set), or superseded (the object was merged or collected meanwhile)."}, []string{"stage"}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "picomq_repair_pending_objects",
			Help: "Objects whose copies must move: on a removed or draining member, or one down longer than the grace (as of the leader's last round)."}),
		pendingBytes: prometheus.NewGauge(prometheus.GaugeOpts{Name: "picomq_repair_pending_bytes",
			Help: "Size of the objects whose copies must move."}),
		stuck: prometheus.NewGauge(prometheus.GaugeOpts{Name: "picomq_repair_stuck_objects",
			Help: "Objects that need a copy no member can make now: no live holder, or no member to copy to."}),
	}
	if cfg.Metrics != nil {
		cfg.Metrics.MustRegister(m.copies, m.bytes, m.failures, m.pending, m.pendingBytes, m.stuck)
	}
	return &Runner{cfg: cfg, cl: cl, m: m, downSince: map[string]time.Time{}}
}

// Run runs rounds until ctx ends: one every Period, and the next at once
// while a round moved copies and more are pending (a drain of many
// objects is bounded by the copies, not by the period).
func (r *Runner) Run(ctx context.Context) {
	t := time.NewTicker(r.cfg.Period)
	defer t.Stop()
	more := false
	for {
		if !more {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
		more = false
		if ctx.Err() != nil {
			return
		}
		if !r.cl.IsLeader() {
			r.forget()
			continue
		}
		sum, moved, err := r.round(ctx)
		if err != nil && ctx.Err() == nil {
			r.cfg.Logger.Warn("repair round", "err", err)
		}
		more = moved > 0 && sum.Pending > sum.Stuck
	}
}

// forget drops what a leader tracks: a member's down time is counted
// again from when the next leader first sees it down, which only delays a
// repair, never hastens one.
func (r *Runner) forget() {
	r.mu.Lock()
	r.downSince = map[string]time.Time{}
	r.mu.Unlock()
}

// Summary is what the last round left to do.
func (r *Runner) Summary() Summary {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// Round plans and makes one round's moves, and returns what is left after
// them (as planned: a failed move stays pending).
func (r *Runner) Round(ctx context.Context) (Summary, error) {
	sum, _, err := r.round(ctx)
	return sum, err
}

// round is Round, also saying how many moves it made.
func (r *Runner) round(ctx context.Context) (Summary, int, error) {
	members := r.cl.Members()
	now := r.cfg.Now()
	r.mu.Lock()
	for i := range members {
		m := &members[i]
		if m.Live || m.Removed {
			delete(r.downSince, m.ID)
			continue
		}
		since, ok := r.downSince[m.ID]
		if !ok {
			since = now
			r.downSince[m.ID] = now
		}
		m.DownFor = now.Sub(since)
	}
	r.mu.Unlock()
	moves, sum := Plan(Input{Objects: r.cl.Objects(), Members: members, R: r.cl.R(), DownGrace: r.cfg.DownGrace, Max: r.cfg.MaxPerRound})
	if len(moves) > 0 && !r.mayMove() {
		moves = nil // nothing copied that could not be committed
	}

	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		done int
	)
	sem := make(chan struct{}, r.cfg.Concurrency)
	for _, mv := range moves {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			err := r.move(ctx, mv)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			done++
		})
	}
	wg.Wait()
	if done > 0 {
		// What is left, as the log now says.
		_, sum = Plan(Input{Objects: r.cl.Objects(), Members: members, R: r.cl.R(), DownGrace: r.cfg.DownGrace})
	}
	r.m.pending.Set(float64(sum.Pending))
	r.m.pendingBytes.Set(float64(sum.PendingBytes))
	r.m.stuck.Set(float64(sum.Stuck))
	r.mu.Lock()
	stuckChanged := sum.Stuck != r.last.Stuck
	r.last = sum
	r.mu.Unlock()
	if stuckChanged {
		// Said when the count changes, not every round: an operator
		// sees which objects wait for a member to come back, or for one
		// to copy to, and with which replica sets.
		if sum.Stuck > 0 {
			r.cfg.Logger.Warn("repair stuck: objects need a copy no member can make now (no live holder, or no live member to copy to)",
				"stuck", sum.Stuck, "examples", stuckExamples(sum.StuckExamples), "members", memberStates(members))
		} else {
			r.cfg.Logger.Info("repair no longer stuck")
		}
	}
	if len(moves) > 0 {
		r.cfg.Logger.Info("repair round", "moves", len(moves), "done", done, "failed", len(errs), "pending", sum.Pending, "stuck", sum.Stuck)
	}
	return sum, done, errors.Join(errs...)
}

// mayMove asks the cluster whether moves may be committed now, logging
// each change of the answer (not every round of a long upgrade).
func (r *Runner) mayMove() bool {
	why := ""
	if err := r.cl.CanMove(); err != nil {
		why = err.Error()
	}
	r.mu.Lock()
	changed := why != r.held
	r.held = why
	r.mu.Unlock()
	switch {
	case changed && why != "":
		r.cfg.Logger.Warn("repair held: copies are not moved until every member can commit the move", "err", why)
	case changed:
		r.cfg.Logger.Info("repair resumed: every member can commit moves of copies")
	}
	return why == ""
}

func (r *Runner) move(ctx context.Context, mv Move) error {
	if mv.To != "" {
		// A holder the set names may answer that it holds no copy (one
		// named by an older build for having been sent it): the next live
		// holder is the source, and the set stops naming the one without.
		var missing []string
		var err error
		for _, from := range append([]string{mv.From}, mv.Others...) {
			if err = r.cl.Copy(ctx, mv.Object, from, mv.To); !errors.Is(err, replication.ReplicaNotFound) {
				break
			}
			missing = append(missing, from)
		}
		if err != nil {
			r.m.failures.WithLabelValues("copy").Inc()
			return err
		}
		r.m.copies.Inc()
		r.m.bytes.Add(float64(mv.Size))
		if len(missing) > 0 {
			// The set as it was, less the names without a copy, plus the
			// new one: its departing copies stay until enough copies
			// that count exist (Plan), which the next round sees.
			r.cfg.Logger.Warn("repair: members named among an object's replicas hold no copy of it; the set no longer names them",
				"object", mv.Object, "missing", missing, "set", mv.Old)
			mv.New = append(slices.DeleteFunc(slices.Clone(mv.Old), func(id string) bool { return slices.Contains(missing, id) }), mv.To)
		}
	}
	if err := r.cl.Commit(ctx, mv.Object, mv.Old, mv.New); err != nil {
		// A refused commit leaves the copy an orphan on To, collected
		// after the orphan grace; the next round plans on the new set.
		if errors.Is(err, node.ReplicasChanged) {
			// A merge replaced the object, or it was collected: nothing
			// to repair any more.
			r.m.failures.WithLabelValues("superseded").Inc()
			return nil
		}
		r.m.failures.WithLabelValues("commit").Inc()
		return err
	}
	return nil
}

// stuckExamples formats stuck objects for a log line: id and replica set.
func stuckExamples(objs []Object) []string {
	out := make([]string, 0, len(objs))
	for _, o := range objs {
		out = append(out, fmt.Sprintf("%d:%v", o.ID, o.Replicas))
	}
	return out
}

// memberStates formats members for a log line: id and what the round saw.
func memberStates(members []Member) []string {
	out := make([]string, 0, len(members))
	for _, m := range members {
		state := "down"
		switch {
		case m.Removed:
			state = "removed"
		case m.Leaving:
			state = "leaving"
		case m.Draining:
			state = "draining"
		case m.Live:
			state = "live"
		}
		out = append(out, m.ID+"="+state)
	}
	return out
}
