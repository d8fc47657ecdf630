package objstore

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkCreateWriteSync measures one group-commit object: Create, 4 KiB
// frames up to the object's size, Sync, Close. "pool" is the store as the
// broker runs it; "nopool" pays a directory fsync per Create, for comparison.
func BenchmarkCreateWriteSync(b *testing.B) {
	for _, size := range []int{64 << 10, 1 << 20} {
		for _, pool := range []struct {
			name string
			size int
		}{{"pool", 0}, {"nopool", -1}} {
			b.Run(fmt.Sprintf("%dKiB/%s", size>>10, pool.name), func(b *testing.B) {
				s, err := Open(filepath.Join(b.TempDir(), "objects"), Options{PoolSize: pool.size})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				frame := make([]byte, 4<<10)
				for i := range frame {
					frame[i] = byte(i * 7)
				}
				b.SetBytes(int64(size))
				b.ResetTimer()
				for range b.N {
					w, err := s.Create()
					if err != nil {
						b.Fatal(err)
					}
					for w.Size() < int64(size) {
						if _, _, err := w.AppendFrame(frame); err != nil {
							b.Fatal(err)
						}
					}
					if err := w.Sync(); err != nil {
						b.Fatal(err)
					}
					if err := w.Close(); err != nil {
						b.Fatal(err)
					}
					b.StopTimer()
					s.Remove(w.ID()) // keep the disk from filling; not part of the commit path
					b.StartTimer()
				}
				b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/object")
			})
		}
	}
}

// BenchmarkFdatasync4KiB is the floor: a plain 4 KiB append to an open file
// and its fdatasync, no framing, no buffering.
func BenchmarkFdatasync4KiB(b *testing.B) {
	f, err := os.Create(filepath.Join(b.TempDir(), "plain"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4<<10)
	b.SetBytes(int64(len(buf)))
	b.ResetTimer()
	for range b.N {
		if _, err := f.Write(buf); err != nil {
			b.Fatal(err)
		}
		if err := fdatasync(f); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAppendSync4KiB is the same 4 KiB append through a Writer:
// one frame, one Sync, on one growing object.
func BenchmarkAppendSync4KiB(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "objects"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	w, err := s.Create()
	if err != nil {
		b.Fatal(err)
	}
	defer w.Abort()
	frame := make([]byte, 4<<10-FrameHeaderSize)
	b.SetBytes(4 << 10)
	b.ResetTimer()
	for range b.N {
		if _, _, err := w.AppendFrame(frame); err != nil {
			b.Fatal(err)
		}
		if err := w.Sync(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReadFrame4KiB reads one 4 KiB frame through the handle cache:
// a pread and a CRC.
func BenchmarkReadFrame4KiB(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "objects"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	w, err := s.Create()
	if err != nil {
		b.Fatal(err)
	}
	pos, n, err := w.AppendFrame(make([]byte, 4<<10))
	if err != nil {
		b.Fatal(err)
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(4 << 10)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := s.ReadFrame(w.ID(), pos, n); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkGroupCommitObject measures one object as the group commit
// writes it under 64 writers of 100 KiB batches: 20 payloads, Sync, Close,
// with the payloads copied into the writer's buffer (copy) or written from
// where they are (ref).
func BenchmarkGroupCommitObject(b *testing.B) {
	payloads := make([][]byte, 20)
	for i := range payloads {
		payloads[i] = make([]byte, 100<<10)
		for j := range payloads[i] {
			payloads[i][j] = byte(i + j*7)
		}
	}
	for _, mode := range []string{"copy", "ref"} {
		b.Run(mode, func(b *testing.B) {
			s, err := Open(filepath.Join(b.TempDir(), "objects"), Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			b.SetBytes(int64(len(payloads) * (100 << 10)))
			b.ReportAllocs()
			for b.Loop() {
				w, err := s.Create()
				if err != nil {
					b.Fatal(err)
				}
				for _, p := range payloads {
					if mode == "copy" {
						_, _, err = w.AppendFrame(p)
					} else {
						_, _, err = w.AppendFrameRef(p)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				if err := w.Close(); err != nil {
					b.Fatal(err)
				}
				if err := s.Remove(w.ID()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
