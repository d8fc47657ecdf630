package tier_test

import (
	"bytes"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/picomq/picomq/broker/tier"
	"github.com/picomq/picomq/test/s3server"
)

// TestS3AgainstARealServer checks the client against SeaweedFS: a
// confirmed upload, ranged reads, listings, idempotent deletes, and the
// codes each failure gets — TIER_REFUSED for a key the server does not
// know, TIER_UNREACHABLE for a cut link or 503s, TIER_OBJECT_MISSING —
// with Health following them; and credentials files read again when they
// change.
func TestS3AgainstARealServer(t *testing.T) {
	if testing.Short() {
		t.Skip("process tier: runs a real S3 server (SeaweedFS); go test without -short runs it")
	}
	other := s3server.Credential{AccessKey: "tier-second", SecretKey: "tier-second-secret-0123456789"}
	srv := s3server.Start(t, s3server.Options{Buckets: []string{"tier-test"}, Credentials: []s3server.Credential{s3server.DefaultCredential, other}})
	proxy := srv.Proxy(t)
	creds := t.TempDir()
	if err := s3server.WriteCredentials(creds, s3server.DefaultCredential); err != nil {
		t.Fatal(err)
	}
	health := &tier.Health{}
	b, err := tier.NewS3(tier.Options{Endpoint: proxy.Endpoint(), Bucket: "tier-test", PathStyle: true, CredentialsDir: creds, Health: health})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := b.Probe(ctx); err != nil {
		t.Fatal(err)
	}
	body := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	sum := md5.Sum(body)
	if err := b.Put(ctx, "p/segments/x.obj", bytes.NewReader(body), int64(len(body)), hex.EncodeToString(sum[:])); err != nil {
		t.Fatal(err)
	}
	got, err := b.GetRange(ctx, "p/segments/x.obj", 100, 1000)
	if err != nil || !bytes.Equal(got, body[100:1100]) {
		t.Fatalf("ranged GET: %v", err)
	}
	// Bytes that are not those the MD5 was computed from are refused by
	// the server (BadDigest), and nothing lands.
	flipped := append([]byte(nil), body...)
	flipped[12345] ^= 1
	if err := b.Put(ctx, "p/segments/y.obj", bytes.NewReader(flipped), int64(len(flipped)), hex.EncodeToString(sum[:])); err == nil {
		t.Fatal("an upload whose bytes do not match their MD5 was confirmed")
	}
	var keys []string
	if err := b.List(ctx, "p/", func(k string, _ int64, _ time.Time) error { keys = append(keys, k); return nil }); err != nil || len(keys) != 1 {
		t.Fatalf("list = %v %v", keys, err)
	}
	if _, err := b.GetRange(ctx, "p/segments/none.obj", 0, 10); !errors.Is(err, tier.NotFound) {
		t.Fatalf("GET of a missing key = %v", err)
	}
	if err := b.Delete(ctx, "p/segments/x.obj"); err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(ctx, "p/segments/x.obj"); err != nil {
		t.Fatalf("second delete: %v", err)
	}

	// Faults: a cut link and 503s are TIER_UNREACHABLE, and Health says so
	// until a request succeeds.
	proxy.Cut()
	if err := b.Probe(ctx); !errors.Is(err, tier.Unreachable) {
		t.Fatalf("probe over a cut link = %v", err)
	}
	if ok, last, _ := health.Snapshot(); ok || !errors.Is(last, tier.Unreachable) {
		t.Fatalf("health after a cut = %v %v", ok, last)
	}
	proxy.Fail(503, 1)
	if _, err := b.GetRange(ctx, "p/segments/none.obj", 0, 10); !errors.Is(err, tier.Unreachable) {
		t.Fatalf("GET answered 503 = %v", err)
	}
	proxy.Pass()
	if err := b.Probe(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, last, _ := health.Snapshot(); !ok || last != nil {
		t.Fatalf("health after recovery = %v %v", ok, last)
	}

	// Credentials: a key the server refuses is TIER_REFUSED; rewriting the
	// files fixes it without a new client, within the re-read interval.
	if err := s3server.WriteCredentials(creds, s3server.Credential{AccessKey: "nobody", SecretKey: "nobody-secret-0123456789"}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := b.Probe(ctx)
		if errors.Is(err, tier.Refused) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("probe with an unknown key = %v, want TIER_REFUSED", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := s3server.WriteCredentials(creds, other); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(15 * time.Second)
	for b.Probe(ctx) != nil {
		if time.Now().After(deadline) {
			t.Fatal("the rotated credentials were not picked up")
		}
		time.Sleep(200 * time.Millisecond)
	}
}
