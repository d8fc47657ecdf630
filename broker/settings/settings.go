// Package settings is the broker process's configuration: its flags, each
// also readable as a PICOMQ_* environment variable (--data-dir is
// PICOMQ_DATA_DIR), with the defaults and the checks the broker applies
// before it starts. The operator renders exactly these variables into a
// StreamCluster's ConfigMap, and its tests run Parse on what it renders, so
// the CRD refuses a value exactly when the broker would (cmd/broker
// --check-config runs the same check).
package settings

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/picomq/picomq/broker/auth"
	"github.com/picomq/picomq/broker/bytesize"
	"github.com/picomq/picomq/broker/core"
	"github.com/picomq/picomq/broker/cors"
	"github.com/picomq/picomq/broker/diskspace"
	"github.com/picomq/picomq/broker/httpapi/wire"
	"github.com/picomq/picomq/broker/membership"
	"github.com/picomq/picomq/broker/repair"
	"github.com/picomq/picomq/broker/stream"
	"github.com/picomq/picomq/broker/tier"
)

// Settings is a broker's configuration.
type Settings struct {
	DataDir        string
	Listen         string
	NodeID         string
	FlushLinger    time.Duration
	SyncLinger     time.Duration
	MaxBatchBytes  int64
	InlineBytes    int64
	PageCacheBytes int64
	// DiskHeadroom is the free space kept on the data volume for deletes,
	// trims, merges and recovery: below it appends are refused.
	DiskHeadroom    diskspace.Headroom
	LongPollTimeout time.Duration
	MaxBodyBytes    int64
	// MaxBatchRecords bounds the records of one append (413 above it).
	MaxBatchRecords int
	ShutdownTimeout time.Duration
	// Limits bounds what a client may send and how slowly (issue 22).
	Limits    Limits
	LogLevel  slog.Level
	LogFormat string
	TestClock bool
	Pprof     bool
	// DefaultStreamPolicy is the policy of a stream created without one
	// (nil: the SDK's defaults).
	DefaultStreamPolicy *stream.PolicyValue
	// TerminationLog is where a fatal error is written before the process
	// exits, for Kubernetes to show as the container's termination message
	// ("" or a path that cannot be written: nowhere).
	TerminationLog string
	// CheckConfig: check the configuration, report, and exit.
	CheckConfig bool
	// TLS, when its CertFile and KeyFile are set, serves HTTPS on the
	// client port and TLS on the peer port.
	TLS TLS
	// AuthTokensDir, when set, is the directory of bearer tokens every
	// request but the probes must present (broker/auth).
	AuthTokensDir string
	// MetricsAuth is "open" (/metrics needs no token) or "token" (a token
	// of any scope).
	MetricsAuth string
	// GroupLagMaxSeries bounds the consumer-group positions a broker
	// exports as metrics (two series each).
	GroupLagMaxSeries int
	// Access holds the browser and tenancy settings: CORS origins,
	// anonymous read prefixes, the keys of signed read URLs.
	Access Access
	// Tier configures object storage for sealed segments (off while
	// Endpoint is empty).
	Tier Tier
	// Cluster is cluster mode's configuration; a zero Name runs a lone
	// broker.
	Cluster Cluster
}

// Access is who may reach streams besides token holders, and from which
// pages (README "Browsers, CDNs and tenants").
type Tier struct {
	Endpoint, Bucket, Region string
	PathStyle                bool
	Prefix                   string
	CAFile                   string
	CredentialsDir           string
	CacheBytes               int64
	CacheDir                 string
	LocalRetainFor           time.Duration
	LocalRetainBytes         int64
	// UploadStagger and OrphanGrace: see core.TierConfig (tests shorten them).
	UploadStagger time.Duration
	OrphanGrace   time.Duration
	// Prefetch is how many chunks a tiered read fetches ahead.
	Prefetch int
	// UploadBytesPerSecond bounds a broker's uploads (0: none).
	UploadBytesPerSecond int64
}

// Access is the browser and tenancy settings.
type Access struct {
	// CORSAllowedOrigins are the origins whose pages may call the brokers
	// (broker/cors); "*" alone allows every one. Empty: every origin
	// without tokens, none with them.
	CORSAllowedOrigins []string
	// AnonymousReadPrefixes are stream-name prefixes anyone may read
	// without a token (public fan-out through a CDN).
	AnonymousReadPrefixes []string
	// URLSigningKeysDir is the directory of the keys that sign read URLs
	// (one file per key, named after its id); empty: no signed URL.
	URLSigningKeysDir string
}

// Cluster configures cluster mode.
type Cluster struct {
	// Name names the cluster (the StreamCluster): slot n is the Lease
	// <Name>-slot-<n> in Namespace.
	Name      string
	Namespace string
	// ID is the cluster id the operator recorded ("" when none is yet): a
	// broker on an empty data directory then joins the cluster rather than
	// bootstrap a new one.
	ID string
	// PeerListen is the peer port's listen address (Raft, replication,
	// forwarding); PeerService the headless Service whose DNS names the
	// pods: node X is reached at X.<PeerService>.
	PeerListen  string
	PeerService string
	// Peers, when set, lists every node of the cluster with the addresses
	// this broker dials them at, instead of DNS (outside Kubernetes).
	Peers []Peer
	// Kubeconfig reaches the API server holding the Leases ("": the pod's
	// service account).
	Kubeconfig string
	Slots      int
	// LeaseDuration, RenewDeadline and RetryPeriod time the slot Leases.
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
	// Failsafe keeps slots served through an API server outage while
	// every member confirms it cannot reach it either (ownership's
	// package doc); false stops a holder at its renew deadline.
	Failsafe bool
	// ReplicationFactor is how many brokers hold each object file (0: the
	// default, min(3, brokers)).
	ReplicationFactor int
	// RepairDownGrace is how long a broker may be down before its copies
	// are made again elsewhere.
	RepairDownGrace time.Duration
}

// Limits bound a request on the client port: each refusal has its own
// status and code, so a client can tell which bound it met.
type Limits struct {
	MaxHeaderBytes    int64         // request head bytes (431)
	MaxHeaders        int           // header lines (431)
	MaxURLBytes       int64         // request target bytes (414)
	ReadHeaderTimeout time.Duration // to read a request head
	BodyReadTimeout   time.Duration // to read a body, plus 1 s per 4 KiB (408)
	WriteTimeout      time.Duration // to write a response, from the end of its head (0: none)
	IdleTimeout       time.Duration // a kept-alive connection waiting for its next request
	// MaxConcurrentStreams bounds the requests one HTTP/2 connection may
	// have open at once (each long-poll and SSE reader is one).
	MaxConcurrentStreams int
}

// Defaults of Limits.
const (
	DefaultMaxHeaderBytes    = 64 << 10
	DefaultMaxHeaders        = 100
	DefaultMaxURLBytes       = 8 << 10
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultBodyReadTimeout   = 20 * time.Second
	DefaultWriteTimeout      = 2 * time.Minute
	DefaultIdleTimeout       = 2 * time.Minute
	// DefaultMaxConcurrentStreams lets a browser page tail a few hundred
	// streams over one connection (net/http's own default is 250 too).
	DefaultMaxConcurrentStreams = 250
)

// TLS is the broker's certificate and the CA it verifies peers with.
type TLS struct {
	// CertFile and KeyFile are the broker's pair (PEM), re-read when they
	// change.
	CertFile, KeyFile string
	// CAFile, when set, is the CA bundle a peer's certificate must chain
	// to: the peer port requires a client certificate it signed (mutual
	// TLS), and a broker dialling a peer or proxying to another's client
	// port verifies the server against it. Unset: the system's roots
	// verify both.
	CAFile string
}

// Enabled reports whether the broker serves TLS.
func (t TLS) Enabled() bool { return t.CertFile != "" }

// Peer is one node of a static peer list.
type Peer struct {
	Name       string
	PeerAddr   string
	ClientAddr string
}

// Defaults of the cluster settings, as the operator's CRD defaults them:
// a kill -9 of a broker is over in about leaseDuration - retryPeriod/2 plus
// the recovery (3-4 s measured), and the API server takes one write per
// broker per retryPeriod (the member Lease).
const (
	DefaultSlots         = 64
	DefaultLeaseDuration = 4 * time.Second
	DefaultRenewDeadline = 3 * time.Second
	DefaultRetryPeriod   = 1 * time.Second
	MaxSlots             = 4096
)

// ErrUsage marks a configuration refused before anything started.
var ErrUsage = errors.New("usage")

// EnvName is a flag's variable: --data-dir is PICOMQ_DATA_DIR.
func EnvName(flag string) string {
	return "PICOMQ_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// Parse reads args over the environment over the defaults: every flag can
// also be given as its PICOMQ_ variable, and a flag on the command line
// wins over its variable. The error wraps ErrUsage and names the flag (or
// variable) at fault; --help writes the usage to out and returns
// flag.ErrHelp.
func Parse(args []string, getenv func(string) string, out io.Writer) (Settings, error) {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "broker-0"
	}
	s := Settings{
		Listen:            ":4437",
		NodeID:            host,
		MaxBatchBytes:     8 << 20,
		InlineBytes:       core.DefaultInlineBytes,
		PageCacheBytes:    core.DefaultPageCacheBytes,
		SyncLinger:        core.DefaultSyncLinger,
		LongPollTimeout:   time.Second,
		MaxBodyBytes:      16 << 20,
		MaxBatchRecords:   100_000,
		GroupLagMaxSeries: core.DefaultGroupLagMaxSeries,
		ShutdownTimeout:   20 * time.Second,
		Limits: Limits{
			MaxHeaderBytes: DefaultMaxHeaderBytes, MaxHeaders: DefaultMaxHeaders, MaxURLBytes: DefaultMaxURLBytes,
			ReadHeaderTimeout: DefaultReadHeaderTimeout, BodyReadTimeout: DefaultBodyReadTimeout,
			WriteTimeout: DefaultWriteTimeout, IdleTimeout: DefaultIdleTimeout, MaxConcurrentStreams: DefaultMaxConcurrentStreams,
		},
		LogLevel:    slog.LevelInfo,
		LogFormat:   "json",
		MetricsAuth: "open",
		Cluster: Cluster{
			Slots: DefaultSlots, LeaseDuration: DefaultLeaseDuration,
			RenewDeadline: DefaultRenewDeadline, RetryPeriod: DefaultRetryPeriod,
			RepairDownGrace: repair.DefaultDownGrace, Failsafe: true,
		},
	}
	fs := flag.NewFlagSet("broker", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprintf(out, "Usage: broker --data-dir DIR [flags]\n\n"+
			"Runs one PicoMQ broker: the partitioned-log and admin HTTP API, /healthz,\n"+
			"/readyz and /metrics on one port. With --cluster it is a member of a\n"+
			"cluster of brokers (Raft, slot Leases, replication on the peer port).\n"+
			"Every flag may also be set by its environment variable (shown in\n"+
			"brackets); the command line wins.\n\n")
		fs.VisitAll(func(f *flag.Flag) {
			fmt.Fprintf(out, "  --%s [%s]\n    \t%s", f.Name, EnvName(f.Name), f.Usage)
			if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" {
				fmt.Fprintf(out, " (default %s)", f.DefValue)
			}
			fmt.Fprintln(out)
		})
	}
	var policy, peers string
	fs.StringVar(&s.DataDir, "data-dir", "", "directory holding the metadata log and the objects (required; created 0700 if absent)")
	fs.StringVar(&s.Listen, "listen", s.Listen, "address the HTTP API listens on")
	fs.StringVar(&s.NodeID, "node-id", s.NodeID, "this broker's node name (in a cluster its pod name, broker-<ordinal>), the host name unless set")
	fs.DurationVar(&s.FlushLinger, "flush-linger", 0, "how long the group-commit flusher waits for more appends before writing (0: as soon as the previous flush is done)")
	fs.DurationVar(&s.SyncLinger, "sync-linger", s.SyncLinger, "how long a group-commit object that gets its own fdatasync (above --inline-bytes) waits for the appends other writers are sending, so that one fdatasync covers more of them (0: never)")
	fs.Var((*byteSize)(&s.MaxBatchBytes), "max-batch-bytes", "bound of one group-commit object, in bytes (suffixes KiB, MiB, GiB)")
	fs.Var((*byteSize)(&s.InlineBytes), "inline-bytes", "largest group-commit object whose bytes travel in the journal, so that one fsync acknowledges it instead of two; a larger one is first synced as a file of its own (0: never; at most 1MiB)")
	fs.Var((*byteSize)(&s.PageCacheBytes), "page-cache-bytes", "how many bytes of the objects it wrote last the broker leaves in the kernel's page cache; older objects' pages are dropped once on disk, so that new writes reuse them and the page cache does not fill the pod's memory (0: leave them all to the kernel)")
	fs.Var(&s.DiskHeadroom, "disk-headroom", "free space kept on the data volume for deletes, trims, merges and recovery: below it appends and creates are refused with 503 STORAGE_FULL until space returns (auto: 5% of the volume, at least min(64MiB, a quarter of it), at most 5GiB; or bytes with suffixes KiB, MiB, GiB; 0: never refuse)")
	fs.DurationVar(&s.LongPollTimeout, "long-poll-timeout", s.LongPollTimeout, "longest a read with wait= waits for an append (positive)")
	fs.Var((*byteSize)(&s.MaxBodyBytes), "max-body-bytes", "largest request body accepted, in bytes (suffixes KiB, MiB, GiB)")
	fs.IntVar(&s.MaxBatchRecords, "max-batch-records", s.MaxBatchRecords, "most records one append may carry; above it 413 BODY_TOO_LARGE")
	fs.Var((*byteSize)(&s.Limits.MaxHeaderBytes), "max-header-bytes", "largest request head (request line and header lines) accepted, in bytes; above it 431 HEADERS_TOO_LARGE")
	fs.IntVar(&s.Limits.MaxHeaders, "max-headers", s.Limits.MaxHeaders, "most header lines a request may carry; above it 431 HEADERS_TOO_LARGE")
	fs.IntVar(&s.Limits.MaxConcurrentStreams, "max-concurrent-streams", s.Limits.MaxConcurrentStreams, "most requests one HTTP/2 connection may have open at once (each long-poll or SSE reader is one); more wait for one to end")
	fs.Var((*byteSize)(&s.Limits.MaxURLBytes), "max-url-bytes", "longest request target (path and query) accepted, in bytes; above it 414 URI_TOO_LONG")
	fs.DurationVar(&s.Limits.ReadHeaderTimeout, "read-header-timeout", s.Limits.ReadHeaderTimeout, "how long a client may take to send a request head; a slower one has its connection closed")
	fs.DurationVar(&s.Limits.BodyReadTimeout, "body-read-timeout", s.Limits.BodyReadTimeout, "how long a client may take to send a request body, plus 1s per 4KiB of it (per 4KiB received for a chunked one); a slower one gets 408 REQUEST_TIMEOUT and its connection closed")
	fs.DurationVar(&s.Limits.WriteTimeout, "write-timeout", s.Limits.WriteTimeout, "longest a response may take to write, from the end of its request head (0: no bound; raised to 30s above --long-poll-timeout and the longest SSE response, 60s, when below)")
	fs.DurationVar(&s.Limits.IdleTimeout, "idle-timeout", s.Limits.IdleTimeout, "how long a kept-alive connection may wait for its next request before it is closed")
	fs.DurationVar(&s.ShutdownTimeout, "shutdown-timeout", s.ShutdownTimeout, "how long a SIGTERM waits for requests in flight before closing their connections")
	fs.TextVar(&s.LogLevel, "log-level", s.LogLevel, "debug, info, warn or error (debug also shows the metadata log's own logs)")
	fs.StringVar(&s.LogFormat, "log-format", s.LogFormat, "json or text")
	fs.BoolVar(&s.Pprof, "pprof", false, "serve Go's profiler under /debug/pprof/ on the API port (for diagnosing CPU and memory use; off by default since it exposes internals)")
	fs.BoolVar(&s.TestClock, "test-clock", false, "TESTS ONLY: run on a clock that stands still until set with PUT /v1/admin/clock?now=T")
	fs.StringVar(&policy, "default-stream-policy", "", `policy of a stream created without one, as the admin API's JSON ({"partitions":4,"retainFor":"24h"})`)
	fs.StringVar(&s.TerminationLog, "termination-log", "", "file the broker writes a fatal error to before it exits, which Kubernetes shows as the container's termination message (/dev/termination-log in a pod; empty: none)")
	fs.BoolVar(&s.CheckConfig, "check-config", false, "check the configuration, print it and exit: 0 when the broker would start with it, 64 otherwise")
	fs.StringVar(&s.Cluster.Name, "cluster", "", "cluster mode: the cluster's name (slot Leases <cluster>-slot-<n>); empty runs a lone broker")
	fs.StringVar(&s.Cluster.Namespace, "namespace", "", "cluster mode: namespace of the slot Leases")
	fs.StringVar(&s.Cluster.ID, "cluster-id", "", "cluster mode: the cluster id recorded by the operator; with it a broker on an empty data directory joins the cluster instead of bootstrapping one")
	fs.StringVar(&s.Cluster.PeerListen, "peer-listen", "", "cluster mode: address of the peer port (Raft, replication, forwarding)")
	fs.StringVar(&s.Cluster.PeerService, "peer-service", "", "cluster mode: DNS name of the headless Service: node X is reached at X.<peer-service>")
	fs.StringVar(&peers, "peers", "", "cluster mode outside Kubernetes: every node as name=peerAddr|clientAddr, comma-separated, instead of DNS")
	fs.StringVar(&s.Cluster.Kubeconfig, "kubeconfig", "", "cluster mode: kubeconfig of the API server holding the Leases (default: the pod's service account)")
	fs.IntVar(&s.Cluster.Slots, "slots", s.Cluster.Slots, "cluster mode: how many slots the internal streams hash onto (one Lease each)")
	fs.DurationVar(&s.Cluster.LeaseDuration, "lease-duration", s.Cluster.LeaseDuration, "cluster mode: how long after a broker's member Lease last changed the others may take its slots")
	fs.DurationVar(&s.Cluster.RenewDeadline, "lease-renew-deadline", s.Cluster.RenewDeadline, "cluster mode: a holder stops serving its slots this long after its last renewal of its member Lease was sent (below --lease-duration)")
	fs.DurationVar(&s.Cluster.RetryPeriod, "lease-retry-period", s.Cluster.RetryPeriod, "cluster mode: how often the member Lease is renewed and slots are taken (below --lease-renew-deadline)")
	fs.BoolVar(&s.Cluster.Failsafe, "lease-failsafe", s.Cluster.Failsafe, "cluster mode: while the API server is unreachable, keep serving the slots as long as every member confirms over the peer port that it cannot reach it either (false: a holder stops at its renew deadline)")
	fs.IntVar(&s.Cluster.ReplicationFactor, "replication-factor", 0, "cluster mode: how many brokers hold each object (0: min(3, brokers))")
	fs.DurationVar(&s.Cluster.RepairDownGrace, "repair-down-grace", s.Cluster.RepairDownGrace, "cluster mode: how long a broker may be down before the copies it holds are made again on the others (a removed or draining broker's are moved at once)")
	fs.StringVar(&s.TLS.CertFile, "tls-cert-file", "", "certificate (PEM) of this broker: with --tls-key-file the client port serves HTTPS and the peer port TLS; re-read within a second when the file changes")
	fs.StringVar(&s.TLS.KeyFile, "tls-key-file", "", "private key (PEM) of --tls-cert-file")
	fs.StringVar(&s.TLS.CAFile, "tls-ca-file", "", "CA bundle (PEM) peers' certificates chain to: the peer port requires client certificates it signed (mutual TLS), and brokers verify each other against it (unset: the system's roots)")
	fs.StringVar(&s.AuthTokensDir, "auth-tokens-dir", "", `directory of bearer tokens, one file per token named after it, holding "<scopes>:<token>" (scopes: a comma list of read, write, admin); every request but /healthz and /readyz then needs one; files added or removed take effect within seconds`)
	fs.IntVar(&s.GroupLagMaxSeries, "group-lag-max-series", s.GroupLagMaxSeries, "most consumer-group positions (group × partition) this broker exports as picomq_consumer_group_lag and _committed_offset; the rest are counted in picomq_consumer_group_lag_series_dropped_total")
	fs.Var((*commaList)(&s.Access.CORSAllowedOrigins), "cors-allowed-origins", "origins whose pages may call the brokers, a comma list of scheme://host[:port], or * for every one; others are refused 403 ORIGIN_NOT_ALLOWED. Unset: every origin without --auth-tokens-dir, none with it")
	fs.Var((*commaList)(&s.Access.AnonymousReadPrefixes), "anonymous-read-prefixes", "stream-name prefixes anyone may read without a token (with --auth-tokens-dir), a comma list: shop/public/ covers the names under it, shop/feed that one name")
	s.Tier.Region, s.Tier.CacheBytes, s.Tier.LocalRetainFor, s.Tier.UploadStagger, s.Tier.OrphanGrace, s.Tier.Prefetch = "us-east-1", 1<<30, time.Hour, 30*time.Second, time.Hour, 4
	fs.StringVar(&s.Tier.Endpoint, "tier-endpoint", "", "S3-compatible object storage that sealed segments move to, http:// or https://host[:port] (empty: tiering off)")
	fs.StringVar(&s.Tier.Bucket, "tier-bucket", "", "the bucket of --tier-endpoint")
	fs.StringVar(&s.Tier.Region, "tier-region", s.Tier.Region, "the bucket's region")
	fs.BoolVar(&s.Tier.PathStyle, "tier-path-style", false, "address the bucket in the URL's path (most S3-compatible servers), not in its host name")
	fs.StringVar(&s.Tier.Prefix, "tier-prefix", "", "prefix of every key the cluster writes (a folder per cluster, ending in /)")
	fs.StringVar(&s.Tier.CAFile, "tier-ca-file", "", "PEM bundle of the CAs trusted for an https --tier-endpoint (default: the system's)")
	fs.StringVar(&s.Tier.CredentialsDir, "tier-credentials-dir", "", "directory holding the files access-key-id and secret-access-key; read again as they change")
	fs.Var((*byteSize)(&s.Tier.CacheBytes), "tier-cache-bytes", "bound of the local disk cache of tiered segments' chunks (suffixes KiB, MiB, GiB)")
	fs.StringVar(&s.Tier.CacheDir, "tier-cache-dir", "", "directory of that cache (default: tier-cache in --data-dir)")
	fs.DurationVar(&s.Tier.LocalRetainFor, "tier-local-retain-for", s.Tier.LocalRetainFor, "how long an uploaded segment stays on local disks too, from its newest record, for streams whose policy says nothing (0: evicted once uploaded)")
	fs.Var((*byteSize)(&s.Tier.LocalRetainBytes), "tier-local-retain-bytes", "uploaded bytes a partition keeps on local disks too, newest first, for streams whose policy says nothing (0: no bound)")
	fs.DurationVar(&s.Tier.UploadStagger, "tier-upload-stagger", s.Tier.UploadStagger, "how long each replica of a segment waits after the one before it in its replica set before uploading it itself")
	fs.DurationVar(&s.Tier.OrphanGrace, "tier-orphan-grace", s.Tier.OrphanGrace, "how old a key no segment names must be before the metadata leader deletes it")
	fs.Var((*byteSize)(&s.Tier.UploadBytesPerSecond), "tier-upload-bytes-per-second", "bound of this broker's upload rate to object storage (suffixes KiB, MiB; 0: none): uploads then leave the appends their disk, CPU and network, and a backlog waits on the disk")
	fs.IntVar(&s.Tier.Prefetch, "tier-prefetch-chunks", s.Tier.Prefetch, "1 MiB chunks a read of a tiered segment fetches ahead (catch-up readers)")
	fs.StringVar(&s.Access.URLSigningKeysDir, "url-signing-keys-dir", "", "directory of the keys that sign read URLs (POST /v1/sign, picomq sign): one file per key, named after its id, holding at least 32 bytes; every key in it verifies, the last by name signs; re-read as it changes")
	fs.StringVar(&s.MetricsAuth, "metrics-auth", s.MetricsAuth, "open: /metrics needs no token; token: a token of any scope (with --auth-tokens-dir)")

	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		if v := getenv(EnvName(f.Name)); v != "" && envErr == nil {
			if err := f.Value.Set(v); err != nil {
				envErr = fmt.Errorf("%w: %s=%q: %v", ErrUsage, EnvName(f.Name), v, err)
			}
		}
	})
	if envErr != nil {
		return s, envErr
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return s, err
		}
		return s, fmt.Errorf("%w: %v", ErrUsage, err)
	}
	if fs.NArg() > 0 {
		return s, fmt.Errorf("%w: unexpected arguments %q", ErrUsage, fs.Args())
	}
	if policy != "" {
		p, err := parsePolicy(policy)
		if err != nil {
			return s, fmt.Errorf("%w: --default-stream-policy: %v", ErrUsage, err)
		}
		s.DefaultStreamPolicy = &p
	}
	if peers != "" {
		ps, err := parsePeers(peers)
		if err != nil {
			return s, fmt.Errorf("%w: --peers: %v", ErrUsage, err)
		}
		s.Cluster.Peers = ps
	}
	return s, s.check()
}

// check refuses what the broker cannot run with, naming the flag.
func (s Settings) check() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrUsage}, args...)...)
	}
	switch {
	case s.DataDir == "":
		return bad("--data-dir (or PICOMQ_DATA_DIR) is required")
	case s.LogFormat != "json" && s.LogFormat != "text":
		return bad("--log-format %q: want json or text", s.LogFormat)
	case s.FlushLinger < 0:
		return bad("--flush-linger %v: must not be negative", s.FlushLinger)
	case s.SyncLinger < 0:
		return bad("--sync-linger %v: must not be negative", s.SyncLinger)
	case s.ShutdownTimeout < 0:
		return bad("--shutdown-timeout %v: must not be negative", s.ShutdownTimeout)
	case s.LongPollTimeout <= 0:
		return bad("--long-poll-timeout %v: must be positive", s.LongPollTimeout)
	case s.MaxBatchBytes <= 0:
		return bad("--max-batch-bytes %d: byte sizes must be positive", s.MaxBatchBytes)
	case s.MaxBodyBytes <= 0:
		return bad("--max-body-bytes %d: byte sizes must be positive", s.MaxBodyBytes)
	case s.Limits.MaxHeaderBytes < 1<<10 || s.Limits.MaxHeaderBytes > 1<<20:
		return bad("--max-header-bytes %d: want 1KiB to 1MiB", s.Limits.MaxHeaderBytes)
	case s.MaxBatchRecords <= 0:
		return bad("--max-batch-records %d: must be positive", s.MaxBatchRecords)
	case s.GroupLagMaxSeries < 0:
		return bad("--group-lag-max-series %d: must not be negative (0: the default)", s.GroupLagMaxSeries)
	case s.Limits.MaxConcurrentStreams < 1 || s.Limits.MaxConcurrentStreams > 10000:
		return bad("--max-concurrent-streams %d: want 1 to 10000", s.Limits.MaxConcurrentStreams)
	case s.Limits.MaxHeaders < 8:
		return bad("--max-headers %d: want at least 8", s.Limits.MaxHeaders)
	case s.Limits.MaxURLBytes < 256 || s.Limits.MaxURLBytes >= s.Limits.MaxHeaderBytes:
		return bad("--max-url-bytes %d: want at least 256, below --max-header-bytes", s.Limits.MaxURLBytes)
	case s.Limits.ReadHeaderTimeout <= 0 || s.Limits.BodyReadTimeout <= 0 || s.Limits.IdleTimeout <= 0:
		return bad("--read-header-timeout, --body-read-timeout and --idle-timeout must be positive")
	case s.Limits.WriteTimeout < 0:
		return bad("--write-timeout %v: must not be negative (0: no bound)", s.Limits.WriteTimeout)
	case s.InlineBytes < 0 || s.InlineBytes > core.MaxInlineBytes:
		return bad("--inline-bytes %d: want 0 to %d", s.InlineBytes, core.MaxInlineBytes)
	case (s.TLS.CertFile == "") != (s.TLS.KeyFile == ""):
		return bad("--tls-cert-file and --tls-key-file go together")
	case s.TLS.CAFile != "" && s.TLS.CertFile == "":
		return bad("--tls-ca-file needs --tls-cert-file and --tls-key-file")
	case s.MetricsAuth != "open" && s.MetricsAuth != "token":
		return bad("--metrics-auth %q: want open or token", s.MetricsAuth)
	case s.MetricsAuth == "token" && s.AuthTokensDir == "":
		return bad("--metrics-auth token needs --auth-tokens-dir")
	case len(s.Access.AnonymousReadPrefixes) > 0 && s.AuthTokensDir == "":
		return bad("--anonymous-read-prefixes needs --auth-tokens-dir (without it every read is anonymous)")
	case s.Access.URLSigningKeysDir != "" && s.AuthTokensDir == "":
		return bad("--url-signing-keys-dir needs --auth-tokens-dir (without it every read is open and a signed URL grants nothing)")
	}
	if t := s.Tier; t.Endpoint != "" {
		switch {
		case t.Bucket == "":
			return bad("--tier-endpoint needs --tier-bucket")
		case t.CredentialsDir == "":
			return bad("--tier-endpoint needs --tier-credentials-dir")
		case t.Prefix != "" && (!strings.HasSuffix(t.Prefix, "/") || strings.HasPrefix(t.Prefix, "/")):
			return bad("--tier-prefix %q: must end with / and not start with one", t.Prefix)
		case t.CacheBytes < tier.ChunkBytes:
			return bad("--tier-cache-bytes %d: at least one chunk (%d)", t.CacheBytes, tier.ChunkBytes)
		case t.LocalRetainFor < 0 || t.LocalRetainBytes < 0 || t.Prefetch < 0 || t.UploadBytesPerSecond < 0 || t.UploadStagger <= 0 || t.OrphanGrace <= 0:
			return bad("--tier-local-retain-for, --tier-local-retain-bytes, --tier-prefetch-chunks and --tier-upload-bytes-per-second must not be negative, --tier-upload-stagger and --tier-orphan-grace must be positive")
		case t.UploadBytesPerSecond > 0 && t.UploadBytesPerSecond < 64<<10:
			return bad("--tier-upload-bytes-per-second %d: at least 64KiB, or 0 for no bound", t.UploadBytesPerSecond)
		}
	} else if s.Tier.Bucket != "" || s.Tier.CredentialsDir != "" {
		return bad("--tier-bucket and --tier-credentials-dir need --tier-endpoint")
	}
	if _, err := cors.New(s.Access.CORSAllowedOrigins, true); err != nil {
		return bad("--cors-allowed-origins: %v", err)
	}
	for _, p := range s.Access.AnonymousReadPrefixes {
		if err := auth.CheckPrefix(p); err != nil {
			return bad("--anonymous-read-prefixes: %v", err)
		}
	}
	if s.Cluster.Name == "" {
		return nil
	}
	c := s.Cluster
	switch {
	case c.Namespace == "":
		return bad("--namespace is required in cluster mode")
	case c.PeerListen == "":
		return bad("--peer-listen is required in cluster mode")
	case c.PeerService == "" && len(c.Peers) == 0:
		return bad("cluster mode needs --peer-service (DNS) or --peers (a static list)")
	case c.Slots < 1 || c.Slots > MaxSlots:
		return bad("--slots %d: want 1 to %d", c.Slots, MaxSlots)
	case c.RetryPeriod <= 0:
		return bad("--lease-retry-period %v: must be positive", c.RetryPeriod)
	case c.RenewDeadline <= c.RetryPeriod:
		return bad("--lease-renew-deadline %v must be above --lease-retry-period %v", c.RenewDeadline, c.RetryPeriod)
	case c.LeaseDuration <= c.RenewDeadline:
		return bad("--lease-duration %v must be above --lease-renew-deadline %v", c.LeaseDuration, c.RenewDeadline)
	case c.ReplicationFactor < 0:
		return bad("--replication-factor %d: must not be negative (0: the default)", c.ReplicationFactor)
	case c.RepairDownGrace <= 0:
		return bad("--repair-down-grace %v: must be positive", c.RepairDownGrace)
	}
	if _, err := membership.Ordinal(s.NodeID); err != nil {
		return bad("--node-id %q: %v", s.NodeID, err)
	}
	if len(c.Peers) > 0 {
		found := false
		for _, p := range c.Peers {
			found = found || p.Name == s.NodeID
		}
		if !found {
			return bad("--peers does not list this node (--node-id %q)", s.NodeID)
		}
	}
	return nil
}

// parsePolicy reads a policy in the admin API's JSON shape, refusing
// unknown members and values the policy's own check refuses.
func parsePolicy(v string) (stream.PolicyValue, error) {
	dec := json.NewDecoder(strings.NewReader(v))
	dec.DisallowUnknownFields()
	var p wire.Policy
	if err := dec.Decode(&p); err != nil {
		return stream.PolicyValue{}, err
	}
	if dec.More() {
		return stream.PolicyValue{}, errors.New("more than one JSON value")
	}
	pv, err := p.Value()
	if err != nil {
		return stream.PolicyValue{}, err
	}
	if err := pv.Validate(); err != nil {
		return stream.PolicyValue{}, err
	}
	return pv, nil
}

// parsePeers reads name=peerAddr|clientAddr,...
func parsePeers(v string) ([]Peer, error) {
	var out []Peer
	seen := map[string]bool{}
	for _, item := range strings.Split(v, ",") {
		name, addrs, ok := strings.Cut(strings.TrimSpace(item), "=")
		peer, client, ok2 := strings.Cut(addrs, "|")
		if !ok || !ok2 || name == "" || peer == "" || client == "" {
			return nil, fmt.Errorf("%q: want name=peerAddr|clientAddr", item)
		}
		if seen[name] {
			return nil, fmt.Errorf("%q listed twice", name)
		}
		seen[name] = true
		out = append(out, Peer{Name: name, PeerAddr: peer, ClientAddr: client})
	}
	return out, nil
}

// byteSize is a flag of bytes: 1048576, 1024KiB, 1MiB, 1GiB.
type byteSize int64

func (b *byteSize) String() string { return strconv.FormatInt(int64(*b), 10) }

func (b *byteSize) Set(s string) error {
	n, err := bytesize.Parse(s)
	if err != nil {
		return err
	}
	*b = byteSize(n)
	return nil
}

// ZeroMeansNever turns a flag's 0, "never", into the broker Config's
// negative (whose 0 is "the default"): --inline-bytes, --sync-linger,
// --page-cache-bytes.
func ZeroMeansNever[T ~int64](v T) T {
	if v == 0 {
		return -1
	}
	return v
}

// commaList is a flag holding a comma-separated list (empty items
// dropped).
type commaList []string

func (l *commaList) String() string { return strings.Join(*l, ",") }

func (l *commaList) Set(v string) error {
	*l = nil
	for _, item := range strings.Split(v, ",") {
		if item = strings.TrimSpace(item); item != "" {
			*l = append(*l, item)
		}
	}
	return nil
}
