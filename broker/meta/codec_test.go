package meta

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/picomq/picomq/broker/errs"
)

// randFill sets every field reachable from v to a random value, edge cases
// (zero, extremes, empty and non-ASCII strings, nil and empty slices and
// pointers) often. It walks the types by reflection, so a field added to
// Commit, Replace or what they hold is generated without anyone thinking of
// it — and the round trip fails until the codec carries it. A kind it does
// not know (a map, say) panics: the codec would not know it either.
func randFill(r *rand.Rand, v reflect.Value) {
	switch v.Kind() {
	case reflect.Uint64:
		v.SetUint([]uint64{0, 1, 127, 128, math.MaxUint64, r.Uint64(), r.Uint64N(1 << 20)}[r.IntN(7)])
	case reflect.Uint8: // an object's frames
		v.SetUint(uint64(r.Uint32() & 0xff))
	case reflect.Int64, reflect.Int:
		v.SetInt([]int64{0, -1, 1, 63, -64, math.MaxInt64, math.MinInt64, r.Int64(), -r.Int64N(1 << 20)}[r.IntN(9)])
	case reflect.String:
		v.SetString(randString(r))
	case reflect.Bool:
		v.SetBool(r.IntN(2) == 0)
	case reflect.Pointer:
		if r.IntN(3) > 0 {
			p := reflect.New(v.Type().Elem())
			randFill(r, p.Elem())
			v.Set(p)
		}
	case reflect.Slice:
		switch r.IntN(5) {
		case 0: // nil
		case 1:
			v.Set(reflect.MakeSlice(v.Type(), 0, 0))
		default:
			n := 1 + r.IntN(6)
			if r.IntN(20) == 0 {
				n = 300
			}
			v.Set(reflect.MakeSlice(v.Type(), n, n))
			for i := 0; i < n; i++ {
				randFill(r, v.Index(i))
			}
		}
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			randFill(r, v.Field(i))
		}
	default:
		panic("randFill: no generator for " + v.Type().String() + ": teach it, and the codec")
	}
}

// randString is empty, ASCII, non-ASCII, or bytes that are not UTF-8 (the
// binary form keeps them as they are).
func randString(r *rand.Rand) string {
	switch r.IntN(6) {
	case 0:
		return ""
	case 1:
		return "p"
	case 2:
		return "producteur-é-生产者-🚀"
	case 3:
		return "\xff\xfe\x00bad"
	case 4:
		return strings.Repeat("x", 200+r.IntN(100))
	}
	b := make([]byte, r.IntN(12))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return string(b)
}

// randBinaryCommand returns a random commit, replace, checkpoint or
// replaceMany.
func randBinaryCommand(r *rand.Rand) *Command {
	switch r.IntN(4) {
	case 3:
		c := &ReplaceMany{}
		randFill(r, reflect.ValueOf(c).Elem())
		return &Command{Op: OpReplaceMany, ReplaceMany: c}
	case 2:
		c := &Checkpoint{}
		randFill(r, reflect.ValueOf(c).Elem())
		return &Command{Op: OpCheckpoint, Checkpoint: c}
	case 0:
		c := &Commit{}
		randFill(r, reflect.ValueOf(c).Elem())
		return &Command{Op: OpCommit, Commit: c}
	}
	c := &Replace{}
	randFill(r, reflect.ValueOf(c).Elem())
	return &Command{Op: OpReplace, Replace: c}
}

// nilEmpty turns every empty slice reachable from v into nil: the binary
// form decodes a slice with no element as nil, which the state machine
// treats as it does an empty one (it only ranges over them and takes their
// length). It also turns every string into what JSON keeps of it (invalid
// UTF-8 bytes become U+FFFD), as both encodings do. Nothing else is
// normalized.
func nilEmpty(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(validUTF8(v.String()))
	case reflect.Pointer:
		if !v.IsNil() {
			nilEmpty(v.Elem())
		}
	case reflect.Slice:
		if v.Len() == 0 {
			v.Set(reflect.Zero(v.Type()))
		}
		for i := 0; i < v.Len(); i++ {
			nilEmpty(v.Index(i))
		}
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			nilEmpty(v.Field(i))
		}
	}
}

// show formats a command or a result for a failure message, through
// pointers (JSON shows invalid UTF-8 as U+FFFD, and %+v shows the rest).
func show(v any) string {
	if cr, ok := v.(*CommitResult); ok {
		return fmt.Sprintf("appends %v groups %v", cr.Appends, cr.Groups)
	}
	if err, ok := v.(error); ok {
		return err.Error()
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%+v", v)
	}
	return string(raw)
}

func decode(t testing.TB, raw []byte) *Command {
	t.Helper()
	var c Command
	if err := Decode(raw, &c); err != nil {
		t.Fatalf("decode %x: %v", raw, err)
	}
	return &c
}

// TestCodecRoundTrip: random commits and replaces, every optional part
// present or absent and every integer at its edges now and then, come back
// from Encode and Decode as they went in — in binary.
func TestCodecRoundTrip(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 5000; i++ {
		c := randBinaryCommand(r)
		raw, err := Encode(c)
		if err != nil {
			t.Fatal(err)
		}
		if raw[0] >= tagLimit {
			t.Fatalf("%s encoded as JSON: %s", c.Op, raw)
		}
		got := decode(t, raw)
		nilEmpty(reflect.ValueOf(c))
		if !reflect.DeepEqual(got, c) {
			t.Fatalf("round trip %d:\nsent %s\ngot  %s", i, show(c), show(got))
		}
	}
}

// TestEncodeFallsBackToJSON: every other op, and a commit or replace
// carrying something the binary form does not, stay JSON, and decode.
func TestEncodeFallsBackToJSON(t *testing.T) {
	t.Parallel()
	for _, c := range []*Command{
		create("a", 2),
		{Op: OpTouch, Touch: &Touch{At: map[string]int64{"a": 1}}},
		{Op: OpCommit}, // no body: Apply refuses it, as it did
		{Op: OpReplace},
		{Op: OpCommit, Commit: &Commit{}, Trim: &Trim{Stream: 1}},
		{Op: OpReplace, Replace: &Replace{}, Group: &GroupOffset{Group: "g"}},
		{Op: OpGroup, Commit: &Commit{}}, // a commit body under another op
	} {
		raw, err := Encode(c)
		if err != nil {
			t.Fatal(err)
		}
		if raw[0] != '{' {
			t.Fatalf("%+v: not JSON: %x", c, raw)
		}
		if got := decode(t, raw); !reflect.DeepEqual(got, c) {
			t.Fatalf("JSON round trip:\nsent %+v\ngot  %+v", c, got)
		}
	}
}

// TestCodecRefusesMalformedEntries: every strict prefix of a valid binary
// entry is refused, and random corruption either is refused or decodes to a
// command that the state machine applies, re-encodes and decodes alike —
// never a panic nor a huge allocation.
func TestCodecRefusesMalformedEntries(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	f := stateWithStreams(t)
	index := uint64(1000)
	var refused, decoded int // corrupt entries
	for i := 0; i < 400; i++ {
		raw, err := Encode(randBinaryCommand(r))
		if err != nil {
			t.Fatal(err)
		}
		// The last field read is a count, so a strict prefix always lacks a
		// byte something needs. Every prefix of small entries, a sample of
		// the large ones' (quadratic otherwise).
		for n := 0; n < len(raw); n++ {
			if len(raw) > 1024 && n > 64 && n < len(raw)-64 {
				n += r.IntN(len(raw) / 64)
				if n >= len(raw) {
					break
				}
			}
			var c Command
			if err := Decode(raw[:n], &c); err == nil {
				t.Fatalf("prefix %d of %d decoded: %x", n, len(raw), raw[:n])
			}
		}
		for k := 0; k < 50; k++ {
			bad := append([]byte(nil), raw...)
			for j := 0; j < 1+r.IntN(3); j++ {
				bad[r.IntN(len(bad))] ^= byte(1 + r.IntN(255))
			}
			var c Command
			if err := Decode(bad, &c); err != nil {
				refused++
				continue
			}
			decoded++
			again, err := Encode(&c)
			if err != nil {
				t.Fatal(err)
			}
			if got := decode(t, again); !reflect.DeepEqual(got, &c) {
				t.Fatalf("corrupt entry %x decoded to %+v, which re-decodes to %+v", bad, c, got)
			}
			index++
			f.Apply(&raft.Log{Index: index, Data: bad})
		}
	}
	if err := f.State().Check(); err != nil {
		t.Fatal(err)
	}
	if refused == 0 || decoded == 0 {
		t.Fatalf("corrupt entries: %d refused, %d decoded: want both", refused, decoded)
	}
	t.Logf("corrupt entries: %d refused, %d decoded", refused, decoded)

	// A count far beyond the entry is refused before anything is allocated.
	huge := []byte{tagReplaceV1, 1, 2, 3}
	huge = appendUvarintTest(huge, 1<<60)
	var c Command
	if err := Decode(huge, &c); err == nil {
		t.Fatal("a count of 2^60 decoded")
	}
	for _, bad := range [][]byte{
		{0x00}, {0x07}, // unknown tags
		append(mustEncode(t, commit(1, Append{Stream: 1})), 0),                          // trailing byte
		{tagCommitV1, 0, 0, 0, 1, 1, 0, 0, 0x10, 0},                                     // unknown append flag
		{tagCommitV1, 0, 0, 0, 1, 1, 0, 0, appendStreamSeq, 5, 'a', 0},                  // string past the end
		{tagCommitV1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, // 11-byte uvarint
	} {
		if err := Decode(bad, &c); err == nil {
			t.Fatalf("%x decoded to %+v", bad, c)
		}
	}
}

func appendUvarintTest(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func mustEncode(t testing.TB, c *Command) []byte {
	t.Helper()
	raw, err := Encode(c)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// stateWithStreams is an FSM holding two open streams (ids 1 and 2) with a
// few ranges, for corrupt commands to land on.
func stateWithStreams(t *testing.T) *FSM {
	f := NewFSM()
	applyLog(t, f, 1, create("a", 2))
	applyLog(t, f, 2, &Command{Op: OpOpen, Open: &Open{Stream: 1, Owner: "n"}})
	applyLog(t, f, 3, &Command{Op: OpOpen, Open: &Open{Stream: 2, Owner: "n"}})
	for i := uint64(0); i < 4; i++ {
		res := applyLog(t, f, 4+i, commit(i+1, Append{Stream: 1, Epoch: 0, First: i, Range: rng(i, i+1, i+1)}))
		if err := res.(*CommitResult).Appends[0]; err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// TestMalformedBinaryEntryIsBadCommand: the FSM refuses a corrupt binary
// entry as it refuses undecodable JSON, naming the index, and goes on.
func TestMalformedBinaryEntryIsBadCommand(t *testing.T) {
	t.Parallel()
	f := NewFSM()
	raw := mustEncode(t, commit(1, Append{Stream: 1, Range: rng(0, 1, 1)}))
	res := f.Apply(&raft.Log{Index: 7, Data: raw[:len(raw)-3]})
	err, _ := res.(error)
	if !errors.Is(err, BadCommand) {
		t.Fatalf("got %v, want BAD_COMMAND", res)
	}
	if v, _ := errs.FieldOf(err, "reason"); v != "undecodable" {
		t.Fatalf("reason = %v", v)
	}
	if v, _ := errs.FieldOf(err, "index"); v != int64(7) {
		t.Fatalf("index = %v (%T)", v, v)
	}
	if f.Applied() != 7 || f.Commands() != 0 {
		t.Fatalf("applied %d commands %d", f.Applied(), f.Commands())
	}
}

// TestJSONAndBinaryLogsReachTheSameState: the random command sequences of
// TestRandomCommandsKeepInvariants, their commits dressed with producers,
// Stream-Seqs, closes and group offsets, fed to one FSM as JSON (the old
// encoding) and to another as Encode writes them now: every result and the
// final states are the same.
func TestJSONAndBinaryLogsReachTheSameState(t *testing.T) {
	t.Parallel()
	var binary, accepted int
	for seed := uint64(1); seed <= 30; seed++ {
		r := rand.New(rand.NewPCG(seed, seed*31))
		s := NewState() // drives the generator
		jf, bf := NewFSM(), NewFSM()
		var obj uint64
		names := []string{"a", "b", "c", "d", "e"}
		for step := uint64(1); step <= 400; step++ {
			c := randomCommand(r, s, names, &obj)
			if c.Op == OpCommit {
				dress(r, c.Commit)
			}
			js, err := json.Marshal(c)
			if err != nil {
				t.Fatal(err)
			}
			bin := mustEncode(t, c)
			if bin[0] < tagLimit {
				binary++
			}
			want := s.Apply(c)
			jr := jf.Apply(&raft.Log{Index: step, Data: js})
			br := bf.Apply(&raft.Log{Index: step, Data: bin})
			if !reflect.DeepEqual(jr, want) || !reflect.DeepEqual(br, want) {
				t.Fatalf("seed %d step %d %s: results differ:\nstate  %s\njson   %s\nbinary %s", seed, step, c.Op, show(want), show(jr), show(br))
			}
			if cr, ok := want.(*CommitResult); ok && len(cr.Appends) > 0 && cr.Appends[0] == nil {
				accepted++
			}
		}
		if !reflect.DeepEqual(jf.State(), bf.State()) || !reflect.DeepEqual(normalize(jf.State()), normalize(s)) {
			t.Fatalf("seed %d: the JSON and binary logs reached different states", seed)
		}
		if err := bf.State().Check(); err != nil {
			t.Fatal(err)
		}
	}
	if binary == 0 || accepted == 0 {
		t.Fatalf("%d binary entries, %d accepted commits: the test proves nothing", binary, accepted)
	}
}

// dress adds to a generated commit what the generator leaves out: producer
// tuples, Stream-Seqs (non-ASCII too), closes and group offsets riding with
// an append or alone. Strings stay valid UTF-8, which JSON would rewrite.
func dress(r *rand.Rand, c *Commit) {
	seqs := []string{"", "a", "b", "é", "生", "🚀"}
	for i := range c.Appends {
		a := &c.Appends[i]
		if r.IntN(2) == 0 {
			a.Producer = &ProducerTuple{ID: []string{"p", "π"}[r.IntN(2)], Epoch: int64(r.IntN(2)), Seq: int64(r.IntN(3))}
		}
		a.StreamSeq = seqs[r.IntN(len(seqs))]
		a.Close = r.IntN(40) == 0
		if r.IntN(10) == 0 {
			a.Range = nil // close-only, or refused for lack of records
		}
		if r.IntN(3) == 0 && a.Range != nil {
			c.Groups = append(c.Groups, GroupOffset{Stream: a.Stream, Group: "g", Next: a.Range.Next - uint64(r.IntN(2)), After: i})
		}
	}
	if r.IntN(4) == 0 && len(c.Appends) > 0 {
		c.Groups = append(c.Groups, GroupOffset{Stream: c.Appends[0].Stream, Group: "组", Next: uint64(r.IntN(3)), After: -1})
	}
}

// TestOldJSONCommitsStillApply: entries written before the binary form —
// JSON, exactly as the old Encode wrote them — replay, mixed with binary
// ones.
func TestOldJSONCommitsStillApply(t *testing.T) {
	t.Parallel()
	f := NewFSM()
	log := []string{
		`{"op":"create","create":{"name":"s","contentType":"text/plain","policy":{"partitions":1},"now":1}}`,
		`{"op":"open","open":{"stream":1,"owner":"n"}}`,
		`{"op":"commit","commit":{"object":1,"size":100,"appends":[{"stream":1,"epoch":0,"first":0,"range":{"first":0,"next":3,"object":1,"pos":0,"len":90,"bytes":30,"count":3,"minTime":5,"maxTime":6},"producer":{"id":"p","epoch":0,"seq":0},"streamSeq":"a"}],"groups":[{"stream":1,"group":"g","next":3}],"now":2}}`,
	}
	for i, l := range log {
		if err, ok := f.Apply(&raft.Log{Index: uint64(i + 1), Data: []byte(l)}).(error); ok {
			t.Fatalf("entry %d: %v", i+1, err)
		}
	}
	// Then the binary form, continuing the same stream.
	res := applyLog(t, f, 4, commit(2, Append{Stream: 1, Epoch: 0, First: 3, Range: rng(3, 5, 2), Producer: &ProducerTuple{ID: "p", Seq: 1}, StreamSeq: "b"}))
	if err := res.(*CommitResult).Appends[0]; err != nil {
		t.Fatal(err)
	}
	// And an old JSON replace merging both ranges.
	old := `{"op":"replace","replace":{"stream":1,"old":[{"object":1,"pos":0},{"object":2,"pos":0}],"new":[{"first":0,"next":5,"object":3,"pos":0,"len":1,"bytes":50,"count":5,"minTime":5,"maxTime":9}],"object":3,"size":10}}`
	if res := f.Apply(&raft.Log{Index: 5, Data: []byte(old)}); res != nil {
		t.Fatalf("replace: %v", res)
	}
	in, _ := f.Internal(1)
	e, _ := f.Entry("s")
	if in.End != 5 || len(in.Ranges) != 1 || in.Ranges[0].Object != 3 || in.Groups["g"] != 3 ||
		e.Producers["p"] != (Producer{LastSeq: 1}) || e.LastStreamSeq != "b" {
		t.Fatalf("stream %+v entry %+v", in, e)
	}
	if err := f.State().Check(); err != nil {
		t.Fatal(err)
	}
}

// FuzzDecode: whatever the bytes, Decode returns, and what it accepts
// re-encodes to something that decodes the same. `go test` runs the seeds.
func FuzzDecode(f *testing.F) {
	r := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < 20; i++ {
		raw, _ := Encode(randBinaryCommand(r))
		f.Add(raw)
	}
	f.Add([]byte(`{"op":"commit","commit":{"appends":[]}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		var c Command
		if err := Decode(raw, &c); err != nil || len(raw) == 0 || raw[0] >= tagLimit {
			return
		}
		if got := decode(t, mustEncode(t, &c)); !reflect.DeepEqual(got, &c) {
			t.Fatalf("%x decoded to %+v, which re-decodes to %+v", raw, c, got)
		}
	})
}

// BenchmarkCommandCodec compares encoding and decoding, together, of a
// typical commit (16 appends with ranges) and of a merge's replace of 1000
// ranges, in JSON and in binary.
func BenchmarkCommandCodec(b *testing.B) {
	const now = int64(1_760_000_000_000_000_000)
	cm := &Commit{Object: 123456, Size: 4 << 20, Now: now}
	for i := uint64(0); i < 16; i++ {
		first := 1_000_000 + i*37
		a := Append{Stream: 1000 + i, Epoch: 3, First: first,
			Range: &Range{First: first, Next: first + 37, Object: 123456, Pos: int64(i) * 250_000, Len: 250_000, Bytes: 240_000, Count: 37, MinTime: now - 5_000_000, MaxTime: now - 1_000}}
		if i%4 == 0 {
			a.Producer = &ProducerTuple{ID: "producer-42", Epoch: 1, Seq: int64(i)}
		}
		cm.Appends = append(cm.Appends, a)
	}
	rp := &Replace{Stream: 77, Object: 999_999, Size: 64 << 20}
	for i := uint64(0); i < 1000; i++ {
		rp.Old = append(rp.Old, RangeRef{Object: 100_000 + i, Pos: int64(i%16) * 250_000})
		rp.New = append(rp.New, Range{First: i * 100, Next: i*100 + 100, Object: 999_999, Pos: int64(i) * 65_000, Len: 65_000, Bytes: 64_000, Count: 100, MinTime: now + int64(i)*1e6, MaxTime: now + int64(i)*1e6 + 9e5})
	}
	for _, tc := range []struct {
		name string
		c    *Command
	}{
		{"commit16", &Command{Op: OpCommit, Commit: cm}},
		{"replace1000", &Command{Op: OpReplace, Replace: rp}},
	} {
		b.Run(tc.name+"/json", func(b *testing.B) {
			var n int
			for b.Loop() {
				raw, err := json.Marshal(tc.c)
				if err != nil {
					b.Fatal(err)
				}
				var c Command
				if err := json.Unmarshal(raw, &c); err != nil {
					b.Fatal(err)
				}
				n = len(raw)
			}
			b.ReportMetric(float64(n), "bytes/entry")
		})
		b.Run(tc.name+"/binary", func(b *testing.B) {
			var n int
			for b.Loop() {
				raw, err := Encode(tc.c)
				if err != nil {
					b.Fatal(err)
				}
				var c Command
				if err := Decode(raw, &c); err != nil {
					b.Fatal(err)
				}
				n = len(raw)
			}
			b.ReportMetric(float64(n), "bytes/entry")
		})
	}
}

// TestCodecCoercesStringsAsJSONDoes: a string that is not valid UTF-8
// decodes as JSON would have stored it, so the state is the same whichever
// form the log holds, and after a JSON snapshot too.
func TestCodecCoercesStringsAsJSONDoes(t *testing.T) {
	t.Parallel()
	bad := "p\xffq\xc3"
	c := &Command{Op: OpCommit, Commit: &Commit{Now: 1, Appends: []Append{{Stream: 1, First: 0,
		Producer: &ProducerTuple{ID: bad, Epoch: 0, Seq: 0}, StreamSeq: bad}},
		Groups: []GroupOffset{{Stream: 1, Group: bad, Next: 0}}}}
	raw, err := Encode(c)
	if err != nil || raw[0] != tagCommitV1 {
		t.Fatalf("Encode: %v", err)
	}
	var fromBinary, fromJSON Command
	if err := Decode(raw, &fromBinary); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(js, &fromJSON); err != nil {
		t.Fatal(err)
	}
	b, j := fromBinary.Commit, fromJSON.Commit
	if b.Appends[0].Producer.ID != j.Appends[0].Producer.ID || b.Appends[0].StreamSeq != j.Appends[0].StreamSeq || b.Groups[0].Group != j.Groups[0].Group {
		t.Fatalf("binary %q %q %q, JSON %q %q %q", b.Appends[0].Producer.ID, b.Appends[0].StreamSeq, b.Groups[0].Group,
			j.Appends[0].Producer.ID, j.Appends[0].StreamSeq, j.Groups[0].Group)
	}
}

// TestCommitTagByFrames: a commit carrying no frames keeps the v1 form, which
// brokers from before frames could travel in the log still read; one with
// frames takes v2 and keeps them.
func TestCommitTagByFrames(t *testing.T) {
	t.Parallel()
	c := &Commit{Object: 7, Size: 40, Appends: []Append{{Stream: 1, First: 0, Range: &Range{First: 0, Next: 1, Object: 7, Pos: 16, Len: 24}}}}
	raw, err := Encode(&Command{Op: OpCommit, Commit: c})
	if err != nil {
		t.Fatal(err)
	}
	if raw[0] != tagCommitV1 {
		t.Fatalf("commit without frames: tag %#x, want v1 %#x", raw[0], tagCommitV1)
	}
	c.Frames = []byte("frames of the object")
	raw, err = Encode(&Command{Op: OpCommit, Commit: c})
	if err != nil {
		t.Fatal(err)
	}
	if raw[0] != tagCommitV2 {
		t.Fatalf("commit with frames: tag %#x, want v2 %#x", raw[0], tagCommitV2)
	}
	if got := decode(t, raw).Commit.Frames; string(got) != "frames of the object" {
		t.Fatalf("frames came back as %q", got)
	}
}

// TestCheckpointAppliesAsItsCommits: the random histories above, with runs
// of consecutive commits folded into one checkpoint each (as an owner
// checkpoints what its journal acknowledged), encoded and decoded as the
// log would: each commit's result and the final state are those of the
// commits applied one by one.
func TestCheckpointAppliesAsItsCommits(t *testing.T) {
	t.Parallel()
	var folded int
	for seed := uint64(1); seed <= 30; seed++ {
		r := rand.New(rand.NewPCG(seed, seed*17))
		s := NewState() // drives the generator, one command at a time
		f := NewFSM()
		var obj uint64
		names := []string{"a", "b", "c"}
		var run []Commit
		var want []any
		index := uint64(0)
		flush := func() {
			if len(run) == 0 {
				return
			}
			index++
			res := f.Apply(&raft.Log{Index: index, Data: mustEncode(t, &Command{Op: OpCheckpoint, Checkpoint: &Checkpoint{Commits: run}})})
			cr, ok := res.(*CheckpointResult)
			if !ok || len(cr.Commits) != len(want) {
				t.Fatalf("seed %d: checkpoint result %s", seed, show(res))
			}
			for i := range want {
				if !reflect.DeepEqual(cr.Commits[i], want[i]) {
					t.Fatalf("seed %d: commit %d of a checkpoint: got %s, want %s", seed, i, show(cr.Commits[i]), show(want[i]))
				}
			}
			folded += len(run)
			run, want = nil, nil
		}
		for step := 0; step < 400; step++ {
			c := randomCommand(r, s, names, &obj)
			if c.Op == OpCommit {
				dress(r, c.Commit)
			}
			res := s.Apply(c)
			if c.Op == OpCommit && c.Commit != nil {
				run = append(run, *c.Commit)
				want = append(want, res)
				if r.IntN(5) == 0 {
					flush()
				}
				continue
			}
			flush()
			index++
			f.Apply(&raft.Log{Index: index, Data: mustEncode(t, c)})
		}
		flush()
		if !reflect.DeepEqual(normalize(f.State()), normalize(s)) {
			t.Fatalf("seed %d: checkpoints reached another state than their commits", seed)
		}
	}
	if folded == 0 {
		t.Fatal("no commit was checkpointed: the test proves nothing")
	}
}

// TestReplaceManyAppliesAsItsReplaces: the random histories above, with
// runs of consecutive replaces folded into one replaceMany each (as a
// maintenance pass sends its merges), encoded and decoded as the log
// would: each replace's refusal, or none, and the final state are those of
// the replaces applied one by one.
func TestReplaceManyAppliesAsItsReplaces(t *testing.T) {
	t.Parallel()
	var folded, refused int
	for seed := uint64(1); seed <= 30; seed++ {
		r := rand.New(rand.NewPCG(seed, seed*31))
		s := NewState() // drives the generator, one command at a time
		f := NewFSM()
		var obj uint64
		names := []string{"a", "b", "c"}
		var run []Replace
		var want []any
		index := uint64(0)
		flush := func() {
			if len(run) == 0 {
				return
			}
			index++
			res := f.Apply(&raft.Log{Index: index, Data: mustEncode(t, &Command{Op: OpReplaceMany, ReplaceMany: &ReplaceMany{Replaces: run}})})
			rm, ok := res.(*ReplaceManyResult)
			if !ok || len(rm.Errs) != len(want) {
				t.Fatalf("seed %d: replaceMany result %s", seed, show(res))
			}
			for i := range want {
				wantErr, _ := want[i].(error)
				if (rm.Errs[i] == nil) != (wantErr == nil) || rm.Errs[i] != nil && rm.Errs[i].Error() != wantErr.Error() {
					t.Fatalf("seed %d: replace %d of a replaceMany: got %v, want %v", seed, i, rm.Errs[i], wantErr)
				}
				if wantErr != nil {
					refused++
				}
			}
			folded += len(run)
			run, want = nil, nil
		}
		for step := 0; step < 400; step++ {
			c := randomCommand(r, s, names, &obj)
			res := s.Apply(c)
			if c.Op == OpReplace && c.Replace != nil {
				run = append(run, *c.Replace)
				want = append(want, res)
				if r.IntN(4) == 0 {
					flush()
				}
				continue
			}
			flush()
			index++
			f.Apply(&raft.Log{Index: index, Data: mustEncode(t, c)})
		}
		flush()
		if !reflect.DeepEqual(normalize(f.State()), normalize(s)) {
			t.Fatalf("seed %d: replaceManys reached another state than their replaces", seed)
		}
	}
	if folded == 0 || refused == 0 || refused == folded {
		t.Fatalf("%d replaces folded, %d of them refused: the test proves nothing unless some apply and some are refused", folded, refused)
	}
	t.Logf("%d replaces folded, %d refused", folded, refused)
}

// TestReplaceManyHoldsOnlyReplaces: a replaceMany entry holding any other
// entry (a commit, a nested replaceMany) is refused, not applied as
// something else.
func TestReplaceManyHoldsOnlyReplaces(t *testing.T) {
	t.Parallel()
	nested := mustEncode(t, &Command{Op: OpReplaceMany, ReplaceMany: &ReplaceMany{Replaces: []Replace{{Stream: 1}}}})
	for name, inner := range map[string][]byte{
		"commit":      mustEncode(t, &Command{Op: OpCommit, Commit: &Commit{Object: 1}}),
		"replaceMany": nested,
		"json":        []byte(`{"op":"replace","replace":{"stream":1}}`),
		"empty":       nil,
	} {
		raw := binary.AppendUvarint([]byte{tagReplaceMany}, 1)
		raw = binary.AppendUvarint(raw, uint64(len(inner)))
		raw = append(raw, inner...)
		var c Command
		if err := Decode(raw, &c); err == nil {
			t.Errorf("%s inside a replaceMany: decoded as %s", name, show(&c))
		}
	}
	if got := decode(t, nested); len(got.ReplaceMany.Replaces) != 1 || got.ReplaceMany.Replaces[0].Stream != 1 {
		t.Fatalf("a replaceMany of one replace decoded as %s", show(got))
	}
}
