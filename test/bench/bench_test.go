package main

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// Pure tests of the bench's arithmetic and parsing: no process, no clock.

// natsOutput is nats bench js pub sync's output (natscli v0.5.0), cut.
const natsOutput = `
  [1] 70 msgs/sec ~ 71 KiB/sec ~ min: 6,869.17us ~ avg: 14,052.51us ~ max: 34,934.04us ~ P50: 12,252.24us ~ P90: 20,972.01us ~ P99: 34,934.04us ~ P99.9: 34,934.04us (78 msgs)
  [2] 70 msgs/sec ~ 70 KiB/sec ~ min: 5,965.68us ~ avg: 14,204.30us ~ max: 33,704.26us ~ P50: 12,917.11us ~ P90: 21,672.16us ~ P99: 33,704.26us ~ P99.9: 33,704.26us (78 msgs)

 NATS JetStream synchronous publisher aggregated stats: 13,984 msgs/sec ~ 13.7 MiB/sec
 message rates min 62 | avg 65 | max 71 | stddev 2 msgs
 latencies per operation min 3,038.50us | avg 15,135.56us | max 52,248.79us | stddev 16,344.29us | P50 14,048.25us | P90 21,611.29us | P99 38,483.32us | P99.9: 51,897.02us
`

func TestParseNATSBench(t *testing.T) {
	r, err := parseNATSBench(natsOutput)
	if err != nil {
		t.Fatal(err)
	}
	if r.msgsPerSec != 13984 {
		t.Errorf("msgs/s %v, want 13984 (the aggregated line, not a client's)", r.msgsPerSec)
	}
	if want := 14048250 * time.Nanosecond; r.p50 != want {
		t.Errorf("p50 %v, want %v", r.p50, want)
	}
	if want := 38483320 * time.Nanosecond; r.p99 != want {
		t.Errorf("p99 %v, want %v (P99, not P99.9)", r.p99, want)
	}
}

func TestParseNATSBenchUnitsAndAbsentLatencies(t *testing.T) {
	r, err := parseNATSBench(" aggregated stats: 812.5 msgs/sec ~ 0.8 MiB/sec\n latencies per operation min 1ms | P50 2.5ms | P90 3ms | P99 1.25s | P99.9: 2s\n")
	if err != nil {
		t.Fatal(err)
	}
	if r.msgsPerSec != 812.5 || r.p50 != 2500*time.Microsecond || r.p99 != 1250*time.Millisecond {
		t.Errorf("got %v msgs/s, p50 %v, p99 %v", r.msgsPerSec, r.p50, r.p99)
	}
	r, err = parseNATSBench(" aggregated stats: 1,000 msgs/sec\n")
	if err != nil || r.msgsPerSec != 1000 || r.p50 != 0 || r.p99 != 0 {
		t.Errorf("without a latency line: %+v, %v", r, err)
	}
}

func TestParseNATSBenchRefusesOutputWithoutRate(t *testing.T) {
	if _, err := parseNATSBench("nats: error: context deadline exceeded\n"); err == nil {
		t.Error("no error for an output without the aggregated line")
	}
}

func TestPercentiles(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{0, time.Millisecond}, {0.5, 50 * time.Millisecond}, {0.99, 99 * time.Millisecond}, {1, 100 * time.Millisecond}} {
		if got := pct(d, tc.q); got != tc.want {
			t.Errorf("pct(1..100 ms, %v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	if got := pct(nil, 0.5); got != 0 {
		t.Errorf("pct of nothing = %v", got)
	}
	// 20 kills: p50 is the 10th smallest, max the largest.
	kills := make([]time.Duration, 20)
	for i := range kills {
		kills[i] = time.Duration(20-i) * time.Second
	}
	slices.Sort(kills)
	if got := pct(kills, 0.5); got != 10*time.Second {
		t.Errorf("p50 of 20 kills = %v, want 10s", got)
	}
}

func TestNATSConfigAndArgs(t *testing.T) {
	routes := []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"}
	always := natsConfig(0, "127.0.0.1:10", "127.0.0.1:20", "127.0.0.1:1", routes, "/s/n0", true)
	for _, want := range []string{`server_name: n0`, `listen: "127.0.0.1:10"`, `store_dir: "/s/n0"`, `sync_interval: always`, `"nats-route://127.0.0.1:3"`} {
		if !strings.Contains(always, want) {
			t.Errorf("config lacks %q:\n%s", want, always)
		}
	}
	if def := natsConfig(0, "a", "b", "c", routes, "/s", false); strings.Contains(def, "sync_interval") {
		t.Errorf("default-sync config sets sync_interval:\n%s", def)
	}
	args := strings.Join(natsArgs([]string{"nats://a", "nats://b"}, 64, 1024, 5000), " ")
	for _, want := range []string{"bench js pub sync ", "--replicas 3", "--storage file", "--clients 64", "--size 1024", "--msgs 5000", "--server nats://a,nats://b"} {
		if !strings.Contains(args, want) {
			t.Errorf("nats bench args lack %q: %s", want, args)
		}
	}
}
