package core

import (
	"context"
	"testing"
	"time"
)

// eventually fails t unless cond holds within timeout, checking every
// millisecond or so; what says what was waited for.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting until %s", timeout, what)
		}
		time.Sleep(time.Millisecond)
	}
}

// checkpointed puts what the journal acknowledged into the metadata log,
// for tests that look at the log's state itself (the API reads see the
// journal's tail without it).
func checkpointed(t testing.TB, b *Broker) {
	t.Helper()
	if err := b.checkpoint(context.Background()); err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
}
