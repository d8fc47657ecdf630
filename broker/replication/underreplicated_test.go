package replication

import (
	"errors"
	"io"
	"maps"
	"testing"
)

// TestUnderReplicated: an object counts when fewer than R of its replicas
// are current members; a member down but not removed still holds its
// copy; duplicates count once; objects with no replica set never count.
func TestUnderReplicated(t *testing.T) {
	t.Parallel()
	members := map[string]bool{"a": true, "b": true, "c": true, "down": true} // "gone" was removed
	isMember := func(id string) bool { return members[id] }
	objects := map[uint64][]string{
		1: {"a", "b", "c"},        // whole
		2: {"a", "b", "gone"},     // one copy on a removed member
		3: {"a", "down", "c"},     // a member down, not removed: whole
		4: nil,                    // inline: every member has it
		5: {"a"},                  // written with R = 1
		6: {"a", "a", "b"},        // a duplicate is one copy
		7: {"gone", "never", "b"}, // two copies lost
	}
	for r, want := range map[int]int{1: 0, 2: 2, 3: 4} {
		if got := UnderReplicated(maps.All(objects), isMember, r); got != want {
			t.Errorf("R=%d: %d under-replicated, want %d", r, got, want)
		}
	}
}

// TestEffectiveR: R = 0 is min(3, live), at least 1; any other R is itself.
func TestEffectiveR(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ r, live, want int }{{0, 0, 1}, {0, 1, 1}, {0, 2, 2}, {0, 3, 3}, {0, 9, 3}, {2, 9, 2}, {5, 1, 5}} {
		if got := EffectiveR(tc.r, tc.live); got != tc.want {
			t.Errorf("EffectiveR(%d, %d) = %d, want %d", tc.r, tc.live, got, tc.want)
		}
	}
}

// TestConfigChecked: New refuses a Config it cannot honour, naming the
// field.
func TestConfigChecked(t *testing.T) {
	t.Parallel()
	live := func() []Peer { return nil }
	for field, cfg := range map[string]Config{
		"Self":        {R: 1, Members: live},
		"R":           {Self: "a", R: -1, Members: live},
		"Members":     {Self: "a", R: 1},
		"Client":      {Self: "a", R: 3, Members: live},
		"CopyTimeout": {Self: "a", R: 1, Members: live, CopyTimeout: -1},
	} {
		_, err := New(cfg)
		if got, _ := errorField(err, "field"); !errors.Is(err, BadConfig) || got != field {
			t.Errorf("%s: %v", field, err)
		}
	}
}

func errorField(err error, key string) (any, bool) {
	var coded interface{ Field(string) (any, bool) }
	if errors.As(err, &coded) {
		return coded.Field(key)
	}
	return nil, false
}

// TestBodyReleased: once released, a body gives no byte more, by Read or
// WriteTo.
func TestBodyReleased(t *testing.T) {
	t.Parallel()
	b := newBody([][]byte{[]byte("head"), []byte("er and "), []byte("payload")})
	p := make([]byte, 6)
	if n, err := b.Read(p); n != 6 || err != nil || string(p) != "header" {
		t.Fatalf("Read: %q, %v", p[:n], err)
	}
	var w testWriter
	if _, err := b.WriteTo(&w); err != nil || string(w) != " and payload" {
		t.Fatalf("WriteTo: %q, %v", w, err)
	}
	if n, err := b.Read(p); n != 0 || err != io.EOF {
		t.Fatalf("Read at the end: %d, %v", n, err)
	}
	b = newBody([][]byte{[]byte("x")})
	b.release()
	if _, err := b.Read(p); !errors.Is(err, errReleased) {
		t.Fatalf("Read after release: %v", err)
	}
	if _, err := b.WriteTo(&w); !errors.Is(err, errReleased) {
		t.Fatalf("WriteTo after release: %v", err)
	}
}

type testWriter []byte

func (w *testWriter) Write(p []byte) (int, error) { *w = append(*w, p...); return len(p), nil }
