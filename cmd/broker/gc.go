package main

import (
	"bytes"
	"runtime/debug"
	"strconv"
)

// The broker's garbage collector.
//
// Go collects when the heap has grown by GOGC percent (100) over what the
// last collection kept. The broker allocates a few KiB per append and keeps
// little between them while its frame cache and held objects are small, so
// at 100 it collects every second or so under load, and a collection's work
// competes with the metadata log's fsync completions on a small machine:
// measured here, a single writer's p99 was 5-20% lower at 400 in 9 of 10
// alternating runs — with about twice the peak memory (~960 against ~440
// MB over the bench's scenarios). So the broker trades that memory for
// latency only where it was given a bound: in a container with a memory
// limit (the heap is then kept under 90% of it, a soft limit Go collects
// harder to stay under), or under GOMEMLIMIT. GOGC, when set, is left as
// it is; elsewhere the runtime's defaults stand.

const (
	// gcPercent is the broker's GOGC under a memory bound, unless GOGC is
	// set.
	gcPercent = 400
	// memoryLimitShare is the part of the container's memory limit the
	// Go runtime may use, unless GOMEMLIMIT is set: the cgroup also
	// charges the page cache of the files the broker writes (reclaimable,
	// but better not squeezed to nothing).
	memoryLimitShare = 0.9
)

// cgroupMemoryLimits are where a container's memory limit is read: cgroup
// v2, then v1.
var cgroupMemoryLimits = []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}

// gcSettings returns the GC percent and soft memory limit the broker sets,
// each -1 where it leaves the runtime's own.
func gcSettings(getenv func(string) string, readFile func(string) ([]byte, error)) (percent int, limit int64) {
	percent, limit = -1, -1
	bounded := getenv("GOMEMLIMIT") != ""
	if !bounded {
		if l, ok := containerMemoryLimit(readFile); ok {
			limit, bounded = int64(float64(l)*memoryLimitShare), true
		}
	}
	if bounded && getenv("GOGC") == "" {
		percent = gcPercent
	}
	return percent, limit
}

// applyGCSettings sets what gcSettings returns and describes the outcome
// for the log.
func applyGCSettings(getenv func(string) string, readFile func(string) ([]byte, error)) []any {
	percent, limit := gcSettings(getenv, readFile)
	attrs := []any{"gogc", "100 (Go's default)"}
	if v := getenv("GOGC"); v != "" {
		attrs[1] = "GOGC=" + v
	}
	if percent >= 0 {
		debug.SetGCPercent(percent)
		attrs[1] = percent
	}
	switch {
	case limit >= 0:
		debug.SetMemoryLimit(limit)
		attrs = append(attrs, "memoryLimitBytes", limit)
	case getenv("GOMEMLIMIT") != "":
		attrs = append(attrs, "memoryLimit", "GOMEMLIMIT="+getenv("GOMEMLIMIT"))
	default:
		attrs = append(attrs, "memoryLimit", "none (no container memory limit, no GOMEMLIMIT)")
	}
	return attrs
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
