package journal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"
)

// The on-disk format.
//
//	segment  = header batch*
//	header   = "PMQJ" version:u16 0:u16 number:u64 len:u16 incarnation crc:u32
//	batch    = "PMQB" len:u32 crc:u32 entry+     (crc: CRC-32C of the entries)
//	entry    = 1:u8 object | 2:u8 fence | 3:u8 by:u64 object
//	object   = id:u64 parts:uvarint part* len:uvarint payload
//	part     = stream:u64 epoch:u64 first:u64 count:u64
//	fence    = stream:u64 epoch:u64
//
// Integers are little-endian; the header's CRC covers what precedes it.

const (
	magic          = "PMQJ"
	version        = 1
	batchMagic     = "PMQB" // so that a scan past a bad batch finds the next one
	batchHeader    = 12
	entryObject    = 1
	entryFence     = 2
	entryCopy      = 3 // a recovery's copy, written on the authority of epoch by
	partBytes      = 32
	fenceBytes     = 1 + 8 + 8 // a fence entry
	maxBatchBytes  = 1 << 30   // a length past it is not a batch; the writer splits before it
	maxObjectBytes = maxBatchBytes / 2
	segmentPrefix  = "journal-"
	segmentSuffix  = ".log"
	maxIncarnation = 1 << 10
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Part is one stream's records in an object.
type Part struct {
	Stream uint64
	Epoch  int64
	First  uint64 // first offset
	Count  uint64 // records
}

// Object is what an owner's group commit writes: parts of many streams,
// and their payload (frames and descriptors, opaque here).
type Object struct {
	ID      uint64
	Parts   []Part
	Payload []byte
	// Copied marks a recovery's copy of an object to a new ensemble: it
	// is written on the authority of epoch By of its streams (the new
	// owner's), which the fences are checked against, while its parts
	// keep the epochs they were written in. It is the same object: a
	// copy of one held already is held once.
	Copied bool
	By     int64
}

// authority is the epoch part p of o is written on.
func (o *Object) authority(p Part) int64 {
	if o.Copied {
		return o.By
	}
	return p.Epoch
}

func segmentName(n uint64) string { return fmt.Sprintf("%s%016x%s", segmentPrefix, n, segmentSuffix) }

// segmentNumber parses a segment's name; false for any other file.
func segmentNumber(name string) (uint64, bool) {
	s, ok := strings.CutPrefix(name, segmentPrefix)
	if !ok {
		return 0, false
	}
	if s, ok = strings.CutSuffix(s, segmentSuffix); !ok || len(s) != 16 {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 16, 64)
	return n, err == nil
}

func appendHeader(b []byte, number uint64, incarnation string) []byte {
	start := len(b)
	b = append(b, magic...)
	b = binary.LittleEndian.AppendUint16(b, version)
	b = binary.LittleEndian.AppendUint16(b, 0)
	b = binary.LittleEndian.AppendUint64(b, number)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(incarnation)))
	b = append(b, incarnation...)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b[start:], castagnoli))
}

// parseHeader reads a segment's header from its first bytes: its number,
// incarnation and length.
func parseHeader(b []byte) (number uint64, incarnation string, n int, err error) {
	if len(b) < 18 || string(b[:4]) != magic {
		return 0, "", 0, errors.New("no journal header")
	}
	if v := binary.LittleEndian.Uint16(b[4:]); v != version {
		return 0, "", 0, fmt.Errorf("journal format version %d, this build reads %d", v, version)
	}
	number = binary.LittleEndian.Uint64(b[8:])
	il := int(binary.LittleEndian.Uint16(b[16:]))
	n = 18 + il + 4
	if len(b) < n {
		return 0, "", 0, errors.New("journal header cut short")
	}
	if crc32.Checksum(b[:n-4], castagnoli) != binary.LittleEndian.Uint32(b[n-4:]) {
		return 0, "", 0, errors.New("journal header fails its checksum")
	}
	return number, string(b[18 : 18+il]), n, nil
}

// appendObject appends o's entry to a batch's entries.
func appendObject(b []byte, o *Object) []byte {
	if o.Copied {
		b = append(b, entryCopy)
		b = binary.LittleEndian.AppendUint64(b, uint64(o.By))
	} else {
		b = append(b, entryObject)
	}
	b = binary.LittleEndian.AppendUint64(b, o.ID)
	b = binary.AppendUvarint(b, uint64(len(o.Parts)))
	for _, p := range o.Parts {
		b = binary.LittleEndian.AppendUint64(b, p.Stream)
		b = binary.LittleEndian.AppendUint64(b, uint64(p.Epoch))
		b = binary.LittleEndian.AppendUint64(b, p.First)
		b = binary.LittleEndian.AppendUint64(b, p.Count)
	}
	b = binary.AppendUvarint(b, uint64(len(o.Payload)))
	return append(b, o.Payload...)
}

func appendFence(b []byte, stream uint64, epoch int64) []byte {
	b = append(b, entryFence)
	b = binary.LittleEndian.AppendUint64(b, stream)
	return binary.LittleEndian.AppendUint64(b, uint64(epoch))
}

// sealBatch frames the entries b[batchHeader:] of a batch begun with
// batchHeader zero bytes.
func sealBatch(b []byte) []byte {
	body := b[batchHeader:]
	copy(b, batchMagic)
	binary.LittleEndian.PutUint32(b[4:], uint32(len(body)))
	binary.LittleEndian.PutUint32(b[8:], crc32.Checksum(body, castagnoli))
	return b
}

// batchAt returns the entries of the batch at off in data, if a whole one
// that passes its checksum begins there.
func batchAt(data []byte, off int64) ([]byte, bool) {
	if int64(len(data))-off < batchHeader || string(data[off:off+4]) != batchMagic {
		return nil, false
	}
	l := int64(binary.LittleEndian.Uint32(data[off+4:]))
	if l == 0 || l > maxBatchBytes || off+batchHeader+l > int64(len(data)) {
		return nil, false
	}
	body := data[off+batchHeader : off+batchHeader+l]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(data[off+8:]) {
		return nil, false
	}
	return body, true
}

// objectBytes is the size of o's entry in a batch, near enough.
func objectBytes(o *Object) int {
	return 1 + 8 + 8 + binary.MaxVarintLen64 + len(o.Parts)*partBytes + binary.MaxVarintLen64 + len(o.Payload)
}

// entry is one decoded entry; for an object, payloadAt is where its
// payload starts in the batch's entries.
type entry struct {
	fence     bool
	stream    uint64 // a fence's
	epoch     int64  // a fence's
	obj       Object // Payload aliases the batch
	payloadAt int
}

// parseEntries decodes a batch's entries (checked by its CRC already).
func parseEntries(body []byte) ([]entry, error) {
	var out []entry
	for i := 0; i < len(body); {
		switch body[i] {
		case entryFence:
			if len(body)-i < fenceBytes {
				return nil, errors.New("fence entry cut short")
			}
			out = append(out, entry{fence: true, stream: binary.LittleEndian.Uint64(body[i+1:]), epoch: int64(binary.LittleEndian.Uint64(body[i+9:]))})
			i += fenceBytes
		case entryObject, entryCopy:
			var e entry
			if body[i] == entryCopy {
				if len(body)-i < 9 {
					return nil, errors.New("copy entry cut short")
				}
				e.obj.Copied, e.obj.By = true, int64(binary.LittleEndian.Uint64(body[i+1:]))
				i += 8
			}
			i++
			if len(body)-i < 8 {
				return nil, errors.New("object entry cut short")
			}
			e.obj.ID = binary.LittleEndian.Uint64(body[i:])
			i += 8
			np, k := binary.Uvarint(body[i:])
			if k <= 0 || np > uint64(len(body)-i)/partBytes {
				return nil, errors.New("object entry: bad part count")
			}
			i += k
			for range np {
				e.obj.Parts = append(e.obj.Parts, Part{
					Stream: binary.LittleEndian.Uint64(body[i:]),
					Epoch:  int64(binary.LittleEndian.Uint64(body[i+8:])),
					First:  binary.LittleEndian.Uint64(body[i+16:]),
					Count:  binary.LittleEndian.Uint64(body[i+24:]),
				})
				i += partBytes
			}
			pl, k := binary.Uvarint(body[i:])
			if k <= 0 || pl > uint64(len(body)-i-k) {
				return nil, errors.New("object entry: bad payload length")
			}
			i += k
			e.payloadAt = i
			e.obj.Payload = body[i : i+int(pl)]
			i += int(pl)
			out = append(out, e)
		default:
			return nil, fmt.Errorf("unknown entry type %d", body[i])
		}
	}
	return out, nil
}
