package controllers

import (
	"context"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
	"github.com/picomq/picomq/broker/settings"
	"github.com/picomq/picomq/controllers/resources"
)

// brokerEnv is the environment a broker pod of c starts with: the
// ConfigMap the operator renders (envFrom) under the container's own env
// (which wins, as in a pod), the downward API resolved for pod <c>-0.
func brokerEnv(t *testing.T, c *streamsv1alpha1.StreamCluster) map[string]string {
	t.Helper()
	cm, err := resources.ConfigMap(c)
	if err != nil {
		t.Fatalf("the operator cannot render a spec the CRD accepted: %v", err)
	}
	env := maps.Clone(cm.Data)
	sts := resources.StatefulSet(c, resources.StatefulSetParams{Replicas: c.Spec.EffectiveReplicas(), ConfigHash: resources.ConfigHash(cm)})
	pod := resources.PodName(c, 0)
	for _, e := range sts.Spec.Template.Spec.Containers[0].Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			env[e.Name] = pod
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace":
			env[e.Name] = c.Namespace
		default:
			t.Fatalf("env %s: a source this test cannot resolve", e.Name)
		}
	}
	return env
}

// parseBroker runs the broker's own configuration check (what cmd/broker
// --check-config runs) on env, in process.
func parseBroker(env map[string]string) error {
	_, err := settings.Parse(nil, func(k string) string { return env[k] }, io.Discard)
	return err
}

// admitCluster sends the manifest to the apiserver as a dry run: nil and
// the object as it would be stored (defaults applied), or the refusal.
// It is sent as written (unstructured, as kubectl sends it): an explicit
// zero stays in, where a typed client would drop it.
func admitCluster(t *testing.T, ns, spec string) (*streamsv1alpha1.StreamCluster, error) {
	t.Helper()
	// Through JSON into Unstructured, which keeps integers int64 (a map
	// decoded by yaml.Unmarshal holds float64s, which round 2^62+1).
	raw, err := yaml.YAMLToJSON([]byte("apiVersion: streams.picomq.io/v1alpha1\nkind: StreamCluster\nmetadata: {name: demo}\nspec: " + spec))
	u := &unstructured.Unstructured{}
	if err == nil {
		err = u.UnmarshalJSON(raw)
	}
	if err != nil {
		t.Fatalf("bad test manifest %q: %v", spec, err)
	}
	u.SetNamespace(ns)
	if err := k8s.Create(context.Background(), u, client.DryRunAll); err != nil {
		return nil, err
	}
	c := &streamsv1alpha1.StreamCluster{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, c); err != nil {
		t.Fatal(err)
	}
	return c, nil
}

// TestBrokerAcceptsWhatTheCRDAccepts: every field the operator renders into
// the broker's configuration, at each of its boundaries, and every sample.
// A manifest the apiserver accepts must give brokers a configuration they
// start with (a refused one crash-loops the pods: the issue's
// longPollTimeout: 0s); one past a boundary must be refused by the
// apiserver, and — unless the CRD is deliberately stricter — the broker
// must refuse what the operator would have rendered for it (env), so that
// the CRD's boundary is the broker's, not a guess.
func TestBrokerAcceptsWhatTheCRDAccepts(t *testing.T) {
	needsEnvtest(t)
	ns := newNamespace(t)
	base, err := admitCluster(t, ns, "{}")
	if err != nil {
		t.Fatal(err)
	}
	baseEnv := brokerEnv(t, base)
	if err := parseBroker(baseEnv); err != nil {
		t.Fatalf("the defaults: %v", err)
	}

	valid := []string{
		"{replicas: 1}",
		"{replicas: 100, replicationFactor: 100}",
		"{replicationFactor: 1}",
		"{ownership: {slots: 1}}",
		"{ownership: {slots: 4096}}",
		// The shortest lease whose defaults (lease - lease/4 and lease/4)
		// still keep 0 < retry < renew < lease: 4ns gives 3ns and 1ns.
		"{ownership: {leaseDuration: 4ns}}",
		"{ownership: {leaseDuration: 3ns, renewDeadline: 2ns, retryPeriod: 1ns}}",
		"{ownership: {renewDeadline: 2001ms}}",
		"{ownership: {retryPeriod: 2999ms}}",
		"{ownership: {leaseDuration: 1000000h}}",
		"{ownership: {leaseDuration: 2562047h}}",
		"{broker: {flushLinger: 0s}}",
		"{broker: {flushLinger: 2562047h}}",
		"{broker: {maxBatchBytes: 4096}}",
		"{broker: {maxBatchBytes: 4611686018427387904}}",
		"{broker: {longPollTimeout: 1ns}}",
		"{broker: {longPollTimeout: 2562047h}}",
		"{broker: {defaultStreamPolicy: {}}}",
		"{broker: {defaultStreamPolicy: {partitions: 4096, maxRecordBytes: 1, maxBytes: 1, blockTimeout: 1ns, retainFor: 2562047h, retainBytes: 1, segmentBytes: 1, compactAfter: 1ns}}}",
		"{broker: {defaultStreamPolicy: {maxBytes: 1048576, blockTimeout: 0s}}}",
	}
	for _, spec := range valid {
		c, err := admitCluster(t, ns, spec)
		if err != nil {
			t.Errorf("%s: refused by the CRD, but within every bound the broker has: %v", spec, err)
			continue
		}
		if err := parseBroker(brokerEnv(t, c)); err != nil {
			t.Errorf("%s: the CRD accepts it, the broker refuses to start: %v", spec, err)
		}
	}

	// TLS, tokens and origins: admitted, and the files rendered are the
	// ones the broker takes (it reads them at start, which no check here
	// can).
	for _, spec := range []string{
		"{tls: {secretName: demo-tls}}",
		"{auth: {secretName: demo-tokens}}",
		"{auth: {secretName: demo-tokens, metrics: Token}, tls: {secretName: demo-tls}}",
		// Browser origins: every form the CRD admits.
		`{cors: {allowedOrigins: ["https://app.example.com", "http://localhost:3000", "http://[::1]:8080", "https://10.0.0.7"]}}`,
		`{auth: {secretName: demo-tokens}, cors: {allowedOrigins: ["*"]}}`,
		// Anonymous prefixes and URL signing: every prefix form.
		`{auth: {secretName: demo-tokens, anonymousReadPrefixes: ["public/", "shop/feed", "a.b_c-d/e/", "x"], urlSigning: {secretName: demo-url-keys}}}`,
		// Tiered storage: the smallest (defaults filled in), and every
		// field at a bound.
		`{tieredStorage: {endpoint: "https://s3.example.com:9000", bucket: picomq-prod, credentialsSecret: {name: s3-creds}}}`,
		`{tieredStorage: {endpoint: "http://[::1]:9000/", bucket: a.b-c, region: garage, pathStyle: true, prefix: "tenants/a/", caSecret: {name: s3-ca, key: bundle.pem}, credentialsSecret: {name: s3-creds, accessKeyIdKey: id, secretAccessKeyKey: key}, localRetainFor: 0s, localRetainBytes: 0, cacheBytes: 1Mi}}`,
		`{tieredStorage: {endpoint: "http://minio:9000", bucket: bbb, credentialsSecret: {name: c}, localRetainFor: 2562047h, localRetainBytes: 4611686018427387904, cacheBytes: 1Ti, uploadBytesPerSecond: 64Ki}, broker: {defaultStreamPolicy: {tiering: Disabled, localRetainFor: 1m, localRetainBytes: 1}}}`,
		`{tieredStorage: {endpoint: "http://minio:9000", bucket: bbb, credentialsSecret: {name: c}, uploadBytesPerSecond: 0}}`,
		`{tieredStorage: {endpoint: "http://minio:9000", bucket: bbb, credentialsSecret: {name: c}, uploadBytesPerSecond: 1Gi}}`,
	} {
		c, err := admitCluster(t, ns, spec)
		if err != nil {
			t.Errorf("%s: refused by the CRD: %v", spec, err)
			continue
		}
		if err := parseBroker(brokerEnv(t, c)); err != nil {
			t.Errorf("%s: the CRD accepts it, the broker refuses to start: %v", spec, err)
		}
	}

	invalid := []struct {
		spec string
		// env is what the operator would render for it, over the
		// defaults; nil: the CRD is stricter than the broker (or the
		// operator could not render it at all).
		env map[string]string
	}{
		{"{broker: {longPollTimeout: 0s}}", map[string]string{"PICOMQ_LONG_POLL_TIMEOUT": "0s"}},
		{"{broker: {flushLinger: 2562048h}}", map[string]string{"PICOMQ_FLUSH_LINGER": "2562048h"}},
		{"{broker: {maxBatchBytes: 4611686018427387905}}", map[string]string{"PICOMQ_MAX_BATCH_BYTES": "4611686018427387905"}},
		{"{broker: {maxBatchBytes: 4095}}", nil}, // a batch below a page is refused as a mistake
		{"{ownership: {slots: 0}}", map[string]string{"PICOMQ_SLOTS": "0"}},
		{"{ownership: {slots: 4097}}", map[string]string{"PICOMQ_SLOTS": "4097"}},
		{"{ownership: {leaseDuration: 3ns}}", map[string]string{"PICOMQ_LEASE_DURATION": "3ns", "PICOMQ_LEASE_RENEW_DEADLINE": "3ns", "PICOMQ_LEASE_RETRY_PERIOD": "0s"}},
		{"{ownership: {leaseDuration: 0s}}", map[string]string{"PICOMQ_LEASE_DURATION": "0s", "PICOMQ_LEASE_RENEW_DEADLINE": "0s", "PICOMQ_LEASE_RETRY_PERIOD": "0s"}},
		{"{ownership: {leaseDuration: 2s, renewDeadline: 2s, retryPeriod: 1s}}", map[string]string{"PICOMQ_LEASE_DURATION": "2s", "PICOMQ_LEASE_RENEW_DEADLINE": "2s", "PICOMQ_LEASE_RETRY_PERIOD": "1s"}},
		{"{ownership: {renewDeadline: 5s, retryPeriod: 5s}}", map[string]string{"PICOMQ_LEASE_RENEW_DEADLINE": "5s", "PICOMQ_LEASE_RETRY_PERIOD": "5s"}},
		{"{ownership: {renewDeadline: 5s, retryPeriod: 0s}}", map[string]string{"PICOMQ_LEASE_RENEW_DEADLINE": "5s", "PICOMQ_LEASE_RETRY_PERIOD": "0s"}},
		{"{ownership: {renewDeadline: 1s}}", map[string]string{"PICOMQ_LEASE_RENEW_DEADLINE": "1s", "PICOMQ_LEASE_RETRY_PERIOD": "1s"}},
		{"{ownership: {retryPeriod: 10s}}", map[string]string{"PICOMQ_LEASE_RENEW_DEADLINE": "3s", "PICOMQ_LEASE_RETRY_PERIOD": "10s"}},
		{"{replicationFactor: 0}", nil},              // the broker reads 0 as "the default"
		{"{replicas: 2, replicationFactor: 3}", nil}, // the broker cannot know the replica count
		{"{broker: {defaultStreamPolicy: {blockTimeout: 1s}}}", map[string]string{"PICOMQ_DEFAULT_STREAM_POLICY": `{"partitions":1,"blockTimeout":"1s"}`}},
		{"{broker: {defaultStreamPolicy: {maxBytes: 1048575}}}", map[string]string{"PICOMQ_DEFAULT_STREAM_POLICY": `{"partitions":1,"maxBytes":1048575}`}},
		{"{broker: {defaultStreamPolicy: {maxRecordBytes: 4096, maxBytes: 4095}}}", map[string]string{"PICOMQ_DEFAULT_STREAM_POLICY": `{"partitions":1,"maxRecordBytes":4096,"maxBytes":4095}`}},
		{"{broker: {defaultStreamPolicy: {retainFor: 2562048h}}}", map[string]string{"PICOMQ_DEFAULT_STREAM_POLICY": `{"partitions":1,"retainFor":"2562048h"}`}},
		{"{auth: {secretName: demo-tokens, metrics: open}}", nil}, // the CRD takes Open and Token only
		{`{cors: {allowedOrigins: ["capacitor://localhost"]}}`, map[string]string{"PICOMQ_CORS_ALLOWED_ORIGINS": "capacitor://localhost"}},
		{`{cors: {allowedOrigins: ["https://app.example.com/ui"]}}`, map[string]string{"PICOMQ_CORS_ALLOWED_ORIGINS": "https://app.example.com/ui"}},
		{`{cors: {allowedOrigins: ["*", "https://app.example.com"]}}`, map[string]string{"PICOMQ_CORS_ALLOWED_ORIGINS": "*,https://app.example.com"}},
		// An origin as no page sends it, which the broker would normalize.
		{`{cors: {allowedOrigins: ["https://App.example.com"]}}`, nil},
		{`{cors: {allowedOrigins: ["https://app.example.com/"]}}`, nil},
		// A prefix that is not a stream name.
		{`{auth: {secretName: t, anonymousReadPrefixes: ["shop/../billing/"]}}`, map[string]string{"PICOMQ_AUTH_TOKENS_DIR": "/etc/picomq/auth", "PICOMQ_ANONYMOUS_READ_PREFIXES": "shop/../billing/"}},
		{`{auth: {secretName: t, anonymousReadPrefixes: ["/"]}}`, map[string]string{"PICOMQ_AUTH_TOKENS_DIR": "/etc/picomq/auth", "PICOMQ_ANONYMOUS_READ_PREFIXES": "/"}},
		{`{auth: {secretName: t, anonymousReadPrefixes: ["shop//x"]}}`, map[string]string{"PICOMQ_AUTH_TOKENS_DIR": "/etc/picomq/auth", "PICOMQ_ANONYMOUS_READ_PREFIXES": "shop//x"}},
		{`{auth: {secretName: t, anonymousReadPrefixes: ["shop,billing/"]}}`, nil}, // the broker would read two prefixes
		// Tiered storage past the broker's bounds.
		{`{tieredStorage: {endpoint: "https://s3.example.com", bucket: bbb, credentialsSecret: {name: c}, cacheBytes: 1048575}}`, tierEnv("PICOMQ_TIER_CACHE_BYTES", "1048575")},
		{`{tieredStorage: {endpoint: "https://s3.example.com", bucket: bbb, credentialsSecret: {name: c}, prefix: a}}`, tierEnv("PICOMQ_TIER_PREFIX", "a")},
		{`{tieredStorage: {endpoint: "https://s3.example.com", bucket: bbb, credentialsSecret: {name: c}, prefix: /a/}}`, tierEnv("PICOMQ_TIER_PREFIX", "/a/")},
		{`{tieredStorage: {endpoint: "https://s3.example.com", bucket: bbb, credentialsSecret: {name: c}, localRetainFor: -1s}}`, tierEnv("PICOMQ_TIER_LOCAL_RETAIN_FOR", "-1s")},
		{`{tieredStorage: {endpoint: "https://s3.example.com", bucket: bbb, credentialsSecret: {name: c}, localRetainBytes: -1}}`, tierEnv("PICOMQ_TIER_LOCAL_RETAIN_BYTES", "-1")},
		{`{tieredStorage: {endpoint: "https://s3.example.com", bucket: bbb}}`, nil}, // no credentials: the operator would mount none
		{`{tieredStorage: {endpoint: "https://s3.example.com", bucket: bbb, credentialsSecret: {name: c}, uploadBytesPerSecond: 65535}}`, tierEnv("PICOMQ_TIER_UPLOAD_BYTES_PER_SECOND", "65535")},
	}
	for _, tc := range invalid {
		if _, err := admitCluster(t, ns, tc.spec); err == nil {
			t.Errorf("%s: accepted by the CRD", tc.spec)
		}
		if tc.env == nil {
			continue
		}
		env := maps.Clone(baseEnv)
		maps.Copy(env, tc.env)
		if err := parseBroker(env); err == nil {
			t.Errorf("%s: the broker starts with %v: the CRD's bound is not the broker's", tc.spec, tc.env)
		}
	}

	// The samples: a StreamCluster gives brokers a configuration they start
	// with; a Stream gives the broker a stream configuration it takes.
	files, err := filepath.Glob(filepath.Join("..", "config", "samples", "streams_*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no samples: %v", err)
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(raw, &u.Object); err != nil {
			t.Fatal(err)
		}
		switch u.GetKind() {
		case "StreamCluster":
			c, err := admitCluster(t, ns, specOf(t, raw))
			if err != nil {
				t.Errorf("sample %s refused: %v", filepath.Base(f), err)
				continue
			}
			if err := parseBroker(brokerEnv(t, c)); err != nil {
				t.Errorf("sample %s: the broker refuses to start: %v", filepath.Base(f), err)
			}
		case "Stream":
			s := &streamsv1alpha1.Stream{}
			if err := yaml.Unmarshal(raw, s); err != nil {
				t.Fatal(err)
			}
			s.Namespace = ns
			if err := k8s.Create(context.Background(), s, client.DryRunAll); err != nil {
				t.Errorf("sample %s refused: %v", filepath.Base(f), err)
				continue
			}
			if _, err := desiredConfig(s); err != nil {
				t.Errorf("sample %s: the broker would refuse its configuration: %v", filepath.Base(f), err)
			}
		case "StreamAccess":
			a := &streamsv1alpha1.StreamAccess{}
			if err := yaml.Unmarshal(raw, a); err != nil {
				t.Fatal(err)
			}
			a.Namespace = ns
			if err := k8s.Create(context.Background(), a, client.DryRunAll); err != nil {
				t.Errorf("sample %s refused: %v", filepath.Base(f), err)
				continue
			}
			if _, err := resources.AccessItems(a.Spec.Scopes, a.Spec.Prefixes); err != nil {
				t.Errorf("sample %s: its scope items do not render: %v", filepath.Base(f), err)
			}
		default:
			t.Errorf("sample %s: unexpected kind %s", filepath.Base(f), u.GetKind())
		}
	}
}

// tierEnv is what the operator renders for a minimal tieredStorage, with
// k set to v.
func tierEnv(k, v string) map[string]string {
	env := map[string]string{
		"PICOMQ_TIER_ENDPOINT": "https://s3.example.com", "PICOMQ_TIER_BUCKET": "bbb", "PICOMQ_TIER_REGION": "us-east-1",
		"PICOMQ_TIER_PATH_STYLE": "false", "PICOMQ_TIER_PREFIX": "ns/demo/", "PICOMQ_TIER_CACHE_BYTES": "1073741824",
		"PICOMQ_TIER_LOCAL_RETAIN_FOR": "1h0m0s", "PICOMQ_TIER_LOCAL_RETAIN_BYTES": "0",
		"PICOMQ_TIER_CREDENTIALS_DIR": "/etc/picomq/tier-credentials",
	}
	env[k] = v
	return env
}

// specOf returns a manifest's spec as YAML.
func specOf(t *testing.T, manifest []byte) string {
	t.Helper()
	var m struct {
		Spec map[string]any `json:"spec"`
	}
	if err := yaml.Unmarshal(manifest, &m); err != nil {
		t.Fatal(err)
	}
	raw, err := yaml.Marshal(m.Spec)
	if err != nil {
		t.Fatal(err)
	}
	return "\n  " + strings.ReplaceAll(strings.TrimSpace(string(raw)), "\n", "\n  ")
}
