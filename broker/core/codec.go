package core

import (
	"encoding/binary"
	"errors"
	"time"

	"github.com/picomq/picomq/broker/stream"
)

// A frame's payload is a run of records of one internal stream, each written
// as
//
//	offset      uvarint  absolute: compaction leaves holes, so it is not implied
//	appendedAt  varint   Unix nanoseconds
//	key         uvarint length, bytes
//	payload     uvarint length, bytes
//
// The object store frames and checksums the payload; this codec only lays
// records out.

// encodedRecord is one record to encode.
type encodedRecord struct {
	offset uint64
	at     int64
	key    []byte
	value  []byte
}

// appendRecord appends one record's encoding to b.
func appendRecord(b []byte, off uint64, at int64, key, value []byte) []byte {
	b = binary.AppendUvarint(b, off)
	b = binary.AppendVarint(b, at)
	b = binary.AppendUvarint(b, uint64(len(key)))
	b = append(b, key...)
	b = binary.AppendUvarint(b, uint64(len(value)))
	return append(b, value...)
}

// encodeBatch encodes a batch appended at one instant from offset first.
func encodeBatch(b []byte, first uint64, at time.Time, records []stream.RecordValue) []byte {
	ns := at.UnixNano()
	for i, r := range records {
		b = appendRecord(b, first+uint64(i), ns, r.Key, r.Payload)
	}
	return b
}

var errMalformed = errors.New("malformed record frame")

// decodeFrame calls fn for every record of a frame payload, in order. The
// slices fn receives alias the payload.
func decodeFrame(p []byte, fn func(off uint64, at int64, key, value []byte) bool) error {
	for len(p) > 0 {
		off, n := binary.Uvarint(p)
		if n <= 0 {
			return errMalformed
		}
		p = p[n:]
		at, n := binary.Varint(p)
		if n <= 0 {
			return errMalformed
		}
		p = p[n:]
		kl, n := binary.Uvarint(p)
		if n <= 0 || uint64(len(p)-n) < kl {
			return errMalformed
		}
		key := p[n : n+int(kl)]
		p = p[n+int(kl):]
		vl, n := binary.Uvarint(p)
		if n <= 0 || uint64(len(p)-n) < vl {
			return errMalformed
		}
		value := p[n : n+int(vl)]
		p = p[n+int(vl):]
		if !fn(off, at, key, value) {
			return nil
		}
	}
	return nil
}
