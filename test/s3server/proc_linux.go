package s3server

import "syscall"

// sysProcAttr: weed in a process group of its own (a ^C to go test does
// not stop it half-way through a test's cleanup), killed when the test
// binary dies (a crashed or killed go test leaves no server holding ports).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
