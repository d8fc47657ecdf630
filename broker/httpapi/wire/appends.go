package wire

import (
	"encoding/binary"
	"encoding/json"
)

// Several appends in one request. The Go client sends concurrent small
// appends of one Client this way — while MaxAppendsInFlight requests are
// out, the appends that arrive queue and leave together in the next one —
// so 64 goroutines appending single records cost a few requests, not 64.
// Each append keeps its own atomicity, offsets and answer.
//
//	POST /v1/appends   Content-Type application/vnd.picomq.appends
//
// The body is a run of appends, each
//
//	uvarint nameLen, name, varint partition (-1: by key, as without ?partition=),
//	uvarint batchLen, batch (the append framing of BatchContentType)
//
// The answer, 200 application/json, is AppendsResult: one item per append,
// in order: its result, its refusal as a problem, or "alone" (see
// AppendsItemResult) — or, to a request that accepts it, the same items in
// binary (AppendsResultContentType, appendsresult.go). A request that
// cannot be read at all (malformed, too many appends) is refused whole.
const (
	AppendsPath        = "/v1/appends"
	AppendsContentType = "application/vnd.picomq.appends"
	// MaxAppendsPerRequest bounds the appends of one request.
	MaxAppendsPerRequest = 1024
)

// AppendItem is one append of an AppendsContentType body.
type AppendItem struct {
	Name      string
	Partition int // -1: by key
	Batch     []byte
}

// AppendItemTo appends one item's framing to b.
func AppendItemTo(b []byte, name string, partition int, batch []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(name)))
	b = append(b, name...)
	b = binary.AppendVarint(b, int64(partition))
	b = binary.AppendUvarint(b, uint64(len(batch)))
	return append(b, batch...)
}

// AppendItemSize is the length of the item AppendItemTo appends.
func AppendItemSize(name string, partition int, batch []byte) int {
	var tmp [binary.MaxVarintLen64]byte
	return binary.PutUvarint(tmp[:], uint64(len(name))) + len(name) +
		binary.PutVarint(tmp[:], int64(partition)) +
		binary.PutUvarint(tmp[:], uint64(len(batch))) + len(batch)
}

// DecodeAppends reads an AppendsContentType body. Names and batches are
// slices of body; the names are not validated here.
func DecodeAppends(body []byte) ([]AppendItem, error) {
	var out []AppendItem
	pos := 0
	for pos < len(body) {
		if len(out) >= MaxAppendsPerRequest {
			return nil, BodyTooLarge.With("appends", len(out)+1, "maxAppends", MaxAppendsPerRequest)
		}
		name, next, err := chunk(body, pos, "name")
		if err != nil {
			return nil, err
		}
		p, w := binary.Varint(body[next:])
		if w <= 0 || p < -1 || p > 1<<31 {
			return nil, MalformedBatch.With("position", next, "reason", "partition is not a varint of -1 or more")
		}
		batch, end, err := chunk(body, next+w, "batch")
		if err != nil {
			return nil, err
		}
		out = append(out, AppendItem{Name: string(name), Partition: int(p), Batch: batch})
		pos = end
	}
	if len(out) == 0 {
		return nil, MalformedBatch.With("position", 0, "reason", "no append in the body")
	}
	return out, nil
}

// AppendsResult answers a request of several appends.
type AppendsResult struct {
	Results []AppendsItemResult `json:"results"`
}

// AppendsItemResult is one append's answer: Error (a problem, as a
// refused single append's body), Alone, or the result. Alone says the
// append was not made because it would have waited for room under its
// stream's MaxBytes, which must not hold the request's other appends: the
// client sends it again on its own, where it waits as any append does.
type AppendsItemResult struct {
	*AppendResult
	Error json.RawMessage `json:"error,omitempty"`
	Alone bool            `json:"alone,omitempty"`
}
