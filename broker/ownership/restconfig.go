package ownership

import (
	"math"
	"time"

	"k8s.io/client-go/rest"
)

// RestConfigFor returns a copy of cfg whose client-side rate limit lets a
// manager of slots slots do its busiest period's work every retry: after
// an outage, write every held slot again and the member Lease (slots+1
// updates), take or hand off as many again, and the informer's own
// requests, with room to spare. A quiet period writes the member Lease
// alone.
//
// client-go's defaults (QPS 5, burst 10) would throttle 64 slot writes
// after an outage past the renew deadline and lose every slot at once. QPS
// and Burst are only ever raised, never lowered below what cfg asks; a
// cfg.RateLimiter, which overrides both, is kept as the caller's choice.
func RestConfigFor(cfg *rest.Config, slots int, retry time.Duration) *rest.Config {
	c := rest.CopyConfig(cfg)
	perPeriod := 2 * (slots + 1) // writes, plus as many takes or hand-offs
	if retry <= 0 {
		retry = time.Second
	}
	qps := float32(math.Ceil(2 * float64(perPeriod) / retry.Seconds())) // twice the mean rate
	burst := 2 * perPeriod                                              // a whole period's requests at once
	if c.QPS < qps {
		c.QPS = qps
	}
	if c.Burst < burst {
		c.Burst = burst
	}
	return c
}
