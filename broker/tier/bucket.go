package tier

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/picomq/picomq/broker/errs"
)

// Object storage's refusals: block 0.16.13 (0x00_10_0D_xx).
var (
	// Unreachable: the bucket did not answer, answered 5xx, or throttled.
	// Retriable: uploads wait and retry; a read may be retried.
	Unreachable = errs.Static(0x00_10_0D_01, "TIER_UNREACHABLE",
		"Object storage cannot be reached right now; retry shortly",
		"broker/tier: a request to the bucket failed in transit, timed out, or was answered 5xx or SlowDown; fields: op, key, err",
		503, 75)
	// Refused: the bucket refused the request (access denied, unknown
	// bucket or key id, bad signature): a configuration to fix.
	Refused = errs.Static(0x00_10_0D_02, "TIER_REFUSED",
		"Object storage refused the broker's request; check the bucket and its credentials",
		"broker/tier: the bucket answered 4xx (AccessDenied, NoSuchBucket, InvalidAccessKeyId, SignatureDoesNotMatch, ...); fields: op, key, code, err",
		503, 78)
	// Corrupt: bytes read back failed their checksum twice (cache and
	// bucket), or an upload could not be confirmed.
	Corrupt = errs.Static(0x00_10_0D_03, "TIER_CORRUPT",
		"Records read back from object storage failed their checksum",
		"broker/tier: a frame read from the bucket failed its CRC-32C (or was short) after a fresh fetch, or an uploaded object's size or MD5 differed; fields: key, pos, err",
		500, 74)
	// NotFound: the key is not in the bucket.
	NotFound = errs.Static(0x00_10_0D_04, "TIER_OBJECT_MISSING",
		"A segment the metadata names is missing from object storage",
		"broker/tier: GET or HEAD answered NoSuchKey for a key; fields: op, key",
		500, 74)
)

// Bucket is the object storage the tier uses. The S3 type is the real
// one; every method is safe for concurrent use.
type Bucket interface {
	// Put stores size bytes of body under key, sending md5hex (their MD5,
	// computed by the caller from the bytes it checked) for the server to
	// check them against, and confirms them with a HEAD.
	Put(ctx context.Context, key string, body io.Reader, size int64, md5hex string) error
	// GetRange reads n bytes of key from off.
	GetRange(ctx context.Context, key string, off, n int64) ([]byte, error)
	// Delete removes key; a missing key is not an error.
	Delete(ctx context.Context, key string) error
	// List calls fn for every key under prefix.
	List(ctx context.Context, prefix string, fn func(key string, size int64, modified time.Time) error) error
	// Probe checks that the bucket is there and the credentials work.
	Probe(ctx context.Context) error
	// Describe names the endpoint and the bucket, for status and logs.
	Describe() (endpoint, bucket string)
}

// Keys lays the cluster's objects out under one prefix.
type Keys struct{ Prefix string }

const segmentDir = "segments/"

// Segment is the key of object id.
func (k Keys) Segment(id uint64) string {
	return fmt.Sprintf("%s%s%016x.obj", k.Prefix, segmentDir, id)
}

// Segments is the prefix every segment key starts with.
func (k Keys) Segments() string { return k.Prefix + segmentDir }

// ParseSegment returns the object id of a segment key, false for a key
// that is not one (the scan leaves those alone).
func (k Keys) ParseSegment(key string) (uint64, bool) {
	rest, ok := strings.CutPrefix(key, k.Segments())
	if !ok {
		return 0, false
	}
	hex, ok := strings.CutSuffix(rest, ".obj")
	if !ok || len(hex) != 16 {
		return 0, false
	}
	id, err := strconv.ParseUint(hex, 16, 64)
	return id, err == nil
}
