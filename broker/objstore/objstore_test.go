package objstore_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/objstore"
	"github.com/picomq/picomq/broker/stream"
)

// openStore opens a store in a fresh objects directory. t.TempDir's own mode
// follows the umask, so the store gets a subdirectory PrepareDir creates.
func openStore(t testing.TB, opts objstore.Options) (*objstore.Store, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "objects")
	s, err := objstore.Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, dir
}

type frame struct {
	pos, n  int64
	payload []byte
}

// writeObject writes one object of the given payloads, syncs and closes it.
func writeObject(t testing.TB, s *objstore.Store, payloads ...[]byte) (uint64, []frame) {
	t.Helper()
	w, err := s.Create()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	var frames []frame
	for _, p := range payloads {
		pos, n, err := w.AppendFrame(p)
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, frame{pos, n, p})
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return w.ID(), frames
}

func payload(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(r.Uint32())
	}
	return p
}

func objPath(dir string, id uint64) string {
	return filepath.Join(dir, fmt.Sprintf("%016x.obj", id))
}

func TestFramesRoundTrip(t *testing.T) {
	t.Parallel()
	s, dir := openStore(t, objstore.Options{})
	sizes := []int{1, 7, 8, 4096, 65536, 1<<20 + 3, 5 << 20} // the last crosses the flush threshold
	var ps [][]byte
	for i, n := range sizes {
		ps = append(ps, payload(uint64(i), n))
	}
	id, frames := writeObject(t, s, ps...)

	wantPos := int64(objstore.HeaderSize)
	for _, f := range frames {
		if f.pos != wantPos || f.n != int64(objstore.FrameHeaderSize+len(f.payload)) {
			t.Fatalf("frame at %d len %d, want at %d len %d", f.pos, f.n, wantPos, objstore.FrameHeaderSize+len(f.payload))
		}
		wantPos += f.n
	}
	check := func(s *objstore.Store) {
		t.Helper()
		for _, f := range frames {
			got, err := s.ReadFrame(id, f.pos, f.n)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, f.payload) {
				t.Fatalf("frame at %d: wrong bytes", f.pos)
			}
		}
		i := 0
		end, err := s.Scan(id, func(pos, n int64, p []byte) error {
			if pos != frames[i].pos || n != frames[i].n || !bytes.Equal(p, frames[i].payload) {
				t.Fatalf("scan frame %d: at %d len %d, want at %d len %d", i, pos, n, frames[i].pos, frames[i].n)
			}
			i++
			return nil
		})
		if err != nil || end != wantPos || i != len(frames) {
			t.Fatalf("Scan = %d, %v after %d frames; want %d, nil after %d", end, err, i, wantPos, len(frames))
		}
	}
	check(s)

	// The file is exactly header plus frames, and the header names the object.
	raw, err := os.ReadFile(objPath(dir, id))
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(raw)) != wantPos {
		t.Fatalf("file is %d bytes, want %d", len(raw), wantPos)
	}
	if string(raw[:4]) != "PMQO" || raw[4] != objstore.Version || binary.LittleEndian.Uint64(raw[8:16]) != id {
		t.Fatalf("header % x", raw[:16])
	}
	if binary.LittleEndian.Uint32(raw[16:20]) != 1 {
		t.Fatalf("first frame length field % x", raw[16:20])
	}

	// And it all reads back the same from a reopened store.
	s.Close()
	s2, err := objstore.Open(dir, objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	check(s2)
}

// TestAppendFrameRef: frames appended by reference, alone or between copied
// ones, land where their positions say and read back — across the pwritev
// limit of 1,024 pieces and the 4 MiB write threshold — and the file holds
// exactly header plus frames.
func TestAppendFrameRef(t *testing.T) {
	t.Parallel()
	s, dir := openStore(t, objstore.Options{})
	w, err := s.Create()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	var frames []frame
	add := func(p []byte, byRef bool) {
		t.Helper()
		var pos, n int64
		var err error
		if byRef {
			pos, n, err = w.AppendFrameRef(p)
		} else {
			pos, n, err = w.AppendFrame(p)
		}
		if err != nil {
			t.Fatal(err)
		}
		if pos != w.Size()-n || n != int64(objstore.FrameHeaderSize+len(p)) {
			t.Fatalf("frame %d at %d len %d, size now %d", len(frames), pos, n, w.Size())
		}
		frames = append(frames, frame{pos, n, p})
	}
	for i := range 1500 { // 3,000 pieces: pwritev in batches
		add(payload(uint64(i), 1+i%300), i%500 != 499)
	}
	add(payload(7, 5<<20), true) // past the write threshold alone
	add(payload(8, 100), false)
	add(payload(9, 3<<20), true)
	if _, _, err := w.AppendFrameRef(nil); !errors.Is(err, objstore.ErrFrameSize) {
		t.Fatalf("empty payload by reference: %v, want ErrFrameSize", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.AppendFrameRef([]byte("late")); !errors.Is(err, objstore.ErrClosed) {
		t.Fatalf("AppendFrameRef after Close = %v, want ErrClosed", err)
	}
	raw, err := os.ReadFile(objPath(dir, w.ID()))
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(raw)) != w.Size() {
		t.Fatalf("file is %d bytes, want %d", len(raw), w.Size())
	}
	for i, f := range frames {
		got, err := s.ReadFrame(w.ID(), f.pos, f.n)
		if err != nil || !bytes.Equal(got, f.payload) {
			t.Fatalf("frame %d at %d: %v, same bytes %v", i, f.pos, err, bytes.Equal(got, f.payload))
		}
	}
	count := 0
	end, err := s.Scan(w.ID(), func(pos, n int64, p []byte) error { count++; return nil })
	if err != nil || count != len(frames) || end != w.Size() {
		t.Fatalf("Scan: %d frames ending at %d, %v; want %d ending at %d", count, end, err, len(frames), w.Size())
	}
}

func TestAppendFrameRefusesBadSizes(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t, objstore.Options{})
	w, err := s.Create()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	if _, _, err := w.AppendFrame(nil); !errors.Is(err, objstore.ErrFrameSize) {
		t.Fatalf("empty payload: %v", err)
	}
	// The refusal leaves the writer usable.
	pos, n, err := w.AppendFrame([]byte("x"))
	if err != nil || pos != objstore.HeaderSize || n != objstore.FrameHeaderSize+1 {
		t.Fatalf("AppendFrame = %d, %d, %v", pos, n, err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.AppendFrame([]byte("y")); !errors.Is(err, objstore.ErrClosed) {
		t.Fatalf("append after Close: %v", err)
	}
	if err := w.Sync(); !errors.Is(err, objstore.ErrClosed) {
		t.Fatalf("Sync after Close: %v", err)
	}
	if got, err := s.ReadFrame(w.ID(), pos, n); err != nil || string(got) != "x" {
		t.Fatalf("ReadFrame = %q, %v", got, err)
	}
	for _, c := range []struct{ pos, n int64 }{{0, 9}, {objstore.HeaderSize, 8}, {objstore.HeaderSize, -1}, {objstore.HeaderSize, 1<<31 + 100}} {
		if _, err := s.ReadFrame(w.ID(), c.pos, c.n); !errors.Is(err, objstore.ErrFrameSize) {
			t.Errorf("ReadFrame(%d, %d): %v, want ErrFrameSize", c.pos, c.n, err)
		}
	}
}

// flipByte changes one byte of a file in place, through a descriptor of its
// own, as a disk or another process would.
func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := []byte{0}
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x20
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func wantCorrupt(t *testing.T, err error, id uint64, pos int64) {
	t.Helper()
	if !errors.Is(err, objstore.ErrCorrupt) {
		t.Fatalf("err = %v, want ErrCorrupt", err)
	}
	var ce *objstore.CorruptError
	if !errors.As(err, &ce) || ce.ID != id || ce.Pos != pos {
		t.Fatalf("err = %#v, want a CorruptError at %016x:%d", err, id, pos)
	}
}

func TestReadFrameDetectsCorruption(t *testing.T) {
	t.Parallel()
	s, dir := openStore(t, objstore.Options{})
	p0, p1 := payload(1, 1000), payload(2, 3000)
	id, frames := writeObject(t, s, p0, p1)
	path := objPath(dir, id)
	f := frames[1]

	// Every single byte of the second frame, flipped in turn: length, CRC and
	// payload. The read fails with ErrCorrupt and never returns bytes; the
	// first frame is unaffected.
	for off := f.pos; off < f.pos+f.n; off += 97 {
		flipByte(t, path, off)
		got, err := s.ReadFrame(id, f.pos, f.n)
		if got != nil {
			t.Fatalf("byte %d flipped: ReadFrame returned %d bytes", off, len(got))
		}
		wantCorrupt(t, err, id, f.pos)
		if got, err := s.ReadFrame(id, frames[0].pos, frames[0].n); err != nil || !bytes.Equal(got, p0) {
			t.Fatalf("first frame after flipping byte %d: %v", off, err)
		}
		flipByte(t, path, off) // restore
		if got, err := s.ReadFrame(id, f.pos, f.n); err != nil || !bytes.Equal(got, p1) {
			t.Fatalf("restored: %v", err)
		}
	}

	// A length other than the frame's own is corrupt too: the metadata and
	// the file disagree, and neither payload can be trusted.
	_, err := s.ReadFrame(id, f.pos, f.n-1)
	wantCorrupt(t, err, id, f.pos)
	_, err = s.ReadFrame(id, frames[0].pos, frames[0].n+8)
	wantCorrupt(t, err, id, frames[0].pos)

	// A frame the file ends inside of.
	if err := os.Truncate(path, f.pos+f.n-1); err != nil {
		t.Fatal(err)
	}
	_, err = s.ReadFrame(id, f.pos, f.n)
	wantCorrupt(t, err, id, f.pos)
}

func TestReadFrameChecksHeader(t *testing.T) {
	t.Parallel()
	s, dir := openStore(t, objstore.Options{})
	a, fa := writeObject(t, s, []byte("a"))
	b, _ := writeObject(t, s, []byte("b"))

	// A file under another object's name: its header names the other id.
	raw, err := os.ReadFile(objPath(dir, a))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(objPath(dir, b), raw, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = s.ReadFrame(b, fa[0].pos, fa[0].n)
	wantCorrupt(t, err, b, 0)
	_, err = s.Scan(b, func(int64, int64, []byte) error { return nil })
	wantCorrupt(t, err, b, 0)

	// A stray file with no magic.
	stray := uint64(0x777)
	if err := os.WriteFile(objPath(dir, stray), []byte("hello, this is not an object"), 0o600); err != nil {
		t.Fatal(err)
	}
	end, err := s.Scan(stray, func(int64, int64, []byte) error { return nil })
	if end != 0 {
		t.Fatalf("validEnd = %d, want 0", end)
	}
	wantCorrupt(t, err, stray, 0)

	// An empty file, as a crash leaves a pool file whose header never
	// reached the disk.
	empty := uint64(0x778)
	if err := os.WriteFile(objPath(dir, empty), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	end, err = s.Scan(empty, func(int64, int64, []byte) error { return nil })
	if end != 0 {
		t.Fatalf("validEnd = %d, want 0", end)
	}
	wantCorrupt(t, err, empty, 0)
}

func TestScanTornTail(t *testing.T) {
	t.Parallel()
	s, dir := openStore(t, objstore.Options{})
	var ps [][]byte
	for i := range 5 {
		ps = append(ps, payload(uint64(i), 100+i*50))
	}
	id, frames := writeObject(t, s, ps...)
	path := objPath(dir, id)
	last := frames[len(frames)-1]
	end := last.pos + last.n
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}

	scan := func() (int64, int, error) {
		count := 0
		v, err := s.Scan(id, func(int64, int64, []byte) error { count++; return nil })
		return v, count, err
	}

	// Cut the file everywhere inside the last two frames: the valid prefix
	// ends at the last whole frame before the cut.
	for cut := frames[3].pos; cut <= end; cut++ {
		if err := os.WriteFile(path, raw[:cut], 0o600); err != nil {
			t.Fatal(err)
		}
		validEnd, count, err := scan()
		want, wantCount := frames[3].pos, 3
		if cut >= frames[4].pos {
			want, wantCount = frames[4].pos, 4
		}
		if cut == end {
			want, wantCount = end, 5
		}
		if validEnd != want || count != wantCount {
			t.Fatalf("cut at %d: validEnd %d after %d frames, want %d after %d", cut, validEnd, count, want, wantCount)
		}
		if cut == want {
			if err != nil {
				t.Fatalf("cut at frame boundary %d: %v", cut, err)
			}
		} else {
			wantCorrupt(t, err, id, want)
		}
	}

	// A tail of zeros, as a crash can leave where the size reached the disk
	// and the data did not: zero is never a frame's length.
	if err := os.WriteFile(path, append(append([]byte(nil), raw...), make([]byte, 4096)...), 0o600); err != nil {
		t.Fatal(err)
	}
	validEnd, count, err := scan()
	if validEnd != end || count != 5 {
		t.Fatalf("zero tail: validEnd %d after %d frames, want %d after 5", validEnd, count, end)
	}
	wantCorrupt(t, err, id, end)

	// A corrupt frame in the middle stops the scan before it.
	bad := append([]byte(nil), raw...)
	bad[frames[2].pos+objstore.FrameHeaderSize+5] ^= 1
	if err := os.WriteFile(path, bad, 0o600); err != nil {
		t.Fatal(err)
	}
	validEnd, count, err = scan()
	if validEnd != frames[2].pos || count != 2 {
		t.Fatalf("corrupt middle: validEnd %d after %d frames, want %d after 2", validEnd, count, frames[2].pos)
	}
	wantCorrupt(t, err, id, frames[2].pos)

	// fn's error stops the scan at the frame it refused.
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	stop := errors.New("stop")
	validEnd, err = s.Scan(id, func(pos, n int64, p []byte) error {
		if pos == frames[1].pos {
			return stop
		}
		return nil
	})
	if validEnd != frames[1].pos || err != stop {
		t.Fatalf("fn error: %d, %v", validEnd, err)
	}

	// An object with no frame at all scans clean.
	w, err := s.Create()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if validEnd, err := s.Scan(w.ID(), func(int64, int64, []byte) error { return nil }); validEnd != objstore.HeaderSize || err != nil {
		t.Fatalf("empty object: %d, %v", validEnd, err)
	}
}

func TestIDsNeverReused(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "objects")
	seen := map[uint64]bool{}
	create := func(s *objstore.Store) uint64 {
		t.Helper()
		id, _ := writeObject(t, s, []byte("x"))
		if seen[id] || id == 0 {
			t.Fatalf("id %d handed out twice (or zero)", id)
		}
		seen[id] = true
		return id
	}
	open := func(min uint64) *objstore.Store {
		t.Helper()
		s, err := objstore.Open(dir, objstore.Options{MinNextID: min})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}

	s := open(0)
	var highest uint64
	for range 10 { // more than the pool holds, so refills happen
		highest = max(highest, create(s))
	}
	s.Close()

	// Files present: new ids are above all of them.
	s = open(0)
	if id := create(s); id <= highest {
		t.Fatalf("after reopen: id %d, highest file %d", id, highest)
	}
	s.Close()

	// Every file gone (collected): MinNextID keeps the ids the metadata knew
	// from coming back.
	infos := listIDs(t, dir)
	for _, id := range infos {
		os.Remove(objPath(dir, id))
	}
	s = open(1000)
	if id := create(s); id < 1000 {
		t.Fatalf("MinNextID 1000: got id %d", id)
	}
	s.Close()

	// A file above MinNextID wins over it.
	if err := os.WriteFile(objPath(dir, 5000), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s = open(2000)
	if id := create(s); id <= 5000 {
		t.Fatalf("file 5000 present: got id %d", id)
	}
	// Aborted objects' ids are not handed out again by this store either.
	w, err := s.Create()
	if err != nil {
		t.Fatal(err)
	}
	aborted := w.ID()
	seen[aborted] = true
	w.Abort()
	if _, err := os.Stat(objPath(dir, aborted)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("aborted object still there: %v", err)
	}
	for range 6 {
		create(s)
	}
	s.Close()
}

// listIDs returns the ids of the object files in dir, straight from the
// directory.
func listIDs(t *testing.T, dir string) []uint64 {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var ids []uint64
	for _, e := range entries {
		var id uint64
		if _, err := fmt.Sscanf(e.Name(), "%016x.obj", &id); err == nil {
			ids = append(ids, id)
		}
	}
	return ids
}

func TestListHidesPool(t *testing.T) {
	t.Parallel()
	s, dir := openStore(t, objstore.Options{})
	onDisk := listIDs(t, dir)
	if len(onDisk) == 0 {
		t.Fatal("no pool files created by Open")
	}
	infos, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 0 {
		t.Fatalf("List shows %d entries before any Create: %+v", len(infos), infos)
	}
	// Remove treats a pool file as absent and leaves it alone.
	if err := s.Remove(onDisk[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(objPath(dir, onDisk[0])); err != nil {
		t.Fatalf("pool file removed: %v", err)
	}

	w, err := s.Create()
	if err != nil {
		t.Fatal(err)
	}
	infos, err = s.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 1 || infos[0].ID != w.ID() || !infos[0].Writing || infos[0].Size != objstore.HeaderSize {
		t.Fatalf("List while writing = %+v", infos)
	}
	if err := s.Remove(w.ID()); !errors.Is(err, objstore.ErrInUse) {
		t.Fatalf("Remove while writing: %v", err)
	}
	if _, _, err := w.AppendFrame(make([]byte, 100)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	infos, err = s.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 1 || infos[0].Writing || infos[0].Size != objstore.HeaderSize+objstore.FrameHeaderSize+100 || infos[0].ModTime.IsZero() {
		t.Fatalf("List after Close = %+v", infos)
	}

	// Close deletes the unclaimed pool files: only the object is left.
	s.Close()
	if ids := listIDs(t, dir); len(ids) != 1 || ids[0] != w.ID() {
		t.Fatalf("after Close the directory holds %x, want only %x", ids, w.ID())
	}
	// After a crash, pool files are plain header-only objects in List.
	s2, err := objstore.Open(dir, objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if err := os.WriteFile(objPath(dir, 1<<40), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	infos, err = s2.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 2 || infos[0].ID != w.ID() || infos[1].ID != 1<<40 || infos[1].Size != 0 {
		t.Fatalf("List with a leftover = %+v", infos)
	}
}

func TestRemove(t *testing.T) {
	t.Parallel()
	s, dir := openStore(t, objstore.Options{})
	id, frames := writeObject(t, s, []byte("payload"))
	if _, err := s.ReadFrame(id, frames[0].pos, frames[0].n); err != nil { // caches a handle
		t.Fatal(err)
	}
	for range 2 {
		if err := s.Remove(id); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Remove(123456); err != nil {
		t.Fatalf("Remove of an object that never existed: %v", err)
	}
	if _, err := os.Stat(objPath(dir, id)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("file still there: %v", err)
	}
	// The cached handle went with it: the read fails instead of serving the
	// removed file.
	_, err := s.ReadFrame(id, frames[0].pos, frames[0].n)
	if !errors.Is(err, stream.StreamBackendFailed) || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("read of removed object: %v", err)
	}
	if op, _ := errs.FieldOf(err, "op"); op != "objstore.open" {
		t.Fatalf("op = %v", op)
	}
}

func TestClosedStore(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t, objstore.Options{})
	id, frames := writeObject(t, s, []byte("a"))
	w, err := s.Create()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := s.Create(); !errors.Is(err, objstore.ErrClosed) {
		t.Fatalf("Create: %v", err)
	}
	if _, err := s.ReadFrame(id, frames[0].pos, frames[0].n); !errors.Is(err, objstore.ErrClosed) {
		t.Fatalf("ReadFrame: %v", err)
	}
	if _, err := s.List(); !errors.Is(err, objstore.ErrClosed) {
		t.Fatalf("List: %v", err)
	}
	// A writer open at Close finishes its object.
	if _, _, err := w.AppendFrame([]byte("b")); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestPrepareDir(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	if err := os.Chmod(base, 0o700); err != nil {
		t.Fatal(err)
	}

	// Missing directories are created, parents included, mode 0700.
	deep := filepath.Join(base, "a", "b", "c")
	if err := objstore.PrepareDir(deep); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(base, "a"), deep} {
		fi, err := os.Stat(p)
		if err != nil || fi.Mode().Perm() != 0o700 {
			t.Fatalf("%s: %v, %v", p, fi.Mode(), err)
		}
	}
	if err := objstore.PrepareDir(deep); err != nil {
		t.Fatalf("existing directory: %v", err)
	}
	if entries, _ := os.ReadDir(deep); len(entries) != 0 {
		t.Fatalf("probe left behind: %v", entries)
	}
	readOnlyOthers := filepath.Join(base, "ok755")
	if err := os.Mkdir(readOnlyOthers, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(readOnlyOthers, 0o755)
	if err := objstore.PrepareDir(readOnlyOthers); err != nil {
		t.Fatalf("mode 0755: %v", err)
	}

	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	open := filepath.Join(base, "open")
	if err := os.Mkdir(open, 0o700); err != nil {
		t.Fatal(err)
	}
	os.Chmod(open, 0o777)
	group := filepath.Join(base, "group")
	if err := os.Mkdir(group, 0o700); err != nil {
		t.Fatal(err)
	}
	os.Chmod(group, 0o720)

	refusals := []struct {
		name, path, reason string
	}{
		{"not a directory", file, "not a directory"},
		{"file in the way", filepath.Join(file, "objects"), "cannot create the directory"},
		{"mode 0777", open, "writable by group or others (mode 0777)"},
		{"group-writable", group, "writable by group or others (mode 0720)"},
	}
	if os.Geteuid() != 0 { // root writes anywhere
		ro := filepath.Join(base, "readonly")
		if err := os.Mkdir(ro, 0o500); err != nil {
			t.Fatal(err)
		}
		refusals = append(refusals, struct{ name, path, reason string }{"not writable", ro, "not writable by this process"})
	}
	for _, c := range refusals {
		t.Run(c.name, func(t *testing.T) {
			err := objstore.PrepareDir(c.path)
			if !errors.Is(err, stream.StreamDirectoryUnusable) {
				t.Fatalf("err = %v, want STREAM_DIRECTORY_UNUSABLE", err)
			}
			if p, _ := errs.FieldOf(err, "path"); p != c.path {
				t.Errorf("path field = %v, want %s", p, c.path)
			}
			if r, _ := errs.FieldOf(err, "reason"); r != c.reason {
				t.Errorf("reason field = %v, want %s", r, c.reason)
			}
			// Open refuses the same directory the same way.
			if _, err := objstore.Open(c.path, objstore.Options{}); !errors.Is(err, stream.StreamDirectoryUnusable) {
				t.Errorf("Open: %v", err)
			}
		})
	}
}

// TestConcurrentReadersWriterRemover runs a writer making objects, readers
// reading every frame published so far through a cache far smaller than the
// number of objects, and a remover collecting old objects. A read returns the
// right bytes or, for a removed object only, a not-exist error: never wrong
// bytes.
func TestConcurrentReadersWriterRemover(t *testing.T) {
	t.Parallel()
	s, _ := openStore(t, objstore.Options{MaxOpenFiles: 4})

	type pub struct {
		id uint64
		f  frame
	}
	var (
		mu      sync.RWMutex
		frames  []pub
		removed = map[uint64]bool{}
		reads   atomic.Int64
		done    = make(chan struct{})
		wg      sync.WaitGroup
	)

	wg.Add(1)
	go func() { // writer
		defer wg.Done()
		defer close(done)
		for obj := range 60 {
			w, err := s.Create()
			if err != nil {
				t.Error(err)
				return
			}
			var fs []frame
			for i := range 1 + obj%5 {
				p := payload(uint64(obj*100+i), 10+rand.IntN(5000))
				pos, n, err := w.AppendFrame(p)
				if err != nil {
					t.Error(err)
					return
				}
				fs = append(fs, frame{pos, n, p})
			}
			if err := w.Sync(); err != nil {
				t.Error(err)
				return
			}
			if err := w.Close(); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			for _, f := range fs {
				frames = append(frames, pub{w.ID(), f})
			}
			mu.Unlock()
		}
	}()

	wg.Add(1)
	go func() { // remover: drops an early object now and then
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			mu.RLock()
			var victim uint64
			if len(frames) > 20 && i%50 == 0 {
				victim = frames[rand.IntN(len(frames)/2)].id
			}
			mu.RUnlock()
			if victim != 0 {
				mu.Lock()
				removed[victim] = true // before the file goes, so readers may expect it gone
				mu.Unlock()
				if err := s.Remove(victim); err != nil {
					t.Error(err)
				}
			}
			if _, err := s.List(); err != nil {
				t.Error(err)
			}
		}
	}()

	for range 4 { // readers
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				mu.RLock()
				if len(frames) == 0 {
					mu.RUnlock()
					continue
				}
				p := frames[rand.IntN(len(frames))]
				mu.RUnlock()
				got, err := s.ReadFrame(p.id, p.f.pos, p.f.n)
				if err != nil {
					mu.RLock()
					gone := removed[p.id]
					mu.RUnlock()
					if !gone || !errors.Is(err, fs.ErrNotExist) {
						t.Errorf("read %x@%d: %v", p.id, p.f.pos, err)
						return
					}
					continue
				}
				if !bytes.Equal(got, p.f.payload) {
					t.Errorf("read %x@%d: wrong bytes", p.id, p.f.pos)
					return
				}
				reads.Add(1)
			}
		}()
	}
	wg.Wait()
	if reads.Load() == 0 {
		t.Fatal("no read succeeded")
	}
	t.Logf("%d reads, %d objects removed", reads.Load(), len(removed))
}

// TestReadFramesReadsARunAtOnce: consecutive frames come back as written,
// each checked; a damaged frame anywhere in the run, or a run past the
// end, is ErrCorrupt and no payload is returned.
func TestReadFramesReadsARunAtOnce(t *testing.T) {
	t.Parallel()
	s, dir := openStore(t, objstore.Options{})
	id, frames := writeObject(t, s, payload(1, 10), payload(2, 1), payload(3, 5000), payload(4, 300))
	lens := func(fs []frame) []int64 {
		var out []int64
		for _, f := range fs {
			out = append(out, f.n)
		}
		return out
	}
	got, err := s.ReadFrames(id, frames[1].pos, lens(frames[1:]))
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range got {
		if !bytes.Equal(p, frames[1+i].payload) {
			t.Fatalf("frame %d differs", 1+i)
		}
	}
	if _, err := s.ReadFrames(id, frames[2].pos, []int64{frames[2].n, frames[3].n + 1}); !errors.Is(err, objstore.ErrCorrupt) {
		t.Fatalf("run past the end: %v, want ErrCorrupt", err)
	}
	// Flip a byte of the third frame's payload.
	f, err := os.OpenFile(objPath(dir, id), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	at := frames[2].pos + objstore.FrameHeaderSize + 100
	var b [1]byte
	if _, err := f.ReadAt(b[:], at); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x40
	if _, err := f.WriteAt(b[:], at); err != nil {
		t.Fatal(err)
	}
	f.Close()
	got, err = s.ReadFrames(id, frames[0].pos, lens(frames))
	if !errors.Is(err, objstore.ErrCorrupt) || got != nil {
		t.Fatalf("damaged run: %d payloads, %v; want ErrCorrupt and none", len(got), err)
	}
	if _, err := s.ReadFrames(id, frames[0].pos, lens(frames[:2])); err != nil {
		t.Fatalf("the frames before the damage: %v", err)
	}
}
