package objstore

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/picomq/picomq/broker/stream"
)

// IDSpan is how many ids a store's own range holds (Options.IDBase).
const IDSpan = 1 << 48

// reserveBlock is how many ids a reservation covers: one fsync per 4096
// objects.
const reserveBlock = 4096

// reservationFile holds the first id not reserved yet, with a checksum.
const reservationFile = "NEXT"

// own reports whether id is in this store's range (every id, without one).
func (s *Store) own(id uint64) bool {
	return s.idBase == 0 || id >= s.idBase && id-s.idBase < IDSpan
}

// readReservation reads NEXT (0 when there is none yet). A torn or corrupt
// one is refused: handing out an id twice would mix two objects.
func readReservation(dir string) (uint64, error) {
	b, err := os.ReadFile(filepath.Join(dir, reservationFile))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, stream.StreamBackendFailed.Wrap(err, "op", "objstore.reservation.read", "path", dir)
	}
	if len(b) != 12 || crc32.Checksum(b[:8], castagnoli) != binary.LittleEndian.Uint32(b[8:]) {
		return 0, stream.StreamBackendFailed.With("op", "objstore.reservation.read", "path", dir, "reason", "NEXT is corrupt: the ids handed out are unknown; restore it or start this member afresh")
	}
	return binary.LittleEndian.Uint64(b[:8]), nil
}

// writeReservation makes next the first unreserved id, durably: written
// aside, fsynced, renamed over NEXT, the directory fsynced.
func writeReservation(dir string, next uint64) error {
	b := binary.LittleEndian.AppendUint64(nil, next)
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	tmp := filepath.Join(dir, reservationFile+".tmp")
	fail := func(err error) error {
		return stream.StreamBackendFailed.Wrap(err, "op", "objstore.reservation.write", "path", dir)
	}
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fail(err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fail(err)
	}
	if err := fdatasync(f); err != nil {
		f.Close()
		return fail(err)
	}
	if err := f.Close(); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, reservationFile)); err != nil {
		return fail(err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fail(err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fail(err)
	}
	return nil
}
