package auth

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"
)

// dirSet is the items read from the files of a directory (tokens, signing
// keys): read whole at Load, read again by Reload and Run when the
// directory's fingerprint changes, replaced atomically. A file that parse
// refuses is skipped and logged by name; its content never reaches a log.
type dirSet[T any] struct {
	dir   string
	what  string // "auth token", "url signing key": what its logs call an item
	many  string // "tokens", "keys": the count's name in its logs
	parse func(path, name string) (T, error)
	log   *slog.Logger
	set   atomic.Pointer[[]T]
	seen  atomic.Pointer[string] // fingerprint of the directory last read
}

func (d *dirSet[T]) init(dir, what, many string, log *slog.Logger, parse func(path, name string) (T, error)) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d.dir, d.what, d.many, d.log, d.parse = dir, what, many, log, parse
	_, err := d.Reload()
	return err
}

// items is the set in force.
func (d *dirSet[T]) items() []T { return *d.set.Load() }

// Len is how many items are in force.
func (d *dirSet[T]) Len() int { return len(d.items()) }

// Reload reads the directory again if its fingerprint changed since the
// last read, and reports whether it did.
func (d *dirSet[T]) Reload() (bool, error) {
	fp, files, err := fingerprint(d.dir)
	if err != nil {
		return false, err
	}
	if last := d.seen.Load(); last != nil && *last == fp {
		return false, nil
	}
	var set []T
	for _, f := range files { // sorted by name
		item, err := d.parse(filepath.Join(d.dir, f), f)
		if err != nil {
			d.log.Warn(d.what+" file skipped", "file", f, "reason", err.Error())
			continue
		}
		set = append(set, item)
	}
	d.set.Store(&set)
	d.seen.Store(&fp)
	d.log.Info(d.what+"s loaded", "dir", d.dir, d.many, len(set))
	return true, nil
}

// Run re-reads the directory every interval while its fingerprint (names,
// sizes, modification times) changes, until ctx ends.
func (d *dirSet[T]) Run(ctx context.Context, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if _, err := d.Reload(); err != nil {
			d.log.Warn("cannot re-read the "+d.what+"s directory: keeping the "+d.many+" in force", "dir", d.dir, "err", err)
		}
	}
}

// readSmall reads a file of at most maxTokenFileBytes (a token or a key is
// short; anything larger is a mistake). Its errors never hold the content.
func readSmall(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("cannot open: %w", err)
	}
	defer f.Close()
	buf, err := io.ReadAll(io.LimitReader(f, maxTokenFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("cannot read: %w", err)
	}
	if len(buf) > maxTokenFileBytes {
		return nil, fmt.Errorf("larger than %d bytes", maxTokenFileBytes)
	}
	return buf, nil
}
