package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
)

// leaseWrites is what the API server says it took of Lease writes
// (apiserver_request_total for resource="leases", verbs POST, PUT, PATCH
// and DELETE), from its own /metrics: every write of the cluster's
// brokers, members and slots alike. Issue 30's figure: writes per second
// per cluster should grow with brokers, not with slots.
func leaseWrites(ctx context.Context, c kubernetes.Interface) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	raw, err := c.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, fmt.Errorf("the apiserver's /metrics: %w", err)
	}
	return countLeaseWrites(raw)
}

func countLeaseWrites(raw []byte) (float64, error) {
	var n float64
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") || !strings.Contains(line, `resource="leases"`) {
			continue
		}
		write := false
		for _, v := range []string{"POST", "PUT", "PATCH", "DELETE"} {
			if strings.Contains(line, `verb="`+v+`"`) {
				write = true
			}
		}
		if !write {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return 0, fmt.Errorf("apiserver_request_total line %q: %w", line, err)
		}
		n += v
	}
	return n, sc.Err()
}

// leaseLoad is the cluster's Lease writes per second, idle and under the
// headline load to owners.
type leaseLoad struct {
	slots       int
	idle, under float64
}

// measureIdleLeaseWrites counts the Lease writes of a quiet window.
func measureIdleLeaseWrites(ctx context.Context, c kubernetes.Interface, window time.Duration) (float64, error) {
	w0, err := leaseWrites(ctx, c)
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(window):
	}
	w1, err := leaseWrites(ctx, c)
	if err != nil {
		return 0, err
	}
	return (w1 - w0) / time.Since(t0).Seconds(), nil
}
