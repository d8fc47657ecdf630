package routing

import "github.com/picomq/picomq/broker/errs"

// Routing's refusals: block 0.16.8 (0x00_10_08_xx).
var (
	// NoSlotOwner: the partition's slot has no live holder (its lease
	// expired and nobody took it yet, or its holder is unknown here).
	NoSlotOwner = errs.Static(0x00_10_08_01, "NO_SLOT_OWNER",
		"No broker serves this partition right now; retry shortly",
		"broker/routing: the partition's slot Lease has no live holder, or this broker cannot reach it; the fields name the slot and the last holder",
		503, 75)

	// NotSlotOwner: a request routed to this broker for a slot it does not
	// serve (the owner moved): the proxy looks the owner up again.
	NotSlotOwner = errs.Static(0x00_10_08_02, "NOT_SLOT_OWNER",
		"This broker does not serve the partition the request was routed to it for",
		"broker/routing: a routed request named a slot this broker does not serve now; the fields name the slot, who it was routed to and the owner this broker knows",
		421, 75)

	// OutcomeUnknown: the request reached the partition's owner and its
	// answer was lost (the owner went away, the link broke): it may have
	// taken effect, so it is not sent again by the proxy. An append's retry
	// is safe with an idempotent producer.
	OutcomeUnknown = errs.Static(0x00_10_08_03, "PROXY_OUTCOME_UNKNOWN",
		"The request reached the partition's owner but its answer was lost; it may have taken effect",
		"broker/routing: the proxied request was sent and no answer came back; the fields name the owner and the cause",
		502, 75)
)
