//go:build linux

package objstore

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
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

// syncFS makes every file of the filesystem holding dir durable, names
// included, with one syncfs(2): one journal commit for all of them, where
// an fdatasync each would cost a commit apiece. On the broker's own volume
// that is exactly its objects; elsewhere it also writes others' dirty pages,
// which is harmless.
func syncFS(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	rc, err := d.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		for {
			serr = unix.Syncfs(int(fd))
			if serr != unix.EINTR {
				if serr == unix.ENOSYS {
					serr = errSyncFSUnsupported
				}
				return
			}
		}
	}); err != nil {
		return err
	}
	if serr == errSyncFSUnsupported {
		return serr
	}
	if serr != nil {
		return &os.PathError{Op: "syncfs", Path: dir, Err: serr}
	}
	return nil
}
