package ownership

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
)

// MaxSlots is the StreamCluster's bound on ownership.slots. (The defaults
// of the timings are the broker's settings and the StreamCluster's: this
// package takes every value from its Config.)
const MaxSlots = 4096

// Config configures a Manager. New refuses a Config with a field missing or
// out of range (a coded BadConfig naming the field and its value); it never
// clamps or defaults a value that decides ownership. Only Clock, Logger,
// Metrics and Acquire may be left nil.
type Config struct {
	// Client reaches the API server holding the Leases: a typed clientset
	// (in tests the fake clientset or envtest's). Its rest.Config must allow
	// Slots+1 requests per RetryPeriod: see RestConfigFor.
	Client kubernetes.Interface
	// Namespace holds the cluster's Leases.
	Namespace string
	// Cluster is the StreamCluster's name: it prefixes every Lease name and
	// is the value of LabelCluster.
	Cluster string
	// Node is this broker's pod name (demo-1): it names the member Lease.
	Node string
	// Identity is this broker's member identity (node plus incarnation),
	// written as the holder of the Leases it holds. A broker started again
	// with the same identity (same data directory) takes back at once the
	// slots that still name it; a new incarnation waits for them to expire.
	Identity string
	// Slots is how many slots internal streams hash onto, 1..MaxSlots; every
	// broker of the cluster must use the same.
	Slots int
	// PlaceBy, when set, maps an internal stream to the id it hashes onto a
	// slot by (nil: its own). The broker passes its stream's first
	// partition, so that every partition of a stream has one owner: the
	// state the core keeps for a whole stream — MaxBytes held, idempotent
	// producers, Stream-Seq, the closed flag — needs a single writer.
	PlaceBy func(id uint64) uint64
	// LeaseDuration is how long a Lease stays held after it last changed,
	// as each broker measures on its own clock: a whole number of seconds
	// (the Lease records it as leaseDurationSeconds).
	LeaseDuration time.Duration
	// RenewDeadline is how long after sending its last successful renew a
	// holder keeps serving a slot: shorter than LeaseDuration, and the
	// difference is the margin for clock rate skew and the API server's
	// latency.
	RenewDeadline time.Duration
	// RetryPeriod is how often the manager renews, hands off and takes:
	// shorter than RenewDeadline, so that one failed renew does not lose the
	// slots.
	RetryPeriod time.Duration
	// Clock is the clock every timing decision reads (nil: the real one);
	// tests inject k8s.io/utils/clock/testing's FakeClock.
	Clock clock.Clock
	// Logger receives what the manager decides (nil: discarded).
	Logger *slog.Logger
	// Metrics registers picomq_slots_held, picomq_slot_handoffs_total,
	// picomq_slot_lease_renew_failures_total and picomq_members_live (nil:
	// kept unregistered).
	Metrics prometheus.Registerer

	// Acquire is called before the manager serves a slot it has just taken
	// (nil: nothing to prepare). An error leaves the slot held but not
	// served; it is tried again next period.
	Acquire func(ctx context.Context, slot int) error
	// Release hands a slot off gracefully: the broker closes the slot's open
	// streams through the metadata log (flush, CloseMany). It is called
	// after MayOpen started refusing the slot and before the holder is
	// cleared; an error keeps the slot held (not served) and it is tried
	// again next period. Required.
	Release func(ctx context.Context, slot int) error
	// InContact, when set, says whether this broker can commit through the
	// metadata log now (metalog.Log.InContact). While it cannot, the
	// manager renews and takes nothing: a broker cut from its peers but not
	// from the API server must not keep slots it cannot write.
	InContact func() bool
	// Failsafe, when set, asks every member of the metadata log's
	// configuration, over the peer network, to confirm that it cannot
	// reach the API server either and to promise to take none of this
	// broker's slots (each answers with its Manager's AnswerFailsafe). It
	// returns nil only when every member confirmed. The manager calls it
	// when its member Lease could not be renewed for want of the API
	// server, and keeps serving the slots on its answer: see failsafe.go.
	// Nil: a holder that cannot renew stops at its renew deadline.
	Failsafe func(ctx context.Context) error
	// Revoke tells the broker to stop writing a slot's streams at once,
	// without I/O: the slot was lost or is past its renew deadline. Called
	// once per loss. Required.
	Revoke func(slot int)
}

// validate checks every field, and names the first one it refuses.
func (c *Config) validate() error {
	bad := func(field string, value any, rule string, kv ...any) error {
		return BadConfig.With(append([]any{"field", field, "value", value, "rule", rule}, kv...)...)
	}
	if c.Client == nil {
		return bad("Client", nil, "required")
	}
	if errs := validation.IsDNS1123Label(c.Namespace); len(errs) > 0 {
		return bad("Namespace", c.Namespace, strings.Join(errs, "; "))
	}
	if c.Cluster == "" {
		return bad("Cluster", c.Cluster, "required")
	}
	if errs := validation.IsValidLabelValue(c.Cluster); len(errs) > 0 {
		return bad("Cluster", c.Cluster, "must be a label value: "+strings.Join(errs, "; "))
	}
	if c.Slots < 1 || c.Slots > MaxSlots {
		return bad("Slots", c.Slots, "must be 1..4096", "max", MaxSlots)
	}
	// The longest slot name must be a valid object name.
	if errs := validation.IsDNS1123Subdomain(SlotLeaseName(c.Cluster, c.Slots-1)); len(errs) > 0 {
		return bad("Cluster", c.Cluster, "slot Lease names must be DNS subdomains: "+strings.Join(errs, "; "))
	}
	if c.Node == "" {
		return bad("Node", c.Node, "required")
	}
	if errs := validation.IsDNS1123Subdomain(MemberLeaseName(c.Cluster, c.Node)); len(errs) > 0 {
		return bad("Node", c.Node, "the member Lease name must be a DNS subdomain: "+strings.Join(errs, "; "))
	}
	if c.Identity == "" {
		return bad("Identity", c.Identity, "required")
	}
	if c.LeaseDuration < time.Second || c.LeaseDuration%time.Second != 0 {
		return bad("LeaseDuration", c.LeaseDuration, "must be a whole number of seconds, at least 1s (the Lease records leaseDurationSeconds)")
	}
	if c.LeaseDuration > time.Duration(1<<31-1)*time.Second {
		return bad("LeaseDuration", c.LeaseDuration, "must fit leaseDurationSeconds (int32)")
	}
	if c.RenewDeadline <= 0 || c.RenewDeadline >= c.LeaseDuration {
		return bad("RenewDeadline", c.RenewDeadline, "must be positive and shorter than LeaseDuration, or a holder could serve a slot another broker already took",
			"leaseDuration", c.LeaseDuration)
	}
	if c.RetryPeriod <= 0 || c.RetryPeriod >= c.RenewDeadline {
		return bad("RetryPeriod", c.RetryPeriod, "must be positive and shorter than RenewDeadline, or one late renew loses every slot",
			"renewDeadline", c.RenewDeadline)
	}
	if c.Release == nil {
		return bad("Release", nil, "required: a hand-off must close the slot's open streams")
	}
	if c.Revoke == nil {
		return bad("Revoke", nil, "required: a lost slot must stop being written")
	}
	return nil
}
