package objstore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/picomq/picomq/broker/stream"
)

// PrepareDir makes path a directory the broker can keep data in: it creates
// it, and any missing parent, with mode 0700, and makes the new entries
// durable. It refuses, with stream.StreamDirectoryUnusable carrying the
// fields "path" and "reason", a path that cannot be created, is not a
// directory, is writable by group or others (an account that could inject or
// remove records), or that this process cannot create files in.
//
// The broker calls it for its whole data directory as well as Open does for
// the objects directory.
func PrepareDir(path string) error {
	unusable := func(cause error, reason string) error {
		if cause == nil {
			return stream.StreamDirectoryUnusable.With("path", path, "reason", reason)
		}
		return stream.StreamDirectoryUnusable.Wrap(cause, "path", path, "reason", reason)
	}

	// Note which components are missing before MkdirAll creates them: a new
	// directory's entry is durable only once its parent is fsynced, and
	// objects made durable inside a directory that vanishes in a crash would
	// be lost with it.
	var created []string
	for p := filepath.Clean(path); ; {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			break
		}
		created = append(created, p)
		parent := filepath.Dir(p)
		if parent == p {
			break
		}
		p = parent
	}

	fi, err := os.Stat(path)
	if err != nil {
		// Missing, or a file in the way of a parent: MkdirAll says which.
		if err := os.MkdirAll(path, 0o700); err != nil {
			return unusable(err, "cannot create the directory")
		}
		fi, err = os.Stat(path)
	}
	if err != nil {
		return unusable(err, "cannot stat the directory")
	}
	if !fi.IsDir() {
		return unusable(nil, "not a directory")
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return unusable(nil, fmt.Sprintf("writable by group or others (mode %#o)", perm))
	}

	// Ask the file system rather than the mode bits: ownership, ACLs and
	// read-only mounts all decide whether we can write here.
	probe, err := os.CreateTemp(path, ".picomq-probe-*")
	if err != nil {
		return unusable(err, "not writable by this process")
	}
	name := probe.Name()
	probe.Close()
	if err := os.Remove(name); err != nil {
		return unusable(err, "cannot remove a file from the directory")
	}

	for _, p := range created {
		if err := syncDir(filepath.Dir(p)); err != nil {
			return stream.StreamBackendFailed.Wrap(err, "op", "objstore.fsyncdir", "path", filepath.Dir(p))
		}
	}
	return nil
}

// syncDir fsyncs the directory at path, making the entries created or
// removed in it durable.
func syncDir(path string) error {
	d, err := os.Open(path)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
