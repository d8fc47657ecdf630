package bytesize

import "testing"

func TestParse(t *testing.T) {
	for s, want := range map[string]int64{
		"0": 0, "1": 1, "8388608": 8 << 20, "1KiB": 1 << 10, "8MiB": 8 << 20,
		"2GiB": 2 << 30, " 64 MiB ": 64 << 20, "4611686018427387904": 1 << 62,
	} {
		got, err := Parse(s)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "-1", "1.5MiB", "1MB", "1 KB", "MiB", "4611686018427387905", "4294967297GiB", "0x10", "1e6"} {
		if n, err := Parse(s); err == nil {
			t.Errorf("Parse(%q) = %d; want an error", s, n)
		}
	}
}
