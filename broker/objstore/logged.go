package objstore

import (
	"errors"
	"io/fs"
	"os"

	"github.com/picomq/picomq/broker/stream"
)

// Objects kept durable by a log.
//
// A small object's frames may travel inside the metadata command that
// commits it: the metadata log's fsync then makes them durable, and the
// object's own fdatasync, a second one on the append's path, can wait. Such
// an object is held in memory at first (held.go), written to its file
// without fdatasync by Spill, held again from the log by Restore when the
// log is replayed (after a power loss its file may be torn, gone or never
// written), and made durable by SyncObjects before the log may drop the
// entries that hold its bytes.

// EnsureObject makes object id's file in dir hold header + frames, exactly
// as Spill writes it, writing it (without fdatasync) unless it already
// does. It is for a log's entry holding the frames of an object the store
// does not hold (Restore is for a replay at start).
func EnsureObject(dir string, id uint64, frames []byte) error {
	path := fileNameIn(dir, id)
	if sameObject(path, id, frames) {
		return nil
	}
	if err := PrepareDir(dir); err != nil {
		return err
	}
	return writeObjectFile(path, id, frames, os.O_TRUNC, "objstore.rewrite")
}

// errSyncFSUnsupported: the system has no syncfs.
var errSyncFSUnsupported = errors.New("objstore: syncfs unsupported")

// SyncObjects makes the files of objects ids in dir, and their names,
// survive a power loss. On Linux one syncfs(2) does it for all (thousands
// of objects may be waiting: an fdatasync each would keep the disk from the
// log's own fsyncs); elsewhere each file is fdatasynced, skipping those
// collected since (nothing references them any more), then dir.
func SyncObjects(dir string, ids []uint64) error {
	if len(ids) == 0 {
		return nil
	}
	if err := syncFS(dir); err == nil {
		return nil
	} else if !errors.Is(err, errSyncFSUnsupported) {
		return stream.StreamBackendFailed.Wrap(err, "op", "objstore.syncfs", "path", dir)
	}
	for _, id := range ids {
		f, err := os.OpenFile(fileNameIn(dir, id), os.O_RDONLY, 0)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return stream.StreamBackendFailed.Wrap(err, "op", "objstore.open", "object", id)
		}
		err = fdatasync(f)
		f.Close()
		if err != nil {
			return stream.StreamBackendFailed.Wrap(err, "op", "objstore.fdatasync", "object", id)
		}
	}
	d, err := os.Open(dir)
	if err != nil {
		return stream.StreamBackendFailed.Wrap(err, "op", "objstore.opendir", "path", dir)
	}
	err = d.Sync()
	d.Close()
	if err != nil {
		return stream.StreamBackendFailed.Wrap(err, "op", "objstore.fsyncdir", "path", dir)
	}
	return nil
}
