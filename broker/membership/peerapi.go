package membership

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/picomq/picomq/broker/core"
	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/frontend"
	"github.com/picomq/picomq/broker/metalog"
	"github.com/picomq/picomq/broker/node"
	"github.com/picomq/picomq/broker/stream"
)

// The membership routes of the peer API.
const (
	forwardPath = "/peer/v1/log/forward"
	joinPath    = "/peer/v1/join"
	statusPath  = "/peer/v1/status"
	// readIndexPath is the leader's read index: what it has applied once
	// a barrier committed in its term (see Catchup).
	readIndexPath = "/peer/v1/read-index"
	membersPath   = "/peer/v1/members/"
)

type joinRequest struct {
	ID          string `json:"id"`
	Node        string `json:"node"`
	Incarnation string `json:"incarnation"`
	PeerAddr    string `json:"peerAddr"`
	ClientAddr  string `json:"clientAddr"`
	// Level is the command level the joiner's build applies (absent from
	// a build before levels: the base level).
	Level int `json:"level,omitempty"`
}

type joinResponse struct {
	Number    int    `json:"number"`
	ClusterID string `json:"clusterId"`
}

// statusInfo is a member's answer to GET statusPath.
type statusInfo struct {
	MemberID     string `json:"memberId"`
	Node         string `json:"node"`
	ClusterID    string `json:"clusterId"`
	RaftState    string `json:"raftState"`
	Leader       string `json:"leader"`
	AppliedIndex uint64 `json:"appliedIndex"`
	LastIndex    uint64 `json:"lastIndex"`
	HasLog       bool   `json:"hasLog"`
}

type memberInfo struct {
	Known   bool `json:"known"`
	Removed bool `json:"removed"`
	// Configured: the metadata log's configuration still lists the id (a
	// removed member stays there until the leader may take it out).
	Configured bool `json:"configured,omitempty"`
}

// maxForwardBody bounds a forwarded batch (entries may carry objects'
// frames: up to 256 entries of up to 1 MiB).
const maxForwardBody = 512 << 20

func (m *Member) routes(srv interface {
	Handle(string, http.Handler)
}) {
	srv.Handle("POST "+forwardPath, http.HandlerFunc(m.serveForward))
	srv.Handle("POST "+joinPath, http.HandlerFunc(m.serveJoin))
	srv.Handle("GET "+statusPath, http.HandlerFunc(m.serveStatus))
	srv.Handle("GET "+readIndexPath, http.HandlerFunc(m.serveReadIndex))
	srv.Handle("GET "+membersPath+"{id}", http.HandlerFunc(m.serveMember))
}

func (m *Member) fail(w http.ResponseWriter, r *http.Request, err error) {
	coded := frontend.Coded(err, "peer"+r.URL.Path)
	frontend.WriteProblem(w, r, m.log, coded, errs.HTTPStatus(coded))
}

func writeJSON(w http.ResponseWriter, v any) {
	body, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
}

// notLeader is the refusal a follower answers a leader's request with.
func (m *Member) notLeader(b *core.Broker) error {
	return errNotLeader.With("leader", b.Status().Leader)
}

func (m *Member) serveForward(w http.ResponseWriter, r *http.Request) {
	b := m.broker()
	if b == nil || !m.metaLog().IsLeader() {
		m.fail(w, r, errNotLeader.With("reason", "not the leader"))
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxForwardBody))
	if err != nil {
		m.fail(w, r, err)
		return
	}
	entries, err := decodeEntries(body)
	if err != nil {
		m.fail(w, r, stream.StreamMisconfigured.With("field", "body", "reason", err.Error()))
		return
	}
	errsOut, err := m.metaLog().AcceptForwarded(r.Context(), entries)
	if errors.Is(err, metalog.ErrNotLeader) {
		m.fail(w, r, m.notLeader(b))
		return
	}
	if err != nil {
		m.fail(w, r, err)
		return
	}
	out := struct {
		Errors []string `json:"errors"`
	}{Errors: make([]string, len(errsOut))}
	for i, e := range errsOut {
		if e != nil {
			out.Errors[i] = e.Error()
		}
	}
	writeJSON(w, out)
}

// Forward is the metadata log's Forwarder over the peer API.
func (m *Member) Forward(ctx context.Context, leaderAddr, leaderID string, entries [][]byte) ([]error, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, m.cfg.Client.URL(leaderAddr, forwardPath), bytes.NewReader(encodeEntries(entries)))
	if err != nil {
		return nil, err
	}
	resp, err := m.cfg.Client.Do(req)
	if errors.Is(err, errNotLeader) {
		return nil, fmt.Errorf("%w: %s answered: %w", metalog.ErrNotLeader, leaderID, err)
	}
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out struct {
		Errors []string `json:"errors"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, err
	}
	errsOut := make([]error, len(out.Errors))
	for i, e := range out.Errors {
		if e != "" {
			errsOut[i] = errors.New(e)
		}
	}
	return errsOut, nil
}

func encodeEntries(entries [][]byte) []byte {
	n := binary.MaxVarintLen64
	for _, e := range entries {
		n += binary.MaxVarintLen64 + len(e)
	}
	b := make([]byte, 0, n)
	b = binary.AppendUvarint(b, uint64(len(entries)))
	for _, e := range entries {
		b = binary.AppendUvarint(b, uint64(len(e)))
		b = append(b, e...)
	}
	return b
}

func decodeEntries(b []byte) ([][]byte, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return nil, errors.New("bad entry count")
	}
	b = b[k:]
	out := make([][]byte, 0, n)
	for range n {
		l, k := binary.Uvarint(b)
		if k <= 0 || l > uint64(len(b)-k) {
			return nil, errors.New("bad entry length")
		}
		out = append(out, b[k:k+int(l)])
		b = b[k+int(l):]
	}
	if len(b) != 0 {
		return nil, errors.New("trailing bytes")
	}
	return out, nil
}

func (m *Member) serveJoin(w http.ResponseWriter, r *http.Request) {
	b := m.broker()
	if b == nil || !m.metaLog().IsLeader() {
		if b == nil {
			m.fail(w, r, errNotLeader.With("reason", "starting"))
		} else {
			m.fail(w, r, m.notLeader(b))
		}
		return
	}
	var req joinRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&req); err != nil || req.ID == "" || req.Node == "" || req.PeerAddr == "" {
		m.fail(w, r, stream.StreamMisconfigured.With("field", "body", "reason", "a join names the member's id, node and peer address"))
		return
	}
	if cur, ok := b.Member(req.ID); ok && !cur.Removed.IsZero() {
		m.log.Warn("a removed member asked to join again: refused", "member", req.ID)
		m.fail(w, r, node.MemberRemoved.With("member", req.ID, "node", req.Node))
		return
	}
	rec, err := b.RecordMember(r.Context(), core.Member{ID: req.ID, Node: req.Node, Incarnation: req.Incarnation, PeerAddr: req.PeerAddr, ClientAddr: req.ClientAddr, Level: req.Level})
	if err != nil {
		m.fail(w, r, err)
		return
	}
	l := m.metaLog()
	conf, err := l.Configuration(r.Context())
	if err != nil {
		m.fail(w, r, err)
		return
	}
	if s, ok := conf.Server(req.ID); !ok || s.Address != req.PeerAddr {
		// Raft keeps one server per address: a server there already is the
		// node's old incarnation (its directory was wiped), which cannot be
		// running any more — the address is the new one's now. It goes
		// first; the planner would remove it once the new one is in anyway.
		for _, old := range conf.Servers {
			if old.Address == req.PeerAddr && old.ID != req.ID {
				// Unless the old one votes and the others could not
				// commit without it: then the join waits (the joiner
				// retries) rather than take the quorum with it.
				if err := m.checkRemovable(r.Context(), conf, old.ID); err != nil {
					m.log.Warn("a node joins under a new incarnation, but its old one still votes and the other voters have no majority answering: the join waits", "old", old.ID, "new", req.ID, "err", err)
					m.fail(w, r, err)
					return
				}
				m.log.Info("a node joins under a new incarnation: its old one goes", "old", old.ID, "new", req.ID)
				if err := l.RemoveServer(r.Context(), old.ID); err != nil {
					m.fail(w, r, err)
					return
				}
				if mem, ok := b.Member(old.ID); ok && mem.Removed.IsZero() {
					if err := b.RemoveMember(r.Context(), old.ID); err != nil {
						m.fail(w, r, err)
						return
					}
				}
			}
		}
		if err := l.AddNonvoter(r.Context(), req.ID, req.PeerAddr); err != nil {
			m.fail(w, r, err)
			return
		}
		m.log.Info("member joined as a non-voter", "member", req.ID, "number", rec.Number, "addr", req.PeerAddr)
	}
	writeJSON(w, joinResponse{Number: rec.Number, ClusterID: b.ClusterID()})
}

// requestJoin asks the peer at addr to add this member; a follower's
// answer naming the leader is followed once.
func (m *Member) requestJoin(ctx context.Context, addr string, jr joinRequest) (joinResponse, error) {
	raw, _ := json.Marshal(jr)
	for hop := 0; ; hop++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, m.cfg.Client.URL(addr, joinPath), bytes.NewReader(raw))
		if err != nil {
			return joinResponse{}, err
		}
		resp, err := m.cfg.Client.Do(req)
		if errors.Is(err, errNotLeader) && hop == 0 {
			if leader, ok := errs.FieldOf(err, "leader"); ok {
				if id, _ := leader.(string); id != "" {
					if a := m.leaderAddr(ctx, addr, id); a != "" {
						addr = a
						continue
					}
				}
			}
		}
		if err != nil {
			return joinResponse{}, err
		}
		defer resp.Body.Close()
		var out joinResponse
		err = json.NewDecoder(resp.Body).Decode(&out)
		return out, err
	}
}

// leaderAddr finds the leader's address from the peer that named it.
func (m *Member) leaderAddr(ctx context.Context, via, leaderID string) string {
	st, err := m.status(ctx, via)
	if err != nil || st.Leader != leaderID {
		return ""
	}
	// Member ids are <node>~<incarnation> (or the node alone).
	nodeName := leaderID
	for i := 0; i < len(leaderID); i++ {
		if leaderID[i] == '~' {
			nodeName = leaderID[:i]
			break
		}
	}
	return m.cfg.Addresses.Advertise(nodeName)
}

func (m *Member) serveStatus(w http.ResponseWriter, r *http.Request) {
	st := statusInfo{MemberID: m.id.ID(), Node: m.id.Node, HasLog: hasLog(m.cfg.DataDir)}
	if b := m.broker(); b != nil {
		s := b.Status()
		st.ClusterID, st.RaftState, st.Leader, st.AppliedIndex, st.LastIndex = b.ClusterID(), s.LogState, s.Leader, s.AppliedIndex, s.LastIndex
	}
	writeJSON(w, st)
}

// readIndex is the leader's answer to GET readIndexPath.
type readIndex struct {
	AppliedIndex uint64 `json:"appliedIndex"`
}

// serveReadIndex answers, on the leader only, the index its state machine
// has applied once a barrier committed in its term: every entry committed
// before the request, by it or by the leaders before it. A leader's applied
// index alone may trail entries a predecessor committed (a new leader
// learns them only by committing in its own term), which a follower may
// already have applied and served.
func (m *Member) serveReadIndex(w http.ResponseWriter, r *http.Request) {
	b := m.broker()
	if b == nil {
		m.fail(w, r, errNotLeader.With("reason", "starting"))
		return
	}
	if !m.metaLog().IsLeader() {
		m.fail(w, r, m.notLeader(b))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	if err := m.metaLog().Barrier(ctx); err != nil {
		m.fail(w, r, err)
		return
	}
	writeJSON(w, readIndex{AppliedIndex: b.Status().AppliedIndex})
}

func (m *Member) status(ctx context.Context, addr string) (statusInfo, error) {
	var st statusInfo
	err := m.get(ctx, addr, statusPath, &st)
	return st, err
}

func (m *Member) serveMember(w http.ResponseWriter, r *http.Request) {
	b := m.broker()
	if b == nil {
		m.fail(w, r, errNotLeader.With("reason", "starting"))
		return
	}
	id := r.PathValue("id")
	cur, ok := b.Member(id)
	mi := memberInfo{Known: ok, Removed: ok && !cur.Removed.IsZero()}
	if conf, err := m.metaLog().Configuration(r.Context()); err == nil {
		for _, sv := range conf.Servers {
			mi.Configured = mi.Configured || sv.ID == id
		}
	} else {
		mi.Configured = true // unknown: assume the worst
	}
	writeJSON(w, mi)
}

func (m *Member) memberInfo(ctx context.Context, addr, id string) (memberInfo, error) {
	var mi memberInfo
	err := m.get(ctx, addr, membersPath+url.PathEscape(id), &mi)
	return mi, err
}

func (m *Member) get(ctx context.Context, addr, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.cfg.Client.URL(addr, path), nil)
	if err != nil {
		return err
	}
	resp, err := m.cfg.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}
