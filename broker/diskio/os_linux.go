//go:build linux

package diskio

import (
	"io"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// maxIOV is how many pieces one pwritev(2) takes (IOV_MAX).
const maxIOV = 1024

func fdatasync(f *os.File) error {
	return onDescriptor(f, "fdatasync", syscall.Fdatasync)
}

func pwritev(f *os.File, iovs [][]byte, off int64) error {
	for len(iovs) > 0 {
		batch := iovs[:min(len(iovs), maxIOV)]
		var n int
		err := onDescriptor(f, "pwritev", func(fd int) (err error) {
			n, err = unix.Pwritev(fd, batch, off)
			return err
		})
		if err != nil {
			return err
		}
		if n == 0 {
			return &os.PathError{Op: "pwritev", Path: f.Name(), Err: io.ErrShortWrite}
		}
		off += int64(n)
		for n > 0 {
			if n < len(iovs[0]) {
				iovs[0] = iovs[0][n:]
				break
			}
			n -= len(iovs[0])
			iovs = iovs[1:]
		}
	}
	return nil
}

// onDescriptor runs call on f's descriptor, again while it is interrupted.
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
