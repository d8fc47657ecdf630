package contracts_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/picomq/picomq/broker/client"
	"github.com/picomq/picomq/broker/httpapi/wire"
	"github.com/picomq/picomq/broker/stream"
	"github.com/picomq/picomq/broker/tier"
	"github.com/picomq/picomq/internal/testwait"
	"github.com/picomq/picomq/test/brokerstat"
	"github.com/picomq/picomq/test/clusterharness"
	"github.com/picomq/picomq/test/records"
	"github.com/picomq/picomq/test/s3server"
)

const tierBucket = "tier"

// tierFlags are a broker's flags for object storage at endpoint.
func tierFlags(endpoint, credsDir, prefix string, extra ...string) []string {
	return append([]string{
		"--tier-endpoint", endpoint, "--tier-bucket", tierBucket, "--tier-path-style",
		"--tier-prefix", prefix, "--tier-credentials-dir", credsDir,
		"--tier-local-retain-for", "0", "--tier-upload-stagger", "2s",
	}, extra...)
}

// fill appends batches of records to partition 0 of s, one batch at a
// time (each a group commit: a small range the merge turns into segments).
func fill(t *testing.T, s *client.Stream, batches, perBatch, size int, tag string) {
	t.Helper()
	for i := range batches {
		recs := make([]stream.RecordValue, perBatch)
		for j := range recs {
			unit := []byte(fmt.Sprintf("%s-%d-%d|", tag, i, j))
			recs[j] = stream.RecordValue{Key: []byte(fmt.Sprintf("k%d", j%7)), Payload: bytes.Repeat(unit, size/len(unit)+1)[:size]}
		}
		if _, err := s.Append(t.Context(), recs); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
}

func partitionInfo(t *testing.T, c *client.Client, name string) wire.PartitionInfo {
	t.Helper()
	info, err := c.GetStream(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	return info.Partitions[0]
}

func tierStatusOf(t *testing.T, url string) wire.TierStatus {
	t.Helper()
	st, err := brokerstat.Tier(url)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestTieredStorage runs a lone broker against a real S3 server (SeaweedFS,
// behind a fault proxy): sealed segments are uploaded and their local files
// go, every record reads back identical at its offset, a corrupt object is
// refused with a coded error and read again once repaired, the credentials
// rotate under a running broker, and retention and deletion empty the
// bucket.
func TestTieredStorage(t *testing.T) {
	needBroker(t)
	s3 := s3server.Start(t, s3server.Options{Buckets: []string{tierBucket}})
	proxy := s3.Proxy(t)
	creds := t.TempDir()
	if err := s3server.WriteCredentials(creds, s3server.DefaultCredential); err != nil {
		t.Fatal(err)
	}
	const prefix = "contract/"
	c := clusterharness.Start(t, clusterharness.Options{Brokers: 1, ExtraFlags: tierFlags(proxy.Endpoint(), creds, prefix, "--tier-cache-bytes", "4MiB")})
	cl, err := client.New(c.URL(0))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if st := tierStatusOf(t, c.URL(0)); !st.Enabled || st.Bucket != tierBucket || st.Prefix != prefix {
		t.Fatalf("tier status = %+v", st)
	}
	testwait.Until(t, 30*time.Second, "the broker reports the bucket reachable", func() bool { return tierStatusOf(t, c.URL(0)).Reachable })

	s, err := cl.Open(ctx, "tiered", client.StreamConfig{Policy: stream.PolicyValue{SegmentBytes: 256 << 10}})
	if err != nil {
		t.Fatal(err)
	}
	// 600 group commits of 4 KiB: more than the merge's 256 small ranges,
	// so segments of 256 KiB are written, sealed and uploaded.
	fill(t, s, 600, 4, 1024, "a")
	before, err := records.ReadAll(ctx, s, 0)
	if err != nil {
		t.Fatal(err)
	}
	segments := func() []string { return s3.Keys(t, tierBucket, prefix+"segments/") }
	testwait.Until(t, 90*time.Second, "segments are uploaded and their local copies evicted", func() bool {
		p := partitionInfo(t, cl, "tiered")
		return len(segments()) >= 2 && p.TieredBytes > 0 && p.LocalBytes < p.TieredBytes
	})
	// The evicted segments' files go from the data directory.
	testwait.Until(t, 30*time.Second, "the uploaded segments' local files are deleted", func() bool {
		for _, key := range segments() {
			id, _ := tier.Keys{Prefix: prefix}.ParseSegment(key)
			if _, err := os.Stat(filepath.Join(c.Broker(0).DataDir, "objects", fmt.Sprintf("%016x.obj", id))); err == nil {
				return false
			}
		}
		return true
	})
	after, err := records.ReadAll(ctx, s, 0)
	if err != nil {
		t.Fatalf("reading back tiered records: %v", err)
	}
	if err := records.Same(after, before); err != nil {
		t.Fatalf("tiered records read back: %v", err)
	}
	if proxy.Counts()["GET"].Seen == 0 {
		t.Fatalf("no GET reached the bucket: the reads were not served from object storage (%s)", proxy)
	}

	// A corrupt object: refused with a coded error, never served; put right,
	// read again (the cache dropped the chunks that failed). The broker
	// restarts with an empty cache first: its memory holds the frames
	// read above.
	key := segments()[0]
	good := s3.Get(t, tierBucket, key)
	s3.Corrupt(t, tierBucket, key)
	cacheDir := filepath.Join(c.Broker(0).DataDir, "tier-cache")
	clearCache := func() {
		ents, _ := os.ReadDir(cacheDir)
		for _, e := range ents {
			os.Remove(filepath.Join(cacheDir, e.Name()))
		}
	}
	c.Kill(0)
	clearCache()
	c.StartBroker(0)
	_, err = records.ReadAll(ctx, s, 0)
	if err == nil || !(strings.Contains(err.Error(), "OBJECT_CORRUPT") || strings.Contains(err.Error(), "TIER_CORRUPT")) {
		t.Fatalf("read of a corrupt tiered segment = %v, want OBJECT_CORRUPT", err)
	}
	s3.Put(t, tierBucket, key, good)
	clearCache()
	testwait.NoError(t, 30*time.Second, "reads of the repaired segment", func() error {
		got, err := records.ReadAll(ctx, s, 0)
		if err != nil {
			return err
		}
		return records.Same(got, before)
	})

	// Rotation: the Secret's files change, then the server stops accepting
	// the old key; new segments still upload, with no broker restart.
	second := s3server.Credential{AccessKey: "picomq-rotated", SecretKey: "picomq-rotated-secret-0123456789"}
	s3.Restart(s3server.DefaultCredential, second)
	if err := s3server.WriteCredentials(creds, second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(6 * time.Second) // the broker re-reads its credentials every 5 s
	s3.Restart(second)
	n := len(segments())
	fill(t, s, 600, 4, 1024, "b")
	testwait.Until(t, 90*time.Second, "segments upload with the rotated credentials", func() bool { return len(segments()) > n })

	// Retention drops whole segments: their keys go too.
	if _, err := cl.UpdatePolicy(ctx, "tiered", stream.PolicyValue{SegmentBytes: 256 << 10, RetainBytes: 64 << 10}); err != nil {
		t.Fatal(err)
	}
	if !testwait.Poll(90*time.Second, func() bool { return len(segments()) <= 1 }) {
		t.Fatalf("retention did not delete the trimmed segments' keys: %d keys, partition %+v, tier %+v", len(segments()), partitionInfo(t, cl, "tiered"), tierStatusOf(t, c.URL(0)))
	}
	// Deleting the stream empties the bucket.
	if err := cl.DeleteStream(ctx, "tiered"); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 90*time.Second, "the deleted stream's keys go", func() bool { return len(segments()) == 0 })
	if st := tierStatusOf(t, c.URL(0)); st.TieredBytes != 0 || !st.Reachable {
		t.Fatalf("tier status at the end = %+v", st)
	}
}
