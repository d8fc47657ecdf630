package journal

import (
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/picomq/picomq/broker/diskio"
)

// FS is the directory a journal keeps its segments in: a real one (Dir),
// or crashfs's in tests, which forgets at a simulated crash what no
// fdatasync covered.
type FS interface {
	// Create creates and opens a file that must not exist.
	Create(name string) (File, error)
	Open(name string) (File, error)
	Remove(name string) error
	// Rename renames from to to, replacing it (durable once SyncDir).
	Rename(from, to string) error
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
func Dir(path string) FS { return DirOn(path, diskio.OS) }

// DirOn is the journal directory at path, its files opened, written,
// synced and removed through fsys (tests inject faults there).
func DirOn(path string, fsys diskio.FS) FS { return osDir{path, fsys} }

type osDir struct {
	path string
	fs   diskio.FS
}

type osFile struct {
	*os.File
	fs diskio.FS
}

func (d osDir) Create(name string) (File, error) {
	f, err := d.fs.OpenFile(filepath.Join(d.path, name), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	return osFile{f, d.fs}, nil
}

func (d osDir) Open(name string) (File, error) {
	f, err := d.fs.OpenFile(filepath.Join(d.path, name), os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	return osFile{f, d.fs}, nil
}

func (d osDir) Remove(name string) error { return d.fs.Remove(filepath.Join(d.path, name)) }

func (d osDir) Rename(from, to string) error {
	return d.fs.Rename(filepath.Join(d.path, from), filepath.Join(d.path, to))
}

func (d osDir) List() ([]string, error) {
	entries, err := os.ReadDir(d.path)
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
	f, err := os.Open(d.path)
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

func (f osFile) WriteAt(p []byte, off int64) (int, error) { return f.fs.WriteAt(f.File, p, off) }

// Sync is fdatasync, through the file system seam.
func (f osFile) Sync() error { return f.fs.Sync(f.File) }
