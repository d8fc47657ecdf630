package v1alpha1_test

// These tests install the generated CRDs into a real kube-apiserver (envtest)
// and check what users meet first: samples accepted, defaults applied, every
// validation rule refusing a bad manifest with its message, descriptions
// served for `kubectl explain`. Under -short no apiserver starts and they
// skip; the package's unit tests (helpers_test.go) run alone.

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
)

var (
	k8s     client.Client
	restCfg *rest.Config
)

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		fmt.Fprintln(os.Stderr, "KUBEBUILDER_ASSETS is not set: run `make test`, or export KUBEBUILDER_ASSETS=$(hack/envtest-assets.sh); `go test -short` runs the unit tests alone")
		os.Exit(1)
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := env.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting envtest:", err)
		os.Exit(1)
	}
	restCfg = cfg
	scheme := runtime.NewScheme()
	if err := streamsv1alpha1.AddToScheme(scheme); err != nil {
		panic(err)
	}
	k8s, err = client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		panic(err)
	}
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping envtest:", err)
	}
	os.Exit(code)
}

// needsEnvtest skips a test that needs the apiserver under -short, where
// TestMain starts none.
func needsEnvtest(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("envtest: skipped under -short")
	}
}

// object decodes a YAML manifest; namespace default.
func object(t *testing.T, manifest string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(manifest), &u.Object); err != nil {
		t.Fatalf("bad test manifest: %v\n%s", err, manifest)
	}
	if u.GetNamespace() == "" {
		u.SetNamespace("default")
	}
	return u
}

func cleanup(t *testing.T, u *unstructured.Unstructured) {
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), u) })
}

func TestSamplesAreAccepted(t *testing.T) {
	needsEnvtest(t)
	files, err := filepath.Glob(filepath.Join("..", "..", "config", "samples", "streams_*.yaml"))
	if err != nil || len(files) < 3 {
		t.Fatalf("want at least 3 samples, found %v (%v)", files, err)
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		u := object(t, string(raw))
		u.SetNamespace("default")
		if err := k8s.Create(context.Background(), u); err != nil {
			t.Errorf("sample %s refused: %v", filepath.Base(f), err)
			continue
		}
		cleanup(t, u)
	}
}

func TestStreamClusterDefaults(t *testing.T) {
	needsEnvtest(t)
	u := object(t, `
apiVersion: streams.picomq.io/v1alpha1
kind: StreamCluster
metadata: {name: defaults}
`)
	ctx := context.Background()
	if err := k8s.Create(ctx, u); err != nil {
		t.Fatal(err)
	}
	cleanup(t, u)
	var got streamsv1alpha1.StreamCluster
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(u), &got); err != nil {
		t.Fatal(err)
	}
	s := got.Spec
	if s.Replicas != 3 {
		t.Errorf("replicas = %d, want 3", s.Replicas)
	}
	if s.Storage.Size == nil || s.Storage.Size.String() != "10Gi" {
		t.Errorf("storage.size = %v, want 10Gi", s.Storage.Size)
	}
	if s.Ownership.Slots != 64 || s.Ownership.LeaseDuration != "4s" {
		t.Errorf("ownership = %+v, want 64 slots and 4s", s.Ownership)
	}
	if s.Service.Port != 4437 || s.Service.Type != "ClusterIP" {
		t.Errorf("service = %+v, want ClusterIP:4437", s.Service)
	}
	if s.PodDisruptionBudget.MaxUnavailable == nil || *s.PodDisruptionBudget.MaxUnavailable != 1 {
		t.Errorf("podDisruptionBudget.maxUnavailable = %v, want 1", s.PodDisruptionBudget.MaxUnavailable)
	}
	if rf := s.EffectiveReplicationFactor(); rf != 3 {
		t.Errorf("effective replicationFactor = %d, want 3", rf)
	}
}

// TestSecureClusterAccepted: tls, auth and a NetworkPolicy are admitted
// now that the broker serves them, with /metrics open by default.
func TestSecureClusterAccepted(t *testing.T) {
	needsEnvtest(t)
	u := object(t, clusterHead+`  tls: {secretName: demo-tls}
  auth: {secretName: demo-tokens}
  networkPolicy:
    enabled: true
    namespaceSelector: {matchLabels: {team: shop}}
    from: [{ipBlock: {cidr: 10.0.0.0/8}}]
`)
	u.SetName("secure")
	ctx := context.Background()
	if err := k8s.Create(ctx, u); err != nil {
		t.Fatal(err)
	}
	cleanup(t, u)
	var got streamsv1alpha1.StreamCluster
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(u), &got); err != nil {
		t.Fatal(err)
	}
	s := got.Spec
	if s.TLS == nil || s.TLS.SecretName != "demo-tls" || s.Auth == nil || s.Auth.SecretName != "demo-tokens" {
		t.Fatalf("tls %+v, auth %+v", s.TLS, s.Auth)
	}
	if s.Auth.Metrics != streamsv1alpha1.MetricsAuthOpen {
		t.Errorf("auth.metrics = %q, want the default Open", s.Auth.Metrics)
	}
	if np := s.NetworkPolicy; np == nil || !np.Enabled || np.NamespaceSelector.MatchLabels["team"] != "shop" || len(np.From) != 1 {
		t.Errorf("networkPolicy = %+v", np)
	}
}

// The fields of issue 31: a cluster that admits other namespaces and
// browser origins, and a Stream that names a cluster in another namespace.
func TestCrossNamespaceAndCORSAccepted(t *testing.T) {
	needsEnvtest(t)
	ctx := context.Background()
	for i, spec := range []string{
		"  allowedNamespaces: {from: All}\n  cors: {allowedOrigins: [\"*\"]}\n",
		"  allowedNamespaces: {from: Same}\n",
		"  allowedNamespaces: {from: Selector, selector: {matchLabels: {team: shop}}}\n",
		"  allowedNamespaces: {from: Selector, selector: {matchExpressions: [{key: team, operator: In, values: [shop]}, {key: tier, operator: Exists}]}}\n",
		"  cors: {allowedOrigins: [\"https://app.example.com\", \"http://localhost:3000\", \"http://[::1]:8080\", \"https://10.0.0.7\"]}\n",
	} {
		u := object(t, clusterHead+spec)
		u.SetName(fmt.Sprintf("admits-%d", i))
		if err := k8s.Create(ctx, u); err != nil {
			t.Errorf("refused:\n%s: %v", spec, err)
			continue
		}
		cleanup(t, u)
	}

	// Left out, allowedNamespaces defaults to the cluster's own namespace.
	u := object(t, clusterHead+"  replicas: 1\n")
	u.SetName("same")
	if err := k8s.Create(ctx, u); err != nil {
		t.Fatal(err)
	}
	cleanup(t, u)
	var c streamsv1alpha1.StreamCluster
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(u), &c); err != nil {
		t.Fatal(err)
	}
	if c.Spec.AllowedNamespaces.From != streamsv1alpha1.NamespacesFromSame || c.Spec.CORS != nil {
		t.Errorf("defaults: allowedNamespaces %+v, cors %+v", c.Spec.AllowedNamespaces, c.Spec.CORS)
	}

	s := object(t, streamHead)
	s.SetName("elsewhere")
	set(s, "picomq-system", "spec", "clusterRef", "namespace")
	if err := k8s.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	cleanup(t, s)
	// clusterRef stays immutable, namespace included.
	set(s, "other", "spec", "clusterRef", "namespace")
	if err := k8s.Update(ctx, s); err == nil || !strings.Contains(err.Error(), "clusterRef is immutable") {
		t.Errorf("moving clusterRef to another namespace: %v, want clusterRef is immutable", err)
	}
}

func TestStreamDefaults(t *testing.T) {
	needsEnvtest(t)
	u := object(t, `
apiVersion: streams.picomq.io/v1alpha1
kind: Stream
metadata: {name: plain}
spec: {clusterRef: {name: demo}}
`)
	ctx := context.Background()
	if err := k8s.Create(ctx, u); err != nil {
		t.Fatal(err)
	}
	cleanup(t, u)
	var got streamsv1alpha1.Stream
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(u), &got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.ContentType != "application/octet-stream" || got.Spec.Partitions != 1 || got.Spec.DeletionPolicy != "Delete" {
		t.Errorf("defaults = contentType %q, partitions %d, deletionPolicy %q", got.Spec.ContentType, got.Spec.Partitions, got.Spec.DeletionPolicy)
	}
	if got.StreamName() != "plain" {
		t.Errorf("StreamName() = %q, want metadata.name", got.StreamName())
	}
}

const streamHead = `
apiVersion: streams.picomq.io/v1alpha1
kind: Stream
metadata: {name: bad}
spec:
  clusterRef: {name: demo}
`

const clusterHead = `
apiVersion: streams.picomq.io/v1alpha1
kind: StreamCluster
metadata: {name: bad}
spec:
`

// TestInvalidManifestsAreRefused creates manifests that break one rule each
// and expects the apiserver's refusal to carry the rule's message.
func TestInvalidManifestsAreRefused(t *testing.T) {
	needsEnvtest(t)
	cases := []struct{ name, manifest, want string }{
		{"ttl and expiresAt", streamHead + "  ttl: 1h\n  expiresAt: \"2030-01-01T00:00:00Z\"\n", "set ttl or expiresAt, not both"},
		{"blockTimeout without maxBytes", streamHead + "  blockTimeout: 5s\n", "blockTimeout needs maxBytes"},
		{"maxBytes below default maxRecordBytes", streamHead + "  maxBytes: 1000\n", "maxBytes must be 0 (unbounded) or at least maxRecordBytes"},
		{"maxBytes below maxRecordBytes", streamHead + "  maxRecordBytes: 4096\n  maxBytes: 4095\n", "maxBytes must be 0 (unbounded) or at least maxRecordBytes"},
		{"negative retainFor", streamHead + "  retainFor: -1h\n", "must be a non-negative duration"},
		{"malformed compactAfter", streamHead + "  compactAfter: soon\n", "must be a non-negative duration"},
		{"negative blockTimeout", streamHead + "  maxBytes: 2097152\n  blockTimeout: -5s\n", "must be a non-negative duration"},
		{"negative ttl", streamHead + "  ttl: -10m\n", "must be a non-negative duration"},
		{"ttl under a second", streamHead + "  ttl: 500ms\n", "ttl must be 0 (none) or at least 1s"},
		{"dot-dot segment", streamHead + "  name: logs/../etc\n", "name segments '.' and '..' are not allowed"},
		{"dot segment", streamHead + "  name: ./logs\n", "name segments '.' and '..' are not allowed"},
		{"leading slash", streamHead + "  name: /logs\n", "spec.name in body should match"},
		{"trailing slash", streamHead + "  name: logs/\n", "spec.name in body should match"},
		{"empty segment", streamHead + "  name: logs//api\n", "spec.name in body should match"},
		{"bad character", streamHead + "  name: logs/a b\n", "spec.name in body should match"},
		{"name too long", streamHead + "  name: " + strings.Repeat("a", 256) + "\n", "spec.name: Too long"},
		{"zero partitions", streamHead + "  partitions: 0\n", "spec.partitions in body should be greater than or equal to 1"},
		{"negative maxRecordBytes", streamHead + "  maxRecordBytes: -1\n", "spec.maxRecordBytes in body should be greater than or equal to 0"},
		{"negative retainBytes", streamHead + "  retainBytes: -1\n", "spec.retainBytes in body should be greater than or equal to 0"},
		{"unknown deletionPolicy", streamHead + "  deletionPolicy: Forget\n", `supported values: "Delete", "Retain"`},
		{"missing clusterRef", "apiVersion: streams.picomq.io/v1alpha1\nkind: Stream\nmetadata: {name: bad}\nspec: {}\n", "spec.clusterRef: Required value"},
		{"replicationFactor above replicas", clusterHead + "  replicas: 2\n  replicationFactor: 3\n", "replicationFactor cannot exceed replicas"},
		{"replicationFactor above default replicas", clusterHead + "  replicationFactor: 4\n", "replicationFactor cannot exceed replicas"},
		{"zero replicas", clusterHead + "  replicas: 0\n", "spec.replicas in body should be greater than or equal to 1"},
		{"renewDeadline above leaseDuration", clusterHead + "  ownership: {leaseDuration: 10s, renewDeadline: 20s}\n", "renewDeadline must be shorter than leaseDuration"},
		{"retryPeriod above renewDeadline", clusterHead + "  ownership: {renewDeadline: 5s, retryPeriod: 6s}\n", "retryPeriod must be shorter than renewDeadline"},
		{"negative leaseDuration", clusterHead + "  ownership: {leaseDuration: -15s}\n", "must be a non-negative duration"},
		{"default policy blockTimeout without maxBytes", clusterHead + "  broker: {defaultStreamPolicy: {blockTimeout: 1s}}\n", "blockTimeout needs maxBytes"},
		{"unknown service type", clusterHead + "  service: {type: ExternalName}\n", `supported values: "ClusterIP", "NodePort", "LoadBalancer"`},
		{"tls without secret", clusterHead + "  tls: {}\n", "spec.tls.secretName: Required value"},
		{"maxBatchBytes too small", clusterHead + "  broker: {maxBatchBytes: 10}\n", "spec.broker.maxBatchBytes in body should be greater than or equal to 4096"},
		// What the broker refuses to start with (broker/settings; the
		// controllers' TestBrokerAcceptsWhatTheCRDAccepts runs both sides).
		{"maxBatchBytes above 2^62", clusterHead + "  broker: {maxBatchBytes: 4611686018427387905}\n", "maxBatchBytes must be at most 4611686018427387904"},
		{"zero longPollTimeout", clusterHead + "  broker: {longPollTimeout: 0s}\n", "longPollTimeout must be positive"},
		{"duration beyond a Go duration", clusterHead + "  broker: {flushLinger: 2562048h}\n", "at most 2562047h"},
		{"zero retryPeriod", clusterHead + "  ownership: {renewDeadline: 5s, retryPeriod: 0s}\n", "retryPeriod must be positive"},
		{"zero leaseDuration", clusterHead + "  ownership: {leaseDuration: 0s}\n", "with the defaults filled in"},
		{"leaseDuration too short for the default retryPeriod", clusterHead + "  ownership: {leaseDuration: 3ns}\n", "with the defaults filled in"},
		{"renewDeadline at the default retryPeriod", clusterHead + "  ownership: {renewDeadline: 1s}\n", "with the defaults filled in"},
		{"retryPeriod at the default renewDeadline", clusterHead + "  ownership: {retryPeriod: 3s}\n", "with the defaults filled in"},
		{"auth without secret", clusterHead + "  auth: {}\n", "spec.auth.secretName: Required value"},
		{"unknown metrics auth", clusterHead + "  auth: {secretName: demo-tokens, metrics: Basic}\n", `supported values: "Open", "Token"`},
		{"networkPolicy without enabled", clusterHead + "  networkPolicy: {}\n", "spec.networkPolicy.enabled: Required value"},
		{"unknown allowedNamespaces.from", clusterHead + "  allowedNamespaces: {from: Everywhere}\n", `supported values: "Same", "All", "Selector"`},
		{"Selector without selector", clusterHead + "  allowedNamespaces: {from: Selector}\n", "allowedNamespaces.selector is required when from is Selector"},
		{"selector without Selector", clusterHead + "  allowedNamespaces: {selector: {matchLabels: {team: shop}}}\n", "allowedNamespaces.selector is read only when from is Selector"},
		{"selector with All", clusterHead + "  allowedNamespaces: {from: All, selector: {}}\n", "allowedNamespaces.selector is read only when from is Selector"},
		{"selector operator", clusterHead + "  allowedNamespaces: {from: Selector, selector: {matchExpressions: [{key: team, operator: Near}]}}\n", "operator is In, NotIn, Exists or DoesNotExist"},
		{"In without values", clusterHead + "  allowedNamespaces: {from: Selector, selector: {matchExpressions: [{key: team, operator: In}]}}\n", "In and NotIn need values"},
		{"Exists with values", clusterHead + "  allowedNamespaces: {from: Selector, selector: {matchExpressions: [{key: team, operator: Exists, values: [a]}]}}\n", "In and NotIn need values"},
		{"origin with a path", clusterHead + "  cors: {allowedOrigins: [\"https://app.example.com/ui\"]}\n", "an origin is http(s)://host[:port]"},
		{"origin with a trailing slash", clusterHead + "  cors: {allowedOrigins: [\"https://app.example.com/\"]}\n", "an origin is http(s)://host[:port]"},
		{"origin without a scheme", clusterHead + "  cors: {allowedOrigins: [app.example.com]}\n", "an origin is http(s)://host[:port]"},
		{"origin of another scheme", clusterHead + "  cors: {allowedOrigins: [\"capacitor://localhost\"]}\n", "an origin is http(s)://host[:port]"},
		{"origin in capitals", clusterHead + "  cors: {allowedOrigins: [\"https://App.example.com\"]}\n", "an origin is http(s)://host[:port]"},
		{"wildcard subdomain", clusterHead + "  cors: {allowedOrigins: [\"https://*.example.com\"]}\n", "an origin is http(s)://host[:port]"},
		{"two origins in one", clusterHead + "  cors: {allowedOrigins: [\"https://a.example.com,https://b.example.com\"]}\n", "an origin is http(s)://host[:port]"},
		{"star among others", clusterHead + "  cors: {allowedOrigins: [\"*\", \"https://app.example.com\"]}\n", "it must be the only entry"},
		{"origin twice", clusterHead + "  cors: {allowedOrigins: [\"https://app.example.com\", \"https://app.example.com\"]}\n", "Duplicate value"},
		{"clusterRef namespace not a name", streamHead + "  clusterRef: {name: demo, namespace: Picomq_System}\n", "spec.clusterRef.namespace in body should match"},
	}
	ctx := context.Background()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			u := object(t, c.manifest)
			err := k8s.Create(ctx, u)
			if err == nil {
				cleanup(t, u)
				t.Fatalf("accepted:\n%s", c.manifest)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("refused with %q, want a message containing %q", err, c.want)
			}
		})
	}
}

// TestTransitionRulesRefuseChanges creates a valid object, then applies one
// forbidden change each and expects the rule's message.
func TestTransitionRulesRefuseChanges(t *testing.T) {
	needsEnvtest(t)
	stream := `
apiVersion: streams.picomq.io/v1alpha1
kind: Stream
metadata: {name: change}
spec:
  clusterRef: {name: demo}
  name: shop/orders
  contentType: application/json
  partitions: 4
`
	cases := []struct {
		name   string
		mutate func(u *unstructured.Unstructured)
		want   string
	}{
		{"partitions decrease", func(u *unstructured.Unstructured) { set(u, int64(3), "spec", "partitions") }, "partitions may only grow"},
		{"contentType change", func(u *unstructured.Unstructured) { set(u, "text/plain", "spec", "contentType") }, "contentType is immutable"},
		{"clusterRef change", func(u *unstructured.Unstructured) { set(u, "other", "spec", "clusterRef", "name") }, "clusterRef is immutable"},
		{"name change", func(u *unstructured.Unstructured) { set(u, "shop/orders2", "spec", "name") }, "name is immutable"},
		{"name removed", func(u *unstructured.Unstructured) { unstructured.RemoveNestedField(u.Object, "spec", "name") }, "name cannot be added or removed"},
	}
	ctx := context.Background()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			u := object(t, stream)
			u.SetName("change-" + strings.ToLower(strings.ReplaceAll(c.name, " ", "-")))
			if err := k8s.Create(ctx, u); err != nil {
				t.Fatal(err)
			}
			cleanup(t, u)
			c.mutate(u)
			err := k8s.Update(ctx, u)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("update error = %v, want a message containing %q", err, c.want)
			}
		})
	}

	t.Run("partitions grow", func(t *testing.T) {
		u := object(t, stream)
		u.SetName("grow")
		if err := k8s.Create(ctx, u); err != nil {
			t.Fatal(err)
		}
		cleanup(t, u)
		set(u, int64(8), "spec", "partitions")
		set(u, "72h", "spec", "retainFor")
		if err := k8s.Update(ctx, u); err != nil {
			t.Fatalf("growing partitions and setting retention refused: %v", err)
		}
	})

	t.Run("slots immutable", func(t *testing.T) {
		u := object(t, clusterHead+"  ownership: {slots: 32}\n")
		u.SetName("slots")
		if err := k8s.Create(ctx, u); err != nil {
			t.Fatal(err)
		}
		cleanup(t, u)
		set(u, int64(64), "spec", "ownership", "slots")
		if err := k8s.Update(ctx, u); err == nil || !strings.Contains(err.Error(), "ownership.slots is immutable") {
			t.Fatalf("update error = %v, want slots immutable", err)
		}
	})
}

func set(u *unstructured.Unstructured, v any, path ...string) {
	if err := unstructured.SetNestedField(u.Object, v, path...); err != nil {
		panic(err)
	}
}

// TestExplainDescriptions reads the OpenAPI v3 document kubectl explain uses
// and checks that field documentation reached it.
func TestExplainDescriptions(t *testing.T) {
	needsEnvtest(t)
	hc, err := rest.HTTPClientFor(restCfg)
	if err != nil {
		t.Fatal(err)
	}
	// The apiserver publishes a CRD's schema shortly after it is established.
	var raw []byte
	var status int
	if err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		resp, err := hc.Get(strings.TrimRight(restCfg.Host, "/") + "/openapi/v3/apis/streams.picomq.io/v1alpha1")
		if err != nil {
			return false, err
		}
		raw, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		status = resp.StatusCode
		return err == nil && status == 200, nil
	}); err != nil {
		t.Fatalf("GET openapi v3 for streams.picomq.io/v1alpha1: %d %v", status, err)
	}
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]json.RawMessage `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	cluster, ok := doc.Components.Schemas["io.picomq.streams.v1alpha1.StreamCluster"]
	if !ok {
		t.Fatalf("no StreamCluster schema in the OpenAPI document")
	}
	var spec struct {
		Description string `json:"description"`
		Properties  map[string]struct {
			Description string `json:"description"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(cluster.Properties["spec"], &spec); err != nil {
		t.Fatal(err)
	}
	for field, want := range map[string]string{
		"replicas":          "how many broker pods run",
		"replicationFactor": "Defaults to min(3, replicas)",
		"paused":            "stops the operator from changing any child object",
	} {
		if d := spec.Properties[field].Description; !strings.Contains(d, want) {
			t.Errorf("spec.%s description = %q, want it to contain %q", field, d, want)
		}
	}
}
