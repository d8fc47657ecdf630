package workload

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
)

// sseClient has no overall timeout: an SSE response lasts as long as the
// broker keeps it (60s by default); Stop ends it through the context.
var sseClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// formatOffset writes an offset the Durable Streams way (dsapi).
func formatOffset(off int64) string { return fmt.Sprintf("%016d_%016d", off, 0) }

var offsetPattern = regexp.MustCompile(`^([0-9]{1,19})_0+$`)

func parseOffset(s string) (int64, bool) {
	m := offsetPattern.FindStringSubmatch(s)
	if m == nil {
		return 0, false
	}
	v, err := strconv.ParseInt(m[1], 10, 64)
	return v, err == nil
}

// sse follows a single-partition stream with Durable Streams Server-Sent
// Events from offset 0, reconnecting where it left off (to a broker picked
// anew) whenever a response ends. Each data event is recorded as a read of
// the records it carried, from the offset the reader was at; its Start is
// the connection's start — the broker may have read the records at any
// moment since — so SSE events are too long for the linearizability check
// and go to the other checkers only.
func (r *Run) sse(id, name string, rng *rand.Rand) {
	pos := int64(0)
	for !r.stopped() {
		b, base := r.target(rng)
		pos = r.sseOnce(id, name, b, base, pos)
		if !r.think(rng) {
			return
		}
	}
}

// sseOnce reads one SSE response and returns the offset to resume from.
func (r *Run) sseOnce(id, name string, b int, base string, pos int64) int64 {
	u := base + "/v1/stream/" + (&url.URL{Path: name}).EscapedPath() + "?offset=" + formatOffset(pos) + "&live=sse"
	req, err := http.NewRequestWithContext(r.ctx, http.MethodGet, u, nil)
	if err != nil {
		return pos
	}
	start := r.h.Now()
	resp, err := sseClient.Do(req)
	if err != nil {
		return pos
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return pos
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var event string
	var data []string
	var pending *Op // a data event waiting for its control event
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			body := strings.Join(data, "\n")
			switch event {
			case "data":
				o := &Op{Worker: id, Kind: Read, Mode: SSE, Stream: name, Broker: b, From: pos, Max: -1, First: -1,
					Next: -1, Start: start, End: r.h.Now()}
				var msgs []json.RawMessage
				if err := json.Unmarshal([]byte(body), &msgs); err != nil {
					o.Outcome, o.Err = Unknown, fmt.Sprintf("data event is no JSON array: %v: %.100q", err, body)
					r.h.Add(o)
					return pos
				}
				for i, m := range msgs {
					o.Records = append(o.Records, Record{Offset: pos + int64(i), Payload: string(m)})
				}
				pending = o
			case "control":
				var c struct {
					NextOffset string `json:"streamNextOffset"`
				}
				_ = json.Unmarshal([]byte(body), &c)
				next, ok := parseOffset(c.NextOffset)
				if pending != nil {
					if ok {
						pending.Next = next // CheckMonotonic compares it with the records
					}
					r.h.Add(pending)
					pos += int64(len(pending.Records))
					pending = nil
				}
			}
			event, data = "", nil
		case strings.HasPrefix(line, "event:"):
			event = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "data:"):
			data = append(data, strings.TrimPrefix(line, "data:"))
		}
	}
	if pending != nil {
		// Records that arrived without their control event are still
		// records the broker served.
		r.h.Add(pending)
		pos += int64(len(pending.Records))
	}
	return pos
}
