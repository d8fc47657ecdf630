package records

import (
	"strings"
	"testing"

	"github.com/picomq/picomq/broker/stream"
)

func TestSame(t *testing.T) {
	e := func(off stream.Offset, key, payload string) stream.EntryValue {
		return stream.EntryValue{Offset: off, Record: stream.RecordValue{Key: []byte(key), Payload: []byte(payload)}}
	}
	want := []stream.EntryValue{e(0, "a", "x"), e(1, "b", "y")}
	for name, c := range map[string]struct {
		got  []stream.EntryValue
		fail string
	}{
		"same":          {[]stream.EntryValue{e(0, "a", "x"), e(1, "b", "y")}, ""},
		"shorter":       {want[:1], "1 entries, want 2"},
		"other offset":  {[]stream.EntryValue{e(0, "a", "x"), e(2, "b", "y")}, "entry 1"},
		"other key":     {[]stream.EntryValue{e(0, "z", "x"), e(1, "b", "y")}, "entry 0"},
		"other payload": {[]stream.EntryValue{e(0, "a", "x"), e(1, "b", "Y")}, "entry 1"},
	} {
		err := Same(c.got, want)
		if c.fail == "" && err != nil || c.fail != "" && (err == nil || !strings.Contains(err.Error(), c.fail)) {
			t.Errorf("%s: %v, want %q", name, err, c.fail)
		}
	}
}
