package membership

import "testing"

func TestMajorityWithout(t *testing.T) {
	up := func(ids ...string) func(string) bool {
		return func(id string) bool {
			for _, x := range ids {
				if x == id {
					return true
				}
			}
			return false
		}
	}
	for _, tc := range []struct {
		name    string
		voters  []string
		answers func(string) bool
		leaving string
		ok      bool
		up, n   int
	}{
		{"3 voters, the others answer", []string{"a", "b", "c"}, up("a", "b", "c"), "c", true, 2, 2},
		{"3 voters, one of the two staying is silent", []string{"a", "b", "c"}, up("a", "c"), "c", false, 1, 2},
		{"a non-voter leaving changes no majority", []string{"a", "b", "c"}, up("a"), "d", true, 1, 3},
		{"5 voters, one staying silent", []string{"a", "b", "c", "d", "e"}, up("a", "b", "c", "e"), "e", true, 3, 4},
		{"5 voters, two staying silent", []string{"a", "b", "c", "d", "e"}, up("a", "b", "e"), "e", false, 2, 4},
		{"the last voter", []string{"a"}, up("a"), "a", false, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up, n, ok := majorityWithout(tc.voters, tc.answers, tc.leaving)
			if ok != tc.ok || up != tc.up || n != tc.n {
				t.Fatalf("got up=%d n=%d ok=%v; want up=%d n=%d ok=%v", up, n, ok, tc.up, tc.n, tc.ok)
			}
		})
	}
}
