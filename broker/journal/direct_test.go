package journal

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"unsafe"
)

func TestAlignedBuffer(t *testing.T) {
	for _, n := range []int{DirectAlign, 1 << 20, 3 * DirectAlign} {
		b := AlignedBuffer(n)
		if len(b) != n || cap(b) != n {
			t.Fatalf("AlignedBuffer(%d): len %d cap %d", n, len(b), cap(b))
		}
		if p := uintptr(unsafe.Pointer(unsafe.SliceData(b))); p%DirectAlign != 0 {
			t.Fatalf("AlignedBuffer(%d) at %#x, not a multiple of %d", n, p, DirectAlign)
		}
	}
}

// TestSparesOnADisk: on a real directory, a spare is zero-filled whole
// (directly where the size keeps direct I/O's alignment, through the page
// cache where it does not), segments begun from it hold what was
// appended, and the journal reopens with every object.
func TestSparesOnADisk(t *testing.T) {
	for _, size := range []int64{64 << 10, 64<<10 + 100} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			dir := t.TempDir()
			opts := Options{Incarnation: "broker-0/abc", SegmentBytes: size, Preallocate: true}
			j, err := Open(Dir(dir), opts)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { j.Close() }()
			spare := func(j *Journal) {
				t.Helper()
				waitSpare(t, j)
				b, err := os.ReadFile(filepath.Join(dir, spareName))
				if err != nil {
					t.Fatal(err)
				}
				if int64(len(b)) != size || !allZero(b) {
					t.Fatalf("the spare is %d bytes (want %d), all zeros: %v", len(b), size, allZero(b))
				}
			}
			var want []Object
			for i := range uint64(60) {
				if i%10 == 0 {
					spare(j) // so that the next segment is begun from it
				}
				o := obj(i+1, i%4, 0, i/4, fmt.Sprintf("payload-%02d-%s", i, bytes.Repeat([]byte("z"), 4000)))
				mustAppend(t, j, o)
				want = append(want, o)
			}
			if n := len(j.Segments()); n < 3 {
				t.Fatalf("%d segments: the test proves nothing", n)
			}
			j.Close()
			if j, err = Open(Dir(dir), opts); err != nil {
				t.Fatal(err)
			}
			if err := j.Damaged(); err != nil {
				t.Fatal(err)
			}
			for _, o := range want {
				if _, payload, err := j.Read(o.ID); err != nil || !bytes.Equal(payload, o.Payload) {
					t.Fatalf("object %d after reopening: %v", o.ID, err)
				}
			}
		})
	}
}
