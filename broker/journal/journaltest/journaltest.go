// Package journaltest gives tests a journal directory that forgets, at a
// simulated crash, what no fdatasync covered: a crashfs.Dir as a
// journal.FS.
package journaltest

import (
	"github.com/picomq/picomq/broker/crashfs"
	"github.com/picomq/picomq/broker/journal"
)

// FS is d as a journal's directory.
func FS(d *crashfs.Dir) journal.FS { return memFS{d} }

type memFS struct{ d *crashfs.Dir }

func (m memFS) Create(name string) (journal.File, error) {
	f, err := m.d.Create(name)
	if err != nil {
		return nil, err
	}
	return f, nil
}

func (m memFS) Open(name string) (journal.File, error) {
	f, err := m.d.Open(name)
	if err != nil {
		return nil, err
	}
	return f, nil
}

func (m memFS) Remove(name string) error     { return m.d.Remove(name) }
func (m memFS) Rename(from, to string) error { return m.d.Rename(from, to) }
func (m memFS) List() ([]string, error)      { return m.d.List(), nil }
func (m memFS) SyncDir() error               { return m.d.SyncDir() }
