package replication

import (
	"bytes"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/peer"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestDurableOnExactlyR: with R of 3 members, a synced object is on
// exactly R of them — the writer and the R-1 the rendezvous ranks first —
// byte-identical, every frame readable there; Replicas names them, the
// writer first.
func TestDurableOnExactlyR(t *testing.T) {
	t.Parallel()
	for _, r := range []int{1, 2, 3} {
		t.Run("R="+string(rune('0'+r)), func(t *testing.T) {
			t.Parallel()
			c := newCluster(t, 3, Config{R: r})
			m := c.members[0]
			w, frames, err := writeObject(t, m.placement(), []byte("copied"), payload(1, 200<<10), []byte("by reference"), payload(2, 5))
			if err != nil {
				t.Fatal(err)
			}
			id := w.ID()
			replicas := w.Replicas()
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			others := slices.DeleteFunc(c.ids(), func(s string) bool { return s == m.id })
			want := append([]string{m.id}, Rank(id, others)[:r-1]...)
			if !slices.Equal(replicas, want) {
				t.Fatalf("Replicas() = %v, want %v", replicas, want)
			}
			local := m.fileOf(t, id)
			if int64(len(local)) != frames[len(frames)-1].pos+frames[len(frames)-1].n {
				t.Fatalf("the writer's file is %d bytes", len(local))
			}
			c.checkCopies(t, id, local, replicas, frames)
			if got := testutil.ToFloat64(m.repl.m.Copies); got != float64(r-1) {
				t.Errorf("copies counted: %v, want %d", got, r-1)
			}
			if got := testutil.ToFloat64(m.repl.m.CopyBytes); got != float64((r-1)*len(local)) {
				t.Errorf("bytes counted: %v, want %d", got, (r-1)*len(local))
			}
		})
	}
}

// TestAutomaticR: R = 0 is min(3, live members), decided at Create.
func TestAutomaticR(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 4, Config{})
	m := c.members[0]
	w, _, err := writeObject(t, m.placement(), []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	if got := w.Replicas(); len(got) != 3 {
		t.Fatalf("4 live members: Replicas() = %v, want 3", got)
	}
	c.setLive(c.members[1].id, false)
	c.setLive(c.members[2].id, false)
	w, _, err = writeObject(t, m.placement(), []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	if got := w.Replicas(); len(got) != 2 || got[0] != m.id || got[1] != c.members[3].id {
		t.Fatalf("2 live members: Replicas() = %v", got)
	}
	c.setLive(c.members[3].id, false)
	w, _, err = writeObject(t, m.placement(), []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	if got := w.Replicas(); !slices.Equal(got, []string{m.id}) {
		t.Fatalf("alone: Replicas() = %v", got)
	}
}

// TestR1IsLocal: R = 1 needs no client and copies nothing; the commit
// still names this member, for the others to fetch from it.
func TestR1IsLocal(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 2, Config{R: 1})
	r, err := New(Config{Self: c.members[0].id, R: 1, Members: c.liveMembers})
	if err != nil {
		t.Fatal(err)
	}
	w, _, err := writeObject(t, r.Placement(localObjects{c.members[0].store}), []byte("alone"))
	if err != nil {
		t.Fatal(err)
	}
	if got := w.Replicas(); !slices.Equal(got, []string{c.members[0].id}) {
		t.Fatalf("Replicas() = %v", got)
	}
	if c.members[1].fileOf(t, w.ID()) != nil {
		t.Fatal("R = 1 copied the object")
	}
}

// wantReplicationFailed checks err is REPLICATION_FAILED, 503, with the
// fields given.
func wantReplicationFailed(t *testing.T, err error, fields map[string]any) {
	t.Helper()
	if !errors.Is(err, ReplicationFailed) {
		t.Fatalf("Sync: %v, want REPLICATION_FAILED", err)
	}
	if s := errs.HTTPStatus(err); s != http.StatusServiceUnavailable {
		t.Errorf("status %d, want 503", s)
	}
	for k, want := range fields {
		if got, _ := errs.FieldOf(err, k); got != want {
			t.Errorf("field %s = %v (%T), want %v", k, got, got, want)
		}
	}
}

// TestTooFewLivePeers: R = 3 with one live member (this one) fails the
// Sync: a write quorum is two; no copy is made, nothing is claimed.
func TestTooFewLivePeers(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3, Config{R: 3})
	m := c.members[0]
	c.setLive(c.members[1].id, false)
	c.setLive(c.members[2].id, false)
	w, _, err := writeObject(t, m.placement(), []byte("x"))
	wantReplicationFailed(t, err, map[string]any{"object": int64(w.ID()), "wanted": int64(3), "got": int64(0), "live": int64(1)})
	if got := w.Replicas(); len(got) != 0 {
		t.Fatalf("Replicas() after a failed Sync = %v", got)
	}
	if err := w.Sync(); !errors.Is(err, ReplicationFailed) {
		t.Fatalf("a second Sync: %v, want the same failure", err)
	}
	if err := w.Close(); err == nil {
		t.Fatal("Close after a failed Sync succeeded")
	}
	id := w.ID()
	w.Abort()
	for _, o := range c.members {
		if o.fileOf(t, id) != nil {
			t.Errorf("%s holds the object", o.id)
		}
	}
	if got := testutil.ToFloat64(m.repl.m.CopyFailures.WithLabelValues(reasonTooFew)); got != 1 {
		t.Errorf("too_few_peers counted %v", got)
	}
}

// TestWriteQuorumWithAMemberDown: R = 3 with one member not live (a
// planned restart, a crash past its lease) or listed live but down: the
// Sync succeeds on a write quorum, this member and the other, and the
// replicas name exactly the two that hold a durable copy (repair makes
// the third).
func TestWriteQuorumWithAMemberDown(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3, Config{R: 3})
	m, other, gone := c.members[0], c.members[1], c.members[2]
	c.setLive(gone.id, false)
	w, _, err := writeObject(t, m.placement(), []byte("x"))
	if err != nil {
		t.Fatalf("Sync with 2 of 3 live: %v", err)
	}
	if got := w.Replicas(); !slices.Equal(got, []string{m.id, other.id}) {
		t.Fatalf("Replicas() = %v, want [%s %s]", got, m.id, other.id)
	}
	if other.fileOf(t, w.ID()) == nil || gone.fileOf(t, w.ID()) != nil {
		t.Fatal("the copy is not where the replicas say")
	}

	c.setLive(gone.id, true)
	gone.srv.Close() // listed live, its peer port closed
	w, _, err = writeObject(t, m.placement(), payload(3, 100<<10))
	if err != nil {
		t.Fatalf("Sync with a live member down: %v", err)
	}
	if got := w.Replicas(); !slices.Equal(got, []string{m.id, other.id}) {
		t.Fatalf("Replicas() = %v, want [%s %s]", got, m.id, other.id)
	}
	if got := testutil.ToFloat64(m.repl.m.CopyFailures.WithLabelValues(reasonUnreachable)); got != 1 {
		t.Errorf("unreachable counted %v", got)
	}
}

// TestPeersDownFailSync: with two of R = 3 members listed live but down,
// only this member's copy is durable, below a write quorum: the Sync fails
// naming both, and nothing is claimed.
func TestPeersDownFailSync(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3, Config{R: 3})
	m, down1, down2 := c.members[0], c.members[1], c.members[2]
	down1.srv.Close()
	down2.srv.Close()
	w, _, err := writeObject(t, m.placement(), payload(3, 100<<10))
	wantReplicationFailed(t, err, map[string]any{"wanted": int64(3), "got": int64(1)})
	failed, _ := errs.FieldOf(err, "failed")
	if s, _ := failed.(string); !strings.Contains(s, down1.id) || !strings.Contains(s, down2.id) {
		t.Fatalf("failed = %v, want both peers", failed)
	}
	if len(w.Replicas()) != 0 {
		t.Fatal("replicas claimed after a failed Sync")
	}
	id := w.ID()
	w.Abort()
	if m.fileOf(t, id) != nil {
		t.Fatal("Abort left the writer's file")
	}
}

// TestPeerErrorFailsSync: a peer that answers a refusal, or a status
// other than 204, fails the Sync.
func TestPeerErrorFailsSync(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3, Config{R: 3})
	m := c.members[0]
	busy, odd := c.members[1], c.members[2]
	busy.setHandler(func(http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			(&handler{cfg: HandlerConfig{Logger: slog.New(slog.DiscardHandler)}}).fail(w, r, ReplicaBusy.With("object", 1))
		})
	})
	odd.setHandler(func(real http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusOK) // not "durable": 204 is
		})
	})
	w, _, err := writeObject(t, m.placement(), []byte("x"))
	wantReplicationFailed(t, err, map[string]any{"got": int64(1)})
	failed, _ := errs.FieldOf(err, "failed")
	if s, _ := failed.(string); !strings.Contains(s, busy.id) || !strings.Contains(s, odd.id) {
		t.Fatalf("failed = %v, want both peers", failed)
	}
	if !errors.Is(err, ReplicaBusy) {
		t.Errorf("the peer's refusal is not in the chain: %v", err)
	}
	if got := testutil.ToFloat64(m.repl.m.CopyFailures.WithLabelValues(reasonPeerError)); got != 2 {
		t.Errorf("peer_error counted %v, want 2", got)
	}
	w.Abort()
}

// TestHungPeerTimesOut: a peer that takes the request and never answers
// fails the Sync after CopyTimeout; the caller's payload may be reused at
// once (the race detector sees any read of it after Sync returned).
func TestHungPeerTimesOut(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 2, Config{R: 2, CopyTimeout: 200 * time.Millisecond})
	m, hung := c.members[0], c.members[1]
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	hung.setHandler(func(http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = r.Body.Read(make([]byte, 100)) // takes a little, then waits
			<-release
		})
	})
	p := payload(4, 4<<20)
	w, err := m.placement().Create()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.AppendFrameRef(p); err != nil {
		t.Fatal(err)
	}
	err = w.Sync()
	wantReplicationFailed(t, err, map[string]any{"failed": hung.id})
	for i := range p {
		p[i] = 0 // the caller's buffer is its own again
	}
	w.Abort()
	if got := testutil.ToFloat64(m.repl.m.CopyFailures.WithLabelValues(reasonTimeout)); got != 1 {
		t.Errorf("timeout counted %v", got)
	}
}

// TestBlackholedPeerTimesOut: a peer port that accepts and never reads.
func TestBlackholedPeerTimesOut(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 2, Config{R: 2, CopyTimeout: 200 * time.Millisecond})
	m := c.members[0]
	// The only peer, listed live, leads to a port that never answers.
	client := peer.NewClient(peer.Dialer{Addresses: peer.Addresses{Static: map[string]peer.Static{"hole": {Peer: blackhole(t)}}}})
	t.Cleanup(client.CloseIdle)
	r, err := New(Config{Self: m.id, R: 2, Client: client, CopyTimeout: 200 * time.Millisecond, Members: func() []Peer {
		return []Peer{{ID: m.id, Addr: m.id}, {ID: "hole~1", Addr: "hole"}}
	}})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = writeObject(t, r.Placement(localObjects{m.store}), payload(5, 1<<20))
	wantReplicationFailed(t, err, map[string]any{"failed": "hole~1"})
	if got := testutil.ToFloat64(r.m.CopyFailures.WithLabelValues(reasonTimeout)); got != 1 {
		t.Errorf("timeout counted %v", got)
	}
}

// TestResyncAfterMoreFrames: a Sync after more frames sends the whole
// object again; the peer takes the longer version.
func TestResyncAfterMoreFrames(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 2, Config{R: 2})
	m := c.members[0]
	w, frames, err := writeObject(t, m.placement(), []byte("one"))
	if err != nil {
		t.Fatal(err)
	}
	pos, n, err := w.AppendFrame([]byte("two"))
	if err != nil {
		t.Fatal(err)
	}
	frames = append(frames, frameAt{pos, n, []byte("two")})
	if err := w.Close(); err != nil { // Close syncs what Sync has not
		t.Fatal(err)
	}
	c.checkCopies(t, w.ID(), m.fileOf(t, w.ID()), w.Replicas(), frames)
}

// TestNoAppendAfterSyncByReference: once a Sync sent frames by reference,
// their bytes are the caller's again: a further frame, which would need
// the whole object sent anew, is refused (Close still works).
func TestNoAppendAfterSyncByReference(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 2, Config{R: 2})
	w, _, err := writeObject(t, c.members[0].placement(), []byte("copied"), []byte("by reference"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.AppendFrame([]byte("more")); !errors.Is(err, errAppendAfterSync) {
		t.Fatalf("AppendFrame after the Sync: %v", err)
	}
	if _, _, err := w.AppendFrameRef([]byte("more")); !errors.Is(err, errAppendAfterSync) {
		t.Fatalf("AppendFrameRef after the Sync: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if got := c.members[1].fileOf(t, w.ID()); !bytes.Equal(got, c.members[0].fileOf(t, w.ID())) {
		t.Fatal("the copy differs")
	}
}

// TestConcurrentWriters: every member writes many objects at once, each
// copied to the others, under the race detector.
func TestConcurrentWriters(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3, Config{R: 3})
	const writers, objects = 8, 6
	type written struct {
		id       uint64
		replicas []string
		frames   []frameAt
		writer   *member
	}
	var mu sync.Mutex
	var all []written
	var wg sync.WaitGroup
	for _, m := range c.members {
		st := m.placement()
		for g := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range objects {
					w, frames, err := writeObject(t, st, payload(g, 1000+i), payload(i, 30<<10), []byte("end"))
					if err != nil {
						t.Error(err)
						return
					}
					if err := w.Close(); err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					all = append(all, written{w.ID(), w.Replicas(), frames, m})
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	if len(all) != len(c.members)*writers*objects {
		t.Fatalf("%d objects written", len(all))
	}
	for _, o := range all {
		if len(o.replicas) != 3 || o.replicas[0] != o.writer.id {
			t.Fatalf("object %016x: replicas %v", o.id, o.replicas)
		}
		c.checkCopies(t, o.id, o.writer.fileOf(t, o.id), o.replicas, o.frames)
	}
}
