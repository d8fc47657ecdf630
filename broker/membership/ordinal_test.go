package membership

import "testing"

func TestOrdinal(t *testing.T) {
	t.Parallel()
	for node, want := range map[string]int{"demo-0": 0, "a-b-12": 12, "broker-3": 3} {
		if n, err := Ordinal(node); err != nil || n != want {
			t.Errorf("Ordinal(%q) = %d, %v; want %d", node, n, err, want)
		}
	}
	for _, bad := range []string{"demo", "demo-", "demo-x"} {
		if _, err := Ordinal(bad); err == nil {
			t.Errorf("Ordinal(%q) accepted", bad)
		}
	}
}
