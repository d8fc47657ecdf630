// Package testwait is how the tests wait for something that happens on its
// own time — a leader elected, a file written, a pod ready: poll a
// condition on the real clock until it holds or a timeout passes, then fail
// the test saying what was waited for (and, for a condition that explains
// itself with an error, its last one). One loop for every package, so
// every wait polls alike: at first every millisecond, backing off to every
// 100 ms for the slow ones.
//
// It is for conditions, not for time: a test that must see nothing happen
// for a while measures that period itself.
package testwait

import (
	"fmt"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// maxInterval bounds the back-off between two looks.
const maxInterval = 100 * time.Millisecond

// Poll reports whether cond holds within timeout (looked at once more at
// the end).
func Poll(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	interval := time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			return cond()
		}
		time.Sleep(interval)
		interval = min(2*interval, maxInterval)
	}
	return true
}

// Until fails t unless cond holds within timeout; what says what was
// waited for.
func Until(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Poll(timeout, cond) {
		t.Fatalf("timed out after %v waiting until %s", timeout, what)
	}
}

// NoError fails t unless cond returns nil within timeout, with cond's last
// error; what says what was waited for (empty: the caller's file and line).
func NoError(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	var last error
	if Poll(timeout, func() bool { last = cond(); return last == nil }) {
		return
	}
	if what == "" {
		_, file, line, _ := runtime.Caller(1)
		what = fmt.Sprintf("%s:%d", filepath.Base(file), line)
	}
	t.Fatalf("%s: still not true after %v: %v", what, timeout, last)
}
