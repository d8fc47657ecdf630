package replication

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/picomq/picomq/broker/objstore"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestFetchFromReplicas: a member that holds no copy reads every frame
// through the replicas the commit named.
func TestFetchFromReplicas(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3, Config{R: 2})
	writer := c.members[0]
	w, frames, err := writeObject(t, writer.placement(), []byte("one"), payload(7, 300<<10), []byte("three"))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	replicas := w.Replicas()
	var reader *member
	for _, m := range c.members {
		if !slices.Contains(replicas, m.id) {
			reader = m
		}
	}
	if reader.fileOf(t, w.ID()) != nil {
		t.Fatal("the reader holds a copy")
	}
	f := reader.repl.Fetcher()
	for _, fr := range frames {
		p, err := f.FetchFrame(w.ID(), replicas, fr.pos, fr.n)
		if err != nil || !bytes.Equal(p, fr.payload) {
			t.Fatalf("frame at %d: %d bytes, %v", fr.pos, len(p), err)
		}
	}
	if got := testutil.ToFloat64(reader.repl.m.Fetches); got != float64(len(frames)) {
		t.Errorf("fetches counted %v", got)
	}
	// The first replica down: the second serves.
	c.setLive(Rank(w.ID(), replicas)[0], false)
	if p, err := f.FetchFrame(w.ID(), replicas, frames[1].pos, frames[1].n); err != nil || !bytes.Equal(p, frames[1].payload) {
		t.Fatalf("with a replica down: %v", err)
	}
}

// fakeReplica serves a frame fetch with answer(the real frame).
func fakeReplica(c *cluster, m *member, answer func(w http.ResponseWriter, frame []byte)) {
	m.setHandler(func(real http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			pos, _ := strconv.ParseInt(r.URL.Query().Get("pos"), 10, 64)
			n, _ := strconv.ParseInt(r.URL.Query().Get("len"), 10, 64)
			frame := c.frameFor(pos, n)
			answer(w, frame)
		})
	})
}

// TestFetchSkipsCorruptReplica: a replica whose bytes fail the check —
// flipped on the wire, its own copy corrupt, or the wrong length — is
// skipped for a good one; with no good one the fetch is ErrCorrupt.
func TestFetchSkipsCorruptReplica(t *testing.T) {
	t.Parallel()
	for name, bad := range map[string]func(c *cluster, m *member, id uint64){
		"bytes flipped on the way": func(c *cluster, m *member, _ uint64) {
			fakeReplica(c, m, func(w http.ResponseWriter, frame []byte) {
				frame = bytes.Clone(frame)
				frame[len(frame)-1] ^= 0x10
				_, _ = w.Write(frame)
			})
		},
		"a short answer": func(c *cluster, m *member, _ uint64) {
			fakeReplica(c, m, func(w http.ResponseWriter, frame []byte) { _, _ = w.Write(frame[:len(frame)-1]) })
		},
		"a long answer": func(c *cluster, m *member, _ uint64) {
			fakeReplica(c, m, func(w http.ResponseWriter, frame []byte) { _, _ = w.Write(append(bytes.Clone(frame), 0)) })
		},
		"its own copy corrupt": func(c *cluster, m *member, id uint64) {
			path := filepath.Join(m.store.Dir(), fmt.Sprintf("%016x.obj", id))
			b, err := os.ReadFile(path)
			if err != nil {
				panic(err)
			}
			b[len(b)-1] ^= 1
			if err := os.WriteFile(path, b, 0o600); err != nil {
				panic(err)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := newCluster(t, 3, Config{R: 3})
			writer := c.members[0]
			w, frames, err := writeObject(t, writer.placement(), payload(8, 1000))
			if err != nil {
				t.Fatal(err)
			}
			c.mu.Lock()
			c.frame = writer.fileOf(t, w.ID())
			c.mu.Unlock()
			replicas := w.Replicas()
			// Read from the writer's point of view with its own copy gone:
			// the replicas are the two others, the first ranked bad.
			ranked := Rank(w.ID(), replicas[1:])
			first, second := c.byID(ranked[0]), c.byID(ranked[1])
			bad(c, first, w.ID())
			f := writer.repl.Fetcher()
			fr := frames[0]
			p, err := f.FetchFrame(w.ID(), replicas, fr.pos, fr.n)
			if err != nil || !bytes.Equal(p, fr.payload) {
				t.Fatalf("fetch past a bad replica: %v", err)
			}
			if got := testutil.ToFloat64(writer.repl.m.FetchFailures.WithLabelValues(reasonCorrupt)); got != 1 {
				t.Errorf("corrupt counted %v", got)
			}
			bad(c, second, w.ID())
			if _, err := f.FetchFrame(w.ID(), replicas, fr.pos, fr.n); !errors.Is(err, objstore.ErrCorrupt) {
				t.Fatalf("every replica bad: %v, want ErrCorrupt", err)
			}
		})
	}
}

// frameFor is the frame of n bytes at pos of the object c.frame holds.
func (c *cluster) frameFor(pos, n int64) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.frame[pos : pos+n]
}

// TestFetchNoCopy: replicas that all say they hold no copy make an
// fs.ErrNotExist (the object was collected); one down or unreachable among
// them makes REPLICA_UNAVAILABLE instead (the copy may be there); no
// replica at all but this member is fs.ErrNotExist too.
func TestFetchNoCopy(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3, Config{R: 1})
	a, b, reader := c.members[0], c.members[1], c.members[2]
	f := reader.repl.Fetcher()
	const id = 1<<48 + 99
	pos, n := int64(objstore.HeaderSize), int64(objstore.FrameHeaderSize+4)

	_, err := f.FetchFrame(id, []string{a.id, b.id}, pos, n)
	if !errors.Is(err, fs.ErrNotExist) || errors.Is(err, ReplicaUnavailable) {
		t.Fatalf("no replica holds it: %v, want fs.ErrNotExist", err)
	}
	if _, err := f.FetchFrame(id, []string{reader.id}, pos, n); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("only this member named: %v, want fs.ErrNotExist", err)
	}
	c.setLive(a.id, false)
	_, err = f.FetchFrame(id, []string{a.id, b.id}, pos, n)
	if !errors.Is(err, ReplicaUnavailable) || errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("one replica down, one without it: %v, want REPLICA_UNAVAILABLE", err)
	}
	c.setLive(a.id, true)
	a.srv.Close()
	if _, err := f.FetchFrame(id, []string{a.id, b.id}, pos, n); !errors.Is(err, ReplicaUnavailable) {
		t.Fatalf("one replica unreachable: %v, want REPLICA_UNAVAILABLE", err)
	}
	if got := testutil.ToFloat64(reader.repl.m.FetchFailures.WithLabelValues(reasonDown)); got != 1 {
		t.Errorf("down counted %v", got)
	}
	if _, err := f.FetchFrame(id, []string{b.id}, 3, n); !errors.Is(err, objstore.ErrFrameSize) {
		t.Fatalf("a frame inside the header: %v", err)
	}
}
