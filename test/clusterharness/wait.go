package clusterharness

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"
)

// Main runs a test binary's tests and removes the broker binary Binary
// built: call it from TestMain, after flag.Parse if the package has flags.
func Main(m *testing.M) {
	code := m.Run()
	cleanupBinary()
	os.Exit(code)
}

// PollInterval is how often Poll asks again.
const PollInterval = 25 * time.Millisecond

// Poll calls cond every PollInterval until it returns nil, ctx ends or
// timeout passes; the error is cond's last, wrapped with what was waited
// for. It is the one way the harness waits for a condition: no sleeps.
func Poll(ctx context.Context, timeout time.Duration, what string, cond func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(PollInterval)
	defer tick.Stop()
	var last error
	for {
		if last = cond(ctx); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: not after %v: %w", what, timeout, last)
		case <-tick.C:
		}
	}
}
