package settings

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"log/slog"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/picomq/picomq/broker/core"
	"github.com/picomq/picomq/broker/repair"
	"github.com/picomq/picomq/broker/stream"
)

func env(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

func TestParseConfig(t *testing.T) {
	host, _ := os.Hostname()
	c, err := Parse([]string{"--data-dir", "/d"}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defCluster := Cluster{Slots: DefaultSlots, LeaseDuration: DefaultLeaseDuration, RenewDeadline: DefaultRenewDeadline, RetryPeriod: DefaultRetryPeriod,
		RepairDownGrace: repair.DefaultDownGrace, Failsafe: true}
	defLimits := Limits{MaxHeaderBytes: 64 << 10, MaxHeaders: 100, MaxURLBytes: 8 << 10, ReadHeaderTimeout: 10 * time.Second,
		BodyReadTimeout: 20 * time.Second, WriteTimeout: 2 * time.Minute, IdleTimeout: 2 * time.Minute, MaxConcurrentStreams: 250}
	want := Settings{DataDir: "/d", Listen: ":4437", NodeID: host, MaxBatchBytes: 8 << 20, InlineBytes: core.DefaultInlineBytes, PageCacheBytes: core.DefaultPageCacheBytes, SyncLinger: core.DefaultSyncLinger, LongPollTimeout: time.Second,
		MaxBodyBytes: 16 << 20, MaxBatchRecords: 100_000, GroupLagMaxSeries: core.DefaultGroupLagMaxSeries, ShutdownTimeout: 20 * time.Second, LogLevel: slog.LevelInfo, LogFormat: "json", MetricsAuth: "open", Cluster: defCluster, Limits: defLimits,
		Tier: Tier{Region: "us-east-1", CacheBytes: 1 << 30, LocalRetainFor: time.Hour, UploadStagger: 30 * time.Second, OrphanGrace: time.Hour, Prefetch: 4}}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("defaults = %+v, want %+v", c, want)
	}

	// Every setting from the environment.
	c, err = Parse(nil, env(map[string]string{
		"PICOMQ_DATA_DIR": "/env", "PICOMQ_LISTEN": "127.0.0.1:9000", "PICOMQ_NODE_ID": "b-1",
		"PICOMQ_FLUSH_LINGER": "2ms", "PICOMQ_MAX_BATCH_BYTES": "4MiB", "PICOMQ_LONG_POLL_TIMEOUT": "30s",
		"PICOMQ_LOG_LEVEL": "debug", "PICOMQ_LOG_FORMAT": "text", "PICOMQ_MAX_BODY_BYTES": "1024",
		"PICOMQ_INLINE_BYTES": "0", "PICOMQ_SYNC_LINGER": "0", "PICOMQ_PAGE_CACHE_BYTES": "64MiB",
		"PICOMQ_MAX_HEADER_BYTES": "32KiB", "PICOMQ_MAX_BATCH_RECORDS": "500", "PICOMQ_MAX_HEADERS": "50", "PICOMQ_MAX_URL_BYTES": "4KiB",
		"PICOMQ_READ_HEADER_TIMEOUT": "5s", "PICOMQ_BODY_READ_TIMEOUT": "30s", "PICOMQ_WRITE_TIMEOUT": "0s", "PICOMQ_IDLE_TIMEOUT": "1m",
		"PICOMQ_TLS_CERT_FILE": "/etc/picomq/tls/tls.crt", "PICOMQ_TLS_KEY_FILE": "/etc/picomq/tls/tls.key",
		"PICOMQ_TLS_CA_FILE": "/etc/picomq/tls/ca.crt", "PICOMQ_AUTH_TOKENS_DIR": "/etc/picomq/auth", "PICOMQ_METRICS_AUTH": "token",
		// The operator's names for spec.tieredStorage.
		"PICOMQ_TIER_ENDPOINT": "https://s3.example.com:9000", "PICOMQ_TIER_BUCKET": "picomq", "PICOMQ_TIER_REGION": "eu-west-1",
		"PICOMQ_TIER_PATH_STYLE": "true", "PICOMQ_TIER_PREFIX": "ns/demo/", "PICOMQ_TIER_CA_FILE": "/etc/picomq/tier-ca/ca.crt",
		"PICOMQ_TIER_CREDENTIALS_DIR": "/etc/picomq/tier-credentials", "PICOMQ_TIER_CACHE_BYTES": "2147483648",
		"PICOMQ_TIER_LOCAL_RETAIN_FOR": "2h", "PICOMQ_TIER_LOCAL_RETAIN_BYTES": "1073741824",
	}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want = Settings{DataDir: "/env", Listen: "127.0.0.1:9000", NodeID: "b-1", FlushLinger: 2 * time.Millisecond, MaxBatchBytes: 4 << 20,
		PageCacheBytes: 64 << 20, LongPollTimeout: 30 * time.Second, MaxBodyBytes: 1024, MaxBatchRecords: 500, ShutdownTimeout: 20 * time.Second, LogLevel: slog.LevelDebug, LogFormat: "text", Cluster: defCluster,
		Limits:        Limits{MaxHeaderBytes: 32 << 10, MaxHeaders: 50, MaxURLBytes: 4 << 10, ReadHeaderTimeout: 5 * time.Second, BodyReadTimeout: 30 * time.Second, IdleTimeout: time.Minute, MaxConcurrentStreams: 250},
		TLS:           TLS{CertFile: "/etc/picomq/tls/tls.crt", KeyFile: "/etc/picomq/tls/tls.key", CAFile: "/etc/picomq/tls/ca.crt"},
		AuthTokensDir: "/etc/picomq/auth", MetricsAuth: "token", GroupLagMaxSeries: core.DefaultGroupLagMaxSeries,
		Tier: Tier{Endpoint: "https://s3.example.com:9000", Bucket: "picomq", Region: "eu-west-1", PathStyle: true, Prefix: "ns/demo/",
			CAFile: "/etc/picomq/tier-ca/ca.crt", CredentialsDir: "/etc/picomq/tier-credentials", CacheBytes: 2 << 30,
			LocalRetainFor: 2 * time.Hour, LocalRetainBytes: 1 << 30, UploadStagger: 30 * time.Second, OrphanGrace: time.Hour, Prefetch: 4}}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("from env = %+v, want %+v", c, want)
	}

	// A flag wins over its variable.
	c, err = Parse([]string{"--listen", ":1", "--log-level", "warn", "--max-batch-bytes", "1GiB"},
		env(map[string]string{"PICOMQ_DATA_DIR": "/env", "PICOMQ_LISTEN": ":2", "PICOMQ_LOG_LEVEL": "error"}), io.Discard)
	if err != nil || c.Listen != ":1" || c.LogLevel != slog.LevelWarn || c.DataDir != "/env" || c.MaxBatchBytes != 1<<30 {
		t.Fatalf("flags over env = %+v, %v", c, err)
	}

	for _, bad := range []struct {
		args []string
		env  map[string]string
		says string
	}{
		{nil, nil, "--data-dir"},
		{[]string{"--data-dir", "/d", "extra"}, nil, "unexpected"},
		{[]string{"--data-dir", "/d", "--flush-linger", "soon"}, nil, "flush-linger"},
		{[]string{"--data-dir", "/d"}, map[string]string{"PICOMQ_FLUSH_LINGER": "soon"}, "PICOMQ_FLUSH_LINGER"},
		{[]string{"--data-dir", "/d"}, map[string]string{"PICOMQ_MAX_BATCH_BYTES": "8MB"}, "PICOMQ_MAX_BATCH_BYTES"},
		{[]string{"--data-dir", "/d", "--log-level", "chatty"}, nil, "log-level"},
		{[]string{"--data-dir", "/d", "--inline-bytes", "2MiB"}, nil, "--inline-bytes"},
		{[]string{"--data-dir", "/d", "--log-format", "xml"}, nil, "log-format"},
		{[]string{"--data-dir", "/d", "--long-poll-timeout", "0s"}, nil, "long-poll-timeout"},
		{[]string{"--data-dir", "/d", "--sync-linger", "-1ms"}, nil, "negative"},
		{[]string{"--data-dir", "/d", "--max-body-bytes", "0"}, nil, "byte sizes"},
		{[]string{"--data-dir", "/d", "--default-stream-policy", `{"partitions":-1}`}, nil, "--default-stream-policy"},
		{[]string{"--data-dir", "/d", "--default-stream-policy", `{"partitions":2,"colour":"red"}`}, nil, "--default-stream-policy"},
		{[]string{"--data-dir", "/d", "--tls-cert-file", "/c"}, nil, "go together"},
		{[]string{"--data-dir", "/d"}, map[string]string{"PICOMQ_TLS_KEY_FILE": "/k"}, "go together"},
		{[]string{"--data-dir", "/d", "--tls-ca-file", "/ca"}, nil, "--tls-ca-file needs"},
		{[]string{"--data-dir", "/d", "--metrics-auth", "closed"}, nil, "--metrics-auth"},
		{[]string{"--data-dir", "/d", "--metrics-auth", "token"}, nil, "needs --auth-tokens-dir"},
		{[]string{"--nope"}, nil, "nope"},
		{[]string{"--data-dir", "/d", "--max-header-bytes", "512"}, nil, "--max-header-bytes"},
		{[]string{"--data-dir", "/d", "--max-headers", "0"}, nil, "--max-headers"},
		{[]string{"--data-dir", "/d", "--max-batch-records", "0"}, nil, "--max-batch-records"},
		{[]string{"--data-dir", "/d", "--max-url-bytes", "64KiB"}, nil, "--max-url-bytes"},
		{[]string{"--data-dir", "/d", "--read-header-timeout", "0s"}, nil, "--read-header-timeout"},
		{[]string{"--data-dir", "/d", "--idle-timeout", "-1s"}, nil, "--idle-timeout"},
		{[]string{"--data-dir", "/d", "--write-timeout", "-1s"}, nil, "--write-timeout"},
	} {
		_, err := Parse(bad.args, env(bad.env), io.Discard)
		if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), bad.says) {
			t.Errorf("Parse(%q, %v) = %v, want a usage error naming %s", bad.args, bad.env, err, bad.says)
		}
	}
	var help bytes.Buffer
	if _, err := Parse([]string{"--help"}, env(nil), &help); !errors.Is(err, flag.ErrHelp) || !strings.Contains(help.String(), "PICOMQ_DATA_DIR") {
		t.Fatalf("--help = %v:\n%s", err, help.String())
	}
}

// cluster is a valid cluster-mode environment, as the operator renders it.
func cluster(extra map[string]string) map[string]string {
	e := map[string]string{
		"PICOMQ_DATA_DIR": "/var/lib/picomq/data", "PICOMQ_NODE_ID": "demo-1", "PICOMQ_CLUSTER": "demo",
		"PICOMQ_NAMESPACE": "ns", "PICOMQ_PEER_LISTEN": ":4438", "PICOMQ_PEER_SERVICE": "demo-headless.ns.svc",
		"PICOMQ_SLOTS": "64", "PICOMQ_LEASE_DURATION": "15s", "PICOMQ_LEASE_RENEW_DEADLINE": "10s", "PICOMQ_LEASE_RETRY_PERIOD": "2s",
	}
	for k, v := range extra {
		e[k] = v
	}
	return e
}

func TestParseClusterSettings(t *testing.T) {
	t.Parallel()
	s, err := Parse(nil, env(cluster(map[string]string{"PICOMQ_REPLICATION_FACTOR": "3", "PICOMQ_CLUSTER_ID": "c-1",
		"PICOMQ_DEFAULT_STREAM_POLICY": `{"partitions":4,"retainFor":"24h"}`, "PICOMQ_REPAIR_DOWN_GRACE": "2m"})), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := Cluster{Name: "demo", Namespace: "ns", ID: "c-1", PeerListen: ":4438", PeerService: "demo-headless.ns.svc",
		Slots: 64, LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second, ReplicationFactor: 3,
		RepairDownGrace: 2 * time.Minute, Failsafe: true}
	if !reflect.DeepEqual(s.Cluster, want) {
		t.Fatalf("cluster = %+v, want %+v", s.Cluster, want)
	}
	off, err := Parse(nil, env(cluster(map[string]string{"PICOMQ_LEASE_FAILSAFE": "false"})), io.Discard)
	if err != nil || off.Cluster.Failsafe {
		t.Fatalf("PICOMQ_LEASE_FAILSAFE=false: failsafe %v, err %v", off.Cluster.Failsafe, err)
	}
	if p := s.DefaultStreamPolicy; p == nil || *p != (stream.PolicyValue{Partitions: 4, RetainFor: 24 * time.Hour}) {
		t.Fatalf("default policy %+v", p)
	}
	s, err = Parse([]string{"--peers", "broker-0=127.0.0.1:7000|127.0.0.1:8000,demo-1=127.0.0.1:7001|127.0.0.1:8001"}, env(cluster(map[string]string{"PICOMQ_PEER_SERVICE": ""})), io.Discard)
	if err != nil || len(s.Cluster.Peers) != 2 || s.Cluster.Peers[1] != (Peer{Name: "demo-1", PeerAddr: "127.0.0.1:7001", ClientAddr: "127.0.0.1:8001"}) {
		t.Fatalf("static peers %+v, %v", s.Cluster.Peers, err)
	}
	for _, bad := range []struct {
		env  map[string]string
		says string
	}{
		{map[string]string{"PICOMQ_NAMESPACE": ""}, "--namespace"},
		{map[string]string{"PICOMQ_PEER_LISTEN": ""}, "--peer-listen"},
		{map[string]string{"PICOMQ_PEER_SERVICE": ""}, "--peer-service"},
		{map[string]string{"PICOMQ_SLOTS": "0"}, "--slots"},
		{map[string]string{"PICOMQ_SLOTS": "5000"}, "--slots"},
		{map[string]string{"PICOMQ_LEASE_RENEW_DEADLINE": "15s"}, "--lease-duration"},
		{map[string]string{"PICOMQ_LEASE_RETRY_PERIOD": "10s"}, "--lease-renew-deadline"},
		{map[string]string{"PICOMQ_LEASE_RETRY_PERIOD": "0s"}, "--lease-retry-period"},
		{map[string]string{"PICOMQ_REPLICATION_FACTOR": "-1"}, "--replication-factor"},
		{map[string]string{"PICOMQ_REPAIR_DOWN_GRACE": "0s"}, "--repair-down-grace"},
		{map[string]string{"PICOMQ_NODE_ID": "demo"}, "--node-id"},
		{map[string]string{"PICOMQ_PEERS": "demo-0=a|b"}, "does not list this node"},
		{map[string]string{"PICOMQ_PEERS": "demo-1=a"}, "--peers"},
	} {
		_, err := Parse(nil, env(cluster(bad.env)), io.Discard)
		if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), bad.says) {
			t.Errorf("%v: %v, want a usage error naming %s", bad.env, err, bad.says)
		}
	}
}

// TestZeroMeansNever: a flag's 0 turns inline commits or the sync linger
// off, which the broker's Config spells negative (its 0 is the default).
func TestZeroMeansNever(t *testing.T) {
	if n := ZeroMeansNever(int64(0)); n >= 0 {
		t.Fatalf("ZeroMeansNever(0) = %d", n)
	}
	if n := ZeroMeansNever(int64(4096)); n != 4096 {
		t.Fatalf("ZeroMeansNever(4096) = %d", n)
	}
	if d := ZeroMeansNever(time.Duration(0)); d >= 0 {
		t.Fatalf("ZeroMeansNever(0s) = %v", d)
	}
	if d := ZeroMeansNever(time.Millisecond); d != time.Millisecond {
		t.Fatalf("ZeroMeansNever(1ms) = %v", d)
	}
}
