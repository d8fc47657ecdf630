package tier

import (
	"sync"
	"time"
)

// Health is what the last requests said of the bucket: reachable from a
// success until a failure, the failure kept until the next success. The
// status endpoint and the operator's Degraded reason read it. A nil
// *Health records nothing.
type Health struct {
	mu          sync.Mutex
	reachable   bool
	lastErr     error
	lastSuccess time.Time
}

func (h *Health) record(err error) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil {
		h.reachable, h.lastErr, h.lastSuccess = true, nil, time.Now()
		return
	}
	h.reachable, h.lastErr = false, err
}

// Snapshot returns whether the bucket answered last time, the failure
// since the last success (nil when none), and when it last succeeded.
func (h *Health) Snapshot() (reachable bool, lastErr error, lastSuccess time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.reachable, h.lastErr, h.lastSuccess
}
