package v1alpha1_test

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
)

// tierHead is a cluster with the smallest tieredStorage the CRD admits.
const tierHead = clusterHead + `  tieredStorage:
    endpoint: https://s3.example.com:9000
    bucket: picomq-prod
    credentialsSecret: {name: s3-creds}
`

// TestTieredStorageDefaults: what the CRD fills in for a minimal
// tieredStorage, and the fields a full one keeps.
func TestTieredStorageDefaults(t *testing.T) {
	needsEnvtest(t)
	ctx := context.Background()
	u := object(t, tierHead)
	u.SetName("tier-defaults")
	if err := k8s.Create(ctx, u); err != nil {
		t.Fatal(err)
	}
	cleanup(t, u)
	var got streamsv1alpha1.StreamCluster
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(u), &got); err != nil {
		t.Fatal(err)
	}
	ts := got.Spec.TieredStorage
	if ts == nil {
		t.Fatal("tieredStorage dropped")
	}
	if ts.Region != "us-east-1" || ts.PathStyle || ts.Prefix != "" {
		t.Errorf("region %q pathStyle %v prefix %q, want us-east-1, false, empty", ts.Region, ts.PathStyle, ts.Prefix)
	}
	if ts.CredentialsSecret.AccessKeyIDKey != "accessKeyId" || ts.CredentialsSecret.SecretAccessKeyKey != "secretAccessKey" {
		t.Errorf("credentialsSecret = %+v, want the default keys", ts.CredentialsSecret)
	}
	if ts.LocalRetainFor == nil || *ts.LocalRetainFor != "1h" {
		t.Errorf("localRetainFor = %v, want 1h", ts.LocalRetainFor)
	}
	if ts.CacheBytes == nil || ts.CacheBytes.Value() != 1<<30 {
		t.Errorf("cacheBytes = %v, want 1Gi", ts.CacheBytes)
	}
	if ts.CASecret != nil {
		t.Errorf("caSecret = %+v, want none", ts.CASecret)
	}

	full := object(t, clusterHead+`  tieredStorage:
    endpoint: http://minio.storage.svc:9000
    bucket: a.b-c
    region: garage
    pathStyle: true
    prefix: tenants/a/
    caSecret: {name: s3-ca}
    credentialsSecret: {name: s3-creds, accessKeyIdKey: AWS_ACCESS_KEY_ID, secretAccessKeyKey: AWS_SECRET_ACCESS_KEY}
    localRetainFor: 0s
    localRetainBytes: 1073741824
    cacheBytes: 1Mi
`)
	full.SetName("tier-full")
	if err := k8s.Create(ctx, full); err != nil {
		t.Fatal(err)
	}
	cleanup(t, full)
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(full), &got); err != nil {
		t.Fatal(err)
	}
	ts = got.Spec.TieredStorage
	if ts.CASecret == nil || ts.CASecret.Key != "ca.crt" {
		t.Errorf("caSecret = %+v, want key ca.crt by default", ts.CASecret)
	}
	if ts.CacheBytes.Value() != 1<<20 || ts.LocalRetainBytes != 1<<30 || *ts.LocalRetainFor != "0s" || !ts.PathStyle {
		t.Errorf("tieredStorage = %+v", ts)
	}
}

func TestTieredStorageRefused(t *testing.T) {
	needsEnvtest(t)
	tier := func(fields string) string {
		return clusterHead + "  tieredStorage: {" + fields + "}\n"
	}
	const creds = "credentialsSecret: {name: s3-creds}"
	cases := []struct{ name, manifest, want string }{
		{"no endpoint", tier("bucket: b-1, " + creds), "spec.tieredStorage.endpoint: Required value"},
		{"no bucket", tier("endpoint: https://s3.example.com, " + creds), "spec.tieredStorage.bucket: Required value"},
		{"no credentials", tier("endpoint: https://s3.example.com, bucket: b-1"), "spec.tieredStorage.credentialsSecret: Required value"},
		{"credentials without a name", tier("endpoint: https://s3.example.com, bucket: b-1, credentialsSecret: {}"), "spec.tieredStorage.credentialsSecret.name: Required value"},
		{"endpoint without a scheme", tier("endpoint: s3.example.com, bucket: b-1, " + creds), "endpoint is http(s)://host[:port]"},
		{"endpoint of another scheme", tier("endpoint: \"s3://s3.example.com\", bucket: b-1, " + creds), "endpoint is http(s)://host[:port]"},
		{"endpoint with a path", tier("endpoint: \"https://s3.example.com/bucket\", bucket: b-1, " + creds), "endpoint is http(s)://host[:port]"},
		{"endpoint with a query", tier("endpoint: \"https://s3.example.com/?x=1\", bucket: b-1, " + creds), "endpoint is http(s)://host[:port]"},
		{"endpoint with credentials", tier("endpoint: \"https://user:pw@s3.example.com\", bucket: b-1, " + creds), "endpoint is http(s)://host[:port]"},
		{"bucket too short", tier("endpoint: https://s3.example.com, bucket: ab, " + creds), "spec.tieredStorage.bucket"},
		{"bucket too long", tier("endpoint: https://s3.example.com, bucket: " + strings.Repeat("a", 64) + ", " + creds), "spec.tieredStorage.bucket: Too long"},
		{"bucket in capitals", tier("endpoint: https://s3.example.com, bucket: Picomq, " + creds), "spec.tieredStorage.bucket in body should match"},
		{"bucket with an underscore", tier("endpoint: https://s3.example.com, bucket: pico_mq, " + creds), "spec.tieredStorage.bucket in body should match"},
		{"bucket ending with a hyphen", tier("endpoint: https://s3.example.com, bucket: picomq-, " + creds), "spec.tieredStorage.bucket in body should match"},
		{"bucket with two dots", tier("endpoint: https://s3.example.com, bucket: pico..mq, " + creds), "a bucket name has no '..'"},
		{"prefix without a trailing slash", tier("endpoint: https://s3.example.com, bucket: b-1, prefix: tenants/a, " + creds), "prefix ends with '/'"},
		{"prefix with a leading slash", tier("endpoint: https://s3.example.com, bucket: b-1, prefix: /tenants/, " + creds), "prefix ends with '/'"},
		{"negative localRetainFor", tier("endpoint: https://s3.example.com, bucket: b-1, localRetainFor: -1h, " + creds), "must be a non-negative duration"},
		{"negative localRetainBytes", tier("endpoint: https://s3.example.com, bucket: b-1, localRetainBytes: -1, " + creds), "greater than or equal to 0"},
		{"negative cacheBytes", tier("endpoint: https://s3.example.com, bucket: b-1, cacheBytes: -1Gi, " + creds), "cacheBytes must be at least 1Mi"},
		{"cacheBytes below a chunk", tier("endpoint: https://s3.example.com, bucket: b-1, cacheBytes: 1048575, " + creds), "cacheBytes must be at least 1Mi"},
		{"cacheBytes in kibibytes below a chunk", tier("endpoint: https://s3.example.com, bucket: b-1, cacheBytes: 1023Ki, " + creds), "cacheBytes must be at least 1Mi"},
		{"cacheBytes not a quantity", tier("endpoint: https://s3.example.com, bucket: b-1, cacheBytes: lots, " + creds), "spec.tieredStorage.cacheBytes"},
		{"unknown tiering", streamHead + "  tiering: Auto\n", `supported values: "Enabled", "Disabled"`},
		{"negative stream localRetainBytes", streamHead + "  localRetainBytes: -1\n", "spec.localRetainBytes in body should be greater than or equal to 0"},
		{"negative stream localRetainFor", streamHead + "  localRetainFor: -1m\n", "must be a non-negative duration"},
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

// TestTieredStorageTransitions: once set, tieredStorage stays, on the
// same endpoint, bucket and prefix; the rest may change.
func TestTieredStorageTransitions(t *testing.T) {
	needsEnvtest(t)
	ctx := context.Background()
	cases := []struct {
		name   string
		mutate func(u *unstructured.Unstructured)
		want   string // "": accepted
	}{
		{"removed", func(u *unstructured.Unstructured) { unstructured.RemoveNestedField(u.Object, "spec", "tieredStorage") }, "tieredStorage cannot be removed once set"},
		{"bucket changed", func(u *unstructured.Unstructured) { set(u, "picomq-other", "spec", "tieredStorage", "bucket") }, "tieredStorage.bucket cannot change"},
		{"endpoint changed", func(u *unstructured.Unstructured) {
			set(u, "https://s3.other.com", "spec", "tieredStorage", "endpoint")
		}, "tieredStorage.endpoint cannot change"},
		{"prefix set", func(u *unstructured.Unstructured) { set(u, "x/", "spec", "tieredStorage", "prefix") }, "tieredStorage.prefix cannot change"},
		{"credentials, CA, region, cache and local retention changed", func(u *unstructured.Unstructured) {
			set(u, "s3-creds-2", "spec", "tieredStorage", "credentialsSecret", "name")
			set(u, map[string]any{"name": "s3-ca"}, "spec", "tieredStorage", "caSecret")
			set(u, "eu-west-1", "spec", "tieredStorage", "region")
			set(u, "2Gi", "spec", "tieredStorage", "cacheBytes")
			set(u, "10m", "spec", "tieredStorage", "localRetainFor")
			set(u, int64(1<<20), "spec", "tieredStorage", "localRetainBytes")
			set(u, true, "spec", "tieredStorage", "pathStyle")
		}, ""},
		{"an explicit empty prefix", func(u *unstructured.Unstructured) { set(u, "", "spec", "tieredStorage", "prefix") }, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			u := object(t, tierHead)
			u.SetName("tier-" + strings.ToLower(strings.NewReplacer(" ", "-", ",", "").Replace(c.name)))
			if err := k8s.Create(ctx, u); err != nil {
				t.Fatal(err)
			}
			cleanup(t, u)
			c.mutate(u)
			err := k8s.Update(ctx, u)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("update error = %v, want a message containing %q", err, c.want)
			}
		})
	}

	t.Run("added later", func(t *testing.T) {
		u := object(t, clusterHead)
		u.SetName("tier-added")
		if err := k8s.Create(ctx, u); err != nil {
			t.Fatal(err)
		}
		cleanup(t, u)
		set(u, map[string]any{"endpoint": "https://s3.example.com", "bucket": "b-1", "credentialsSecret": map[string]any{"name": "c"}}, "spec", "tieredStorage")
		if err := k8s.Update(ctx, u); err != nil {
			t.Fatalf("adding tieredStorage refused: %v", err)
		}
	})

	t.Run("stream tiering", func(t *testing.T) {
		u := object(t, streamHead+"  tiering: Enabled\n  localRetainFor: 30m\n  localRetainBytes: 1048576\n")
		u.SetName("tier-stream")
		if err := k8s.Create(ctx, u); err != nil {
			t.Fatal(err)
		}
		cleanup(t, u)
		set(u, "Disabled", "spec", "tiering")
		if err := k8s.Update(ctx, u); err != nil {
			t.Fatalf("tiering Enabled -> Disabled refused: %v", err)
		}
	})
}

// kubectl get stream shows the local and tiered sizes as people read
// them (strings such as 1.5Gi: kubectl cannot shorten an integer), in the
// default view, before the wide-only Reason.
func TestStreamColumnsShowSizes(t *testing.T) {
	t.Parallel()
	cols := printerColumns(t, "streams")
	at := map[string]int{}
	for i, c := range cols {
		at[c.Name] = i
	}
	for name, path := range map[string]string{"Local": ".status.localSize", "Tiered": ".status.tieredSize"} {
		i, ok := at[name]
		if !ok {
			t.Fatalf("no %s column: %+v", name, cols)
		}
		if c := cols[i]; c.JSONPath != path || c.Type != "string" || c.Priority != 0 {
			t.Errorf("column %s = %s %s priority %d, want string %s in the default view", name, c.Type, c.JSONPath, c.Priority, path)
		}
	}
	if at["Local"] > at["Age"] || at["Tiered"] != at["Local"]+1 {
		t.Errorf("columns in order %v: want Local, Tiered before Age", at)
	}
}
