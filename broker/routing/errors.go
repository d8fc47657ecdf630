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

// MetadataCatchingUp: this broker could not confirm that its copy of the
// metadata log holds what the leader committed (its last catch-up failed:
// it restarted, or lost contact), so it answers nothing from that copy —
// a read of a stream's head, a listing, a "not found" — until a catch-up
// succeeds. Another broker, or this one a moment later, answers.
var MetadataCatchingUp = errs.Static(0x00_10_08_04, "METADATA_CATCHING_UP",
	"This broker is catching up with the cluster's metadata and cannot answer from its own copy yet; retry shortly",
	"broker/routing: the catch-up with the metadata leader (read index, barrier) failed or timed out, and an answer from this broker's copy could miss what was committed; the cause says why",
	503, 75)
