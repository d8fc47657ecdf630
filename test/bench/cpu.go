package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuSample is the CPU time used so far by the broker process and by the
// bench itself (the clients), and the machine's CPU time by kind, so that
// each scenario can say where the machine's processors went: the broker
// and its load share them here.
type cpuSample struct {
	broker, bench time.Duration
	machine       [8]uint64 // /proc/stat's cpu line: user nice system idle iowait irq softirq steal
	ok            bool
}

// userHZ is the unit of /proc's CPU times (USER_HZ, 100 on every Linux
// architecture Go supports).
const userHZ = 100

// sampleCPU samples the bench and the broker processes pids (their CPU
// times add up: a cluster's brokers, or NATS's servers).
func sampleCPU(pids ...int) cpuSample {
	var s cpuSample
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return s
	}
	s.bench = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	for _, pid := range pids {
		t, ok := processCPU(pid)
		if !ok {
			return s
		}
		s.broker += t
	}
	all, err := os.ReadFile("/proc/stat")
	if err != nil {
		return s
	}
	line, _, _ := strings.Cut(string(all), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return s
	}
	for i := range s.machine {
		if s.machine[i], err = strconv.ParseUint(f[i+1], 10, 64); err != nil {
			return s
		}
	}
	s.ok = true
	return s
}

// processCPU is the user and system time process pid used so far.
func processCPU(pid int) (time.Duration, bool) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// Fields after the command name, which is in parentheses and may hold
	// spaces: state is the first, utime the 12th, stime the 13th.
	rest := string(stat)
	rest = rest[strings.LastIndexByte(rest, ')')+1:]
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0, false
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(utime+stime) * time.Second / userHZ, true
}

// cpuUse is what one scenario cost.
type cpuUse struct {
	brokerCores, benchCores float64 // processors busy on average
	busy, iowait            float64 // fractions of the machine
}

func (s cpuSample) since(before cpuSample, wall time.Duration) (cpuUse, bool) {
	if !s.ok || !before.ok || wall <= 0 {
		return cpuUse{}, false
	}
	var d [8]float64
	var total float64
	for i := range d {
		d[i] = float64(s.machine[i] - before.machine[i])
		total += d[i]
	}
	if total <= 0 {
		return cpuUse{}, false
	}
	return cpuUse{
		brokerCores: (s.broker - before.broker).Seconds() / wall.Seconds(),
		benchCores:  (s.bench - before.bench).Seconds() / wall.Seconds(),
		busy:        (d[0] + d[1] + d[2] + d[5] + d[6]) / total,
		iowait:      d[4] / total,
	}, true
}

// describe prints a scenario's CPU use, per append and, for bandwidth
// scenarios, per MB.
func (u cpuUse) describe(r result) string {
	s := fmt.Sprintf("CPU: broker %.2f cores, bench (clients) %.2f; machine %.0f%% busy, %.0f%% waiting for the disk", u.brokerCores, u.benchCores, 100*u.busy, 100*u.iowait)
	if r.appendsPerSec > 0 {
		s += fmt.Sprintf("; per append: broker %.0f µs, bench %.0f µs (broker CPU-seconds per 1,000 appends %.3f)", 1e6*u.brokerCores/r.appendsPerSec, 1e6*u.benchCores/r.appendsPerSec, 1e3*u.brokerCores/r.appendsPerSec)
	}
	if r.mbPerSec >= 50 {
		s += fmt.Sprintf("; per MB: broker %.2f ms, bench %.2f ms", 1e3*u.brokerCores/r.mbPerSec, 1e3*u.benchCores/r.mbPerSec)
	}
	return s
}
