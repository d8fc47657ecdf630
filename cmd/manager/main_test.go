package main

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/picomq/picomq/controllers"
	"github.com/picomq/picomq/controllers/resources"
)

func noEnv(string) string { return "" }

func TestParseFlagsDefaults(t *testing.T) {
	t.Parallel()
	c, err := parseFlags(nil, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.MetricsAddr != ":8080" || c.ProbeAddr != ":8081" || c.LeaderElect || len(c.Namespaces) != 0 || !c.ManageCRDs {
		t.Errorf("defaults %+v", c)
	}
	if c.ResyncPeriod != controllers.DefaultResyncPeriod || c.StreamClusterWorkers != 1 || c.StreamWorkers != 4 || c.BrokerImage != resources.DefaultImage {
		t.Errorf("controller defaults %+v", c)
	}
}

func TestParseFlags(t *testing.T) {
	t.Parallel()
	env := func(k string) string {
		if k == "PICOMQ_BROKER_IMAGE" {
			return "reg.local/picomq:env"
		}
		return ""
	}
	c, err := parseFlags([]string{
		"--leader-elect", "--namespaces", " a, b ,,c", "--resync-period=2m",
		"--streamcluster-concurrency=2", "--stream-concurrency=16", "--zap-log-level=debug",
		"--leader-election-namespace=picomq-system",
	}, env, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !c.LeaderElect || !slices.Equal(c.Namespaces, []string{"a", "b", "c"}) || c.ResyncPeriod != 2*time.Minute ||
		c.StreamClusterWorkers != 2 || c.StreamWorkers != 16 || c.LeaderElectionNamespace != "picomq-system" {
		t.Errorf("parsed %+v", c)
	}
	if c.BrokerImage != "reg.local/picomq:env" {
		t.Errorf("broker image %q, want PICOMQ_BROKER_IMAGE's", c.BrokerImage)
	}
	if c, _ := parseFlags([]string{"--manage-crds=false"}, env, io.Discard); c.ManageCRDs {
		t.Error("--manage-crds=false left ManageCRDs on")
	}
	if c, _ := parseFlags([]string{"--broker-image=cli:1"}, env, io.Discard); c.BrokerImage != "cli:1" {
		t.Errorf("the flag must win over the variable: %q", c.BrokerImage)
	}
}

func TestParseFlagsRefusals(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--stream-concurrency=0"},
		{"--resync-period=10ms"},
		{"--broker-image="},
		{"extra"},
		{"--no-such-flag"},
	} {
		if _, err := parseFlags(args, noEnv, io.Discard); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
	var help strings.Builder
	if _, err := parseFlags([]string{"--help"}, noEnv, &help); err == nil || !strings.Contains(help.String(), "resync-period") {
		t.Errorf("--help: %v\n%s", err, help.String())
	}
}

// --kubeconfig is a flag of the manager, listed by --help, and the
// manager's REST config comes from the file it names.
func TestKubeconfigFlag(t *testing.T) {
	t.Parallel()
	kubeconfig := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://apiserver.example:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := parseFlags([]string{"--kubeconfig", kubeconfig}, noEnv, io.Discard)
	if err != nil {
		t.Fatalf("--kubeconfig refused: %v", err)
	}
	cfg, err := c.restConfig()
	if err != nil || cfg.Host != "https://apiserver.example:6443" {
		t.Errorf("restConfig after --kubeconfig: %v, %v; want the file's server", cfg, err)
	}
	c.Kubeconfig = filepath.Join(t.TempDir(), "missing")
	if _, err := c.restConfig(); err == nil {
		t.Error("restConfig with a --kubeconfig that does not exist: no error")
	}
	var help strings.Builder
	if _, err := parseFlags([]string{"--help"}, noEnv, &help); !errors.Is(err, flag.ErrHelp) || !strings.Contains(help.String(), "-kubeconfig") {
		t.Errorf("--help does not list --kubeconfig:\n%s", help.String())
	}
}

// Logs carry durations as people write them, not as nanoseconds.
func TestLogsEncodeDurationsAsStrings(t *testing.T) {
	t.Parallel()
	c, err := parseFlags(nil, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	newLogger(c.Zap, &out).Info("resync", "timeout", 20*time.Second)
	if !strings.Contains(out.String(), `"timeout":"20s"`) {
		t.Errorf("log line %q, want \"timeout\":\"20s\"", out.String())
	}
}

func TestCacheOptions(t *testing.T) {
	t.Parallel()
	all := controllers.CacheOptions(nil)
	if all.DefaultNamespaces != nil || len(all.ByObject) != 9 {
		t.Errorf("all namespaces: %+v", all)
	}
	for obj, by := range all.ByObject {
		if by.Label == nil || by.Label.String() != resources.LabelManagedBy+"="+resources.ManagedByValue {
			t.Errorf("%T cached without the managed-by selector", obj)
		}
	}
	some := controllers.CacheOptions([]string{"a", "b"})
	if len(some.DefaultNamespaces) != 2 {
		t.Errorf("namespaces: %+v", some.DefaultNamespaces)
	}
	if newScheme().IsGroupRegistered("streams.picomq.io") != true {
		t.Errorf("scheme lacks the PicoMQ types")
	}
}
