package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// natsLoadModule is the folder, from the repository's root, of the
// program that runs PicoMQ's spread load against NATS (natsload/main.go):
// a module of its own, so that the NATS client stays out of PicoMQ's.
const natsLoadModule = "test/bench/natsload"

// ensureNATSLoad builds natsload into the NATS binaries' folder (go build:
// a second build is the cache's) and returns its path.
func ensureNATSLoad() (string, error) {
	dir, err := natsBinDir()
	if err != nil {
		return "", err
	}
	src := fromRepoRoot(natsLoadModule)
	bin := filepath.Join(dir, "natsload")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = src
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build %s: %w", src, err)
	}
	return bin, nil
}

// natsLoad is one natsload run's answer (its JSON).
type natsLoad struct {
	Acks       int64   `json:"acks"`
	Errors     int64   `json:"errors"`
	FirstError string  `json:"first_error"`
	Seconds    float64 `json:"seconds"`
	P50        int64   `json:"p50_ns"`
	P99        int64   `json:"p99_ns"`
	Replicas   int     `json:"replicas"`
	Storage    string  `json:"storage"`
}

// runNATSLoad runs the spread load — writers closed-loop over streams,
// writer w on stream w mod streams, 1 KiB each, every publish waiting for
// its acknowledgement — against nc for d. The servers' CPU is sampled over
// the load alone: natsload says "load" when its clock starts (the streams
// made and each answering), then its figures when it ends.
func runNATSLoad(bin string, nc *natsCluster, writers, streams int, d time.Duration) (natsResult, error) {
	var r natsResult
	cmd := exec.Command(bin, "-servers", strings.Join(nc.clients, ","), "-streams", strconv.Itoa(streams),
		"-writers", strconv.Itoa(writers), "-size", "1024", "-replicas", "3", "-duration", d.String())
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return r, err
	}
	if err := cmd.Start(); err != nil {
		return r, fmt.Errorf("natsload: %w", err)
	}
	rd := bufio.NewReader(stdout)
	first, err := rd.ReadString('\n')
	if err != nil || strings.TrimSpace(first) != "load" {
		_ = cmd.Wait()
		return r, fmt.Errorf("natsload did not start its load (said %q): %v", first, err)
	}
	cpu0, t0 := sampleCPU(nc.pids()...), time.Now()
	client0, _ := processCPU(cmd.Process.Pid)
	out, err := readAnswer(rd)
	wall := time.Since(t0)
	cpu1 := sampleCPU(nc.pids()...)
	client1, clientOK := processCPU(cmd.Process.Pid) // still running: it exits once its answer is read
	if werr := cmd.Wait(); werr != nil {
		return r, fmt.Errorf("natsload: %w", werr)
	}
	if err != nil {
		return r, err
	}
	var l natsLoad
	if err := json.Unmarshal(out, &l); err != nil {
		return r, fmt.Errorf("natsload's answer %q: %w", out, err)
	}
	if l.Seconds <= 0 {
		return r, fmt.Errorf("natsload ran no load: %s", out)
	}
	r.msgsPerSec = float64(l.Acks) / l.Seconds
	r.p50, r.p99 = time.Duration(l.P50), time.Duration(l.P99)
	r.elapsed = time.Duration(l.Seconds * float64(time.Second))
	r.replicas, r.storage = l.Replicas, l.Storage
	r.errs, r.firstErr = l.Errors, l.FirstError
	r.use, r.cpuOK = cpu1.since(cpu0, wall)
	r.use.benchCores = 0
	if clientOK {
		r.use.benchCores = (client1 - client0).Seconds() / wall.Seconds() // natsload's, not this process's
	}
	return r, nil
}

// readAnswer reads natsload's one line of figures (it exits after).
func readAnswer(rd *bufio.Reader) ([]byte, error) {
	line, err := rd.ReadBytes('\n')
	if err == io.EOF && len(line) > 0 {
		err = nil
	}
	return line, err
}
