package journal

import (
	"io"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"
)

// FS is the directory a journal keeps its segments in: a real one (Dir),
// or crashfs's in tests, which forgets at a simulated crash what no
// fdatasync covered.
type FS interface {
	// Create creates and opens a file that must not exist.
	Create(name string) (File, error)
	Open(name string) (File, error)
	Remove(name string) error
	// List returns the directory's entries, sorted.
	List() ([]string, error)
	// SyncDir makes creates and removes durable.
	SyncDir() error
}

// File is one segment.
type File interface {
	io.ReaderAt
	io.WriterAt
	Size() (int64, error)
	Truncate(size int64) error
	// Sync is fdatasync: the file's bytes and size.
	Sync() error
	Close() error
}

// Dir is the journal directory at path, on the real file system.
func Dir(path string) FS { return osDir(path) }

type osDir string

type osFile struct{ *os.File }

func (d osDir) Create(name string) (File, error) {
	f, err := os.OpenFile(filepath.Join(string(d), name), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (d osDir) Open(name string) (File, error) {
	f, err := os.OpenFile(filepath.Join(string(d), name), os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (d osDir) Remove(name string) error { return os.Remove(filepath.Join(string(d), name)) }

func (d osDir) List() ([]string, error) {
	entries, err := os.ReadDir(string(d))
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	return names, nil
}

func (d osDir) SyncDir() error {
	f, err := os.Open(string(d))
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

func (f osFile) Size() (int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

func (f osFile) Sync() error {
	for {
		err := unix.Fdatasync(int(f.Fd()))
		if err != unix.EINTR {
			return err
		}
	}
}
