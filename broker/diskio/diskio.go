// Package diskio is the storage seam: the few file operations through which
// the broker's stores (the objects, the metadata log's segments) write what
// they acknowledge — create, write, sync, rename, remove. OS does them; Faulty
// injects the failures a real volume shows (EIO on a write or an fsync, a
// short write, ENOSPC), chosen by operation, path and count, so that tests
// can prove an append that met one is never acknowledged and nothing
// acknowledged before is lost.
package diskio

import (
	"io/fs"
	"os"
)

// Op names one file operation, for Faulty's rules and for errors.
type Op string

const (
	OpCreate Op = "create"
	OpWrite  Op = "write"
	OpSync   Op = "sync"
	OpRename Op = "rename"
	OpRemove Op = "remove"
)

// FS is the seam. Files stay *os.File: the stores also read, map and
// advise them, which no fault needs to reach.
type FS interface {
	// OpenFile is os.OpenFile (OpCreate when flag has O_CREATE, else no op).
	OpenFile(path string, flag int, perm fs.FileMode) (*os.File, error)
	// WriteAt writes all of p at off, or fails.
	WriteAt(f *os.File, p []byte, off int64) (int, error)
	// WriteV writes the pieces one after the other from off (pwritev), or
	// fails; it may reslice the pieces.
	WriteV(f *os.File, pieces [][]byte, off int64) error
	// Sync makes f's data durable (fdatasync).
	Sync(f *os.File) error
	Rename(from, to string) error
	Remove(path string) error
}

// OS is the real file system.
var OS FS = osFS{}

type osFS struct{}

func (osFS) OpenFile(path string, flag int, perm fs.FileMode) (*os.File, error) {
	return os.OpenFile(path, flag, perm)
}
func (osFS) WriteAt(f *os.File, p []byte, off int64) (int, error) { return f.WriteAt(p, off) }
func (osFS) WriteV(f *os.File, pieces [][]byte, off int64) error  { return pwritev(f, pieces, off) }
func (osFS) Sync(f *os.File) error                                { return fdatasync(f) }
func (osFS) Rename(from, to string) error                         { return os.Rename(from, to) }
func (osFS) Remove(path string) error                             { return os.Remove(path) }

// Or returns fs, or OS when fs is nil: the zero value of an option.
func Or(fs FS) FS {
	if fs == nil {
		return OS
	}
	return fs
}
