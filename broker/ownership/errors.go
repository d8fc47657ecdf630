package ownership

import "github.com/picomq/picomq/broker/errs"

// Ownership's refusals: block 0.16.4 (0x00_10_04_xx), beside the broker's
// 0.16.1 (metadata), 0.16.2 (data path), 0.16.3 (HTTP) and 0.16.5 (Durable
// Streams) blocks.
const (
	CodeNotSlotOwner errs.Code = 0x00_10_04_01
	CodeBadConfig    errs.Code = 0x00_10_04_02
	CodeFailsafe     errs.Code = 0x00_10_04_03
)

var (
	// NotSlotOwner answers an open of an internal stream whose slot this
	// broker does not serve now: another broker holds it, nobody does, or
	// this broker holds it but is handing it off, has not finished taking
	// it, or is past its renew deadline. Nothing was written; the request
	// may be retried at the owner (field "owner", when known) or later.
	NotSlotOwner = errs.Static(CodeNotSlotOwner, "NOT_SLOT_OWNER",
		"This broker does not own the stream's slot; retry at its owner",
		"broker/ownership: the slot Lease of the stream is not held and served by this broker; fields: slot, reason, owner (the holder's identity, when one is known), ownerLive (whether its Lease is unexpired as this broker observes it)",
		503, 75)

	// BadConfig refuses a Config New cannot honour: the field and its value
	// say which, and why.
	BadConfig = errs.Static(CodeBadConfig, "OWNERSHIP_CONFIG",
		"The ownership configuration is invalid",
		"broker/ownership: a Config field is missing or out of range; fields: field, value, and the rule it breaks",
		0, 78)

	// FailsafeRefused answers another broker's failsafe round: this broker
	// does not confirm that it cannot reach the API server (it can, or the
	// round is malformed), and promises nothing. The holder stops at its
	// renew deadline.
	FailsafeRefused = errs.Static(CodeFailsafe, "FAILSAFE_REFUSED",
		"This broker does not confirm the failsafe round",
		"broker/ownership: a failsafe round was refused; fields: holder, member, reason",
		409, 75)
)
