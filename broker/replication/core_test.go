package replication

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/picomq/picomq/broker/core"
	"github.com/picomq/picomq/broker/node"
	"github.com/picomq/picomq/broker/stream"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The seams, checked at compile time.
var (
	_ core.Fetcher      = (*Fetcher)(nil)
	_ core.ObjectWriter = (*writer)(nil)
	_ core.ObjectWriter = soleWriter{}
	_ core.ObjectStore  = (*Store)(nil)
)

// recorder is a placement over the replicating one that notes each
// object's replica set after its Sync, as the commit records it.
type recorder struct {
	inner core.ObjectStore
	mu    sync.Mutex
	sets  map[uint64][]string
}

func (r *recorder) Create() (core.ObjectWriter, error) {
	w, err := r.inner.Create()
	if err != nil {
		return nil, err
	}
	return &recordingWriter{ObjectWriter: w, r: r}, nil
}

type recordingWriter struct {
	core.ObjectWriter
	r *recorder
}

func (w *recordingWriter) Sync() error {
	err := w.ObjectWriter.Sync()
	if err == nil {
		w.r.mu.Lock()
		w.r.sets[w.ID()] = w.Replicas()
		w.r.mu.Unlock()
	}
	return err
}

// TestThroughTheCore: a broker whose placement and fetcher are
// replication's writes every object file on R members before it
// acknowledges; with a copy failing, the append fails retriably and
// commits nothing; after its own files are lost it reads its records back
// through the replicas the commits named.
func TestThroughTheCore(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3, Config{R: 3})
	// The broker is the first member (a lone broker: its member id is its
	// node id); its directory is the core's, not the test member's store.
	self := c.members[0]
	self.srv.Close()
	rec := &recorder{sets: map[uint64][]string{}}
	dir := t.TempDir()
	cfg := core.Config{
		DataDir: filepath.Join(dir, "data"), NodeID: self.id,
		InlineBytes: -1,   // every group commit is a file
		LogCommits:  true, // placed as a cluster member's are
		Placement: func(local core.ObjectStore) core.ObjectStore {
			rec.inner = self.repl.Placement(local)
			return rec
		},
		Fetcher: self.repl.Fetcher(),
	}
	b, err := core.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, _, err := b.Create(ctx, "s", node.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := range 5 {
		rec := strings.Repeat(string(rune('a'+i)), 10<<10)
		want = append(want, rec)
		if _, err := b.Append(ctx, "s", []stream.RecordValue{{Payload: []byte(rec)}}, node.AppendOptions{Partition: -1}); err != nil {
			t.Fatal(err)
		}
	}
	objects := filepath.Join(cfg.DataDir, "objects")
	rec.mu.Lock()
	if len(rec.sets) == 0 {
		t.Fatal("no object went through the placement")
	}
	for id, set := range rec.sets {
		if len(set) != 3 || set[0] != self.id {
			t.Errorf("object %016x: replicas %v", id, set)
		}
		local, err := os.ReadFile(filepath.Join(objects, objectFileName(id)))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range c.members[1:] {
			if got := m.fileOf(t, id); !bytes.Equal(got, local) {
				t.Errorf("%s: object %016x differs from the broker's", m.id, id)
			}
		}
	}
	rec.mu.Unlock()

	// Both peers refusing: below a write quorum, the append is
	// REPLICATION_FAILED, nothing lands.
	for _, down := range c.members[1:] {
		down.setHandler(func(http.Handler) http.Handler { return http.NotFoundHandler() })
	}
	_, err = b.Append(ctx, "s", []stream.RecordValue{{Payload: []byte("lost")}}, node.AppendOptions{Partition: -1})
	if !errors.Is(err, ReplicationFailed) {
		t.Fatalf("append with both copies failing: %v, want REPLICATION_FAILED", err)
	}
	for _, down := range c.members[1:] {
		down.setHandler(func(real http.Handler) http.Handler { return real })
	}
	tail, err := b.TailOf("s", 0)
	if err != nil || tail.End != uint64(len(want)) {
		t.Fatalf("after the refused append the tail is %+v, %v; want %d records", tail, err, len(want))
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	// Lose the broker's own copies; it reads through the replicas.
	entries, err := os.ReadDir(objects)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".obj") {
			os.Remove(filepath.Join(objects, e.Name()))
		}
	}
	b, err = core.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	got, _, err := b.Read(ctx, "s", 0, 0, 100, node.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var payloads []string
	for _, e := range got {
		payloads = append(payloads, string(e.Record.Payload))
	}
	if !slices.Equal(payloads, want) {
		t.Fatalf("read %d records back through the replicas, want %d", len(payloads), len(want))
	}
	if n := testutil.ToFloat64(self.repl.m.Fetches); n == 0 {
		t.Fatal("nothing was fetched")
	}
}

func objectFileName(id uint64) string { return fmt.Sprintf("%016x.obj", id) }
