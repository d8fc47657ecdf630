//go:build linux

package objstore

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/picomq/picomq/internal/testwait"
)

// The tests of this file are not parallel: they measure which pages are in
// the page cache, which the machine's other I/O can change.

// residentPages returns how many of the file's pages are in the page cache,
// and how many it has.
func residentPages(t *testing.T, path string) (resident, pages int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	ps := os.Getpagesize()
	vec := make([]byte, (len(m)+ps-1)/ps)
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatal(errno)
	}
	for _, v := range vec {
		if v&1 != 0 {
			resident++
		}
	}
	return resident, len(vec)
}

// writeObjects writes n objects of one frame of size bytes each and returns
// their ids and payloads.
func writeObjects(t *testing.T, s *Store, n, size int) ([]uint64, [][]byte) {
	t.Helper()
	var ids []uint64
	var payloads [][]byte
	for i := range n {
		p := bytes.Repeat([]byte{byte('a' + i)}, size)
		id, _, _ := writeOne(t, s, p)
		ids, payloads = append(ids, id), append(payloads, p)
	}
	return ids, payloads
}

// TestOldObjectsLeaveThePageCache checks that once more than CachedBytes
// were written after an object, its pages are dropped — and that it still
// reads back whole — while the newest stay cached.
func TestOldObjectsLeaveThePageCache(t *testing.T) {
	const size = 500 << 10 // two objects fit in 1 MiB, three do not
	s := openInternal(t, Options{CachedBytes: 1 << 20})
	ids, payloads := writeObjects(t, s, 6, size)
	objSize := int64(HeaderSize + FrameHeaderSize + size)

	want := 4 * objSize // all but the newest two
	testwait.Until(t, 10*time.Second, fmt.Sprintf("%d bytes are dropped from the page cache", want), func() bool {
		return s.dropped.Load() >= want
	})
	if got := s.dropped.Load(); got != want {
		t.Fatalf("dropped %d bytes, want %d", got, want)
	}
	for i, id := range ids {
		resident, pages := residentPages(t, s.path(id))
		if i < 4 && resident != 0 {
			t.Errorf("object %d of 6: %d of %d pages still cached, want none", i+1, resident, pages)
		}
		if i >= 4 && resident != pages {
			t.Errorf("object %d of 6: %d of %d pages cached, want all", i+1, resident, pages)
		}
	}
	got, err := s.ReadFrame(ids[0], HeaderSize, int64(FrameHeaderSize+size))
	if err != nil || !bytes.Equal(got, payloads[0]) {
		t.Fatalf("dropped object reads back: %v, same bytes %v", err, bytes.Equal(got, payloads[0]))
	}
}

// TestNegativeCachedBytesKeepsPages checks that CachedBytes < 0 leaves every
// written object's pages to the kernel.
func TestNegativeCachedBytesKeepsPages(t *testing.T) {
	s := openInternal(t, Options{CachedBytes: -1})
	ids, _ := writeObjects(t, s, 3, 256<<10)
	s.dropOld() // what the refill loop would do
	if s.dropped.Load() != 0 {
		t.Fatalf("dropped %d bytes, want none", s.dropped.Load())
	}
	for i, id := range ids {
		if resident, pages := residentPages(t, s.path(id)); resident != pages {
			t.Errorf("object %d: %d of %d pages cached, want all", i+1, resident, pages)
		}
	}
}

// TestDropOldSkipsRemovedObjects checks that an object removed before its
// pages were due to be dropped is simply forgotten.
func TestDropOldSkipsRemovedObjects(t *testing.T) {
	s := openInternal(t, Options{CachedBytes: -1})
	ids, _ := writeObjects(t, s, 3, 64<<10)
	if err := s.Remove(ids[0]); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.cachedBytes = 100 // every object but the newest is due
	s.recent = []recentObject{{ids[0], 100}, {ids[1], 100}, {ids[2], 100}}
	s.recentBytes = 300
	s.mu.Unlock()
	s.dropOld()
	if got := s.dropped.Load(); got != 100 {
		t.Fatalf("dropped %d bytes, want 100 (object 2's; object 1 was removed)", got)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if left := s.recent[s.recentHead:]; len(left) != 1 || left[0].id != ids[2] || s.recentBytes != 100 {
		t.Fatalf("left %v (%d bytes), want only the newest", left, s.recentBytes)
	}
}

// TestDropOldKeepsTheNewestWithinTheWindow checks the bookkeeping over
// many objects: after each one, exactly the newest that fit in CachedBytes
// are left to drop later, in order, and their sizes add up.
func TestDropOldKeepsTheNewestWithinTheWindow(t *testing.T) {
	s := openInternal(t, Options{})
	s.mu.Lock()
	s.cachedBytes = 250
	s.mu.Unlock()
	var sizes []int64
	for i := range 200 {
		size := int64(10 + i%7*15) // 10 to 100 bytes
		sizes = append(sizes, size)
		s.wrote(1<<40+uint64(i), size) // no such files: nothing to drop but the record
		s.dropOld()

		// The newest objects whose sizes fit in the window.
		var want []uint64
		var sum int64
		for j := len(sizes) - 1; j >= 0 && sum+sizes[j] <= 250; j-- {
			sum += sizes[j]
			want = append([]uint64{1<<40 + uint64(j)}, want...)
		}
		s.mu.Lock()
		left, bytes := append([]recentObject(nil), s.recent[s.recentHead:]...), s.recentBytes
		s.mu.Unlock()
		var got []uint64
		for _, o := range left {
			got = append(got, o.id)
		}
		if !slices.Equal(got, want) || bytes != sum {
			t.Fatalf("after object %d: left %v (%d bytes), want %v (%d bytes)", i, got, bytes, want, sum)
		}
	}
}
