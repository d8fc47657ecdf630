// Package membership is how a clustered broker takes its place in its
// cluster's metadata log: its identity (node and incarnation), whether it
// bootstraps the cluster or joins it, the forwarding of its commands to the
// leader, and — on the leader — the membership changes the cluster needs:
// joiners added as non-voters and promoted once they have the log, an odd
// number of voters, wiped brokers' old incarnations and removed members
// taken out, leadership handed over before its holder leaves.
//
// It follows DESIGN.md's "Membership" and what reference/cluster.md
// records of Vault, Redpanda, Kafka and etcd: addresses are names, only
// ordinal 0 on an empty directory bootstraps and only once, a removed
// member never comes back as itself.
package membership

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/picomq/picomq/broker/core"
	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/metalog"
	"github.com/picomq/picomq/broker/node"
	"github.com/picomq/picomq/broker/peer"
)

// Config configures a member.
type Config struct {
	DataDir string
	// Node is this broker's node (pod) name, ending in -<ordinal>.
	Node string
	// ClusterID is the cluster id recorded by the operator ("" when none
	// is): with one, an empty directory joins, never bootstraps.
	ClusterID string
	// Addresses finds peers; Client calls their peer API.
	Addresses peer.Addresses
	Client    *peer.Client
	// Peers lists the nodes to ask when joining or checking membership: a
	// static list, or (nil) the StatefulSet's ordinals found by DNS.
	Peers []string
	// Interval is how often the leader's duties run (default 1s).
	Interval time.Duration
	Logger   *slog.Logger
}

// Member is this broker's membership.
type Member struct {
	cfg      Config
	id       Identity
	ordinal  int
	boot     bool
	log      *slog.Logger
	addrSelf string // the address the configuration knows this member by

	// recovery is the recovery the log opens with (nil: none asked);
	// removing the one whose removals are still to record.
	recovery *Recovery

	mu       sync.Mutex
	b        *core.Broker
	mlog     MetaLog
	last     Status
	removing *Recovery
}

// Prepare decides, before the broker opens its log, who this member is and
// whether it bootstraps a new cluster: only ordinal 0, on an empty
// directory, with no cluster id recorded and no peer knowing a cluster.
// Any other new member joins through a peer (it is added as a non-voter and
// given its number) before Prepare returns. A member the cluster removed
// for good is refused (MEMBER_REMOVED).
func Prepare(ctx context.Context, cfg Config) (*Member, error) {
	if cfg.Interval == 0 {
		cfg.Interval = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	ordinal, err := Ordinal(cfg.Node)
	if err != nil {
		return nil, fmt.Errorf("membership: node %q: %w", cfg.Node, err)
	}
	id, fresh, err := loadIdentity(cfg.DataDir, cfg.Node)
	if err != nil {
		return nil, err
	}
	m := &Member{cfg: cfg, id: id, ordinal: ordinal, log: cfg.Logger, addrSelf: cfg.Addresses.Advertise(cfg.Node)}
	if m.recovery, err = loadRecovery(cfg.DataDir, recoveryFile); err != nil {
		return nil, err
	}
	if m.removing, err = loadRecovery(cfg.DataDir, recoveryDoneFile); err != nil {
		return nil, err
	}
	switch {
	case m.recovery != nil:
		if fresh || !slices.ContainsFunc(m.recovery.Voters, func(s metalog.Server) bool { return s.ID == id.ID() }) {
			return nil, BadRecovery.With("reason", recoveryFile+" does not name this member among the voters", "member", id.ID(), "voters", fmt.Sprint(m.recovery.Voters))
		}
		// The peers left out are the lost majority: nothing to ask them.
	case id.Bootstrapping && !hasLog(cfg.DataDir):
		m.boot = true // a bootstrap that died before its log was written
	case fresh && ordinal == 0 && cfg.ClusterID == "":
		known, err := m.clusterKnown(ctx)
		if err != nil {
			return nil, err
		}
		if known == "" {
			m.id.Number, m.id.Bootstrapping, m.boot = 1, true, true
			cfg.Logger.Info("bootstrapping a new cluster", "member", m.id.ID())
			break
		}
		cfg.Logger.Info("a peer knows cluster "+known+": joining it instead of bootstrapping", "member", m.id.ID())
		fallthrough
	case fresh:
		if err := m.join(ctx); err != nil {
			return nil, err
		}
	default:
		if err := m.checkNotRemoved(ctx); err != nil {
			return nil, err
		}
	}
	if err := m.id.save(cfg.DataDir); err != nil {
		return nil, fmt.Errorf("membership: save %s: %w", identityFile, err)
	}
	return m, nil
}

// Identity is this member's identity.
func (m *Member) Identity() Identity { return m.id }

// Bootstrap reports whether the log is to be bootstrapped with this member
// as its only voter.
func (m *Member) Bootstrap() bool { return m.boot }

// Advertise is the address the configuration knows this member by.
func (m *Member) Advertise() string { return m.addrSelf }

// MetaLog is what membership needs of the metadata log: its leadership
// and configuration, the changes to them the leader makes, and the
// entries other members forward to it. (*metalog.Log is one; the cluster
// hands it over at Attach.)
type MetaLog interface {
	IsLeader() bool
	Leader() (addr, id string)
	Configuration(ctx context.Context) (metalog.Configuration, error)
	Barrier(ctx context.Context) error
	AcceptForwarded(ctx context.Context, entries [][]byte) ([]error, error)
	AddNonvoter(ctx context.Context, id, addr string) error
	Promote(ctx context.Context, id string) error
	DemoteVoter(ctx context.Context, id string) error
	RemoveServer(ctx context.Context, id string) error
	TransferLeadership(ctx context.Context, to string) error
}

// Attach gives the member its broker and the metadata log, once open,
// and serves the peer API's membership routes on srv. A member that
// bootstrapped the cluster names it and records itself first, before any
// peer can join: it is member 1, the number its object ids were given
// when the broker opened.
func (m *Member) Attach(ctx context.Context, b *core.Broker, l MetaLog, srv *peer.Server) error {
	m.mu.Lock()
	m.b, m.mlog = b, l
	m.mu.Unlock()
	if err := m.recovered(); err != nil {
		return err
	}
	if m.id.Bootstrapping {
		if _, err := m.leaderDuties(ctx, b, m.metaLog()); err != nil {
			return fmt.Errorf("membership: naming the new cluster: %w", err)
		}
		if err := m.recordSelf(ctx, b); err != nil {
			return fmt.Errorf("membership: recording the first member: %w", err)
		}
		if got := b.Members(); len(got) != 1 || got[0].Number != m.id.Number {
			return fmt.Errorf("membership: the first member was recorded as %+v, want number %d", got, m.id.Number)
		}
	}
	m.routes(srv)
	return nil
}

func (m *Member) broker() *core.Broker {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.b
}

// metaLog is the metadata log given at Attach (nil before).
func (m *Member) metaLog() MetaLog {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mlog
}

// Run does the member's duties until ctx ends: record itself, and on the
// leader name the cluster, admit and promote joiners, keep voters odd,
// take out wiped and removed members.
func (m *Member) Run(ctx context.Context) {
	t := time.NewTicker(m.cfg.Interval)
	defer t.Stop()
	for {
		m.tick(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (m *Member) tick(ctx context.Context) {
	b := m.broker()
	if b == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	l := m.metaLog()
	// One change at a time (raft applies them so), as many as are due: a
	// cluster forming promotes its joiners in one go.
	for step := 0; step < maxStepsPerTick && l.IsLeader(); step++ {
		changed, err := m.leaderDuties(ctx, b, l)
		if err != nil {
			m.log.Warn("membership change failed; retrying", "err", err)
		}
		if !changed || err != nil {
			break
		}
	}
	m.recordRemovals(ctx, b)
	if err := m.recordSelf(ctx, b); err != nil && !errors.Is(err, context.Canceled) {
		m.log.Debug("recording this member failed; retrying", "err", err)
	}
	m.refreshStatus(ctx, b)
}

// recordSelf keeps this member's record, and its identity file, current:
// a bootstrapped or adopted member records itself once the log can take
// commands; its number and cluster go to its identity.
func (m *Member) recordSelf(ctx context.Context, b *core.Broker) error {
	client, _ := m.cfg.Addresses.Client(m.cfg.Node)
	cur, ok := b.Member(m.id.ID())
	// The level too: a broker upgraded (or rolled back) in place records
	// what its build applies, which gates the commands the others propose.
	if !ok || cur.PeerAddr != m.addrSelf || cur.ClientAddr != client || cur.Level != core.Level {
		rec, err := b.RecordMember(ctx, core.Member{ID: m.id.ID(), Node: m.id.Node, Incarnation: m.id.Incarnation, PeerAddr: m.addrSelf, ClientAddr: client, Level: core.Level})
		if err != nil {
			return err
		}
		cur = rec
	}
	cluster := b.ClusterID()
	if cur.Number == m.id.Number && cluster == m.id.Cluster && !m.id.Bootstrapping {
		return nil
	}
	if cluster == "" {
		return nil // the leader names it first
	}
	m.id.Number, m.id.Cluster, m.id.Bootstrapping = cur.Number, cluster, false
	return m.id.save(m.cfg.DataDir)
}

// maxStepsPerTick bounds the membership changes one tick makes.
const maxStepsPerTick = 8

// leaderDuties runs on the leader: name the cluster, then plan and make
// the next membership change. It reports whether it changed anything.
func (m *Member) leaderDuties(ctx context.Context, b *core.Broker, l MetaLog) (bool, error) {
	if b.ClusterID() == "" {
		id := m.cfg.ClusterID
		if id == "" {
			id = newClusterID()
		}
		named, err := b.NameCluster(ctx, id)
		if err != nil {
			return false, err
		}
		m.log.Info("cluster named", "cluster", named)
	}
	conf, err := l.Configuration(ctx)
	if err != nil {
		return false, err
	}
	members := map[string]core.Member{}
	for _, mem := range b.Members() {
		members[mem.ID] = mem
	}
	applied := b.Status().AppliedIndex
	var servers []seen
	for _, s := range conf.Servers {
		mem, recorded := members[s.ID]
		nodeName := mem.Node
		if !recorded {
			nodeName = m.cfg.Addresses.NodeOf(s.Address)
		}
		ord, err := Ordinal(nodeName)
		if err != nil {
			ord = 1 << 20 // not a StatefulSet name: last
		}
		sv := seen{ID: s.ID, Node: nodeName, Ordinal: ord, Number: mem.Number, Voter: s.Suffrage == metalog.Voter,
			Removed: recorded && !mem.Removed.IsZero()}
		switch {
		case s.ID == string(m.id.ID()):
			sv.Answers = true
		case !sv.Removed:
			st, err := m.status(ctx, s.Address)
			sv.Answers = err == nil
			sv.CaughtUp = !sv.Voter && err == nil && st.AppliedIndex+caughtUpLag >= applied
		}
		servers = append(servers, sv)
	}
	steps := planSteps(servers, string(m.id.ID()))
	if len(steps) == 0 {
		return false, nil
	}
	s := steps[0]
	m.log.Info("membership change", "change", s.Kind.String(), "server", s.ID)
	switch s.Kind {
	case stepPromote:
		err = l.Promote(ctx, s.ID)
	case stepDemote:
		err = l.DemoteVoter(ctx, s.ID)
	case stepRemove:
		if err = l.RemoveServer(ctx, s.ID); err == nil {
			if mem, ok := members[s.ID]; ok && mem.Removed.IsZero() {
				err = b.RemoveMember(ctx, s.ID)
			}
		}
	case stepTransfer:
		err = l.TransferLeadership(ctx, s.ID)
	}
	return err == nil, err
}

// caughtUpLag is how many entries a non-voter may trail the leader by and
// count as caught up.
const caughtUpLag = 64

func newClusterID() string {
	return fmt.Sprintf("%08x-%04x", rand.Uint32(), rand.Uint32()&0xffff)
}

// seeds are the configuration addresses of the peers to ask.
func (m *Member) seeds() []string {
	var names []string
	if len(m.cfg.Peers) > 0 {
		names = m.cfg.Peers
	} else {
		// A StatefulSet's pods are <set>-0 .. <set>-(n-1): ask the lower
		// ordinals and a few above this one.
		set := m.cfg.Node[:strings.LastIndexByte(m.cfg.Node, '-')]
		for i := 0; i <= max(m.ordinal+3, 4); i++ {
			names = append(names, set+"-"+strconv.Itoa(i))
		}
	}
	var out []string
	for _, n := range names {
		if n != m.cfg.Node {
			out = append(out, m.cfg.Addresses.Advertise(n))
		}
	}
	return out
}

// clusterKnown asks the peers whether any belongs to a cluster already:
// the guard against a second bootstrap by ordinal 0 on a wiped directory
// when the operator has not recorded the cluster id (Redpanda re-formed a
// cluster that way: redpanda-data/redpanda#333). Peers that do not answer
// know nothing yet.
func (m *Member) clusterKnown(ctx context.Context) (string, error) {
	for _, addr := range m.seeds() {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := m.status(cctx, addr)
		cancel()
		if err == nil && (st.ClusterID != "" || st.HasLog) {
			if st.ClusterID == "" {
				return "(unnamed)", nil
			}
			return st.ClusterID, nil
		}
	}
	return "", ctx.Err()
}

// join asks the peers, in turn and until one answers, to add this member:
// the answer is its number and the cluster's id.
func (m *Member) join(ctx context.Context) error {
	client, _ := m.cfg.Addresses.Client(m.cfg.Node)
	req := joinRequest{ID: m.id.ID(), Node: m.id.Node, Incarnation: m.id.Incarnation, PeerAddr: m.addrSelf, ClientAddr: client, Level: core.Level}
	backoff := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		for _, addr := range m.seeds() {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			res, err := m.requestJoin(cctx, addr, req)
			cancel()
			if err == nil {
				m.id.Number, m.id.Cluster = res.Number, res.ClusterID
				m.log.Info("joined the cluster", "member", m.id.ID(), "number", res.Number, "cluster", res.ClusterID, "via", addr)
				return nil
			}
			if errors.Is(err, node.MemberRemoved) {
				return err
			}
			if attempt%20 == 1 {
				m.log.Info("waiting to join the cluster", "via", addr, "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("membership: joining the cluster: %w", context.Cause(ctx))
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 2*time.Second)
	}
}

// askPeersAboutSelf asks the peers in turn what they record of this
// member, each within 2 s, until see returns true; a peer that does not
// answer is skipped.
func (m *Member) askPeersAboutSelf(ctx context.Context, see func(addr string, info memberInfo) bool) {
	for _, addr := range m.seeds() {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		info, err := m.memberInfo(cctx, addr, m.id.ID())
		cancel()
		if err == nil && see(addr, info) {
			return
		}
	}
}

// checkNotRemoved refuses to start a member the cluster removed: it asks
// the peers about its id; silence (a whole cluster restarting) lets it on.
func (m *Member) checkNotRemoved(ctx context.Context) error {
	var refused error
	m.askPeersAboutSelf(ctx, func(addr string, info memberInfo) bool {
		if info.Removed {
			refused = node.MemberRemoved.With("member", m.id.ID(), "node", m.id.Node, "told_by", addr, "configured", info.Configured)
		}
		return info.Removed || info.Known
	})
	return refused
}

// OutOfConfiguration says whether a peer reports this member removed and
// no longer in the metadata log's configuration: the leader took it out,
// so that the voters no longer count it and its process may go. Peers
// that do not answer, or still list it, say nothing.
func (m *Member) OutOfConfiguration(ctx context.Context) bool {
	out := false
	m.askPeersAboutSelf(ctx, func(_ string, info memberInfo) bool {
		out = info.Known && info.Removed && !info.Configured
		return out
	})
	return out
}

// Status is the member's view of the cluster, for the admin API.
type Status struct {
	MemberID  string
	ClusterID string
	Voters    []string
	NonVoters []string
	Leader    string
	Number    int
}

// Status reports the member's latest view of the cluster.
func (m *Member) Status() Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.last
}

func (m *Member) refreshStatus(ctx context.Context, b *core.Broker) {
	st := Status{MemberID: m.id.ID(), ClusterID: b.ClusterID(), Leader: b.Status().Leader, Number: m.id.Number}
	if conf, err := m.metaLog().Configuration(ctx); err == nil {
		for _, s := range conf.Servers {
			if s.Suffrage == metalog.Voter {
				st.Voters = append(st.Voters, s.ID)
			} else {
				st.NonVoters = append(st.NonVoters, s.ID)
			}
		}
	}
	m.mu.Lock()
	m.last = st
	m.mu.Unlock()
}

// errNotLeader is the peer API's refusal of a leader's request on another
// node: the caller asks the leader instead.
var errNotLeader = errs.Static(0x00_10_06_01, "NOT_METADATA_LEADER",
	"This broker is not the metadata log's leader",
	"broker/membership: a request only the leader serves reached a follower; the fields name the leader when known",
	421, 75)

// Catchup waits until this member's state machine has applied every entry
// committed before the call: what the leader has applied once a barrier
// committed in its term (its read index). A slot taken is served only
// then, so that its reads hold the last owner's commits even right after
// a leadership change, and a request for a stream created through another
// broker a moment ago finds it here.
func (m *Member) Catchup(ctx context.Context) error {
	b := m.broker()
	if b == nil {
		return errNotLeader.With("reason", "starting")
	}
	st := b.Status()
	switch st.Leader {
	case "":
		// Nobody can say what was committed: what this member applied so
		// far may miss the last commits (a member just restarted has
		// applied nothing yet).
		return errNotLeader.With("reason", "no metadata leader known: cannot tell whether this member has caught up")
	case m.id.ID():
		// The leader has every committed entry; a barrier makes sure it
		// has applied them (a new leader applies its predecessors' last
		// commits once it commits in its own term).
		return m.metaLog().Barrier(ctx)
	}
	want, err := m.leaderReadIndex(ctx, st.Leader)
	if err != nil {
		return err
	}
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	for b.Status().AppliedIndex < want {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// leaderReadIndex asks the leader (leader: its member id, as this member
// sees it) for its read index, following once a "not the leader" answer
// naming another. A leader of an older build, without the route, is asked
// its applied index instead.
func (m *Member) leaderReadIndex(ctx context.Context, leader string) (uint64, error) {
	for hop := 0; ; hop++ {
		nodeName, _, _ := strings.Cut(leader, "~")
		addr := m.cfg.Addresses.Advertise(nodeName)
		var ri readIndex
		err := m.get(ctx, addr, readIndexPath, &ri)
		if err == nil {
			return ri.AppliedIndex, nil
		}
		var old *peer.HTTPError
		if errors.As(err, &old) && old.Code == http.StatusNotFound {
			ls, err := m.status(ctx, addr)
			return ls.AppliedIndex, err
		}
		if errors.Is(err, errNotLeader) && hop == 0 {
			if next, ok := errs.FieldOf(err, "leader"); ok {
				if id, _ := next.(string); id != "" && id != leader {
					leader = id
					continue
				}
			}
		}
		return 0, err
	}
}
