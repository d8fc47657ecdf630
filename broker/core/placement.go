package core

import "github.com/picomq/picomq/broker/objstore"

// ObjectStore is where the broker writes object files: the flusher's
// group-commit objects that are too large to travel in their commit, and
// the segments merges and compactions rewrite. It is the seam object
// placement plugs into: a cluster wraps this node's store
// (Config.Placement) with one that copies every object to its replicas
// while it is written and makes them durable there at Sync, before the
// commit naming it is proposed. (Objects small enough to travel inside
// their commit are replicated by the metadata log itself.)
type ObjectStore interface {
	// Create starts a new object with a fresh id.
	Create() (ObjectWriter, error)
}

// ObjectWriter appends frames to one new object; see objstore.Writer,
// which implements it on this node's directory. It is used by one
// goroutine at a time.
type ObjectWriter interface {
	// ID is the object's id, Size its length so far.
	ID() uint64
	Size() int64
	// AppendFrame appends a frame holding a copy of payload;
	// AppendFrameRef one that keeps payload itself until Sync returns. Both
	// return the frame's position and length.
	AppendFrame(payload []byte) (pos, n int64, err error)
	AppendFrameRef(payload []byte) (pos, n int64, err error)
	// Sync makes every frame appended so far durable, on every replica.
	Sync() error
	// Replicas names the members holding a durable copy once Sync
	// returned (nil: this node alone), for the commit to record.
	Replicas() []string
	// Close finishes a synced object; Abort discards one that will not be
	// committed (it does nothing after a successful Close).
	Close() error
	Abort()
}

// localObjects is the ObjectStore of this node's objects directory.
type localObjects struct{ s *objstore.Store }

func (l localObjects) Create() (ObjectWriter, error) {
	w, err := l.s.Create()
	if err != nil {
		return nil, err
	}
	return localWriter{w}, nil
}

// localWriter is an object written to this node's directory only.
type localWriter struct{ *objstore.Writer }

// Replicas is nil: the copy is this node's.
func (localWriter) Replicas() []string { return nil }

// Fetcher reads a frame of an object file this node holds no copy of from
// one of the members that do (in a cluster, an object's replicas). The
// frame is checked as a local read checks it: a failed checksum is
// objstore.ErrCorrupt, an object no replica holds fs.ErrNotExist.
type Fetcher interface {
	FetchFrame(object uint64, replicas []string, pos, n int64) ([]byte, error)
}
