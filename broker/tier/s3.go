package tier

import (
	"context"
	"crypto/md5"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/picomq/picomq/broker/errs"
)

// Options configure an S3 bucket.
type Options struct {
	// Endpoint is the S3 API's URL: http:// or https://host[:port].
	Endpoint string
	Bucket   string
	Region   string
	// PathStyle addresses the bucket in the path (most S3-compatible
	// servers), not in the host name (AWS's default).
	PathStyle bool
	// CAFile, when set, is a PEM bundle trusted for an https endpoint
	// (instead of the system's roots).
	CAFile string
	// CredentialsDir holds the files access-key-id and secret-access-key,
	// read again when they change.
	CredentialsDir string
	// Health records what each request says of the bucket (may be nil).
	Health *Health
}

// The files of Options.CredentialsDir.
const (
	AccessKeyIDFile     = "access-key-id"
	SecretAccessKeyFile = "secret-access-key"
)

// S3 is a Bucket on an S3-compatible server.
type S3 struct {
	client   *minio.Client
	endpoint string
	bucket   string
	health   *Health
}

// NewS3 checks the options and builds the client; it sends nothing.
func NewS3(o Options) (*S3, error) {
	u, err := url.Parse(o.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		return nil, fmt.Errorf("endpoint %q: want http:// or https://host[:port] with no path", o.Endpoint)
	}
	if o.Bucket == "" {
		return nil, errors.New("no bucket")
	}
	if o.CredentialsDir == "" {
		return nil, errors.New("no credentials directory")
	}
	creds := &fileCredentials{dir: o.CredentialsDir}
	if _, err := creds.read(); err != nil {
		return nil, err
	}
	tr := &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 30 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	if o.CAFile != "" {
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CA file %s: no PEM certificate in it", o.CAFile)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	lookup := minio.BucketLookupDNS
	if o.PathStyle {
		lookup = minio.BucketLookupPath
	}
	region := o.Region
	if region == "" {
		region = "us-east-1"
	}
	c, err := minio.New(u.Host, &minio.Options{
		Creds:        credentials.New(creds),
		Secure:       u.Scheme == "https",
		Transport:    tr,
		Region:       region,
		BucketLookup: lookup,
		// The uploader retries with its own backoff and readers fall back
		// to other copies: the client's own retries would only hide the
		// fault for longer.
		MaxRetries: 2,
	})
	if err != nil {
		return nil, err
	}
	c.SetAppInfo("picomq", "1")
	return &S3{client: c, endpoint: o.Endpoint, bucket: o.Bucket, health: o.Health}, nil
}

// Describe implements Bucket.
func (s *S3) Describe() (string, string) { return s.endpoint, s.bucket }

// Put implements Bucket: one PUT, the body read once.
func (s *S3) Put(ctx context.Context, key string, body io.Reader, size int64, md5hex string) error {
	sum, err := hex.DecodeString(md5hex)
	if err != nil || len(sum) != md5.Size {
		return fmt.Errorf("tier: bad MD5 %q", md5hex)
	}
	core := minio.Core{Client: s.client}
	_, err = core.PutObject(ctx, s.bucket, key, body, size, base64.StdEncoding.EncodeToString(sum), "", minio.PutObjectOptions{
		ContentType: "application/octet-stream",
		// The server refuses a body whose MD5 is not this (BadDigest):
		// the check that matters, so no SHA-256 of the body is made for
		// the signature (an unsigned payload).
		DisableContentSha256: true,
	})
	if err = s.classify("put", key, err); err != nil {
		return err
	}
	info, err := s.client.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
	if err = s.classify("head", key, err); err != nil {
		return err
	}
	etag := strings.Trim(info.ETag, `"`)
	if info.Size != size || !strings.EqualFold(etag, md5hex) {
		return Corrupt.With("key", key, "pos", 0, "err", fmt.Sprintf("uploaded %d bytes with MD5 %s, the bucket holds %d with ETag %s", size, md5hex, info.Size, etag))
	}
	return nil
}

// GetRange implements Bucket.
func (s *S3) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	o := minio.GetObjectOptions{}
	if err := o.SetRange(off, off+n-1); err != nil {
		return nil, err
	}
	obj, err := s.client.GetObject(ctx, s.bucket, key, o)
	if err != nil {
		return nil, s.classify("get", key, err)
	}
	defer obj.Close()
	buf := make([]byte, n)
	got, err := io.ReadFull(obj, buf)
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		// Short: the caller's frame check refuses what is missing.
		s.classify("get", key, nil)
		return buf[:got], nil
	}
	if err = s.classify("get", key, err); err != nil {
		return nil, err
	}
	return buf, nil
}

// Delete implements Bucket.
func (s *S3) Delete(ctx context.Context, key string) error {
	err := s.client.RemoveObject(ctx, s.bucket, key, minio.RemoveObjectOptions{})
	if r := minio.ToErrorResponse(err); r.Code == "NoSuchKey" {
		err = nil
	}
	return s.classify("delete", key, err)
}

// List implements Bucket.
func (s *S3) List(ctx context.Context, prefix string, fn func(string, int64, time.Time) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for o := range s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			return s.classify("list", prefix, o.Err)
		}
		if err := fn(o.Key, o.Size, o.LastModified); err != nil {
			return err
		}
	}
	s.classify("list", prefix, nil)
	return nil
}

// Probe implements Bucket.
func (s *S3) Probe(ctx context.Context) error {
	ok, err := s.client.BucketExists(ctx, s.bucket)
	if err == nil && !ok {
		return s.classify("probe", "", Refused.With("op", "probe", "key", "", "code", "NoSuchBucket", "err", "the bucket does not exist"))
	}
	return s.classify("probe", "", err)
}

// classify turns a client error into a coded one and tells Health.
func (s *S3) classify(op, key string, err error) error {
	if _, coded := errs.As(err); err != nil && coded {
		s.health.record(err)
		return err
	}
	if err == nil {
		s.health.record(nil)
		return nil
	}
	r := minio.ToErrorResponse(err)
	var out error
	switch {
	case r.Code == "NoSuchKey":
		// The bucket answered: it is reachable; the key is what is missing.
		s.health.record(nil)
		return NotFound.With("op", op, "key", key)
	case r.StatusCode >= 500, r.Code == "SlowDown", r.Code == "RequestTimeout", r.Code == "ServiceUnavailable", r.Code == "InternalError", r.StatusCode == 0:
		out = Unreachable.With("op", op, "key", key, "err", err.Error())
	default:
		out = Refused.With("op", op, "key", key, "code", r.Code, "err", err.Error())
	}
	s.health.record(out)
	return out
}

// fileCredentials reads the key pair from its directory, again every
// credentialsRecheck: a rotated Secret reaches the files within the
// kubelet's sync and the requests within that much more.
type fileCredentials struct {
	dir string

	mu   sync.Mutex
	last time.Time
}

const credentialsRecheck = 5 * time.Second

func (f *fileCredentials) read() (credentials.Value, error) {
	id, err := os.ReadFile(filepath.Join(f.dir, AccessKeyIDFile))
	if err != nil {
		return credentials.Value{}, fmt.Errorf("tier credentials: %w", err)
	}
	secret, err := os.ReadFile(filepath.Join(f.dir, SecretAccessKeyFile))
	if err != nil {
		return credentials.Value{}, fmt.Errorf("tier credentials: %w", err)
	}
	v := credentials.Value{AccessKeyID: strings.TrimSpace(string(id)), SecretAccessKey: strings.TrimSpace(string(secret)), SignerType: credentials.SignatureV4}
	if v.AccessKeyID == "" || v.SecretAccessKey == "" {
		return v, fmt.Errorf("tier credentials in %s: %s or %s is empty", f.dir, AccessKeyIDFile, SecretAccessKeyFile)
	}
	f.mu.Lock()
	f.last = time.Now()
	f.mu.Unlock()
	return v, nil
}

func (f *fileCredentials) Retrieve() (credentials.Value, error) { return f.read() }

func (f *fileCredentials) RetrieveWithCredContext(*credentials.CredContext) (credentials.Value, error) {
	return f.read()
}

func (f *fileCredentials) IsExpired() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return time.Since(f.last) >= credentialsRecheck
}
