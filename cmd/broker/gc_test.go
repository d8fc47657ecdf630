package main

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

func TestFloorPercent(t *testing.T) {
	for _, c := range []struct {
		percent     int
		floor, live uint64
		want        int
	}{
		{100, 64 << 20, 8 << 20, 800},   // small heap: the floor decides
		{100, 64 << 20, 7_000_000, 959}, // rounded up: never under the floor
		{100, 64 << 20, 1 << 30, 100},   // large heap: GOGC decides
		{400, 64 << 20, 100 << 20, 400}, // under a bound
		{100, 64 << 20, 0, 6400},        // nothing kept counts as 1 MiB
		{100, 64 << 20, 512 << 10, 6400},
	} {
		if got := floorPercent(c.percent, c.floor, c.live); got != c.want {
			t.Errorf("floorPercent(%d, %d, %d) = %d, want %d", c.percent, c.floor, c.live, got, c.want)
		}
	}
}

func heapGoal() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// After each collection the heap may grow by the floor before the next;
// stop puts GOGC back, and collections after it leave GOGC alone.
func TestKeepHeapFloor(t *testing.T) {
	const floor = 256 << 20
	prev := debug.SetGCPercent(100)
	defer debug.SetGCPercent(prev)

	stop := keepHeapFloor(100, floor)
	reached := false
	for deadline := time.Now().Add(10 * time.Second); !reached && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		runtime.GC() // the tuner runs after a collection, in the background
		reached = heapGoal() >= floor
	}
	if !reached {
		stop()
		t.Fatalf("heap goal %d bytes after collections with a floor of %d", heapGoal(), floor)
	}
	stop()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("GOGC after stop = %d, want 100 back", got)
	}
	for range 3 {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if goal := heapGoal(); goal >= floor {
		t.Fatalf("heap goal %d bytes after stop: the floor is still kept", goal)
	}
	if got := debug.SetGCPercent(100); got != 100 {
		t.Fatalf("GOGC changed to %d by collections after stop", got)
	}
}
