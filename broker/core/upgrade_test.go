package core

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/picomq/picomq/broker/meta"
	"github.com/picomq/picomq/broker/node"
)

// untar extracts a testdata archive into dir.
func untar(t *testing.T, archive, dir string) {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, h.Name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(path, 0o700); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			out, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(out, tr); err != nil {
				t.Fatal(err)
			}
			out.Close()
		}
	}
}

// TestDataDirectoryOfThePreviousRelease: a data directory written by the
// release before the journal (testdata/datadir-3f487d6.tar.gz: made by
// that commit's core — three streams, small appends committed inline, one
// 100 KiB append in a file of its own, producer and Stream-Seq state, a
// group offset, a closed stream; then a clean stop) opens on this build:
// every record at its offset, producer retries answered as duplicates,
// Stream-Seq order kept, the group offset, the close — and appends go on,
// through the journal, and survive a stop without a checkpoint.
func TestDataDirectoryOfThePreviousRelease(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	untar(t, filepath.Join("testdata", "datadir-3f487d6.tar.gz"), dir)
	data := filepath.Join(dir, "data")
	if err := os.Chmod(data, 0o700); err != nil {
		t.Fatal(err)
	}
	b := openTest(t, data)
	ctx := context.Background()
	check := func(b *Broker, plain int) {
		t.Helper()
		got := readAll(t, b, "plain", 0)
		if len(got) != plain {
			t.Fatalf("plain: %d records, want %d", len(got), plain)
		}
		for i := 0; i < 50; i++ {
			if string(got[i].Record.Payload) != fmt.Sprintf("plain-%d", i) || int(got[i].Offset) != i {
				t.Fatalf("plain record %d: offset %d %.20q", i, got[i].Offset, got[i].Record.Payload)
			}
		}
		if p := got[50].Record.Payload; len(p) != 100<<10 || p[1000] != byte(1000%256) {
			t.Fatalf("the 100 KiB record: %d bytes", len(p))
		}
		keyed := 0
		for part := range 3 {
			keyed += len(readAll(t, b, "keyed", part))
		}
		if keyed != 30 {
			t.Fatalf("keyed: %d records over its 3 partitions, want 30", keyed)
		}
		if next, err := b.Committed(ctx, "plain", "readers", 0); err != nil || next != 20 {
			t.Fatalf("group offset: %d, %v; want 20", next, err)
		}
		if _, err := b.Append(ctx, "closed", recs("more"), node.AppendOptions{Partition: -1}); !errors.Is(err, meta.StreamClosed) {
			t.Fatalf("append to the closed stream: %v, want STREAM_CLOSED", err)
		}
	}
	check(b, 51)
	p := &node.ProducerTuple{ID: "prod", Epoch: 2, Seq: 29}
	res, err := b.Append(ctx, "keyed", recs("keyed-29"), node.AppendOptions{Partition: -1, Producer: p})
	if err != nil || !res.Duplicate {
		t.Fatalf("retry of the producer's last append: %+v, %v; want a duplicate", res, err)
	}
	if _, err := b.Append(ctx, "keyed", recs("x"), node.AppendOptions{Partition: -1, StreamSeq: "0010"}); !errors.Is(err, meta.StreamSeqOrder) {
		t.Fatalf("an old Stream-Seq: %v, want STREAM_SEQ_ORDER", err)
	}
	for i := 51; i < 60; i++ {
		res, err := b.Append(ctx, "plain", recs(fmt.Sprintf("plain-%d", i)), node.AppendOptions{Partition: -1})
		if err != nil || res.First != uint64(i) {
			t.Fatalf("append after the upgrade: %+v, %v; want offset %d", res, err, i)
		}
	}
	stopWithoutCheckpoint(t, b)
	b = openTest(t, data)
	defer b.Close()
	check(b, 60)
}
