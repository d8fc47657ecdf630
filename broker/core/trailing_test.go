package core

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/picomq/picomq/broker/node"
)

// TestLoneBrokerSnapshotDropsItsLogsFrames: a lone broker's snapshot
// compacts its metadata log down to a few entries, so the inline frames
// the entries carried leave the disk with it. (It kept 1024 entries past a
// snapshot, as a member does: on a 64 MiB volume those were half of it, and
// a full volume's deletes could not free enough to take appends again.)
func TestLoneBrokerSnapshotDropsItsLogsFrames(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const segment = 1 << 20
	b := openTest(t, dir, func(c *Config) { c.WALSegmentBytes = segment; c.LogCommits = true }) // the log path (a cluster member's)
	defer b.Close()
	ctx := context.Background()
	mustCreate(t, b, "s", node.CreateOptions{})
	payload := strings.Repeat("x", 16<<10) // committed inline: below InlineBytes
	const n = 400                          // 6.4 MiB of frames: several segments
	for i := range n {
		if _, err := b.Append(ctx, "s", recs(payload), node.AppendOptions{Partition: -1}); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	before := walBytes(t, dir)
	if before < 5*segment {
		t.Fatalf("the log holds %d bytes after %d appends of 16 KiB: were they not committed inline?", before, n)
	}
	if err := b.Snapshot(); err != nil {
		t.Fatal(err)
	}
	// What stays: the segment written to and the one before it, if the
	// trailing entries (32 of 16 KiB) straddle their boundary; a third is
	// slack. (The zeroed spare is not a .wal file.)
	if after := walBytes(t, dir); after > 3*segment {
		t.Fatalf("the log holds %d bytes after a snapshot (%d before): the trailing entries kept their frames", after, before)
	}
	if got := readAll(t, b, "s", 0); len(got) != n {
		t.Fatalf("%d records read back after the snapshot, want %d", len(got), n)
	}
}

// walBytes is the size of the metadata log's segment files.
func walBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var total int64
	err := filepath.WalkDir(filepath.Join(dir, "meta"), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(p) != ".wal" {
			return err
		}
		info, err := d.Info()
		if err == nil {
			total += info.Size()
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return total
}
