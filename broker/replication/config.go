package replication

import (
	"log/slog"
	"time"

	"github.com/picomq/picomq/broker/peer"
	"github.com/prometheus/client_golang/prometheus"
)

// Peer is a live member of the cluster as replication needs it: its member
// id (node and incarnation, the name replica sets record) and the
// configuration address of its peer port (what peer.Client.URL takes).
type Peer struct {
	ID   string
	Addr string
}

// Config configures New.
type Config struct {
	// Self is this member's id: the first of every replica set it writes,
	// never a copy's destination nor a fetch's source.
	Self string
	// R is the replication factor: how many members hold a durable copy
	// of every object file before Sync returns. 0 means min(3, live
	// members, this one included), decided for each object at Create; 1
	// means this member's copy alone.
	R int
	// Members returns the live members (this one may be listed; it is
	// skipped). A member that is down, draining or removed must not be
	// listed: copies go only to members that can take them now.
	Members func() []Peer
	// Client reaches the peers' peer API.
	Client *peer.Client
	// CopyTimeout bounds one copy to one peer, answer included (default
	// 30s). A copy that takes longer fails the Sync.
	CopyTimeout time.Duration
	// FetchTimeout bounds one frame fetch from one replica (default 10s).
	FetchTimeout time.Duration
	// Logger receives replication's logs (default: discard).
	Logger *slog.Logger
	// Metrics, when set, is where replication's measurements are
	// registered.
	Metrics prometheus.Registerer
}

// Defaults of Config.
const (
	DefaultCopyTimeout  = 30 * time.Second
	DefaultFetchTimeout = 10 * time.Second
	// DefaultR is the factor R = 0 stands for when enough members are live.
	DefaultR = 3
)

func (c Config) check() error {
	bad := func(field string, v any, rule string) error {
		return BadConfig.With("field", field, "value", v, "rule", rule)
	}
	switch {
	case c.Self == "":
		return bad("Self", `""`, "this member's id is required")
	case c.R < 0:
		return bad("R", c.R, "must not be negative (0: min(3, live members))")
	case c.Members == nil:
		return bad("Members", "nil", "the live members are required")
	case c.Client == nil && c.R != 1:
		return bad("Client", "nil", "a peer client is required unless R is 1")
	case c.CopyTimeout < 0:
		return bad("CopyTimeout", c.CopyTimeout, "must not be negative (0: the default)")
	case c.FetchTimeout < 0:
		return bad("FetchTimeout", c.FetchTimeout, "must not be negative (0: the default)")
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.CopyTimeout == 0 {
		c.CopyTimeout = DefaultCopyTimeout
	}
	if c.FetchTimeout == 0 {
		c.FetchTimeout = DefaultFetchTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// WriteQuorum is how many durable copies of an object of replication
// factor r a Sync needs: a majority (1 of 1, 2 of 2, 2 of 3, 3 of 5).
func WriteQuorum(r int) int { return r/2 + 1 }

// EffectiveR is the replication factor r stands for with live members
// live (this one included): r itself, or for 0, min(DefaultR, live) (at
// least 1).
func EffectiveR(r, live int) int {
	if r > 0 {
		return r
	}
	return max(1, min(DefaultR, live))
}

// Replication is one member's object replication: the placement wrapper
// (Placement), the fetcher of frames it holds no copy of (Fetcher), and
// the measurements both report.
type Replication struct {
	cfg Config
	m   *Metrics
}

// New checks cfg and returns the member's replication.
func New(cfg Config) (*Replication, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	return &Replication{cfg: cfg.withDefaults(), m: NewMetrics(cfg.Metrics)}, nil
}

// Metrics returns the measurements (the wiring sets UnderReplicated).
func (r *Replication) Metrics() *Metrics { return r.m }

// peers returns the live members other than this one, each once, by id.
func (r *Replication) peers() []Peer {
	all := r.cfg.Members()
	out := make([]Peer, 0, len(all))
	seen := make(map[string]bool, len(all))
	for _, p := range all {
		if p.ID == r.cfg.Self || p.ID == "" || seen[p.ID] {
			continue
		}
		seen[p.ID] = true
		out = append(out, p)
	}
	return out
}
