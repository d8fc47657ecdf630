package replication

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/picomq/picomq/broker/core"
	"github.com/picomq/picomq/broker/objstore"
	"github.com/picomq/picomq/broker/peer"
	"github.com/prometheus/client_golang/prometheus"
)

// member is one in-process cluster member: its objects directory, its peer
// API on loopback, and its replication.
type member struct {
	id    string
	num   int
	store *objstore.Store
	srv   *httptest.Server
	repl  *Replication
	reg   *prometheus.Registry

	// handler serves the peer API; a test may wrap it (a failing peer).
	mu      sync.Mutex
	handler http.Handler
}

func (m *member) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m.mu.Lock()
	h := m.handler
	m.mu.Unlock()
	h.ServeHTTP(w, r)
}

// setHandler replaces the member's peer API; wrap receives the real one.
func (m *member) setHandler(wrap func(real http.Handler) http.Handler) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.handler = wrap(Handler(m.store, nil))
}

// cluster is n members reaching one another through peer.Client by their
// names, as the broker's static peer table does.
type cluster struct {
	t       testing.TB
	members []*member
	client  *peer.Client

	mu    sync.Mutex
	live  map[string]bool // by member id; all at first
	frame []byte          // the object fake replicas serve frames of
}

// newCluster starts n members, each with its replication configured by
// cfg (Self, Members, Client and Metrics are filled in).
func newCluster(t testing.TB, n int, cfg Config) *cluster {
	t.Helper()
	c := &cluster{t: t, live: map[string]bool{}}
	static := map[string]peer.Static{}
	for i := range n {
		num := i + 1
		m := &member{id: fmt.Sprintf("demo-%d~%08x", num, 0x3f9a2c10+num), num: num}
		s, err := objstore.Open(filepath.Join(t.TempDir(), "objects"), objstore.Options{IDBase: uint64(num) << 48})
		if err != nil {
			t.Fatal(err)
		}
		m.store = s
		m.handler = Handler(s, nil)
		m.srv = httptest.NewServer(m)
		t.Cleanup(func() { m.srv.Close(); s.Close() })
		static[m.id] = peer.Static{Peer: m.srv.Listener.Addr().String()}
		c.members = append(c.members, m)
		c.live[m.id] = true
	}
	c.client = peer.NewClient(peer.Dialer{Addresses: peer.Addresses{Static: static}})
	t.Cleanup(c.client.CloseIdle)
	for _, m := range c.members {
		mc := cfg
		mc.Self = m.id
		mc.Members = c.liveMembers
		mc.Client = c.client
		m.reg = prometheus.NewRegistry()
		mc.Metrics = m.reg
		r, err := New(mc)
		if err != nil {
			t.Fatal(err)
		}
		m.repl = r
	}
	return c
}

// liveMembers is every member's Members: the live ones, their names as
// their addresses.
func (c *cluster) liveMembers() []Peer {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Peer
	for _, m := range c.members {
		if c.live[m.id] {
			out = append(out, Peer{ID: m.id, Addr: m.id})
		}
	}
	return out
}

func (c *cluster) setLive(id string, live bool) {
	c.mu.Lock()
	c.live[id] = live
	c.mu.Unlock()
}

func (c *cluster) byID(id string) *member {
	for _, m := range c.members {
		if m.id == id {
			return m
		}
	}
	c.t.Fatalf("no member %s", id)
	return nil
}

func (c *cluster) ids() []string {
	var ids []string
	for _, m := range c.members {
		ids = append(ids, m.id)
	}
	return ids
}

// placement is m's replicating store over its own directory.
func (m *member) placement() core.ObjectStore { return m.repl.Placement(localObjects{m.store}) }

// localObjects is core's local ObjectStore, as core.Open hands it to the
// placement.
type localObjects struct{ s *objstore.Store }

func (l localObjects) Create() (core.ObjectWriter, error) {
	w, err := l.s.Create()
	if err != nil {
		return nil, err
	}
	return localWriter{w}, nil
}

type localWriter struct{ *objstore.Writer }

func (localWriter) Replicas() []string { return nil }

// frameAt is one frame of an object written in a test.
type frameAt struct {
	pos, n  int64
	payload []byte
}

// writeObject writes payloads through st, alternately copied and by
// reference, and syncs; it returns the writer (synced, not closed), the
// frames and Sync's error.
func writeObject(t testing.TB, st core.ObjectStore, payloads ...[]byte) (core.ObjectWriter, []frameAt, error) {
	t.Helper()
	w, err := st.Create()
	if err != nil {
		t.Fatal(err)
	}
	var frames []frameAt
	for i, p := range payloads {
		var pos, n int64
		if i%2 == 0 {
			pos, n, err = w.AppendFrame(p)
		} else {
			pos, n, err = w.AppendFrameRef(p)
		}
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, frameAt{pos, n, p})
	}
	return w, frames, w.Sync()
}

// fileOf returns member m's file of object id, nil when it has none.
func (m *member) fileOf(t testing.TB, id uint64) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(m.store.Dir(), fmt.Sprintf("%016x.obj", id)))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkCopies checks that exactly the members holders hold object id,
// each a file identical to want whose every frame reads back.
func (c *cluster) checkCopies(t testing.TB, id uint64, want []byte, holders []string, frames []frameAt) {
	t.Helper()
	for _, m := range c.members {
		got := m.fileOf(t, id)
		if !slices.Contains(holders, m.id) {
			if got != nil {
				t.Errorf("%s holds a copy of object %016x, not being one of %v", m.id, id, holders)
			}
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: object %016x holds %d bytes, not the writer's %d", m.id, id, len(got), len(want))
			continue
		}
		for _, f := range frames {
			p, err := m.store.ReadFrame(id, f.pos, f.n)
			if err != nil || !bytes.Equal(p, f.payload) {
				t.Errorf("%s: frame at %d of object %016x: %v", m.id, f.pos, id, err)
			}
		}
	}
}

// payload returns n deterministic bytes.
func payload(seed, n int) []byte {
	b := make([]byte, n)
	x := uint32(seed*2654435761 + 1)
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}

// blackhole accepts connections and never answers, until closed.
func blackhole(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	return ln.Addr().String()
}
