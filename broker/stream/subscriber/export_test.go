package subscriber

import "github.com/picomq/picomq/broker/stream"

// ErrCrash is what a CrashBeforeCommit hook returns to simulate a crash
// between a handler's success and its commit.
var ErrCrash = errCrash

// SetCrashBeforeCommit installs f in sub between every handler's success
// and the commit of its offset (nil removes it). It must not be called
// while sub runs; other subscribers are not affected.
func SetCrashBeforeCommit(sub *Subscriber, f func(partition int, e stream.EntryValue) error) {
	sub.beforeCommit = f
}
