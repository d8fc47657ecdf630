package core

import (
	"context"
	"testing"
)

// checkpointed puts what the journal acknowledged into the metadata log,
// for tests that look at the log's state itself (the API reads see the
// journal's tail without it).
func checkpointed(t testing.TB, b *Broker) {
	t.Helper()
	if err := b.checkpoint(context.Background()); err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
}
