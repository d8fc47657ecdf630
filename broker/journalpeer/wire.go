package journalpeer

import (
	"encoding/binary"
	"hash/crc32"

	"github.com/picomq/picomq/broker/journal"
)

const (
	objectMagic = "PMQO"
	refsMagic   = "PMQR"
	headerBytes = 4 + 4         // magic, crc
	fixedBytes  = 8 + 1 + 8 + 4 // id, flags, by, parts
	partBytes   = 8 + 8 + 8 + 8 // stream, epoch, first, count
	refBytes    = 8 + partBytes // object, part
	flagCopied  = 1
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// EncodeObject is o's wire form.
func EncodeObject(o journal.Object) []byte {
	b := make([]byte, headerBytes, headerBytes+fixedBytes+len(o.Parts)*partBytes+len(o.Payload))
	copy(b, objectMagic)
	b = binary.LittleEndian.AppendUint64(b, o.ID)
	var flags byte
	if o.Copied {
		flags |= flagCopied
	}
	b = append(b, flags)
	b = binary.LittleEndian.AppendUint64(b, uint64(o.By))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(o.Parts)))
	for _, p := range o.Parts {
		b = appendPart(b, p)
	}
	b = append(b, o.Payload...)
	binary.LittleEndian.PutUint32(b[4:8], crc32.Checksum(b[headerBytes:], castagnoli))
	return b
}

// DecodeObject parses an object's wire form; the payload aliases b.
func DecodeObject(b []byte) (journal.Object, error) {
	body, err := checked(b, objectMagic)
	if err != nil {
		return journal.Object{}, err
	}
	if len(body) < fixedBytes {
		return journal.Object{}, BadObject.With("reason", "shorter than an object's fixed fields", "bytes", len(b))
	}
	o := journal.Object{ID: binary.LittleEndian.Uint64(body)}
	flags := body[8]
	if flags&^flagCopied != 0 {
		return journal.Object{}, BadObject.With("reason", "unknown flags", "flags", flags)
	}
	o.Copied = flags&flagCopied != 0
	o.By = int64(binary.LittleEndian.Uint64(body[9:]))
	n := int(binary.LittleEndian.Uint32(body[17:]))
	body = body[fixedBytes:]
	if n > len(body)/partBytes {
		return journal.Object{}, BadObject.With("reason", "more parts than bytes", "parts", n)
	}
	o.Parts = make([]journal.Part, n)
	for i := range o.Parts {
		o.Parts[i] = part(body[i*partBytes:])
	}
	if o.ID == 0 {
		return journal.Object{}, BadObject.With("reason", "object id 0")
	}
	o.Payload = body[n*partBytes:]
	return o, nil
}

// EncodeRefs is a fence's answer's wire form.
func EncodeRefs(refs []journal.Ref) []byte {
	b := make([]byte, headerBytes, headerBytes+4+len(refs)*refBytes)
	copy(b, refsMagic)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(refs)))
	for _, r := range refs {
		b = binary.LittleEndian.AppendUint64(b, r.Object)
		b = appendPart(b, r.Part)
	}
	binary.LittleEndian.PutUint32(b[4:8], crc32.Checksum(b[headerBytes:], castagnoli))
	return b
}

// DecodeRefs parses a fence's answer.
func DecodeRefs(b []byte) ([]journal.Ref, error) {
	body, err := checked(b, refsMagic)
	if err != nil {
		return nil, err
	}
	if len(body) < 4 {
		return nil, BadObject.With("reason", "refs without their count")
	}
	n := int(binary.LittleEndian.Uint32(body))
	body = body[4:]
	if n != len(body)/refBytes || len(body)%refBytes != 0 {
		return nil, BadObject.With("reason", "refs count and bytes disagree", "refs", n, "bytes", len(body))
	}
	refs := make([]journal.Ref, n)
	for i := range refs {
		at := body[i*refBytes:]
		refs[i] = journal.Ref{Object: binary.LittleEndian.Uint64(at), Part: part(at[8:])}
	}
	return refs, nil
}

func appendPart(b []byte, p journal.Part) []byte {
	b = binary.LittleEndian.AppendUint64(b, p.Stream)
	b = binary.LittleEndian.AppendUint64(b, uint64(p.Epoch))
	b = binary.LittleEndian.AppendUint64(b, p.First)
	return binary.LittleEndian.AppendUint64(b, p.Count)
}

func part(b []byte) journal.Part {
	return journal.Part{
		Stream: binary.LittleEndian.Uint64(b), Epoch: int64(binary.LittleEndian.Uint64(b[8:])),
		First: binary.LittleEndian.Uint64(b[16:]), Count: binary.LittleEndian.Uint64(b[24:]),
	}
}

// checked verifies magic and CRC and returns what follows the header.
func checked(b []byte, magic string) ([]byte, error) {
	if len(b) < headerBytes || string(b[:4]) != magic {
		return nil, BadObject.With("reason", "not a "+magic+" body", "bytes", len(b))
	}
	if crc32.Checksum(b[headerBytes:], castagnoli) != binary.LittleEndian.Uint32(b[4:8]) {
		return nil, BadObject.With("reason", "checksum mismatch", "bytes", len(b))
	}
	return b[headerBytes:], nil
}
