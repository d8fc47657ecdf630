package syncbuf

import (
	"strings"
	"sync"
	"testing"
)

// TestConcurrentWrites: writes from many goroutines all land, whole, and
// Reset empties the buffer (run with -race to check the locking).
func TestConcurrentWrites(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				_, _ = b.Write([]byte("line\n"))
			}
		})
	}
	wg.Wait()
	if got := strings.Count(b.String(), "line\n"); got != 800 {
		t.Fatalf("%d lines, want 800", got)
	}
	b.Reset()
	if b.String() != "" {
		t.Fatalf("after Reset: %q", b.String())
	}
}
