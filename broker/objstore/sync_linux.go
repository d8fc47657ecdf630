//go:build linux

package objstore

import (
	"os"
	"syscall"
)

// fdatasync flushes f's data, and the metadata needed to read it back (its
// size), without the timestamps fsync would also write. SyscallConn keeps the
// descriptor from being closed under the call.
func fdatasync(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		for {
			serr = syscall.Fdatasync(int(fd))
			if serr != syscall.EINTR {
				return
			}
		}
	}); err != nil {
		return err
	}
	if serr != nil {
		return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: serr}
	}
	return nil
}
