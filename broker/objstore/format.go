package objstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
)

const (
	// HeaderSize is the length of the header every object starts with; the
	// first frame starts there.
	HeaderSize = 16

	// FrameHeaderSize is the length of a frame's header: payload length and
	// CRC. A frame of a p-byte payload is FrameHeaderSize+p bytes long.
	FrameHeaderSize = 8

	// MaxPayload bounds a frame's payload. It is far above any batch the
	// broker writes (records are 1 MiB by default) and keeps a corrupt length
	// from asking for gigabytes of memory.
	MaxPayload = 1 << 30

	// Version is the format version written in every header.
	Version = 1

	magic = "PMQO"

	// suffix ends every object's file name; anything else in the directory
	// (probes, an operator's notes) is ignored.
	suffix = ".obj"
)

var (
	// ErrCorrupt reports bytes that are not the frame or object they should
	// be: a CRC mismatch, a length other than the one expected, a file that
	// ends inside a frame, or a header that is not this object's. It comes
	// wrapped in a *CorruptError naming the object and position.
	ErrCorrupt = errors.New("objstore: object corrupt")

	// ErrClosed reports a call on a closed Store or Writer.
	ErrClosed = errors.New("objstore: closed")

	// ErrFrameSize reports an empty payload, one above MaxPayload, or a frame
	// position or length given to ReadFrame that no frame can have.
	ErrFrameSize = errors.New("objstore: frame size out of range")

	// ErrInUse reports a Remove of an object a Writer still has open.
	ErrInUse = errors.New("objstore: object is being written")
)

// CorruptError is the ErrCorrupt of one object: errors.Is(err, ErrCorrupt)
// holds, and errors.As gives the object and position for a log or a metric.
type CorruptError struct {
	ID     uint64 // the object
	Pos    int64  // file offset of the frame (0 for the object header)
	Reason string // what did not match
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("objstore: object %016x corrupt at %d: %s", e.ID, e.Pos, e.Reason)
}

// Unwrap makes errors.Is(err, ErrCorrupt) hold.
func (e *CorruptError) Unwrap() error { return ErrCorrupt }

func corrupt(id uint64, pos int64, format string, args ...any) error {
	return &CorruptError{ID: id, Pos: pos, Reason: fmt.Sprintf(format, args...)}
}

// castagnoli is CRC-32C, which current CPUs compute in hardware.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func checksum(p []byte) uint32 { return crc32.Checksum(p, castagnoli) }

// appendHeader appends the object header of id to b.
func appendHeader(b []byte, id uint64) []byte {
	b = append(b, magic...)
	b = append(b, Version, 0, 0, 0)
	return binary.LittleEndian.AppendUint64(b, id)
}

// checkHeader reports whether h is the header of object id.
func checkHeader(h []byte, id uint64) error {
	switch {
	case len(h) < HeaderSize:
		return corrupt(id, 0, "header is %d bytes, want %d", len(h), HeaderSize)
	case string(h[0:4]) != magic:
		return corrupt(id, 0, "magic %q is not %q", h[0:4], magic)
	case h[4] != Version:
		return corrupt(id, 0, "format version %d, want %d", h[4], Version)
	case h[5]|h[6]|h[7] != 0:
		return corrupt(id, 0, "reserved header bytes are not zero")
	}
	if got := binary.LittleEndian.Uint64(h[8:16]); got != id {
		return corrupt(id, 0, "header names object %016x", got)
	}
	return nil
}

// appendFrameHeader appends the header of a frame holding payload to b.
func appendFrameHeader(b []byte, payload []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(payload)))
	return binary.LittleEndian.AppendUint32(b, checksum(payload))
}

// fileName returns the name of object id's file.
func fileName(id uint64) string {
	return fmt.Sprintf("%016x%s", id, suffix)
}

// parseName returns the id an object file name stands for. Only the exact
// names fileName writes are accepted, so that no two names (upper and lower
// case hex, say) stand for one id.
func parseName(name string) (uint64, bool) {
	if len(name) != 16+len(suffix) || name[16:] != suffix {
		return 0, false
	}
	for _, c := range name[:16] {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return 0, false
		}
	}
	id, err := strconv.ParseUint(name[:16], 16, 64)
	return id, err == nil
}
