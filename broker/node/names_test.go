package node

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/picomq/picomq/broker/errs"
	"github.com/picomq/picomq/broker/stream"
)

func TestValidateName(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"a", "shop/orders", "logs/api/prod", "A-b_c.d", strings.Repeat("x", MaxNameLength), strings.Repeat("a/", MaxNameDepth-1) + "a"} {
		if err := ValidateName(ok); err != nil {
			t.Errorf("ValidateName(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"", "/a", "a/", "a//b", "a/../b", "..", ".", "a/./b", "a b", "a%2Fb", "a\x00b", "é", strings.Repeat("x", MaxNameLength+1), strings.Repeat("a/", MaxNameDepth) + "a"} {
		err := ValidateName(bad)
		if !errors.Is(err, stream.StreamMisconfigured) {
			t.Errorf("ValidateName(%q) = %v, want STREAM_MISCONFIGURED", bad, err)
			continue
		}
		if f, _ := errs.FieldOf(err, "field"); f != "name" {
			t.Errorf("ValidateName(%q) names field %v, want name", bad, f)
		}
	}
}

// TestAnsweredWaitsForNothing: a Pending answered at admission returns its
// result whatever the context.
func TestAnsweredWaitsForNothing(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	want := AppendResult{Partition: 1, First: 4, Next: 5, Duplicate: true}
	if got, err := Answered(want).Wait(ctx); err != nil || got != want {
		t.Fatalf("Wait = %+v, %v; want %+v", got, err, want)
	}
}
