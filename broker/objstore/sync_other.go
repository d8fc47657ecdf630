//go:build !linux

package objstore

import "os"

// fdatasync falls back to fsync where the system has no fdatasync. (On macOS
// neither reaches the platter; the broker targets Linux.)
func fdatasync(f *os.File) error { return f.Sync() }

// syncFS has no single call outside Linux: SyncObjects syncs each file.
func syncFS(dir string) error { return errSyncFSUnsupported }

// dropPages has no portable call: pages stay to the kernel's judgement.
func dropPages(f *os.File) error { return errDropUnsupported }

// pwritev writes the pieces iovs one after the other to f from offset off,
// one WriteAt each.
func pwritev(f *os.File, iovs [][]byte, off int64) error {
	for _, p := range iovs {
		if _, err := f.WriteAt(p, off); err != nil {
			return err
		}
		off += int64(len(p))
	}
	return nil
}
