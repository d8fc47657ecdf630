package wire

// DrainPath is a clustered broker's drain: POST starts it (and reports its
// progress, asked again), GET reports it, DELETE cancels it. A lone broker
// answers 501 NOT_CLUSTERED.
const DrainPath = "/v1/admin/drain"

// Phases of a broker's drain (DrainStatus.Phase).
const (
	// DrainNone: the broker is a full member, not draining.
	DrainNone = ""
	// DrainDraining: the broker takes no slot and hands those it holds
	// off, while the metadata leader copies every object it holds a copy
	// of to the brokers that stay (broker/repair). It stays in this phase
	// while it holds anything the cluster would lose with it.
	DrainDraining = "Draining"
	// DrainDrained: the broker owns no slot, no replica set names it, and
	// it was removed from the cluster (the leader then takes it out of
	// the metadata log's configuration, handing over leadership first if
	// it led): its pod may be removed without losing data.
	DrainDrained = "Drained"
)

// DrainOptions is the optional body of a POST to DrainPath.
type DrainOptions struct {
	// Stay: hand the slots off and stay a member (a cordon, for
	// maintenance): no copy moves, the broker is not removed, and the
	// drain stays Draining until cancelled. Without it the broker leaves
	// the cluster once its copies moved (a scale down).
	Stay bool `json:"stay,omitempty"`
}

// DrainStatus is the answer of DrainPath: to POST (started, or its
// progress), GET (its progress) and DELETE (cancelled: phase DrainNone).
// Its JSON is what the operator's controllers/brokeradmin.DrainStatus
// decodes.
type DrainStatus struct {
	Phase string `json:"phase"`
	// Stay: the drain is a cordon (DrainOptions.Stay), not a leave: the
	// broker stays a member until someone cancels it, and the operator
	// leaves it alone (kubectl picomq drain).
	Stay bool `json:"stay,omitempty"`
	// SlotsHeld is how many slot Leases the broker still holds.
	SlotsHeld int `json:"slotsHeld"`
	// OpenStreams is how many internal streams the metadata log has open
	// with this broker as their writer.
	OpenStreams int `json:"openStreams"`
	// ObjectsHeld and BytesHeld are the committed objects whose replica
	// set still names this broker, and their size: copies still to move.
	ObjectsHeld int   `json:"objectsHeld"`
	BytesHeld   int64 `json:"bytesHeld"`
	// EnsemblesNaming is how many open partitions of other owners still
	// write to an ensemble naming this broker (they move to one without
	// it before it leaves).
	EnsemblesNaming int `json:"ensemblesNaming,omitempty"`
	// Message says what is left before the broker may be removed.
	Message string `json:"message,omitempty"`
}
