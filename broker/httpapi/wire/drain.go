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
	// off. It stays in this phase while it holds anything the cluster
	// would lose with it: at zero slots and zero open streams it still
	// holds its copies of objects and its place in the metadata log's
	// configuration.
	DrainDraining = "Draining"
	// DrainDrained: the broker owns no slot, holds no copy the others
	// lack and has left the metadata log: its pod may be removed without
	// losing data. No broker reports it yet: re-replicating a draining
	// broker's objects and leaving the Raft configuration are still to be
	// built, and until then the operator keeps holding the scale-down.
	DrainDrained = "Drained"
)

// DrainStatus is the answer of DrainPath: to POST (started, or its
// progress), GET (its progress) and DELETE (cancelled: phase DrainNone).
// Its JSON is what the operator's controllers/brokeradmin.DrainStatus
// decodes.
type DrainStatus struct {
	Phase string `json:"phase"`
	// SlotsHeld is how many slot Leases the broker still holds.
	SlotsHeld int `json:"slotsHeld"`
	// OpenStreams is how many internal streams the metadata log has open
	// with this broker as their writer.
	OpenStreams int `json:"openStreams"`
	// Message says what is left before the broker may be removed.
	Message string `json:"message,omitempty"`
}
