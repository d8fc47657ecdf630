// Package brokerstat reads what a broker reports over HTTP — its admin
// answers and its metrics — for the tests and the benchmark, each request
// bounded by a timeout.
package brokerstat

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/picomq/picomq/broker/httpapi/wire"
)

var hc = &http.Client{Timeout: 5 * time.Second}

// Tier is GET /v1/admin/tier of the broker at url.
func Tier(url string) (wire.TierStatus, error) {
	var st wire.TierStatus
	resp, err := hc.Get(url + wire.TierPath)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("GET %s%s: %s", url, wire.TierPath, resp.Status)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// Metric sums the samples of metric name at url's /metrics whose label
// set holds label (every sample, unlabelled included, when label is "").
// It fails when the broker does not answer or shows no such sample.
func Metric(url, name, label string) (float64, error) {
	resp, err := hc.Get(url + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var sum float64
	found := false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), name)
		if !ok || !(strings.HasPrefix(rest, " ") || strings.HasPrefix(rest, "{")) || (label != "" && !strings.Contains(rest, label)) {
			continue
		}
		f := strings.Fields(rest)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			sum += v
			found = true
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	if !found {
		return 0, fmt.Errorf("no sample of %s (labels holding %q) at %s/metrics", name, label, url)
	}
	return sum, nil
}
