package main

import (
	"bytes"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"sync"
)

// The broker's garbage collector.
//
// Go collects when the heap has grown by GOGC percent (100) over what the
// last collection kept. The broker allocates a few KiB per append and keeps
// little between them while its frame cache and held objects are small:
// with ~7 MB kept, Go's default collects after every ~7 MB allocated —
// several times a second under load — and a collection's work competes
// with the metadata log's fsync completions on a small machine. So, unless
// GOGC is set:
//
//   - The heap may always grow by heapFloor before the next collection
//     (GOGC is raised after each collection while what it kept is small):
//     measured here in alternating runs, a single writer's p99 was
//     1.16/1.20/1.19 ms with Go's default and 0.97/0.93/1.01 ms with the
//     floor, for ~75 MB more peak memory over the bench's scenarios.
//   - Under a memory bound the broker also lets the heap grow to GOGC 400:
//     a single writer's p99 was 5-20% lower at 400 than at 100 in 9 of 10
//     alternating runs — with about twice the peak memory (~960 against
//     ~440 MB over the bench's scenarios). A bound is a container's memory
//     limit (the heap is then kept under 90% of it, a soft limit Go
//     collects harder to stay under) or GOMEMLIMIT.

const (
	// gcPercent is the broker's GOGC under a memory bound, unless GOGC is
	// set; without a bound it is Go's default, 100.
	gcPercent        = 400
	defaultGCPercent = 100
	// heapFloor is how much the heap may always grow between two
	// collections, unless GOGC is set.
	heapFloor = 64 << 20
	// memoryLimitShare is the part of the container's memory limit the
	// Go runtime may use, unless GOMEMLIMIT is set: the cgroup also
	// charges the page cache of the files the broker writes (reclaimable,
	// but better not squeezed to nothing).
	memoryLimitShare = 0.9
)

// cgroupMemoryLimits are where a container's memory limit is read: cgroup
// v2, then v1.
var cgroupMemoryLimits = []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}

// gcSettings returns the GC percent the broker sets (raised to keep
// heapFloor) and its soft memory limit, each -1 where it leaves the
// runtime's own.
func gcSettings(getenv func(string) string, readFile func(string) ([]byte, error)) (percent int, limit int64) {
	percent, limit = -1, -1
	bounded := getenv("GOMEMLIMIT") != ""
	if !bounded {
		if l, ok := containerMemoryLimit(readFile); ok {
			limit, bounded = int64(float64(l)*memoryLimitShare), true
		}
	}
	switch {
	case getenv("GOGC") != "":
	case bounded:
		percent = gcPercent
	default:
		percent = defaultGCPercent
	}
	return percent, limit
}

// applyGCSettings sets what gcSettings returns, describes the outcome for
// the log, and returns what undoes it.
func applyGCSettings(getenv func(string) string, readFile func(string) ([]byte, error)) (attrs []any, undo func()) {
	percent, limit := gcSettings(getenv, readFile)
	undo = func() {}
	if percent >= 0 {
		undo = keepHeapFloor(percent, heapFloor)
		attrs = []any{"gogc", percent, "heapFloorBytes", heapFloor}
	} else {
		attrs = []any{"gogc", "GOGC=" + getenv("GOGC")}
	}
	switch {
	case limit >= 0:
		prev := debug.SetMemoryLimit(limit)
		undoPercent := undo
		undo = func() { undoPercent(); debug.SetMemoryLimit(prev) }
		attrs = append(attrs, "memoryLimitBytes", limit)
	case getenv("GOMEMLIMIT") != "":
		attrs = append(attrs, "memoryLimit", "GOMEMLIMIT="+getenv("GOMEMLIMIT"))
	default:
		attrs = append(attrs, "memoryLimit", "none (no container memory limit, no GOMEMLIMIT)")
	}
	return attrs, undo
}

// keepHeapFloor sets GOGC to percent, raised after each collection so that
// the next one comes no sooner than floor bytes of growth. stop puts the
// GOGC found back.
func keepHeapFloor(percent int, floor uint64) (stop func()) {
	t := &floorTuner{percent: percent, floor: floor}
	t.prev = debug.SetGCPercent(percent)
	t.tune()
	t.arm()
	return func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		t.stopped = true
		debug.SetGCPercent(t.prev)
	}
}

type floorTuner struct {
	percent, prev int
	floor         uint64

	mu      sync.Mutex
	stopped bool
}

// arm has tune run after the next collection, and arm again.
func (t *floorTuner) arm() {
	type sentinel struct{ _ *int } // with a pointer: never in a shared tiny block
	runtime.AddCleanup(&sentinel{}, func(t *floorTuner) {
		if t.tune() {
			t.arm()
		}
	}, t)
}

// tune sets GOGC for what the last collection kept; false once stopped.
func (t *floorTuner) tune() bool {
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(sample)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return false
	}
	debug.SetGCPercent(floorPercent(t.percent, t.floor, sample[0].Value.Uint64()))
	return true
}

// floorPercent is the GOGC that lets a heap of live bytes grow by the more
// of percent and floor bytes. Below 1 MiB live counts as 1 MiB, which
// bounds the percent.
func floorPercent(percent int, floor, live uint64) int {
	live = max(live, 1<<20)
	return max(percent, int((floor*100+live-1)/live))
}

// containerMemoryLimit reads the memory limit of the cgroup the broker runs
// in; false when there is none ("max", or v1's "unlimited" near 2^63).
func containerMemoryLimit(readFile func(string) ([]byte, error)) (int64, bool) {
	for _, path := range cgroupMemoryLimits {
		raw, err := readFile(path)
		if err != nil {
			continue
		}
		s := string(bytes.TrimSpace(raw))
		if s == "max" {
			return 0, false
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 || n >= 1<<60 {
			return 0, false
		}
		return n, true
	}
	return 0, false
}
