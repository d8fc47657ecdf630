package subscriber

import "github.com/picomq/picomq/broker/stream"

// ErrCrash is what a CrashBeforeCommit hook returns to simulate a crash
// between a handler's success and its commit.
var ErrCrash = errCrash

// SetCrashBeforeCommit installs f between every handler's success and the
// commit of its offset (nil removes it). It must not be called while a
// subscriber runs.
func SetCrashBeforeCommit(f func(partition int, e stream.EntryValue) error) { testHookBeforeCommit = f }
