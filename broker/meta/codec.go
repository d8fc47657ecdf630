package meta

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// The log's hot commands — commits, and the replaces a merge sends with
// thousands of ranges — have a compact binary form: decoding them as JSON
// was a tenth of the broker's CPU. Every other command stays JSON.
//
// A binary entry starts with a tag byte naming its kind and version. Tags
// are below 0x09, and no JSON document can start with such a byte (JSON
// commands start with '{'), so entries written before the binary form
// existed still decode as JSON. After the tag come the fields in order:
// unsigned integers as uvarints, signed ones as varints, strings as a
// uvarint length and the bytes, slices as a uvarint count and the elements.
//
//	commit v1:  0x01 Object Size Now
//	            len(Appends) { Stream Epoch First flags [Range] [Producer] [StreamSeq] }
//	            len(Groups)  { Stream Group Next After }
//	commit v2:  0x03 as commit v1, then Frames (a uvarint length and the bytes)
//	commit v3:  0x04 as commit v2 (Frames possibly empty), then
//	            len(Replicas) { string }
//	replace v1: 0x02 Stream Object Size
//	            len(Old) { Object Pos }
//	            len(New) { Range }
//	replace v2: 0x05 as replace v1, then len(Replicas) { string }
//	checkpoint: 0x06 len(Commits) { the commit's own entry, as a uvarint
//	            length and the bytes }
//	replaceMany: 0x07 len(Replaces) { the replace's own entry, likewise }
//	Range:      First Next Object Pos Len Bytes Count MinTime MaxTime
//	Producer:   ID Epoch Seq
//
// An Append's flags byte says which optional parts follow (and carries
// Close). A field added to one of these structs must be added here, under a
// new tag; TestCodecRoundTrip, which fills every field, fails until it is.
// The encoder writes the oldest version that holds the command, so a
// broker's entries stay readable by the version before it unless they need
// what it lacks.
const (
	tagCommitV1    = 0x01
	tagReplaceV1   = 0x02
	tagCommitV2    = 0x03 // v1 + Frames; v1 still written when there are none
	tagCommitV3    = 0x04 // v2 + Replicas, written only when there are some
	tagReplaceV2   = 0x05 // v1 + Replicas, written only when there are some
	tagCheckpoint  = 0x06
	tagReplaceMany = 0x07
	// tagLimit: bytes below it are binary tags, known or not.
	tagLimit = 0x09
)

// The flags of an Append.
const (
	appendRange = 1 << iota
	appendProducer
	appendStreamSeq
	appendClose
	appendFlags = appendRange | appendProducer | appendStreamSeq | appendClose
)

// The fewest bytes an element takes, so that a count can be checked against
// the bytes left before anything is allocated for it.
const (
	minAppend   = 4 // Stream Epoch First flags
	minGroup    = 4 // Stream len(Group) Next After
	minRangeRef = 2 // Object Pos
	minRange    = 9 // its nine integers
)

// Encode serializes a command for the log: commits and replaces in binary,
// everything else as JSON.
func Encode(c *Command) ([]byte, error) {
	// The binary form carries the op's body only, so a command holding any
	// other body (which Apply ignores, but JSON would keep) goes as JSON.
	// Command must stay comparable for this test.
	switch {
	case c.Op == OpCommit && c.Commit != nil && *c == (Command{Op: OpCommit, Commit: c.Commit}):
		return encodeCommit(c.Commit), nil
	case c.Op == OpReplace && c.Replace != nil && *c == (Command{Op: OpReplace, Replace: c.Replace}):
		return encodeReplace(c.Replace), nil
	case c.Op == OpCheckpoint && c.Checkpoint != nil && *c == (Command{Op: OpCheckpoint, Checkpoint: c.Checkpoint}):
		return appendEntries(tagCheckpoint, len(c.Checkpoint.Commits), func(i int) []byte { return encodeCommit(&c.Checkpoint.Commits[i]) }), nil
	case c.Op == OpReplaceMany && c.ReplaceMany != nil && *c == (Command{Op: OpReplaceMany, ReplaceMany: c.ReplaceMany}):
		return appendEntries(tagReplaceMany, len(c.ReplaceMany.Replaces), func(i int) []byte { return encodeReplace(&c.ReplaceMany.Replaces[i]) }), nil
	}
	return json.Marshal(c)
}

// Decode parses a log entry, binary or JSON, into c.
func Decode(data []byte, c *Command) error {
	if len(data) == 0 || data[0] >= tagLimit {
		return json.Unmarshal(data, c)
	}
	d := decoder{b: data[1:]}
	switch data[0] {
	case tagCommitV1:
		*c = Command{Op: OpCommit, Commit: d.commit()}
	case tagCommitV2, tagCommitV3:
		cm := d.commit()
		if d.err == nil {
			if cm.Frames = d.bytes(); len(cm.Frames) == 0 {
				cm.Frames = nil
			}
		}
		if data[0] == tagCommitV3 && d.err == nil {
			cm.Replicas = d.strings()
		}
		*c = Command{Op: OpCommit, Commit: cm}
	case tagReplaceV1, tagReplaceV2:
		rp := d.replace()
		if data[0] == tagReplaceV2 && d.err == nil {
			rp.Replicas = d.strings()
		}
		*c = Command{Op: OpReplace, Replace: rp}
	case tagCheckpoint:
		cp := &Checkpoint{}
		d.entries("checkpoint", "a commit", func(e []byte) bool {
			var one Command
			if err := Decode(e, &one); err != nil || one.Op != OpCommit || one.Commit == nil {
				return false
			}
			cp.Commits = append(cp.Commits, *one.Commit)
			return true
		})
		*c = Command{Op: OpCheckpoint, Checkpoint: cp}
	case tagReplaceMany:
		rm := &ReplaceMany{}
		d.entries("replaceMany", "a replace", func(e []byte) bool {
			var one Command
			if len(e) == 0 || e[0] != tagReplaceV1 && e[0] != tagReplaceV2 {
				return false // no nesting: only a replace's own entry
			}
			if err := Decode(e, &one); err != nil || one.Op != OpReplace || one.Replace == nil {
				return false
			}
			rm.Replaces = append(rm.Replaces, *one.Replace)
			return true
		})
		*c = Command{Op: OpReplaceMany, ReplaceMany: rm}
	default:
		// A later version's entry read by an older broker.
		return fmt.Errorf("meta: unknown binary command tag %#x", data[0])
	}
	if d.err == nil && len(d.b) > 0 {
		d.fail("trailing bytes")
	}
	if d.err != nil {
		*c = Command{}
		return d.err
	}
	return nil
}

func encodeCommit(c *Commit) []byte {
	// A guess at the size that spares most regrowth: ranges dominate.
	b := make([]byte, 0, 32+len(c.Appends)*64+len(c.Groups)*24+len(c.Frames)+len(c.Replicas)*24)
	tag := byte(tagCommitV1)
	switch {
	case len(c.Replicas) > 0:
		tag = tagCommitV3
	case len(c.Frames) > 0:
		tag = tagCommitV2
	}
	b = append(b, tag)
	b = binary.AppendUvarint(b, c.Object)
	b = binary.AppendVarint(b, c.Size)
	b = binary.AppendVarint(b, c.Now)
	b = binary.AppendUvarint(b, uint64(len(c.Appends)))
	for i := range c.Appends {
		a := &c.Appends[i]
		b = binary.AppendUvarint(b, a.Stream)
		b = binary.AppendVarint(b, a.Epoch)
		b = binary.AppendUvarint(b, a.First)
		var flags byte
		if a.Range != nil {
			flags |= appendRange
		}
		if a.Producer != nil {
			flags |= appendProducer
		}
		if a.StreamSeq != "" {
			flags |= appendStreamSeq
		}
		if a.Close {
			flags |= appendClose
		}
		b = append(b, flags)
		if a.Range != nil {
			b = appendRangeV1(b, a.Range)
		}
		if p := a.Producer; p != nil {
			b = appendString(b, p.ID)
			b = binary.AppendVarint(b, p.Epoch)
			b = binary.AppendVarint(b, p.Seq)
		}
		if a.StreamSeq != "" {
			b = appendString(b, a.StreamSeq)
		}
	}
	b = binary.AppendUvarint(b, uint64(len(c.Groups)))
	for i := range c.Groups {
		g := &c.Groups[i]
		b = binary.AppendUvarint(b, g.Stream)
		b = appendString(b, g.Group)
		b = binary.AppendUvarint(b, g.Next)
		b = binary.AppendVarint(b, int64(g.After))
	}
	if tag >= tagCommitV2 {
		b = binary.AppendUvarint(b, uint64(len(c.Frames)))
		b = append(b, c.Frames...)
	}
	if tag == tagCommitV3 {
		b = appendStrings(b, c.Replicas)
	}
	return b
}

func appendStrings(b []byte, ss []string) []byte {
	b = binary.AppendUvarint(b, uint64(len(ss)))
	for _, s := range ss {
		b = appendString(b, s)
	}
	return b
}

// appendEntries is a command of n others, each written as its own entry
// by entry: tag, then n, then each entry as a uvarint length and the bytes
// (the checkpoint's commits, the replaceMany's replaces).
func appendEntries(tag byte, n int, entry func(i int) []byte) []byte {
	b := binary.AppendUvarint([]byte{tag}, uint64(n))
	for i := range n {
		e := entry(i)
		b = binary.AppendUvarint(b, uint64(len(e)))
		b = append(b, e...)
	}
	return b
}

func encodeReplace(c *Replace) []byte {
	b := make([]byte, 0, 32+len(c.Old)*8+len(c.New)*48+len(c.Replicas)*24)
	tag := byte(tagReplaceV1)
	if len(c.Replicas) > 0 {
		tag = tagReplaceV2
	}
	b = append(b, tag)
	b = binary.AppendUvarint(b, c.Stream)
	b = binary.AppendUvarint(b, c.Object)
	b = binary.AppendVarint(b, c.Size)
	b = binary.AppendUvarint(b, uint64(len(c.Old)))
	for _, r := range c.Old {
		b = binary.AppendUvarint(b, r.Object)
		b = binary.AppendVarint(b, r.Pos)
	}
	b = binary.AppendUvarint(b, uint64(len(c.New)))
	for i := range c.New {
		b = appendRangeV1(b, &c.New[i])
	}
	if tag == tagReplaceV2 {
		b = appendStrings(b, c.Replicas)
	}
	return b
}

func appendRangeV1(b []byte, r *Range) []byte {
	b = binary.AppendUvarint(b, r.First)
	b = binary.AppendUvarint(b, r.Next)
	b = binary.AppendUvarint(b, r.Object)
	b = binary.AppendVarint(b, r.Pos)
	b = binary.AppendVarint(b, r.Len)
	b = binary.AppendVarint(b, r.Bytes)
	b = binary.AppendVarint(b, r.Count)
	b = binary.AppendVarint(b, r.MinTime)
	return binary.AppendVarint(b, r.MaxTime)
}

func appendString(b []byte, s string) []byte {
	s = validUTF8(s)
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// validUTF8 replaces each byte of s that is not valid UTF-8 with U+FFFD, as
// encoding/json does. The state is snapshotted as JSON, so a string kept
// byte for byte here would come back changed after a restore, and a
// producer id with a stray byte would then be a different producer.
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var sb strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			sb.WriteString("\uFFFD")
		} else {
			sb.WriteString(s[i : i+size])
		}
		i += size
	}
	return sb.String()
}

// decoder reads a binary command. Its first failure sticks: it empties the
// input, so every later read fails too and returns zero, and callers check
// err only where a loop may stop early.
//
// Empty slices decode as nil. JSON would give an empty slice for
// "appends":[] and nil for null, but the state machine only ranges over
// these slices and takes their length, so the two behave the same.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(why string) {
	if d.err == nil {
		d.err = fmt.Errorf("meta: malformed binary command: %s", why)
	}
	d.b = nil
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("truncated or overlong integer")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("truncated or overlong integer")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// int reads a varint that must fit an int (32-bit platforms).
func (d *decoder) int() int {
	v := d.varint()
	if int64(int(v)) != v {
		d.fail("integer out of range")
		return 0
	}
	return int(v)
}

func (d *decoder) byte() byte {
	if len(d.b) == 0 {
		d.fail("truncated")
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) string() string {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail("string longer than the bytes left")
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return validUTF8(s) // as json.Unmarshal would: the encoder never writes such bytes
}

// bytes reads a length and that many bytes, which alias the entry (an
// object's frames are large, and only written to a file).
func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail("byte string longer than the bytes left")
		return nil
	}
	b := d.b[:n:n]
	d.b = d.b[n:]
	return b
}

// strings reads a count and that many strings (nil for none).
func (d *decoder) strings() []string {
	n := d.count(1) // a string takes at least its length byte
	if n == 0 {
		return nil
	}
	out := make([]string, n)
	for i := range out {
		out[i] = d.string()
	}
	return out
}

// count reads a slice length, refusing one whose elements, of at least min
// bytes each, cannot fit in the bytes left: a corrupt count never makes us
// allocate more than a small multiple of the entry's size.
func (d *decoder) count(min int) int {
	n := d.uvarint()
	if n > uint64(len(d.b)/min) {
		d.fail("count larger than the bytes left")
		return 0
	}
	return int(n)
}

func (d *decoder) commit() *Commit {
	c := &Commit{Object: d.uvarint(), Size: d.varint(), Now: d.varint()}
	if n := d.count(minAppend); n > 0 {
		c.Appends = make([]Append, n)
		// The appends' ranges and producers come from one allocation each
		// rather than one per append; the state machine copies them.
		var ranges []Range
		var producers []ProducerTuple
		for i := range c.Appends {
			a := &c.Appends[i]
			a.Stream, a.Epoch, a.First = d.uvarint(), d.varint(), d.uvarint()
			flags := d.byte()
			if flags&^appendFlags != 0 {
				d.fail("unknown append flags")
			}
			if d.err != nil {
				return nil
			}
			if flags&appendRange != 0 {
				if len(ranges) == 0 {
					ranges = make([]Range, n-i)
				}
				a.Range = &ranges[0]
				ranges = ranges[1:]
				d.rangeV1(a.Range)
			}
			if flags&appendProducer != 0 {
				if len(producers) == 0 {
					producers = make([]ProducerTuple, n-i)
				}
				a.Producer = &producers[0]
				producers = producers[1:]
				a.Producer.ID, a.Producer.Epoch, a.Producer.Seq = d.string(), d.varint(), d.varint()
			}
			if flags&appendStreamSeq != 0 {
				a.StreamSeq = d.string()
			}
			a.Close = flags&appendClose != 0
		}
	}
	if n := d.count(minGroup); n > 0 {
		c.Groups = make([]GroupOffset, n)
		for i := range c.Groups {
			g := &c.Groups[i]
			g.Stream, g.Group, g.Next, g.After = d.uvarint(), d.string(), d.uvarint(), d.int()
		}
	}
	return c
}

// entries reads what appendEntries wrote, handing each entry to add; one
// add refuses fails the decoder ("<what> holds an entry that is not
// <want>"), as does a count past the entry's bytes.
func (d *decoder) entries(what, want string, add func(e []byte) bool) {
	n := d.uvarint()
	if d.err == nil && n > uint64(len(d.b)) {
		d.fail(what + " entry count past the entry")
	}
	for i := uint64(0); i < n && d.err == nil; i++ {
		e := d.bytes()
		if d.err != nil {
			return
		}
		if !add(e) {
			d.fail(what + " holds an entry that is not " + want)
			return
		}
	}
}

func (d *decoder) replace() *Replace {
	c := &Replace{Stream: d.uvarint(), Object: d.uvarint(), Size: d.varint()}
	if n := d.count(minRangeRef); n > 0 {
		c.Old = make([]RangeRef, n)
		for i := range c.Old {
			c.Old[i] = RangeRef{Object: d.uvarint(), Pos: d.varint()}
		}
	}
	if n := d.count(minRange); n > 0 {
		c.New = make([]Range, n)
		for i := range c.New {
			d.rangeV1(&c.New[i])
		}
	}
	return c
}

func (d *decoder) rangeV1(r *Range) {
	r.First, r.Next, r.Object = d.uvarint(), d.uvarint(), d.uvarint()
	r.Pos, r.Len, r.Bytes, r.Count = d.varint(), d.varint(), d.varint(), d.varint()
	r.MinTime, r.MaxTime = d.varint(), d.varint()
}
