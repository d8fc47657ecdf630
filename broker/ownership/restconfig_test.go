package ownership

import (
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// 64 slots renewed every 2s need more than client-go's QPS 5 / burst 10;
// a higher setting is kept, and the input is not changed.
func TestRestConfigForRaisesRateLimits(t *testing.T) {
	in := &rest.Config{Host: "https://example.invalid"}
	out := RestConfigFor(in, 64, 2*time.Second)
	if in.QPS != 0 || in.Burst != 0 {
		t.Fatal("input changed")
	}
	perPeriod := float32(64 + 1)
	if out.QPS < perPeriod/2 || out.Burst < 65 {
		t.Fatalf("QPS %v burst %d cannot renew 65 Leases every 2s", out.QPS, out.Burst)
	}
	high := &rest.Config{QPS: 1000, Burst: 2000}
	if o := RestConfigFor(high, 64, 2*time.Second); o.QPS != 1000 || o.Burst != 2000 {
		t.Errorf("lowered a higher setting: %v %d", o.QPS, o.Burst)
	}
}
