package membership

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/picomq/picomq/broker/core"
	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/metalog"
)

// Recovery from a quorum lost for good: the explicit, never automatic,
// action of an administrator who knows that the missing voters will not
// come back (their machines or volumes are gone). Each surviving voter is
// asked, through POST RecoverPath, to restart with a new configuration made
// of the survivors only; the members left out are recorded as removed, so
// that one coming back with its old data is refused rather than let in to
// form a second majority with another stale member. Whatever the lost
// majority committed that no survivor holds is gone: that is the price, and
// why it is never done for anyone.
//
// The request is written to recoveryFile before the broker restarts; the
// broker opening its log with it applies raft.RecoverCluster, renames it to
// recoveryDoneFile, and once the removals have committed deletes that.

// RecoverPath is the admin API's route of the recovery.
const RecoverPath = "/v1/admin/recover"

const (
	recoveryFile     = "recover.json"
	recoveryDoneFile = "recover.done.json"
)

// RecoveryRequest is the body of POST RecoverPath: the node names of the
// surviving voters, the broker asked among them. Every one of them must be
// asked with the same list.
type RecoveryRequest struct {
	Voters []string `json:"voters"`
}

// Recovery is a recovery as planned and written to the data directory.
type Recovery struct {
	// Voters are the new configuration: the survivors, all voters.
	Voters []metalog.Server `json:"voters"`
	// Remove are the member ids recorded as removed once the log works
	// again: every member not among Voters.
	Remove []string `json:"remove,omitempty"`
	// RequestedAt is when it was asked for.
	RequestedAt time.Time `json:"requestedAt"`
}

var (
	// RecoveryRefused: the recovery is not for now — the log has a
	// leader, a peer reaches one, or the broker is not ready to say.
	RecoveryRefused = errs.Static(0x00_10_06_02, "RECOVERY_REFUSED",
		"The metadata log is not recovered: its quorum is not lost",
		"broker/membership: recovery replaces the log's configuration and is only for a quorum lost for good; the fields say what was found",
		409, 75)
	// BadRecovery: the recovery asked for names no voter set this broker
	// can form.
	BadRecovery = errs.Static(0x00_10_06_03, "BAD_RECOVERY",
		"The recovery request is not valid",
		"broker/membership: the voters must be the node names of current members, this broker among them, each once",
		400, 64)
)

// server is one server of the log's configuration with the node it stands
// for.
type server struct {
	metalog.Server
	Node string
}

// PlanRecovery makes the recovery of a cluster down to voters (node
// names), asked of node self: the new configuration holds the
// configuration's servers of those nodes, as voters; every other member on
// record (not removed) is to be removed. It refuses a list that is empty,
// repeats a node, leaves self out, or names a node with no server in the
// configuration.
func PlanRecovery(conf []server, members []core.Member, self string, voters []string, now time.Time) (Recovery, error) {
	if len(voters) == 0 {
		return Recovery{}, BadRecovery.With("reason", "no voters named")
	}
	seenNode := map[string]bool{}
	for _, v := range voters {
		if seenNode[v] {
			return Recovery{}, BadRecovery.With("reason", "a node is named twice", "node", v)
		}
		seenNode[v] = true
	}
	if !seenNode[self] {
		return Recovery{}, BadRecovery.With("reason", "this broker is not among the voters: ask only the survivors, each with the same list", "node", self, "voters", fmt.Sprint(voters))
	}
	rec := Recovery{RequestedAt: now.UTC()}
	keep := map[string]bool{}
	for _, v := range voters {
		var found []server
		for _, s := range conf {
			if s.Node == v {
				found = append(found, s)
			}
		}
		switch len(found) {
		case 0:
			return Recovery{}, BadRecovery.With("reason", "no server of the metadata log's configuration is this node", "node", v)
		case 1:
		default:
			return Recovery{}, BadRecovery.With("reason", "the configuration holds two incarnations of this node: wait for the old one's removal", "node", v)
		}
		rec.Voters = append(rec.Voters, metalog.Server{ID: found[0].ID, Address: found[0].Address, Suffrage: metalog.Voter})
		keep[found[0].ID] = true
	}
	for _, s := range conf {
		if !keep[s.ID] {
			rec.Remove = append(rec.Remove, s.ID)
		}
	}
	for _, m := range members {
		if m.Removed.IsZero() && !keep[m.ID] && !slices.Contains(rec.Remove, m.ID) {
			rec.Remove = append(rec.Remove, m.ID)
		}
	}
	sort.Strings(rec.Remove)
	return rec, nil
}

// loadRecovery reads dataDir's name, nil when there is none.
func loadRecovery(dataDir, name string) (*Recovery, error) {
	raw, err := os.ReadFile(filepath.Join(dataDir, name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("membership: read %s: %w", name, err)
	}
	var r Recovery
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("membership: %s is corrupt: %w", name, err)
	}
	return &r, nil
}

// Recover is the configuration the log is to be recovered with as it
// opens (metalog.Config.Recover), nil when no recovery was asked for.
func (m *Member) Recover() []metalog.Server {
	if m.recovery == nil {
		return nil
	}
	return m.recovery.Voters
}

// recovered runs once the log opened with the recovery: the request is
// done (a restart must not recover again, which would throw out members
// added since), what is left is recording the removals.
func (m *Member) recovered() error {
	if m.recovery == nil {
		return nil
	}
	if err := os.Rename(filepath.Join(m.cfg.DataDir, recoveryFile), filepath.Join(m.cfg.DataDir, recoveryDoneFile)); err != nil {
		return fmt.Errorf("membership: setting %s aside: %w", recoveryFile, err)
	}
	if err := syncDir(m.cfg.DataDir); err != nil {
		return err
	}
	m.log.Warn("metadata log recovered: the configuration is the survivors'; the others are being removed",
		"voters", fmt.Sprint(m.recovery.Voters), "removing", fmt.Sprint(m.recovery.Remove))
	m.mu.Lock()
	m.removing = m.recovery
	m.mu.Unlock()
	m.recovery = nil
	return nil
}

// recordRemovals records the members a recovery left out as removed; when
// they all are, the recovery is over.
func (m *Member) recordRemovals(ctx context.Context, b *core.Broker) {
	m.mu.Lock()
	rec := m.removing
	m.mu.Unlock()
	if rec == nil {
		return
	}
	for _, id := range rec.Remove {
		if err := b.RemoveMember(ctx, id); err != nil {
			m.log.Info("recording a member left out by the recovery as removed failed; retrying", "member", id, "err", err)
			return
		}
	}
	if err := os.Remove(filepath.Join(m.cfg.DataDir, recoveryDoneFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		m.log.Warn("removing the finished recovery's file failed", "err", err)
		return
	}
	m.mu.Lock()
	m.removing = nil
	m.mu.Unlock()
	m.log.Info("recovery finished: the members left out are removed", "removed", fmt.Sprint(rec.Remove))
}

// ServeRecover serves POST RecoverPath: it checks that the quorum is lost
// (no leader here, none reached by any peer that answers), plans the
// recovery, writes it and answers 202; then restart stops the broker so
// that it opens its log again with it. Every surviving voter must be asked
// with the same list before the cluster can elect a leader.
func (m *Member) ServeRecover(restart func()) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := m.broker()
		if b == nil {
			m.fail(w, r, RecoveryRefused.With("reason", "the broker is starting"))
			return
		}
		var req RecoveryRequest
		dec := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			m.fail(w, r, BadRecovery.With("reason", "the body is not {\"voters\":[node names]}: "+err.Error()))
			return
		}
		l := m.metaLog()
		if _, leader := l.Leader(); leader != "" || l.IsLeader() {
			m.fail(w, r, RecoveryRefused.With("reason", "the metadata log has a leader", "leader", leader))
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		conf, err := l.Configuration(ctx)
		if err != nil {
			m.fail(w, r, RecoveryRefused.Wrap(err, "reason", "the log's configuration cannot be read"))
			return
		}
		var servers []server
		members := map[string]core.Member{}
		for _, mem := range b.Members() {
			members[mem.ID] = mem
		}
		for _, s := range conf.Servers {
			n := members[s.ID].Node
			if n == "" {
				n = m.cfg.Addresses.NodeOf(s.Address)
			}
			servers = append(servers, server{Server: s, Node: n})
		}
		rec, err := PlanRecovery(servers, b.Members(), m.cfg.Node, req.Voters, time.Now())
		if err != nil {
			m.fail(w, r, err)
			return
		}
		// A broker merely cut off from a working majority sees no leader
		// either: whoever still answers must not know one.
		for _, s := range servers {
			if s.ID == m.id.ID() {
				continue
			}
			sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
			st, err := m.status(sctx, s.Address)
			scancel()
			if err == nil && st.Leader != "" {
				m.fail(w, r, RecoveryRefused.With("reason", "a peer reaches a leader: the quorum is not lost", "peer", s.Node, "leader", st.Leader))
				return
			}
		}
		raw, err := json.MarshalIndent(rec, "", "  ")
		if err != nil {
			m.fail(w, r, err)
			return
		}
		if err := writeDurably(m.cfg.DataDir, recoveryFile, append(raw, '\n')); err != nil {
			m.fail(w, r, fmt.Errorf("membership: writing %s: %w", recoveryFile, err))
			return
		}
		m.log.Warn("recovery of the metadata log asked for: restarting with the survivors as the configuration",
			"voters", fmt.Sprint(rec.Voters), "removing", fmt.Sprint(rec.Remove))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write(raw)
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		go restart()
	})
}
