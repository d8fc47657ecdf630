package wire

import (
	"encoding/binary"
	"encoding/json"
	"mime"
	"slices"
	"strconv"
	"strings"
)

// The answer to an appends request, in binary. A client that lists
// AppendsResultContentType in its Accept header (the Go client, a router
// forwarding a group to its owner) is answered in it; any other gets
// AppendsResult's JSON. Encoding and decoding the JSON cost a router and
// an owner about 4% of their CPU under 1 KiB appends, and the client as
// much again: per item it is a few varints here.
//
//	answer = "PMQA" n:uvarint {item}
//	item   = 0 partition:uvarint first:uvarint last:uvarint next:uvarint flags:u8 [epoch:varint lastSeq:varint]
//	                                          flags bit 0: duplicate; bit 1: producer follows
//	       | 1 n:uvarint problem              the refusal, a problem's JSON as in AppendsItemResult.Error
//	       | 2                                alone
//	       | 3                                none of these (an older broker's empty item)
//
// A broker that does not know the type answers JSON, so a client decodes
// by the answer's Content-Type (DecodeAppendsAnswer).
const AppendsResultContentType = "application/vnd.picomq.appends-result"

// AppendsAccept is the Accept header of a request that takes the binary
// answer where the broker has it, and JSON from one that has not.
const AppendsAccept = AppendsResultContentType + ", " + JSONContentType

var appendsResultMagic = []byte("PMQA")

const (
	itemResult  = 0
	itemProblem = 1
	itemAlone   = 2
	itemEmpty   = 3

	flagDuplicate = 1 << 0
	flagProducer  = 1 << 1
)

// AcceptsAppendsResult reports whether an Accept header lists
// AppendsResultContentType (and not with q=0, which refuses it).
func AcceptsAppendsResult(accept string) bool {
	if !strings.Contains(accept, AppendsResultContentType) {
		return false // most requests: no parse
	}
	for part := range strings.SplitSeq(accept, ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil || mt != AppendsResultContentType {
			continue
		}
		if q, err := strconv.ParseFloat(params["q"], 64); err == nil && q <= 0 {
			return false
		}
		return true
	}
	return false
}

// EncodeAppendsResult appends items' answer to dst, grown once for a
// typical answer (a result is a few varints).
func EncodeAppendsResult(dst []byte, items []AppendsItemResult) []byte {
	dst = slices.Grow(dst, 16+len(items)*24)
	dst = append(dst, appendsResultMagic...)
	dst = binary.AppendUvarint(dst, uint64(len(items)))
	for _, it := range items {
		// In the order a client reads an item (Alone, then Error, then
		// the result), so that an item means in binary what it meant in
		// JSON whatever it holds.
		switch {
		case it.Alone:
			dst = append(dst, itemAlone)
		case len(it.Error) > 0: // JSON's omitempty drops an empty one too
			dst = append(dst, itemProblem)
			dst = binary.AppendUvarint(dst, uint64(len(it.Error)))
			dst = append(dst, it.Error...)
		case it.AppendResult == nil:
			// Never written by a broker of this build; passed on as it came
			// (from an older owner), the client fails it as it did in JSON.
			dst = append(dst, itemEmpty)
		default:
			r := it.AppendResult
			dst = append(dst, itemResult)
			dst = binary.AppendUvarint(dst, uint64(r.Partition))
			dst = binary.AppendUvarint(dst, r.First)
			dst = binary.AppendUvarint(dst, r.Last)
			dst = binary.AppendUvarint(dst, r.Next)
			var flags byte
			if r.Duplicate {
				flags |= flagDuplicate
			}
			if r.Producer != nil {
				flags |= flagProducer
			}
			dst = append(dst, flags)
			if r.Producer != nil {
				dst = binary.AppendVarint(dst, r.Producer.Epoch)
				dst = binary.AppendVarint(dst, r.Producer.LastSeq)
			}
		}
	}
	return dst
}

// DecodeAppendsResult reads an answer EncodeAppendsResult wrote. Problems
// are slices of body.
func DecodeAppendsResult(body []byte) ([]AppendsItemResult, error) {
	bad := func(pos int, reason string) ([]AppendsItemResult, error) {
		return nil, MalformedBatch.With("position", pos, "reason", "appends answer: "+reason)
	}
	if len(body) < len(appendsResultMagic) || string(body[:len(appendsResultMagic)]) != string(appendsResultMagic) {
		return bad(0, "no PMQA magic")
	}
	pos := len(appendsResultMagic)
	uvarint := func() (uint64, bool) {
		v, w := binary.Uvarint(body[pos:])
		if w <= 0 {
			return 0, false
		}
		pos += w
		return v, true
	}
	varint := func() (int64, bool) {
		v, w := binary.Varint(body[pos:])
		if w <= 0 {
			return 0, false
		}
		pos += w
		return v, true
	}
	n, ok := uvarint()
	if !ok || n > MaxAppendsPerRequest || n > uint64(len(body)-pos) { // an item is a byte at least
		return bad(pos, "count is not a uvarint of at most MaxAppendsPerRequest and the bytes left")
	}
	out := make([]AppendsItemResult, n)
	results := make([]AppendResult, n) // one allocation for every item's result
	for i := range out {
		if pos >= len(body) {
			return bad(pos, "truncated")
		}
		kind := body[pos]
		pos++
		switch kind {
		case itemAlone:
			out[i].Alone = true
		case itemEmpty:
		case itemProblem:
			m, ok := uvarint()
			if !ok || m == 0 || m > uint64(len(body)-pos) {
				return bad(pos, "problem length zero or past the end")
			}
			if !json.Valid(body[pos : pos+int(m)]) {
				// Passed on in a JSON answer it would break the whole answer.
				return bad(pos, "problem is not JSON")
			}
			out[i].Error = json.RawMessage(body[pos : pos+int(m) : pos+int(m)])
			pos += int(m)
		case itemResult:
			r := &results[i]
			var p uint64
			var ok1, ok2, ok3, ok4 bool
			p, ok1 = uvarint()
			r.First, ok2 = uvarint()
			r.Last, ok3 = uvarint()
			r.Next, ok4 = uvarint()
			if !ok1 || !ok2 || !ok3 || !ok4 || p >= 1<<31 || pos >= len(body) {
				return bad(pos, "result truncated")
			}
			r.Partition = int(p)
			flags := body[pos]
			pos++
			if flags&^(flagDuplicate|flagProducer) != 0 {
				return bad(pos-1, "unknown result flags")
			}
			r.Duplicate = flags&flagDuplicate != 0
			if flags&flagProducer != 0 {
				epoch, ok1 := varint()
				seq, ok2 := varint()
				if !ok1 || !ok2 {
					return bad(pos, "producer truncated")
				}
				r.Producer = &Producer{Epoch: epoch, LastSeq: seq}
			}
			out[i].AppendResult = r
		default:
			return bad(pos-1, "unknown item kind")
		}
	}
	if pos != len(body) {
		return bad(pos, "bytes after the last item")
	}
	return out, nil
}

// DecodeAppendsAnswer reads an appends request's 200 answer of either
// type, as its Content-Type says.
func DecodeAppendsAnswer(contentType string, body []byte) ([]AppendsItemResult, error) {
	if mt, _, err := mime.ParseMediaType(contentType); err == nil && mt == AppendsResultContentType {
		return DecodeAppendsResult(body)
	}
	var res AppendsResult
	if err := json.Unmarshal(body, &res); err != nil {
		return nil, err
	}
	return res.Results, nil
}
