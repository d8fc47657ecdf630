//go:build linux

package objstore

import (
	"errors"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// fdatasync flushes f's data, and the metadata needed to read it back (its
// size), without the timestamps fsync would also write.
func fdatasync(f *os.File) error {
	return onDescriptor(f, "fdatasync", syscall.Fdatasync)
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
	err = onDescriptor(d, "syncfs", unix.Syncfs)
	if errors.Is(err, unix.ENOSYS) {
		return errSyncFSUnsupported
	}
	return err
}

// onDescriptor runs call on f's descriptor, again while it is interrupted.
// SyscallConn keeps the descriptor from being closed under the call.
func onDescriptor(f *os.File, op string, call func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		for {
			if serr = call(int(fd)); serr != syscall.EINTR {
				return
			}
		}
	}); err != nil {
		return err
	}
	if serr != nil {
		return &os.PathError{Op: op, Path: f.Name(), Err: serr}
	}
	return nil
}

// dropPages asks the kernel to drop f's cached pages (POSIX_FADV_DONTNEED):
// it frees the clean ones and leaves any dirty page alone.
func dropPages(f *os.File) error {
	return onDescriptor(f, "fadvise", func(fd int) error {
		return unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED)
	})
}
