package objstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
)

// FuzzScan: an object file of any content after a valid header — whole,
// torn or corrupt frames — is scanned without a panic, and what Scan
// reports holds: frames contiguous from the header, each payload matching
// its checksum and what ReadFrame returns, validEnd just after the last,
// and a nil error only when the file ends there.
func FuzzScan(f *testing.F) {
	frame := func(p string) []byte { return append(appendFrameHeader(nil, []byte(p)), p...) }
	whole := append(frame("one"), frame("second frame")...)
	f.Add(whole)
	f.Add(whole[:len(whole)-3])                                   // torn
	f.Add(append(bytes.Clone(whole), 0, 0, 0))                    // a torn header after whole frames
	f.Add(append(frame("x"), 0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0)) // a huge length
	flipped := bytes.Clone(whole)
	flipped[len(flipped)-1] ^= 1 // the last payload's CRC no longer matches
	f.Add(flipped)
	f.Add([]byte{})

	dir := f.TempDir()
	s, err := Open(dir, Options{PoolSize: -1})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = s.Close() })
	var next atomic.Uint64
	next.Store(1 << 40) // far from any id the store hands out
	f.Fuzz(func(t *testing.T, body []byte) {
		id := next.Add(1)
		path := filepath.Join(dir, fileName(id))
		file := append(appendHeader(nil, id), body...)
		if err := os.WriteFile(path, file, 0o644); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(path)
		want := int64(HeaderSize)
		type seen struct {
			pos, n  int64
			payload []byte
		}
		var frames []seen
		end, err := s.Scan(id, func(pos, n int64, payload []byte) error {
			if pos != want {
				t.Fatalf("frame at %d, want %d (contiguous)", pos, want)
			}
			if int64(len(payload)) != n-FrameHeaderSize || len(payload) == 0 || len(payload) > MaxPayload {
				t.Fatalf("frame at %d: %d payload bytes for a frame of %d", pos, len(payload), n)
			}
			if got := binary.LittleEndian.Uint32(file[pos+4 : pos+8]); got != checksum(payload) {
				t.Fatalf("frame at %d passed with a checksum that does not match", pos)
			}
			frames = append(frames, seen{pos, n, payload})
			want = pos + n
			return nil
		})
		if end != want {
			t.Fatalf("validEnd %d, want %d after the frames reported", end, want)
		}
		switch {
		case err == nil && end != int64(len(file)):
			t.Fatalf("nil error with %d bytes after validEnd", int64(len(file))-end)
		case err != nil && !errors.Is(err, ErrCorrupt):
			t.Fatalf("Scan: %v; want ErrCorrupt or nil", err)
		}
		for _, fr := range frames {
			got, err := s.ReadFrame(id, fr.pos, fr.n)
			if err != nil || !bytes.Equal(got, fr.payload) {
				t.Fatalf("ReadFrame at %d: %q, %v; want what Scan reported", fr.pos, got, err)
			}
		}
		s.cache.evict(id)
	})
}
