package journal

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"unsafe"

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

// DirectCreator is an FS that can also create a file written around the
// page cache (O_DIRECT): the spare's zeros then cost no copy into the
// cache and no writeback later. Writes to such a file must be aligned to
// DirectAlign in offset, length and memory (AlignedBuffer).
type DirectCreator interface {
	// CreateDirect creates a file that must not exist, opened for direct
	// writes; ok is false, with nothing created, where the file system
	// has no direct I/O (tmpfs): the caller then uses Create.
	CreateDirect(name string) (f File, ok bool, err error)
}

// DirectAlign is the alignment direct writes keep: the logical block
// size of any disk (4 KiB covers 512-byte and 4Kn ones).
const DirectAlign = 4096

// AlignedBuffer returns n bytes whose address is a multiple of
// DirectAlign.
func AlignedBuffer(n int) []byte {
	b := make([]byte, n+DirectAlign)
	skip := (DirectAlign - int(uintptr(unsafe.Pointer(unsafe.SliceData(b)))%DirectAlign)) % DirectAlign
	return b[skip : skip+n : skip+n]
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

func (d osDir) CreateDirect(name string) (File, bool, error) {
	f, err := d.fs.OpenFile(filepath.Join(d.path, name), os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_DIRECT, 0o600)
	if errors.Is(err, syscall.EINVAL) {
		// No direct I/O here; open(2) refuses it before creating.
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return osFile{f, d.fs}, true, nil
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
