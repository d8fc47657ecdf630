package resources

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
	"github.com/picomq/picomq/broker/httpapi/wire"
	"github.com/picomq/picomq/broker/stream"
)

// tierCluster is cluster() with the smallest tieredStorage, defaults filled
// in as the apiserver does.
func tierCluster() *streamsv1alpha1.StreamCluster {
	c := cluster()
	cache := resource.MustParse("1Gi")
	c.Spec.TieredStorage = &streamsv1alpha1.TieredStorageSpec{
		Endpoint: "https://s3.example.com:9000",
		Bucket:   "picomq-prod",
		Region:   "us-east-1",
		CredentialsSecret: streamsv1alpha1.TierCredentials{
			Name: "s3-creds", AccessKeyIDKey: "accessKeyId", SecretAccessKeyKey: "secretAccessKey",
		},
		LocalRetainFor: ptr.To[streamsv1alpha1.Duration]("1h"),
		CacheBytes:     &cache,
	}
	return c
}

func TestConfigMapTieredStorage(t *testing.T) {
	t.Parallel()
	cm, err := ConfigMap(cluster())
	if err != nil {
		t.Fatal(err)
	}
	for k := range cm.Data {
		if strings.HasPrefix(k, "PICOMQ_TIER_") {
			t.Errorf("%s rendered without spec.tieredStorage", k)
		}
	}

	cm, err = ConfigMap(tierCluster())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"PICOMQ_TIER_ENDPOINT":           "https://s3.example.com:9000",
		"PICOMQ_TIER_BUCKET":             "picomq-prod",
		"PICOMQ_TIER_REGION":             "us-east-1",
		"PICOMQ_TIER_PATH_STYLE":         "false",
		"PICOMQ_TIER_PREFIX":             "ns/demo/", // the default: <namespace>/<name>/
		"PICOMQ_TIER_CACHE_BYTES":        "1073741824",
		"PICOMQ_TIER_LOCAL_RETAIN_FOR":   "1h0m0s",
		"PICOMQ_TIER_LOCAL_RETAIN_BYTES": "0",
		"PICOMQ_TIER_CREDENTIALS_DIR":    "/etc/picomq/tier-credentials",
	}
	for k, v := range want {
		if cm.Data[k] != v {
			t.Errorf("%s = %q, want %q", k, cm.Data[k], v)
		}
	}
	if v, ok := cm.Data["PICOMQ_TIER_CA_FILE"]; ok {
		t.Errorf("PICOMQ_TIER_CA_FILE = %q without caSecret", v)
	}
	for k, v := range cm.Data {
		if strings.Contains(strings.ToLower(k), "secret") || strings.Contains(v, "s3-creds") {
			t.Errorf("%s=%s: the credentials are mounted, never in the ConfigMap", k, v)
		}
	}

	c := tierCluster()
	ts := c.Spec.TieredStorage
	ts.PathStyle = true
	ts.Prefix = "tenants/a/"
	ts.Region = "garage"
	ts.CASecret = &streamsv1alpha1.SecretKeyRef{Name: "s3-ca", Key: "bundle.pem"}
	ts.LocalRetainFor = ptr.To[streamsv1alpha1.Duration]("90s")
	ts.LocalRetainBytes = 5 << 20
	q := resource.MustParse("512Mi")
	ts.CacheBytes = &q
	cm, err = ConfigMap(c)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		"PICOMQ_TIER_PATH_STYLE":         "true",
		"PICOMQ_TIER_PREFIX":             "tenants/a/",
		"PICOMQ_TIER_REGION":             "garage",
		"PICOMQ_TIER_CA_FILE":            "/etc/picomq/tier-ca/ca.crt",
		"PICOMQ_TIER_LOCAL_RETAIN_FOR":   "1m30s",
		"PICOMQ_TIER_LOCAL_RETAIN_BYTES": "5242880",
		"PICOMQ_TIER_CACHE_BYTES":        "536870912",
	} {
		if cm.Data[k] != v {
			t.Errorf("%s = %q, want %q", k, cm.Data[k], v)
		}
	}

	// Defaults for an object that bypassed the CRD's defaulting.
	c = tierCluster()
	c.Spec.TieredStorage.Region, c.Spec.TieredStorage.CacheBytes, c.Spec.TieredStorage.LocalRetainFor = "", nil, nil
	cm, err = ConfigMap(c)
	if err != nil {
		t.Fatal(err)
	}
	if cm.Data[EnvTierRegion] != "us-east-1" || cm.Data[EnvTierCacheBytes] != "1073741824" || cm.Data[EnvTierLocalRetainFor] != "1h0m0s" {
		t.Errorf("defaults: region %q cache %q localRetainFor %q", cm.Data[EnvTierRegion], cm.Data[EnvTierCacheBytes], cm.Data[EnvTierLocalRetainFor])
	}

	for _, q := range []string{"-1", "1048575", "1023Ki"} {
		small := resource.MustParse(q)
		c.Spec.TieredStorage.CacheBytes = &small
		if _, err := ConfigMap(c); err == nil || !strings.Contains(err.Error(), "tieredStorage.cacheBytes") {
			t.Errorf("cacheBytes %s: %v", q, err)
		}
	}
}

// TestTierPrefixDefault: two clusters of one name in two namespaces never
// share keys in a shared bucket.
func TestTierPrefixDefault(t *testing.T) {
	t.Parallel()
	a, b := tierCluster(), tierCluster()
	b.Namespace = "other"
	if TierPrefix(a) == TierPrefix(b) {
		t.Errorf("both prefixes are %q", TierPrefix(a))
	}
	if got := TierPrefix(b); got != "other/demo/" {
		t.Errorf("prefix = %q, want other/demo/", got)
	}
}

func TestStatefulSetTieredStorage(t *testing.T) {
	t.Parallel()
	sts := StatefulSet(tierCluster(), params())
	pod := sts.Spec.Template.Spec
	ctr := pod.Containers[0]

	creds := volume(pod.Volumes, TierCredentialsVolumeName)
	if creds == nil || creds.Secret == nil {
		t.Fatalf("no %s Secret volume: %+v", TierCredentialsVolumeName, pod.Volumes)
	}
	if creds.Secret.SecretName != "s3-creds" || (creds.Secret.Optional != nil && *creds.Secret.Optional) {
		t.Errorf("credentials volume %+v, want Secret s3-creds, required", creds.Secret)
	}
	wantItems := []corev1.KeyToPath{{Key: "accessKeyId", Path: "access-key-id"}, {Key: "secretAccessKey", Path: "secret-access-key"}}
	if !reflect.DeepEqual(creds.Secret.Items, wantItems) {
		t.Errorf("credentials items %+v, want %+v", creds.Secret.Items, wantItems)
	}
	if m := mount(ctr.VolumeMounts, TierCredentialsVolumeName); m == nil || m.MountPath != "/etc/picomq/tier-credentials" || !m.ReadOnly || m.SubPath != "" {
		// A subPath mount is never updated by the kubelet: rotation
		// would need a restart.
		t.Errorf("credentials mount %+v, want /etc/picomq/tier-credentials read-only, whole", m)
	}
	if volume(pod.Volumes, TierCAVolumeName) != nil || mount(ctr.VolumeMounts, TierCAVolumeName) != nil {
		t.Error("a CA volume without caSecret")
	}
	for _, e := range ctr.Env {
		if strings.HasPrefix(e.Name, "PICOMQ_TIER") || (e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil) {
			t.Errorf("env %s: the credentials are files, not env (env never changes in a running container)", e.Name)
		}
	}

	// Other key names, and a CA.
	c := tierCluster()
	c.Spec.TieredStorage.CredentialsSecret = streamsv1alpha1.TierCredentials{Name: "aws", AccessKeyIDKey: "AWS_ACCESS_KEY_ID", SecretAccessKeyKey: "AWS_SECRET_ACCESS_KEY"}
	c.Spec.TieredStorage.CASecret = &streamsv1alpha1.SecretKeyRef{Name: "s3-ca", Key: "bundle.pem"}
	pod = StatefulSet(c, params()).Spec.Template.Spec
	ctr = pod.Containers[0]
	creds = volume(pod.Volumes, TierCredentialsVolumeName)
	wantItems = []corev1.KeyToPath{{Key: "AWS_ACCESS_KEY_ID", Path: "access-key-id"}, {Key: "AWS_SECRET_ACCESS_KEY", Path: "secret-access-key"}}
	if creds.Secret.SecretName != "aws" || !reflect.DeepEqual(creds.Secret.Items, wantItems) {
		t.Errorf("credentials volume %+v", creds.Secret)
	}
	ca := volume(pod.Volumes, TierCAVolumeName)
	if ca == nil || ca.Secret == nil || ca.Secret.SecretName != "s3-ca" ||
		!reflect.DeepEqual(ca.Secret.Items, []corev1.KeyToPath{{Key: "bundle.pem", Path: "ca.crt"}}) {
		t.Fatalf("CA volume %+v", ca)
	}
	if m := mount(ctr.VolumeMounts, TierCAVolumeName); m == nil || m.MountPath+"/"+TierCAFile != "/etc/picomq/tier-ca/ca.crt" || !m.ReadOnly {
		t.Errorf("CA mount %+v", m)
	}
	// The ConfigMap's CA file is the file the mount holds.
	cm, err := ConfigMap(c)
	if err != nil {
		t.Fatal(err)
	}
	if cm.Data[EnvTierCAFile] != TierCAMountPath+"/"+ca.Secret.Items[0].Path {
		t.Errorf("PICOMQ_TIER_CA_FILE %q is not the mounted file", cm.Data[EnvTierCAFile])
	}
}

// TestTierCredentialsRotationRollsNothing: the pod template of a cluster
// does not depend on its credentials Secret's content (nothing here reads
// it), and the config hash does not change with a Secret of another name
// either: only what the brokers read at start rolls them. The template
// carries no annotation but the config hash.
func TestTierCredentialsRotationRollsNothing(t *testing.T) {
	t.Parallel()
	c := tierCluster()
	cm, err := ConfigMap(c)
	if err != nil {
		t.Fatal(err)
	}
	hash := ConfigHash(cm)
	sts := StatefulSet(c, StatefulSetParams{Replicas: 3, ConfigHash: hash})
	for k := range sts.Spec.Template.Annotations {
		if k != ConfigHashAnnotation {
			t.Errorf("pod template annotation %s: only the config hash may roll the brokers", k)
		}
	}
	raw, _ := json.Marshal(sts.Spec.Template)
	if strings.Contains(strings.ToLower(string(raw)), "checksum") || strings.Contains(string(raw), "secret-hash") {
		t.Errorf("the pod template carries a Secret hash: %s", raw)
	}
	// A changed credentials key name changes the volume (the brokers need
	// the new file), not the ConfigMap.
	c2 := tierCluster()
	c2.Spec.TieredStorage.CredentialsSecret.Name = "s3-creds-2"
	cm2, err := ConfigMap(c2)
	if err != nil {
		t.Fatal(err)
	}
	if ConfigHash(cm2) != hash {
		t.Error("renaming the credentials Secret changed the ConfigMap's hash")
	}
	// Changing what the brokers read at start does roll them.
	c3 := tierCluster()
	c3.Spec.TieredStorage.LocalRetainFor = ptr.To[streamsv1alpha1.Duration]("2h")
	cm3, _ := ConfigMap(c3)
	if ConfigHash(cm3) == hash {
		t.Error("a new localRetainFor did not change the config hash")
	}
}

func TestPolicyValueTiering(t *testing.T) {
	t.Parallel()
	v, err := PolicyValue(streamsv1alpha1.StreamPolicy{
		Tiering: streamsv1alpha1.TieringEnabled, LocalRetainFor: ptr.To[streamsv1alpha1.Duration]("30m"), LocalRetainBytes: 1 << 20,
	})
	if err != nil {
		t.Fatal(err)
	}
	if v.Tiering != stream.TieringEnabled || v.LocalRetainFor != 30*time.Minute || v.LocalRetainBytes != 1<<20 {
		t.Errorf("policy %+v", v)
	}
	raw, _ := json.Marshal(wire.PolicyOf(v))
	for _, f := range []string{`"tiering":"Enabled"`, `"localRetainFor":"30m0s"`, `"localRetainBytes":1048576`} {
		if !strings.Contains(string(raw), f) {
			t.Errorf("wire policy %s lacks %s", raw, f)
		}
	}
	v, err = PolicyValue(streamsv1alpha1.StreamPolicy{})
	if err != nil || v.Tiering != "" || v.LocalRetainFor != 0 || v.LocalRetainBytes != 0 {
		t.Errorf("absent fields: %+v, %v (want the cluster's: empty and zero)", v, err)
	}
	if _, err := PolicyValue(streamsv1alpha1.StreamPolicy{LocalRetainFor: ptr.To[streamsv1alpha1.Duration]("soon")}); err == nil || !strings.Contains(err.Error(), "localRetainFor") {
		t.Errorf("malformed localRetainFor: %v", err)
	}
}

func volume(vs []corev1.Volume, name string) *corev1.VolumeSource {
	for i := range vs {
		if vs[i].Name == name {
			return &vs[i].VolumeSource
		}
	}
	return nil
}

func mount(ms []corev1.VolumeMount, name string) *corev1.VolumeMount {
	for i := range ms {
		if ms[i].Name == name {
			return &ms[i]
		}
	}
	return nil
}
