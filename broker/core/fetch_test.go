package core

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/picomq/picomq/broker/meta"
	"github.com/picomq/picomq/broker/node"
	"github.com/picomq/picomq/broker/objstore"
)

// recordingFetcher reads frames from a peer's objects (a store on another
// directory) and records whom it was told to ask.
type recordingFetcher struct {
	mu       sync.Mutex
	peer     *objstore.Store
	replicas [][]string
}

func (f *recordingFetcher) FetchFrame(object uint64, replicas []string, pos, n int64) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.replicas = append(f.replicas, append([]string(nil), replicas...))
	return f.peer.ReadFrame(object, pos, n)
}

// TestInlineObjectFetchedFromMembers: an object committed inline names no
// replicas — every member that applied its entry wrote it — but a member
// that joined from a snapshot taken after never saw the entry. Its read
// of such an object, missing here, asks the other members (not removed,
// not itself) instead of failing.
func TestInlineObjectFetchedFromMembers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := &recordingFetcher{}
	dir := t.TempDir()
	b := openTest(t, dir, func(c *Config) { c.Fetcher = f; c.LogCommits = true }) // a member's inline commit
	defer b.Close()
	for _, m := range []Member{{ID: "m-a", Node: "m-0"}, {ID: "m-b", Node: "m-1"}, {ID: "m-gone", Node: "m-2"}} {
		if _, err := b.RecordMember(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.RemoveMember(ctx, "m-gone"); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, b, "s", node.CreateOptions{})
	if _, err := b.Append(ctx, "s", recs("here"), node.AppendOptions{Partition: -1}); err != nil {
		t.Fatal(err)
	}
	var ids []uint64
	b.fsm.View(func(s *meta.State) {
		for id, o := range s.Objects {
			if len(o.Replicas) != 0 {
				t.Errorf("object %d names replicas %v: want an inline commit", id, o.Replicas)
			}
			ids = append(ids, id)
		}
	})
	if len(ids) != 1 {
		t.Fatalf("objects %v: want one", ids)
	}
	// This member loses its copy, as one joining from a snapshot never had it.
	if err := b.objs.Spill(ids); err != nil {
		t.Fatal(err)
	}
	peerDir := t.TempDir()
	if err := os.Rename(filepath.Join(objectsDir(dir), objName(ids[0])), filepath.Join(peerDir, objName(ids[0]))); err != nil {
		t.Fatal(err)
	}
	peer, err := objstore.Open(peerDir, objstore.Options{MinNextID: ids[0] + 1, PoolSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	f.mu.Lock()
	f.peer = peer
	f.mu.Unlock()
	b.frames = newFrameCache(1 << 20)
	got, _, err := b.Read(ctx, "s", 0, 0, 10, node.ReadOptions{})
	if err != nil || len(got) != 1 || string(got[0].Record.Payload) != "here" {
		t.Fatalf("read of an inline object missing here: %+v, %v", got, err)
	}
	if len(f.replicas) != 1 || len(f.replicas[0]) != 2 || f.replicas[0][0] != "m-a" || f.replicas[0][1] != "m-b" {
		t.Fatalf("asked %v: want the members m-a and m-b (not the removed one, not this broker)", f.replicas)
	}
}
