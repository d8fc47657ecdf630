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
