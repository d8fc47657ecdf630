package cluster

import (
	"errors"
	"strings"
	"testing"

	"github.com/picomq/picomq/broker/httpapi/wire"
)

// A drain is refused, saying why, when the members that stay could not
// hold R copies or could not commit without it; allowed otherwise.
func TestDrainRefusal(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                   string
		liveOthers, staying, r int
		refused                bool
		reason                 string
	}{
		{"3 brokers, R=2, all up", 2, 2, 2, false, ""},
		{"3 brokers, R=2, one down", 1, 2, 2, true, "objects need 2 copies"},
		{"3 brokers, R=3", 2, 2, 3, true, "objects need 3 copies"},
		{"2 brokers, R unset", 1, 1, 0, false, ""},
		{"a lone broker", 0, 0, 0, true, "objects need 1 copies"},
		{"5 brokers, R=2, two down", 2, 4, 2, true, "only 2 of the 4 members that would stay are live"},
		{"5 brokers, R=2, one down", 3, 4, 2, false, ""},
		{"log not open yet", 2, -1, 2, false, ""},
	} {
		err := drainRefusal(tc.liveOthers, tc.staying, tc.r)
		if (err != nil) != tc.refused || tc.refused && (!errors.Is(err, wire.DrainRefused) || !strings.Contains(err.Error(), tc.reason)) {
			t.Errorf("%s: %v, want refused %v (%q)", tc.name, err, tc.refused, tc.reason)
		}
	}
}
