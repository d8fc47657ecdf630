package wire

import (
	"encoding/binary"
	"encoding/json"
	"mime"
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
//
// A broker that does not know the type answers JSON, so a client decodes
// by the answer's Content-Type (DecodeAppendsAnswer).
const AppendsResultContentType = "application/vnd.picomq.appends-result"

var appendsResultMagic = []byte("PMQA")

const (
	itemResult  = 0
	itemProblem = 1
	itemAlone   = 2

	flagDuplicate = 1 << 0
	flagProducer  = 1 << 1
)

// AcceptsAppendsResult reports whether an Accept header lists
// AppendsResultContentType.
func AcceptsAppendsResult(accept string) bool {
	for part := range strings.SplitSeq(accept, ",") {
		if mt, _, err := mime.ParseMediaType(strings.TrimSpace(part)); err == nil && mt == AppendsResultContentType {
			return true
		}
	}
	return false
}

// EncodeAppendsResult appends items' answer to dst.
func EncodeAppendsResult(dst []byte, items []AppendsItemResult) []byte {
	dst = append(dst, appendsResultMagic...)
	dst = binary.AppendUvarint(dst, uint64(len(items)))
	for _, it := range items {
		switch {
		case it.Error != nil:
			dst = append(dst, itemProblem)
			dst = binary.AppendUvarint(dst, uint64(len(it.Error)))
			dst = append(dst, it.Error...)
		case it.Alone || it.AppendResult == nil:
			// An item with neither (never written by a broker) travels as
			// alone: the client sends it again on its own.
			dst = append(dst, itemAlone)
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
	if !ok || n > MaxAppendsPerRequest {
		return bad(pos, "count is not a uvarint of at most MaxAppendsPerRequest")
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
		case itemProblem:
			m, ok := uvarint()
			if !ok || m > uint64(len(body)-pos) {
				return bad(pos, "problem length past the end")
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
			if !ok1 || !ok2 || !ok3 || !ok4 || p > 1<<31 || pos >= len(body) {
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
