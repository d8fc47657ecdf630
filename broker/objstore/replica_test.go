package objstore

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The ranges of two members: a replica of the first's objects is written
// into the second's store.
const (
	writerBase  = 1 << 48
	replicaBase = 2 << 48
)

// replicaBytes builds object id's whole file of the given payloads.
func replicaBytes(id uint64, payloads ...string) []byte {
	b := AppendObjectHeader(nil, id)
	for _, p := range payloads {
		b = AppendFrame(b, []byte(p))
	}
	return b
}

func partFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var parts []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), partPrefix) {
			parts = append(parts, e.Name())
		}
	}
	return parts
}

// TestWriteReplica: a copy received is the object's file, byte for byte,
// readable as any object, its name made durable (a directory fsync), with
// nothing left aside.
func TestWriteReplica(t *testing.T) {
	t.Parallel()
	s := openInternal(t, Options{IDBase: replicaBase})
	id := uint64(writerBase + 7)
	obj := replicaBytes(id, "first frame", strings.Repeat("x", 300<<10), "last")
	syncs := s.dirSyncs.Load()
	size, err := s.WriteReplica(id, bytes.NewReader(obj))
	if err != nil {
		t.Fatal(err)
	}
	if size != int64(len(obj)) {
		t.Fatalf("size %d, want %d", size, len(obj))
	}
	got, err := os.ReadFile(s.path(id))
	if err != nil || !bytes.Equal(got, obj) {
		t.Fatalf("the file holds %d bytes (%v), not the copy's %d", len(got), err, len(obj))
	}
	if s.dirSyncs.Load() == syncs {
		t.Fatal("the replica's name was not made durable")
	}
	pos := int64(HeaderSize)
	p, err := s.ReadFrame(id, pos, FrameHeaderSize+int64(len("first frame")))
	if err != nil || string(p) != "first frame" {
		t.Fatalf("ReadFrame: %q, %v", p, err)
	}
	raw, err := s.ReadFrameRaw(id, pos, FrameHeaderSize+int64(len("first frame")))
	if err != nil || !bytes.Equal(raw, obj[pos:pos+FrameHeaderSize+int64(len("first frame"))]) {
		t.Fatalf("ReadFrameRaw: %q, %v", raw, err)
	}
	if p, err := CheckFrame(id, pos, raw); err != nil || string(p) != "first frame" {
		t.Fatalf("CheckFrame: %q, %v", p, err)
	}
	if parts := partFiles(t, s.Dir()); len(parts) != 0 {
		t.Fatalf("left aside: %v", parts)
	}
	infos, err := s.List()
	if err != nil || len(infos) != 1 || infos[0].ID != id || infos[0].Writing {
		t.Fatalf("List: %+v, %v", infos, err)
	}
	// A header-only object is a valid (empty) copy too.
	if _, err := s.WriteReplica(id+1, bytes.NewReader(replicaBytes(id+1))); err != nil {
		t.Fatal(err)
	}
}

// TestWriteReplicaAgain: the same bytes again are fine and leave the file
// in place (its time refreshed for the orphan collection's grace); a longer
// version, or a good copy of a torn file, replaces it; a different valid
// object is refused and the one in place kept.
func TestWriteReplicaAgain(t *testing.T) {
	t.Parallel()
	s := openInternal(t, Options{IDBase: replicaBase})
	id := uint64(writerBase + 1)
	obj := replicaBytes(id, "a", "b")
	if _, err := s.WriteReplica(id, bytes.NewReader(obj)); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(s.path(id), old, old); err != nil {
		t.Fatal(err)
	}
	ino := inode(t, s.path(id))
	if _, err := s.WriteReplica(id, bytes.NewReader(obj)); err != nil {
		t.Fatalf("the same copy again: %v", err)
	}
	if inode(t, s.path(id)) != ino {
		t.Fatal("the same copy again replaced the file")
	}
	if fi, err := os.Stat(s.path(id)); err != nil || fi.ModTime().Before(time.Now().Add(-time.Minute)) {
		t.Fatalf("the file's time was not refreshed: %v, %v", fi.ModTime(), err)
	}

	longer := replicaBytes(id, "a", "b", "c")
	if _, err := s.WriteReplica(id, bytes.NewReader(longer)); err != nil {
		t.Fatalf("a longer version: %v", err)
	}
	if got, _ := os.ReadFile(s.path(id)); !bytes.Equal(got, longer) {
		t.Fatal("the longer version did not replace the shorter one")
	}

	other := replicaBytes(id, "something else")
	if _, err := s.WriteReplica(id, bytes.NewReader(other)); !errors.Is(err, ErrReplicaConflict) {
		t.Fatalf("a different object under the same id: %v, want ErrReplicaConflict", err)
	}
	if got, _ := os.ReadFile(s.path(id)); !bytes.Equal(got, longer) {
		t.Fatal("a conflicting copy changed the file in place")
	}

	// A torn file (a crash, a bad disk) is repaired by a good copy.
	if err := os.WriteFile(s.path(id), longer[:len(longer)-1], 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReadFrameRaw(id, HeaderSize, FrameHeaderSize+1); err != nil {
		t.Fatal(err) // caches a handle of the torn file
	}
	if _, err := s.WriteReplica(id, bytes.NewReader(other)); err != nil {
		t.Fatalf("a good copy over a torn file: %v", err)
	}
	if p, err := s.ReadFrame(id, HeaderSize, FrameHeaderSize+int64(len("something else"))); err != nil || string(p) != "something else" {
		t.Fatalf("after the repair the store reads %q, %v (a stale handle?)", p, err)
	}
	if parts := partFiles(t, s.Dir()); len(parts) != 0 {
		t.Fatalf("left aside: %v", parts)
	}
}

// failingReader fails after its bytes.
type failingReader struct {
	r   io.Reader
	err error
}

func (f *failingReader) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if err == io.EOF {
		return n, f.err
	}
	return n, err
}

// TestWriteReplicaRefusesBadCopies: a copy whose header is another
// object's, a frame that fails its CRC or its length, a body that ends
// inside a frame, or a read that fails leave nothing: no file, nothing
// aside.
func TestWriteReplicaRefusesBadCopies(t *testing.T) {
	t.Parallel()
	s := openInternal(t, Options{IDBase: replicaBase})
	id := uint64(writerBase + 3)
	good := replicaBytes(id, "hello", "world")
	flipped := bytes.Clone(good)
	flipped[len(flipped)-1] ^= 0x40
	zeroLen := bytes.Clone(good)
	copy(zeroLen[HeaderSize:], []byte{0, 0, 0, 0})
	cut := errors.New("connection reset")
	for name, tc := range map[string]struct {
		body    io.Reader
		corrupt bool
		want    error
	}{
		"another object's header": {body: bytes.NewReader(replicaBytes(id+1, "hello")), corrupt: true},
		"a flipped payload byte":  {body: bytes.NewReader(flipped), corrupt: true},
		"a zero frame length":     {body: bytes.NewReader(zeroLen), corrupt: true},
		"torn inside a payload":   {body: bytes.NewReader(good[:len(good)-2]), corrupt: true},
		"torn inside a header":    {body: bytes.NewReader(good[:HeaderSize+FrameHeaderSize+5+3]), corrupt: true},
		"a short object header":   {body: bytes.NewReader(good[:10]), corrupt: true},
		"empty":                   {body: bytes.NewReader(nil), corrupt: true},
		"a failed read":           {body: &failingReader{r: bytes.NewReader(good[:20]), err: cut}, want: cut},
	} {
		_, err := s.WriteReplica(id, tc.body)
		switch {
		case tc.corrupt && !errors.Is(err, ErrCorrupt):
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		case tc.want != nil && !errors.Is(err, tc.want):
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
		if _, err := os.Stat(s.path(id)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: a file was left: %v", name, err)
		}
	}
	if parts := partFiles(t, s.Dir()); len(parts) != 0 {
		t.Fatalf("left aside: %v", parts)
	}
}

// TestWriteReplicaRefusesIDs: ids a replica may not take are refused before
// anything is read: 0, an unclaimed pool file, a held object, an id of the
// store's own range it has not handed out yet, and (for a store without a
// range) any id above the ones it handed out.
func TestWriteReplicaRefusesIDs(t *testing.T) {
	t.Parallel()
	s := openInternal(t, Options{IDBase: replicaBase})
	s.mu.Lock()
	pooled := s.ready[0].id
	next := s.nextID
	s.mu.Unlock()
	held, err := s.Hold(AppendFrame(nil, []byte("held")))
	if err != nil {
		t.Fatal(err)
	}
	lone := openInternal(t, Options{})
	for name, tc := range map[string]struct {
		s  *Store
		id uint64
	}{
		"zero":                   {s, 0},
		"a pool file":            {s, pooled},
		"a held object":          {s, held},
		"own range, not yet out": {s, next + 100},
		"a store without range":  {lone, writerBase + 1},
	} {
		if _, err := tc.s.WriteReplica(tc.id, bytes.NewReader(replicaBytes(tc.id, "x"))); !errors.Is(err, ErrReplicaID) {
			t.Errorf("%s (%016x): %v, want ErrReplicaID", name, tc.id, err)
		}
	}
	// An id of the store's own range it handed out is not refused (its
	// file, if any, is compared as any other).
	w, err := s.Create()
	if err != nil {
		t.Fatal(err)
	}
	mine := w.ID()
	if _, err := s.WriteReplica(mine, bytes.NewReader(replicaBytes(mine, "x"))); !errors.Is(err, ErrInUse) {
		t.Fatalf("a replica of an object a Writer has open: %v, want ErrInUse", err)
	}
	w.Abort()
	if _, err := s.WriteReplica(mine, bytes.NewReader(replicaBytes(mine, "x"))); err != nil {
		t.Fatalf("an id the store handed out and dropped: %v", err)
	}
}

// gatedReader hands out its bytes once gate is closed, after telling
// started that the first read came.
type gatedReader struct {
	r       io.Reader
	started chan struct{}
	gate    chan struct{}
	once    bool
}

func (g *gatedReader) Read(p []byte) (int, error) {
	if !g.once {
		g.once = true
		close(g.started)
		<-g.gate
	}
	return g.r.Read(p)
}

// TestReplicaBeingReceived: while a copy streams in, its id is an object
// being written: listed as such (the orphan collection leaves it alone),
// not removable, and a second copy at once is refused with ErrInUse.
func TestReplicaBeingReceived(t *testing.T) {
	t.Parallel()
	s := openInternal(t, Options{IDBase: replicaBase})
	id := uint64(writerBase + 9)
	obj := replicaBytes(id, "slow")
	g := &gatedReader{r: bytes.NewReader(obj), started: make(chan struct{}), gate: make(chan struct{})}
	done := make(chan error, 1)
	go func() { _, err := s.WriteReplica(id, g); done <- err }()
	<-g.started
	if _, err := s.WriteReplica(id, bytes.NewReader(obj)); !errors.Is(err, ErrInUse) {
		t.Errorf("a second copy meanwhile: %v, want ErrInUse", err)
	}
	if err := s.Remove(id); !errors.Is(err, ErrInUse) {
		t.Errorf("Remove meanwhile: %v, want ErrInUse", err)
	}
	close(g.gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(id); err != nil {
		t.Fatalf("Remove after: %v", err)
	}
}

// TestRemovePartialReplicas: what a crash left aside goes; objects stay.
func TestRemovePartialReplicas(t *testing.T) {
	t.Parallel()
	s := openInternal(t, Options{IDBase: replicaBase})
	id := uint64(writerBase + 2)
	if _, err := s.WriteReplica(id, bytes.NewReader(replicaBytes(id, "kept"))); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.Dir(), partPrefix+"0001000000000005-123"), []byte("torn"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.RemovePartialReplicas(); err != nil {
		t.Fatal(err)
	}
	if parts := partFiles(t, s.Dir()); len(parts) != 0 {
		t.Fatalf("left: %v", parts)
	}
	if _, err := os.Stat(s.path(id)); err != nil {
		t.Fatalf("the object went too: %v", err)
	}
}

// TestReadFrameRawChecks: a frame that fails its CRC is not served raw
// either.
func TestReadFrameRawChecks(t *testing.T) {
	t.Parallel()
	s := openInternal(t, Options{IDBase: replicaBase})
	id := uint64(writerBase + 4)
	obj := replicaBytes(id, "payload")
	if _, err := s.WriteReplica(id, bytes.NewReader(obj)); err != nil {
		t.Fatal(err)
	}
	obj[len(obj)-1] ^= 1
	if err := os.WriteFile(s.path(id), obj, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReadFrameRaw(id, HeaderSize, int64(len(obj)-HeaderSize)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("ReadFrameRaw of a corrupt frame: %v", err)
	}
	if _, err := s.ReadFrameRaw(id, HeaderSize, int64(len(obj)-HeaderSize)+5); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("ReadFrameRaw past the end: %v", err)
	}
	if _, err := s.ReadFrameRaw(id, 3, 20); !errors.Is(err, ErrFrameSize) {
		t.Fatalf("ReadFrameRaw inside the header: %v", err)
	}
	if _, err := CheckFrame(id, HeaderSize, obj[HeaderSize:HeaderSize+4]); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("CheckFrame of a short frame: %v", err)
	}
}
