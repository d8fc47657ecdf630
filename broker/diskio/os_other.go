//go:build !linux

package diskio

import "os"

func fdatasync(f *os.File) error { return f.Sync() }

func pwritev(f *os.File, iovs [][]byte, off int64) error {
	for _, p := range iovs {
		if _, err := f.WriteAt(p, off); err != nil {
			return err
		}
		off += int64(len(p))
	}
	return nil
}
