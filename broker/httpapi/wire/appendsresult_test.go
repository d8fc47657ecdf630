package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/picomq/picomq/broker/errs"
)

func sampleAppendsResult(t testing.TB) []AppendsItemResult {
	problem, err := errs.Marshal(MalformedBatch.With("position", 3))
	if err != nil {
		t.Fatal(err)
	}
	return []AppendsItemResult{
		{AppendResult: &AppendResult{Partition: 0, First: 0, Last: 0, Next: 1}},
		{AppendResult: &AppendResult{Partition: 7, First: 1 << 40, Last: 1<<40 + 99, Next: 1<<40 + 100, Duplicate: true}},
		{AppendResult: &AppendResult{Partition: 2, First: 5, Last: 5, Next: 6, Producer: &Producer{Epoch: -1, LastSeq: 1 << 50}}},
		{Error: problem},
		{Alone: true},
	}
}

// TestAppendsResultRoundTrip: every kind of item — a result with and
// without a duplicate and a producer, a refusal, alone — decodes from the
// binary answer as it was, and as its JSON twin decodes.
func TestAppendsResultRoundTrip(t *testing.T) {
	in := sampleAppendsResult(t)
	body := EncodeAppendsResult(nil, in)
	out, err := DecodeAppendsAnswer(AppendsResultContentType, body)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(AppendsResult{Results: in})
	if err != nil {
		t.Fatal(err)
	}
	viaJSON, err := DecodeAppendsAnswer(JSONContentType+"; charset=utf-8", raw)
	if err != nil {
		t.Fatal(err)
	}
	for _, got := range [][]AppendsItemResult{out, viaJSON} {
		if len(got) != len(in) {
			t.Fatalf("%d items, want %d", len(got), len(in))
		}
		for i := range in {
			if !reflect.DeepEqual(got[i].AppendResult, in[i].AppendResult) || got[i].Alone != in[i].Alone || !bytes.Equal(got[i].Error, in[i].Error) {
				t.Errorf("item %d: %+v %+v %s, want %+v %+v %s", i, got[i].AppendResult, got[i].Alone, got[i].Error, in[i].AppendResult, in[i].Alone, in[i].Error)
			}
		}
	}
	if e, err := errs.Unmarshal(out[3].Error); err != nil || !errors.Is(e, MalformedBatch) {
		t.Errorf("the refusal decodes to %v, %v", e, err)
	}
}

func TestAcceptsAppendsResult(t *testing.T) {
	for accept, want := range map[string]bool{
		"":                       false,
		JSONContentType:          false,
		AppendsResultContentType: true,
		AppendsResultContentType + ", " + JSONContentType:             true,
		JSONContentType + " , " + AppendsResultContentType + ";q=0.9": true,
		"application/vnd.picomq.appends-results":                      false,
		AppendsResultContentType + ";q=0, " + JSONContentType:         false,
	} {
		if got := AcceptsAppendsResult(accept); got != want {
			t.Errorf("AcceptsAppendsResult(%q) = %v, want %v", accept, got, want)
		}
	}
}

// TestAppendsResultRefusesDamage: a truncated, padded or mislabelled
// answer is refused MALFORMED_BATCH, never half-read.
func TestAppendsResultRefusesDamage(t *testing.T) {
	body := EncodeAppendsResult(nil, sampleAppendsResult(t))
	for name, b := range map[string][]byte{
		"empty":                {},
		"no magic":             body[4:],
		"truncated":            body[:len(body)-1],
		"padded":               append(bytes.Clone(body), 0),
		"bad kind":             append(EncodeAppendsResult(nil, nil)[:4], 1, 9),
		"bad flags":            append(EncodeAppendsResult(nil, nil)[:4], 1, itemResult, 0, 0, 0, 1, 0x80),
		"huge count":           append([]byte("PMQA"), 0xff, 0xff, 0x03),
		"count past the bytes": []byte("PMQA\x03\x02\x02"),
		"problem not JSON":     []byte("PMQA\x01\x01\x03{x}"),
		"empty problem":        []byte("PMQA\x01\x01\x00"),
		"partition 2^31":       append(EncodeAppendsResult(nil, nil)[:4], 1, itemResult, 0x80, 0x80, 0x80, 0x80, 0x08, 0, 0, 1, 0),
	} {
		if _, err := DecodeAppendsResult(b); !errors.Is(err, MalformedBatch) {
			t.Errorf("%s: %v, want MALFORMED_BATCH", name, err)
		}
	}
}

// TestAppendsResultMeansWhatJSONMeant: an item holding more than one
// answer, or none, reads in binary as a client read it in JSON (Alone
// first, then the refusal, then the result; an empty refusal is none).
func TestAppendsResultMeansWhatJSONMeant(t *testing.T) {
	problem, _ := errs.Marshal(MalformedBatch.With("position", 1))
	result := &AppendResult{Next: 1}
	in := []AppendsItemResult{
		{Alone: true, Error: problem},
		{Alone: true, AppendResult: result},
		{Error: problem, AppendResult: result},
		{Error: json.RawMessage{}, AppendResult: result},
		{},
	}
	out, err := DecodeAppendsResult(EncodeAppendsResult(nil, in))
	if err != nil {
		t.Fatal(err)
	}
	if !out[0].Alone || !out[1].Alone {
		t.Errorf("alone with a refusal or a result: %+v %+v, want alone", out[0], out[1])
	}
	if out[2].Error == nil || out[2].AppendResult != nil {
		t.Errorf("a refusal with a result: %+v, want the refusal", out[2])
	}
	if out[3].Error != nil || out[3].AppendResult == nil {
		t.Errorf("an empty refusal with a result: %+v, want the result", out[3])
	}
	if e := out[4]; e.Alone || e.Error != nil || e.AppendResult != nil {
		t.Errorf("an empty item: %+v, want empty (the client fails it)", e)
	}
}

// FuzzDecodeAppendsResult: any bytes decode without a panic, or are
// refused with MALFORMED_BATCH; what decodes encodes back to bytes that
// decode alike (a varint may be written longer than it need be).
func FuzzDecodeAppendsResult(f *testing.F) {
	f.Add(EncodeAppendsResult(nil, sampleAppendsResult(f)))
	f.Add(EncodeAppendsResult(nil, nil))
	f.Add([]byte("PMQA\x01\x01\x05{}"))
	f.Fuzz(func(t *testing.T, body []byte) {
		items, err := DecodeAppendsResult(body)
		if err != nil {
			if !errors.Is(err, MalformedBatch) {
				t.Fatalf("uncoded error %v", err)
			}
			return
		}
		again, err := DecodeAppendsResult(EncodeAppendsResult(nil, items))
		if err != nil || !reflect.DeepEqual(again, items) {
			t.Fatalf("%d items re-encoded decode to %+v, %v", len(items), again, err)
		}
	})
}
