package resources

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
	"github.com/picomq/picomq/broker/httpapi/wire"
	"github.com/picomq/picomq/broker/stream"
)

// cluster is a StreamCluster as the apiserver returns it with every
// default filled, in namespace ns.
func cluster() *streamsv1alpha1.StreamCluster {
	size := resource.MustParse("10Gi")
	return &streamsv1alpha1.StreamCluster{
		TypeMeta:   metav1.TypeMeta{APIVersion: "streams.picomq.io/v1alpha1", Kind: "StreamCluster"},
		ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "ns", UID: types.UID("uid-1"), Generation: 1},
		Spec: streamsv1alpha1.StreamClusterSpec{
			Replicas:            3,
			Storage:             streamsv1alpha1.StorageSpec{Size: &size},
			Ownership:           streamsv1alpha1.OwnershipSpec{Slots: 64, LeaseDuration: "4s"},
			Service:             streamsv1alpha1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Port: 4437},
			PodDisruptionBudget: streamsv1alpha1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To[int32](1)},
		},
	}
}

func params() StatefulSetParams {
	return StatefulSetParams{Replicas: 3, ConfigHash: "abc123", DefaultImage: "ghcr.io/picomq/picomq:1.2.3"}
}

// checkMeta checks what every child carries: name, namespace, labels and
// the controller reference to the cluster.
func checkMeta(t *testing.T, kind string, m metav1.ObjectMeta, name string) {
	t.Helper()
	if m.Name != name || m.Namespace != "ns" {
		t.Errorf("%s: name %s/%s, want ns/%s", kind, m.Namespace, m.Name, name)
	}
	for k, v := range Labels(cluster()) {
		if m.Labels[k] != v {
			t.Errorf("%s: label %s = %q, want %q", kind, k, m.Labels[k], v)
		}
	}
	if len(m.OwnerReferences) != 1 {
		t.Fatalf("%s: owner references %v", kind, m.OwnerReferences)
	}
	ref := m.OwnerReferences[0]
	if ref.UID != "uid-1" || ref.Kind != "StreamCluster" || ref.APIVersion != "streams.picomq.io/v1alpha1" || ref.Name != "demo" ||
		!ptr.Deref(ref.Controller, false) || !ptr.Deref(ref.BlockOwnerDeletion, false) {
		t.Errorf("%s: owner reference %+v", kind, ref)
	}
}

func TestNamesAndURLs(t *testing.T) {
	t.Parallel()
	c := cluster()
	for got, want := range map[string]string{
		HeadlessServiceName(c):     "demo-headless",
		ClientServiceName(c):       "demo",
		ConfigMapName(c):           "demo-config",
		ServiceAccountName(c):      "demo-broker",
		StatefulSetName(c):         "demo",
		PodDisruptionBudgetName(c): "demo",
		PodName(c, 2):              "demo-2",
		Endpoint(c):                "http://demo.ns.svc:4437",
		BrokerURL(c, "demo-1"):     "http://demo-1.demo-headless.ns.svc:4437",
	} {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
	c.Spec.Service.Port = 80
	c.Spec.TLS = &streamsv1alpha1.TLSSpec{SecretName: "cert"}
	if got := Endpoint(c); got != "https://demo.ns.svc:80" {
		t.Errorf("endpoint with TLS and port 80 = %s", got)
	}
	if got := BrokerURL(c, "demo-0"); got != "https://demo-0.demo-headless.ns.svc:4437" {
		t.Errorf("broker URL with TLS = %s (the pod port does not follow the Service's)", got)
	}
}

func TestHeadlessService(t *testing.T) {
	t.Parallel()
	s := HeadlessService(cluster())
	checkMeta(t, "headless Service", s.ObjectMeta, "demo-headless")
	if s.Spec.ClusterIP != corev1.ClusterIPNone || !s.Spec.PublishNotReadyAddresses {
		t.Errorf("clusterIP %q publishNotReady %v", s.Spec.ClusterIP, s.Spec.PublishNotReadyAddresses)
	}
	if !reflect.DeepEqual(s.Spec.Selector, SelectorLabels(cluster())) {
		t.Errorf("selector %v", s.Spec.Selector)
	}
	if len(s.Spec.Ports) != 2 || s.Spec.Ports[0].Port != ClientPort || s.Spec.Ports[1].Port != PeerPort ||
		s.Spec.Ports[0].TargetPort.StrVal != ClientPortName || s.Spec.Ports[1].Name != PeerPortName {
		t.Errorf("ports %+v", s.Spec.Ports)
	}
	if s.Labels[LabelServiceRole] != ServiceRolePeers || s.APIVersion != "v1" || s.Kind != "Service" {
		t.Errorf("role label / type meta: %v %s %s", s.Labels, s.APIVersion, s.Kind)
	}
}

func TestClientService(t *testing.T) {
	t.Parallel()
	s := ClientService(cluster())
	checkMeta(t, "client Service", s.ObjectMeta, "demo")
	if s.Spec.Type != corev1.ServiceTypeClusterIP || s.Spec.ClusterIP != "" || len(s.Annotations) != 0 {
		t.Errorf("type %s clusterIP %q annotations %v", s.Spec.Type, s.Spec.ClusterIP, s.Annotations)
	}
	if len(s.Spec.Ports) != 1 || s.Spec.Ports[0].Port != 4437 || s.Spec.Ports[0].TargetPort.StrVal != ClientPortName {
		t.Errorf("ports %+v", s.Spec.Ports)
	}

	// Overrides: type, port, annotations.
	c := cluster()
	c.Spec.Service = streamsv1alpha1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Port: 443, Annotations: map[string]string{"lb/internal": "true"}}
	s = ClientService(c)
	if s.Spec.Type != corev1.ServiceTypeLoadBalancer || s.Spec.Ports[0].Port != 443 || s.Annotations["lb/internal"] != "true" {
		t.Errorf("overrides not applied: %s %d %v", s.Spec.Type, s.Spec.Ports[0].Port, s.Annotations)
	}
	// An object that bypassed defaulting still gets a working Service.
	c = cluster()
	c.Spec.Service = streamsv1alpha1.ServiceSpec{}
	if s = ClientService(c); s.Spec.Type != corev1.ServiceTypeClusterIP || s.Spec.Ports[0].Port != 4437 {
		t.Errorf("undefaulted: %s %d", s.Spec.Type, s.Spec.Ports[0].Port)
	}
}

func TestConfigMapDefaults(t *testing.T) {
	t.Parallel()
	cm, err := ConfigMap(cluster())
	if err != nil {
		t.Fatal(err)
	}
	checkMeta(t, "ConfigMap", cm.ObjectMeta, "demo-config")
	want := map[string]string{
		EnvListen:             ":4437",
		EnvDataDir:            "/var/lib/picomq/data",
		EnvCluster:            "demo",
		EnvNamespace:          "ns",
		EnvPeerListen:         ":4438",
		EnvPeerService:        "demo-headless.ns.svc",
		EnvSlots:              "64",
		EnvLeaseDuration:      "4s",
		EnvLeaseRenewDeadline: "3s",
		EnvLeaseRetryPeriod:   "1s",
	}
	if !reflect.DeepEqual(cm.Data, want) {
		t.Errorf("data = %v\nwant %v", cm.Data, want)
	}
	if !strings.HasPrefix(cm.Data[EnvDataDir], DataMountPath+"/") {
		t.Errorf("the data dir must be a subdirectory of the mount (the broker refuses a group-writable one)")
	}
}

func TestConfigMapOverrides(t *testing.T) {
	t.Parallel()
	c := cluster()
	c.Spec.ReplicationFactor = ptr.To[int32](2)
	c.Spec.Ownership = streamsv1alpha1.OwnershipSpec{Slots: 128, LeaseDuration: "30s", RenewDeadline: ptr.To[streamsv1alpha1.Duration]("20s"), RetryPeriod: ptr.To[streamsv1alpha1.Duration]("5s")}
	c.Spec.Broker = streamsv1alpha1.BrokerSpec{
		FlushLinger:         ptr.To[streamsv1alpha1.Duration]("2ms"),
		MaxBatchBytes:       ptr.To[int64](1 << 20),
		LongPollTimeout:     ptr.To[streamsv1alpha1.Duration]("30s"),
		DefaultStreamPolicy: &streamsv1alpha1.StreamPolicy{Partitions: 4, RetainFor: ptr.To[streamsv1alpha1.Duration]("24h")},
	}
	c.Spec.TLS = &streamsv1alpha1.TLSSpec{SecretName: "cert"}
	c.Spec.Auth = &streamsv1alpha1.AuthSpec{SecretName: "tokens"}
	cm, err := ConfigMap(c)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		EnvReplicationFactor:  "2",
		EnvSlots:              "128",
		EnvLeaseDuration:      "30s",
		EnvLeaseRenewDeadline: "20s",
		EnvLeaseRetryPeriod:   "5s",
		EnvFlushLinger:        "2ms",
		EnvMaxBatchBytes:      "1048576",
		EnvLongPollTimeout:    "30s",
		EnvTLSCertFile:        "/etc/picomq/tls/tls.crt",
		EnvTLSKeyFile:         "/etc/picomq/tls/tls.key",
		EnvTLSCAFile:          "/etc/picomq/tls/ca.crt",
		EnvAuthTokensDir:      "/etc/picomq/auth",
		EnvMetricsAuth:        "open",
	} {
		if cm.Data[k] != v {
			t.Errorf("%s = %q, want %q", k, cm.Data[k], v)
		}
	}
	c.Spec.Auth.Metrics = streamsv1alpha1.MetricsAuthToken
	if cm, _ := ConfigMap(c); cm.Data[EnvMetricsAuth] != "token" {
		t.Errorf("metrics Token: %s = %q, want token", EnvMetricsAuth, cm.Data[EnvMetricsAuth])
	}
	var p wire.Policy
	if err := json.Unmarshal([]byte(cm.Data[EnvDefaultStreamPolicy]), &p); err != nil {
		t.Fatalf("default stream policy %q: %v", cm.Data[EnvDefaultStreamPolicy], err)
	}
	if v, err := p.Value(); err != nil || v.Partitions != 4 || v.RetainFor != 24*time.Hour {
		t.Errorf("default stream policy = %+v (%v)", v, err)
	}

	// A spec that bypassed the CRD's rules is refused, naming the field.
	c = cluster()
	c.Spec.Ownership.RenewDeadline = ptr.To[streamsv1alpha1.Duration]("20s") // >= leaseDuration
	if _, err := ConfigMap(c); err == nil || !strings.Contains(err.Error(), "renewDeadline") {
		t.Errorf("renewDeadline above leaseDuration: err = %v", err)
	}
	c = cluster()
	c.Spec.Broker.FlushLinger = ptr.To[streamsv1alpha1.Duration]("soon")
	if _, err := ConfigMap(c); err == nil || !strings.Contains(err.Error(), "flushLinger") {
		t.Errorf("bad flushLinger: err = %v", err)
	}
}

// spec.cors.allowedOrigins reaches the brokers as one comma-joined
// variable, and only when the list has an origin: an empty list leaves the
// broker's default (with auth on, cross-origin requests refused).
func TestConfigMapCORSAllowedOrigins(t *testing.T) {
	t.Parallel()
	for _, cors := range []*streamsv1alpha1.CORSSpec{nil, {}, {AllowedOrigins: []string{}}} {
		c := cluster()
		c.Spec.CORS = cors
		cm, err := ConfigMap(c)
		if err != nil {
			t.Fatal(err)
		}
		if v, ok := cm.Data[EnvCORSAllowedOrigins]; ok {
			t.Errorf("cors %+v: %s = %q, want it unset", cors, EnvCORSAllowedOrigins, v)
		}
	}

	c := cluster()
	c.Spec.CORS = &streamsv1alpha1.CORSSpec{AllowedOrigins: []string{"https://app.example.com", "http://localhost:3000"}}
	cm, err := ConfigMap(c)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := cm.Data[EnvCORSAllowedOrigins], "http://localhost:3000,https://app.example.com"; got != want {
		t.Errorf("%s = %q, want %q", EnvCORSAllowedOrigins, got, want)
	}
	// Reordered, the same origins: the same configuration, no roll.
	c.Spec.CORS.AllowedOrigins = []string{"http://localhost:3000", "https://app.example.com"}
	if again, _ := ConfigMap(c); ConfigHash(again) != ConfigHash(cm) {
		t.Errorf("reordering the origins changed the hash")
	}
	// Another origin is another configuration: the brokers read it at start.
	c.Spec.CORS.AllowedOrigins = []string{"https://app.example.com"}
	if other, _ := ConfigMap(c); ConfigHash(other) == ConfigHash(cm) {
		t.Errorf("changing the origins kept the hash")
	}

	c.Spec.CORS.AllowedOrigins = []string{"*"}
	if cm, _ := ConfigMap(c); cm.Data[EnvCORSAllowedOrigins] != "*" {
		t.Errorf("any origin: %s = %q, want *", EnvCORSAllowedOrigins, cm.Data[EnvCORSAllowedOrigins])
	}
}

func TestConfigHash(t *testing.T) {
	t.Parallel()
	a, _ := ConfigMap(cluster())
	b, _ := ConfigMap(cluster())
	if ConfigHash(a) != ConfigHash(b) || len(ConfigHash(a)) != 16 {
		t.Fatalf("hash not stable: %s %s", ConfigHash(a), ConfigHash(b))
	}
	// What does not configure the brokers does not change the hash: no
	// restart for scaling, a Service change, pod overrides.
	c := cluster()
	c.Spec.Replicas = 7
	c.Spec.Service.Port = 80
	c.Spec.PodTemplate.NodeSelector = map[string]string{"a": "b"}
	c.Spec.Image = "other:1"
	// Which namespaces may keep Streams here is the operator's business.
	c.Spec.AllowedNamespaces = streamsv1alpha1.AllowedNamespaces{From: streamsv1alpha1.NamespacesFromAll}
	if cm, _ := ConfigMap(c); ConfigHash(cm) != ConfigHash(a) {
		t.Errorf("a non-config change changed the hash")
	}
	c = cluster()
	c.Spec.Broker.FlushLinger = ptr.To[streamsv1alpha1.Duration]("1ms")
	if cm, _ := ConfigMap(c); ConfigHash(cm) == ConfigHash(a) {
		t.Errorf("a config change kept the hash")
	}
	// Keys and values cannot be shifted into each other.
	x := &corev1.ConfigMap{Data: map[string]string{"a": "b=c"}}
	y := &corev1.ConfigMap{Data: map[string]string{"a=b": "c"}}
	if ConfigHash(x) == ConfigHash(y) {
		t.Errorf("ambiguous hash")
	}
}

// The recorded cluster id reaches the brokers through a ConfigMap of its
// own, once status has it, and recording it changes nothing the pods'
// template depends on: not the broker ConfigMap, not its hash, not the
// StatefulSet.
func TestClusterIDConfigMap(t *testing.T) {
	t.Parallel()
	c := cluster()
	if cm := ClusterIDConfigMap(c); cm != nil {
		t.Fatalf("no id recorded yet, but %v", cm.Data)
	}
	before, _ := ConfigMap(c)
	stsBefore := StatefulSet(c, StatefulSetParams{Replicas: 3, ConfigHash: ConfigHash(before)})

	c.Status.ClusterID = "c-1f2e"
	cm := ClusterIDConfigMap(c)
	if cm == nil {
		t.Fatal("an id is recorded, but no ConfigMap")
	}
	checkMeta(t, "ConfigMap", cm.ObjectMeta, "demo-cluster-id")
	if !reflect.DeepEqual(cm.Data, map[string]string{"PICOMQ_CLUSTER_ID": "c-1f2e"}) || len(cm.BinaryData) != 0 {
		t.Errorf("data = %v", cm.Data)
	}
	after, _ := ConfigMap(c)
	if !reflect.DeepEqual(before.Data, after.Data) || ConfigHash(before) != ConfigHash(after) {
		t.Errorf("recording the id changed the broker ConfigMap (%v) and so would roll every broker", after.Data)
	}
	if _, ok := after.Data[EnvClusterID]; ok {
		t.Errorf("the id is in the hashed ConfigMap")
	}
	if stsAfter := StatefulSet(c, StatefulSetParams{Replicas: 3, ConfigHash: ConfigHash(after)}); !reflect.DeepEqual(stsBefore, stsAfter) {
		t.Errorf("recording the id changed the StatefulSet")
	}
}

func TestServiceAccountRoleAndBinding(t *testing.T) {
	t.Parallel()
	c := cluster()
	sa := ServiceAccount(c)
	checkMeta(t, "ServiceAccount", sa.ObjectMeta, "demo-broker")
	if !ptr.Deref(sa.AutomountServiceAccountToken, false) {
		t.Errorf("the brokers need their token for the Lease API")
	}
	role := Role(c)
	checkMeta(t, "Role", role.ObjectMeta, "demo-broker")
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create"}}, // the failsafe Event
	}
	if !reflect.DeepEqual(role.Rules, want) {
		t.Errorf("rules = %+v, want leases (no delete) and creating events only", role.Rules)
	}
	rb := RoleBinding(c)
	checkMeta(t, "RoleBinding", rb.ObjectMeta, "demo-broker")
	if rb.RoleRef != (rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "demo-broker"}) {
		t.Errorf("roleRef %+v (must be a namespaced Role, nothing cluster-wide)", rb.RoleRef)
	}
	if len(rb.Subjects) != 1 || rb.Subjects[0] != (rbacv1.Subject{Kind: "ServiceAccount", Name: "demo-broker", Namespace: "ns"}) {
		t.Errorf("subjects %+v", rb.Subjects)
	}
}

func TestPodDisruptionBudget(t *testing.T) {
	t.Parallel()
	p := PodDisruptionBudget(cluster())
	checkMeta(t, "PodDisruptionBudget", p.ObjectMeta, "demo")
	if p.Spec.MaxUnavailable.IntValue() != 1 || !reflect.DeepEqual(p.Spec.Selector.MatchLabels, SelectorLabels(cluster())) || p.Spec.MinAvailable != nil {
		t.Errorf("spec %+v", p.Spec)
	}
	for _, n := range []int32{0, 2} {
		c := cluster()
		c.Spec.PodDisruptionBudget.MaxUnavailable = ptr.To(n)
		if got := PodDisruptionBudget(c).Spec.MaxUnavailable.IntValue(); got != int(n) {
			t.Errorf("override %d: got %d", n, got)
		}
	}
	c := cluster()
	c.Spec.PodDisruptionBudget.MaxUnavailable = nil
	if got := PodDisruptionBudget(c).Spec.MaxUnavailable.IntValue(); got != 1 {
		t.Errorf("undefaulted: %d", got)
	}
}

func TestServiceMonitor(t *testing.T) {
	t.Parallel()
	c := cluster()
	sm := ServiceMonitor(c)
	if sm.GroupVersionKind() != ServiceMonitorGVK || sm.GetName() != "demo" || sm.GetNamespace() != "ns" {
		t.Errorf("identity %v %s/%s", sm.GroupVersionKind(), sm.GetNamespace(), sm.GetName())
	}
	if refs := sm.GetOwnerReferences(); len(refs) != 1 || refs[0].UID != "uid-1" || !ptr.Deref(refs[0].Controller, false) {
		t.Errorf("owner references %+v", refs)
	}
	spec := sm.Object["spec"].(map[string]any)
	sel := spec["selector"].(map[string]any)["matchLabels"].(map[string]any)
	if sel[LabelServiceRole] != ServiceRolePeers || sel[LabelInstance] != "demo" {
		t.Errorf("selector %v: must pick the headless Service only", sel)
	}
	ep := spec["endpoints"].([]any)[0].(map[string]any)
	if ep["port"] != ClientPortName || ep["path"] != "/metrics" || ep["scheme"] != "http" {
		t.Errorf("endpoint %v", ep)
	}
	if _, ok := ep["bearerTokenSecret"]; ok {
		t.Errorf("a bearer token without auth: %v", ep)
	}
	c.Spec.TLS = &streamsv1alpha1.TLSSpec{SecretName: "x"}
	ep = ServiceMonitor(c).Object["spec"].(map[string]any)["endpoints"].([]any)[0].(map[string]any)
	if ep["scheme"] != "https" {
		t.Errorf("TLS: scheme %v", ep["scheme"])
	}
	tc, _ := ep["tlsConfig"].(map[string]any)
	wantTLS := map[string]any{
		"ca":         map[string]any{"secret": map[string]any{"name": "x", "key": "ca.crt"}},
		"serverName": "demo.ns.svc",
	}
	if !reflect.DeepEqual(tc, wantTLS) {
		t.Errorf("TLS: tlsConfig %v, want %v", tc, wantTLS)
	}
	c.Spec.Auth = &streamsv1alpha1.AuthSpec{SecretName: "tokens", Metrics: streamsv1alpha1.MetricsAuthOpen}
	c.Spec.Monitoring.ServiceMonitor = true
	ep = ServiceMonitor(c).Object["spec"].(map[string]any)["endpoints"].([]any)[0].(map[string]any)
	if _, ok := ep["bearerTokenSecret"]; ok {
		t.Errorf("metrics Open: a bearer token %v", ep)
	}
	c.Spec.Auth.Metrics = streamsv1alpha1.MetricsAuthToken
	ep = ServiceMonitor(c).Object["spec"].(map[string]any)["endpoints"].([]any)[0].(map[string]any)
	if bt := ep["bearerTokenSecret"]; !reflect.DeepEqual(bt, map[string]any{"name": "demo-operator-token", "key": "metrics-token"}) {
		t.Errorf("metrics Token: bearerTokenSecret %v", bt)
	}
	// The unstructured object must survive a JSON round trip as the
	// apiserver would store it.
	if _, err := json.Marshal(ServiceMonitor(c).Object); err != nil {
		t.Error(err)
	}
}

func TestOperatorTokens(t *testing.T) {
	t.Parallel()
	admin, metrics := strings.Repeat("ab", 32), strings.Repeat("0f", 32)
	s := OperatorTokenSecret(cluster(), admin, metrics)
	if s.Name != "demo-operator-token" || s.Namespace != "ns" || len(s.OwnerReferences) != 1 || s.Labels[LabelManagedBy] != ManagedByValue {
		t.Errorf("identity %s/%s owners %v labels %v", s.Namespace, s.Name, s.OwnerReferences, s.Labels)
	}
	if got := string(s.Data[OperatorTokenKey]); got != "admin:"+admin {
		t.Errorf("%s = %q: want the token file format admin:<token>", OperatorTokenKey, got)
	}
	a, m, ok := ParseOperatorTokens(s.Data)
	if !ok || a != admin || m != metrics {
		t.Errorf("ParseOperatorTokens = %q, %q, %v", a, m, ok)
	}
	for name, mutate := range map[string]func(map[string][]byte){
		"missing admin":    func(d map[string][]byte) { delete(d, OperatorTokenKey) },
		"write scope":      func(d map[string][]byte) { d[OperatorTokenKey] = []byte("write:" + admin) },
		"short token":      func(d map[string][]byte) { d[OperatorTokenKey] = []byte("admin:abcd") },
		"not hex":          func(d map[string][]byte) { d[OperatorTokenKey] = []byte("admin:" + strings.Repeat("zz", 32)) },
		"upper case":       func(d map[string][]byte) { d[OperatorTokenKey] = []byte("admin:" + strings.Repeat("AB", 32)) },
		"bearer differs":   func(d map[string][]byte) { d[MetricsBearerKey] = []byte(admin) },
		"metrics missing":  func(d map[string][]byte) { delete(d, MetricsTokenKey) },
		"trailing newline": func(d map[string][]byte) { d[OperatorTokenKey] = []byte("admin:" + admin + "\n") },
	} {
		d := OperatorTokenSecret(cluster(), admin, metrics).Data
		mutate(d)
		if _, _, ok := ParseOperatorTokens(d); ok {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestNetworkPolicy(t *testing.T) {
	t.Parallel()
	c := cluster()
	if np := NetworkPolicy(c, "picomq-system"); np != nil {
		t.Errorf("built without spec.networkPolicy: %+v", np)
	}
	c.Spec.NetworkPolicy = &streamsv1alpha1.NetworkPolicySpec{Enabled: false}
	if np := NetworkPolicy(c, "picomq-system"); np != nil {
		t.Errorf("built with enabled false: %+v", np)
	}
	c.Spec.NetworkPolicy.Enabled = true
	np := NetworkPolicy(c, "picomq-system")
	if np == nil || np.Name != "demo-brokers" || np.Namespace != "ns" || len(np.OwnerReferences) != 1 || np.Labels[LabelManagedBy] != ManagedByValue {
		t.Fatalf("identity %+v", np)
	}
	if !reflect.DeepEqual(np.Spec.PodSelector.MatchLabels, SelectorLabels(c)) || !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
		t.Errorf("selects %v, types %v: want the brokers, ingress only", np.Spec.PodSelector, np.Spec.PolicyTypes)
	}
	if len(np.Spec.Ingress) != 2 {
		t.Fatalf("ingress %+v: want a client rule and a peer rule", np.Spec.Ingress)
	}
	rule := func(i int, port string) networkingv1.NetworkPolicyIngressRule {
		r := np.Spec.Ingress[i]
		if len(r.Ports) != 1 || r.Ports[0].Port.String() != port || *r.Ports[0].Protocol != corev1.ProtocolTCP {
			t.Errorf("rule %d ports %+v, want %s/TCP", i, r.Ports, port)
		}
		return r
	}
	nsSel := func(ns string) networkingv1.NetworkPolicyPeer {
		return networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{LabelNamespaceName: ns}}}
	}
	brokers := networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: SelectorLabels(c)}}
	// Default: the cluster's namespace and the operator's reach the
	// client port; only the brokers reach the peer port.
	if got, want := rule(0, ClientPortName).From, []networkingv1.NetworkPolicyPeer{nsSel("ns"), nsSel("picomq-system"), brokers}; !reflect.DeepEqual(got, want) {
		t.Errorf("client sources %+v, want %+v", got, want)
	}
	if got := rule(1, PeerPortName).From; !reflect.DeepEqual(got, []networkingv1.NetworkPolicyPeer{brokers}) {
		t.Errorf("peer sources %+v: want the cluster's brokers only", got)
	}
	// Selected namespaces and extra peers; no operator namespace known.
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"team": "shop"}}
	block := networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/8"}}
	c.Spec.NetworkPolicy.NamespaceSelector = sel
	c.Spec.NetworkPolicy.From = []networkingv1.NetworkPolicyPeer{block}
	np = NetworkPolicy(c, "")
	if got, want := np.Spec.Ingress[0].From, []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel}, block, brokers}; !reflect.DeepEqual(got, want) {
		t.Errorf("client sources %+v, want %+v", got, want)
	}
	np.Spec.Ingress[0].From[0].NamespaceSelector.MatchLabels["team"] = "changed"
	if sel.MatchLabels["team"] != "shop" {
		t.Error("the built policy shares the spec's selector")
	}
}

func TestStatefulSetDefaults(t *testing.T) {
	t.Parallel()
	sts := StatefulSet(cluster(), params())
	checkMeta(t, "StatefulSet", sts.ObjectMeta, "demo")
	s := sts.Spec
	if *s.Replicas != 3 || s.ServiceName != "demo-headless" || s.PodManagementPolicy != appsv1.ParallelPodManagement ||
		s.UpdateStrategy.Type != appsv1.RollingUpdateStatefulSetStrategyType {
		t.Errorf("spec: replicas %d service %s policy %s strategy %s", *s.Replicas, s.ServiceName, s.PodManagementPolicy, s.UpdateStrategy.Type)
	}
	if !reflect.DeepEqual(s.Selector.MatchLabels, SelectorLabels(cluster())) {
		t.Errorf("selector %v", s.Selector.MatchLabels)
	}
	if r := s.PersistentVolumeClaimRetentionPolicy; r.WhenDeleted != appsv1.RetainPersistentVolumeClaimRetentionPolicyType || r.WhenScaled != appsv1.RetainPersistentVolumeClaimRetentionPolicyType {
		t.Errorf("claims must outlive the cluster and a scale-down: %+v", r)
	}
	vct := s.VolumeClaimTemplates[0]
	if vct.Name != DataVolumeName || len(vct.OwnerReferences) != 0 || vct.Spec.StorageClassName != nil ||
		!slices.Equal(vct.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}) {
		t.Errorf("claim template %+v", vct)
	}
	if q := vct.Spec.Resources.Requests[corev1.ResourceStorage]; q.String() != "10Gi" {
		t.Errorf("claim size %s", q.String())
	}

	tpl := s.Template
	if tpl.Annotations[ConfigHashAnnotation] != "abc123" {
		t.Errorf("config hash annotation %v", tpl.Annotations)
	}
	for k, v := range SelectorLabels(cluster()) {
		if tpl.Labels[k] != v {
			t.Errorf("pod label %s = %q", k, tpl.Labels[k])
		}
	}
	ps := tpl.Spec
	if ps.ServiceAccountName != "demo-broker" || ptr.Deref(ps.TerminationGracePeriodSeconds, 0) != TerminationGracePeriodSeconds || ptr.Deref(ps.EnableServiceLinks, true) {
		t.Errorf("pod spec: sa %s grace %v serviceLinks %v", ps.ServiceAccountName, ps.TerminationGracePeriodSeconds, ps.EnableServiceLinks)
	}
	// Restricted Pod Security profile.
	psc := ps.SecurityContext
	if !ptr.Deref(psc.RunAsNonRoot, false) || ptr.Deref(psc.RunAsUser, 0) != BrokerUser || ptr.Deref(psc.FSGroup, 0) != BrokerUser ||
		ptr.Deref(psc.FSGroupChangePolicy, "") != corev1.FSGroupChangeOnRootMismatch || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod security context %+v", psc)
	}
	ctr := ps.Containers[0]
	sc := ctr.SecurityContext
	if !ptr.Deref(sc.ReadOnlyRootFilesystem, false) || ptr.Deref(sc.AllowPrivilegeEscalation, true) || !ptr.Deref(sc.RunAsNonRoot, false) ||
		!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("container security context %+v", sc)
	}
	if ctr.Image != "ghcr.io/picomq/picomq:1.2.3" || !slices.Equal(ctr.Command, []string{"/broker"}) {
		t.Errorf("image %s command %v", ctr.Image, ctr.Command)
	}
	if len(ctr.Ports) != 2 || ctr.Ports[0] != (corev1.ContainerPort{Name: "client", ContainerPort: 4437, Protocol: corev1.ProtocolTCP}) ||
		ctr.Ports[1] != (corev1.ContainerPort{Name: "peer", ContainerPort: 4438, Protocol: corev1.ProtocolTCP}) {
		t.Errorf("ports %+v", ctr.Ports)
	}
	if len(ctr.EnvFrom) != 2 || ctr.EnvFrom[0].ConfigMapRef.Name != "demo-config" || ptr.Deref(ctr.EnvFrom[0].ConfigMapRef.Optional, false) ||
		ctr.EnvFrom[1].ConfigMapRef.Name != "demo-cluster-id" || !ptr.Deref(ctr.EnvFrom[1].ConfigMapRef.Optional, false) {
		t.Errorf("envFrom %+v: want the broker ConfigMap, then the optional cluster id", ctr.EnvFrom)
	}
	env := map[string]string{}
	for _, e := range ctr.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			env[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	if env[EnvNodeID] != "metadata.name" || env["POD_NAME"] != "metadata.name" || env["POD_NAMESPACE"] != "metadata.namespace" {
		t.Errorf("downward-API env %v", env)
	}
	// A broker that cannot start says why in its termination message,
	// which the pod's status keeps (and the logs' tail when it wrote none).
	termLog := ""
	for _, e := range ctr.Env {
		if e.Name == EnvTerminationLog {
			termLog = e.Value
		}
	}
	if termLog != "/dev/termination-log" || ctr.TerminationMessagePolicy != corev1.TerminationMessageFallbackToLogsOnError {
		t.Errorf("termination log %q, policy %q: want the broker's fatal error in /dev/termination-log, FallbackToLogsOnError", termLog, ctr.TerminationMessagePolicy)
	}
	probes := map[string]*corev1.Probe{"startup": ctr.StartupProbe, "liveness": ctr.LivenessProbe, "readiness": ctr.ReadinessProbe}
	for name, path := range map[string]string{"startup": "/healthz", "liveness": "/healthz", "readiness": "/readyz"} {
		p := probes[name]
		if p == nil || p.HTTPGet.Path != path || p.HTTPGet.Port.StrVal != "client" || p.HTTPGet.Scheme != corev1.URISchemeHTTP {
			t.Errorf("%s probe %+v", name, p)
		}
	}
	if ctr.StartupProbe.PeriodSeconds*ctr.StartupProbe.FailureThreshold < 300 {
		t.Errorf("the startup probe must allow a long log replay")
	}
	if ctr.Lifecycle.PreStop.Sleep == nil || ctr.Lifecycle.PreStop.Sleep.Seconds != PreStopSleepSeconds ||
		PreStopSleepSeconds+20 >= TerminationGracePeriodSeconds {
		t.Errorf("preStop %+v must pause before SIGTERM, within the grace period", ctr.Lifecycle.PreStop)
	}
	mounts := map[string]string{}
	for _, m := range ctr.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	if mounts[DataVolumeName] != "/var/lib/picomq" || mounts[TmpVolumeName] != "/tmp" || len(mounts) != 2 {
		t.Errorf("mounts %v", mounts)
	}
	if len(ps.Volumes) != 1 || ps.Volumes[0].EmptyDir == nil {
		t.Errorf("volumes %+v", ps.Volumes)
	}
	if len(ctr.Resources.Requests) != 0 || len(ctr.Resources.Limits) != 0 {
		t.Errorf("resources %+v", ctr.Resources)
	}
	// Default spread: across hosts, soft.
	want := []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "kubernetes.io/hostname", WhenUnsatisfiable: corev1.ScheduleAnyway,
		LabelSelector: &metav1.LabelSelector{MatchLabels: SelectorLabels(cluster())}}}
	if !reflect.DeepEqual(ps.TopologySpreadConstraints, want) {
		t.Errorf("spread %+v", ps.TopologySpreadConstraints)
	}
	if ps.Affinity != nil || ps.NodeSelector != nil || ps.Tolerations != nil || ps.PriorityClassName != "" {
		t.Errorf("no scheduling override was asked: %+v", ps)
	}
}

func TestStatefulSetReplicasComeFromParams(t *testing.T) {
	t.Parallel()
	p := params()
	p.Replicas = 5 // a held scale-down: spec says less
	if got := *StatefulSet(cluster(), p).Spec.Replicas; got != 5 {
		t.Errorf("replicas = %d, want the reconciler's 5", got)
	}
}

func TestImage(t *testing.T) {
	t.Parallel()
	c := cluster()
	for _, tc := range []struct {
		image, version, def, want string
	}{
		{"", "", "", DefaultImage},
		{"", "", "reg.local:5000/picomq:dev", "reg.local:5000/picomq:dev"},
		{"", "1.4.0", "ghcr.io/picomq/picomq:latest", "ghcr.io/picomq/picomq:1.4.0"},
		{"", "1.4.0", "reg.local:5000/picomq", "reg.local:5000/picomq:1.4.0"},
		{"", "1.4.0", "reg.local:5000/picomq:dev@sha256:abcd", "reg.local:5000/picomq:1.4.0"},
		{"mine/broker:7", "1.4.0", "ghcr.io/picomq/picomq:latest", "mine/broker:7"},
	} {
		c.Spec.Image, c.Spec.Version = tc.image, tc.version
		if got := Image(c, tc.def); got != tc.want {
			t.Errorf("Image(image=%q version=%q default=%q) = %q, want %q", tc.image, tc.version, tc.def, got, tc.want)
		}
	}
	c.Spec.Image, c.Spec.Version = "", "1.4.0"
	sts := StatefulSet(c, params())
	if sts.Spec.Template.Labels[LabelVersion] != "1.4.0" || sts.Spec.Template.Spec.Containers[0].Image != "ghcr.io/picomq/picomq:1.4.0" {
		t.Errorf("version: label %v image %s", sts.Spec.Template.Labels, sts.Spec.Template.Spec.Containers[0].Image)
	}
}

func TestStatefulSetStorageOverrides(t *testing.T) {
	t.Parallel()
	c := cluster()
	big := resource.MustParse("50Gi")
	c.Spec.Storage.Size = &big
	c.Spec.Storage.StorageClassName = ptr.To("fast")
	vct := StatefulSet(c, params()).Spec.VolumeClaimTemplates[0]
	if q := vct.Spec.Resources.Requests[corev1.ResourceStorage]; q.String() != "50Gi" || ptr.Deref(vct.Spec.StorageClassName, "") != "fast" {
		t.Errorf("size %s class %v", q.String(), vct.Spec.StorageClassName)
	}
	// The claim template override wins field by field.
	c.Spec.Storage.VolumeClaimTemplate = &corev1.PersistentVolumeClaimSpec{
		AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOncePod},
		StorageClassName: ptr.To("slow"),
		VolumeMode:       ptr.To(corev1.PersistentVolumeFilesystem),
		Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Ti")}},
	}
	vct = StatefulSet(c, params()).Spec.VolumeClaimTemplates[0]
	if q := vct.Spec.Resources.Requests[corev1.ResourceStorage]; q.String() != "1Ti" || ptr.Deref(vct.Spec.StorageClassName, "") != "slow" ||
		vct.Spec.AccessModes[0] != corev1.ReadWriteOncePod || ptr.Deref(vct.Spec.VolumeMode, "") != corev1.PersistentVolumeFilesystem {
		t.Errorf("template override not applied: %+v", vct.Spec)
	}
	// ... and what it leaves out comes from spec.storage.
	c.Spec.Storage.VolumeClaimTemplate = &corev1.PersistentVolumeClaimSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "a"}}}
	vct = StatefulSet(c, params()).Spec.VolumeClaimTemplates[0]
	if q := vct.Spec.Resources.Requests[corev1.ResourceStorage]; q.String() != "50Gi" || ptr.Deref(vct.Spec.StorageClassName, "") != "fast" ||
		vct.Spec.AccessModes[0] != corev1.ReadWriteOnce || vct.Spec.Selector.MatchLabels["tier"] != "a" {
		t.Errorf("partial override: %+v", vct.Spec)
	}
	if c.Spec.Storage.VolumeClaimTemplate.Resources.Requests != nil {
		t.Errorf("the builder mutated the custom resource")
	}
	// No size at all (defaulting bypassed): 10Gi.
	c = cluster()
	c.Spec.Storage.Size = nil
	if q := StatefulSet(c, params()).Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[corev1.ResourceStorage]; q.String() != DefaultStorageSize {
		t.Errorf("undefaulted size %s", q.String())
	}
}

func TestStatefulSetResourcesOverride(t *testing.T) {
	t.Parallel()
	c := cluster()
	c.Spec.Resources = &corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("512Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
	}
	r := StatefulSet(c, params()).Spec.Template.Spec.Containers[0].Resources
	if r.Requests.Cpu().String() != "500m" || r.Limits.Memory().String() != "1Gi" {
		t.Errorf("resources %+v", r)
	}
	r.Requests[corev1.ResourceCPU] = resource.MustParse("1")
	if c.Spec.Resources.Requests.Cpu().String() != "500m" {
		t.Errorf("the builder shares maps with the custom resource")
	}
}

func TestStatefulSetPodOverrides(t *testing.T) {
	t.Parallel()
	c := cluster()
	aff := &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}}},
	}}}
	spread := []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "topology.kubernetes.io/zone", WhenUnsatisfiable: corev1.DoNotSchedule}}
	c.Spec.PodTemplate = streamsv1alpha1.PodOverrides{
		Affinity:                  aff,
		Tolerations:               []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists}},
		NodeSelector:              map[string]string{"disk": "ssd"},
		TopologySpreadConstraints: spread,
		PriorityClassName:         "critical",
		Annotations:               map[string]string{"team": "data", ConfigHashAnnotation: "forged"},
		Labels:                    map[string]string{"team": "data", LabelInstance: "hijack", LabelManagedBy: "me"},
	}
	tpl := StatefulSet(c, params()).Spec.Template
	ps := tpl.Spec
	if !reflect.DeepEqual(ps.Affinity, aff) || ps.Affinity == aff {
		t.Errorf("affinity not applied (or not copied)")
	}
	if len(ps.Tolerations) != 1 || ps.Tolerations[0].Key != "dedicated" || ps.NodeSelector["disk"] != "ssd" || ps.PriorityClassName != "critical" {
		t.Errorf("tolerations %v nodeSelector %v priority %q", ps.Tolerations, ps.NodeSelector, ps.PriorityClassName)
	}
	if !reflect.DeepEqual(ps.TopologySpreadConstraints, spread) {
		t.Errorf("spread constraints must replace the default: %+v", ps.TopologySpreadConstraints)
	}
	if tpl.Annotations["team"] != "data" || tpl.Annotations[ConfigHashAnnotation] != "abc123" {
		t.Errorf("annotations %v: overrides added, the config hash kept", tpl.Annotations)
	}
	if tpl.Labels["team"] != "data" || tpl.Labels[LabelInstance] != "demo" || tpl.Labels[LabelManagedBy] != "me" {
		t.Errorf("labels %v: overrides win except over the selector", tpl.Labels)
	}
	// The pods still match the selector.
	for k, v := range StatefulSet(c, params()).Spec.Selector.MatchLabels {
		if tpl.Labels[k] != v {
			t.Errorf("pod template no longer matches the selector on %s", k)
		}
	}
}

func TestStatefulSetTLSAndAuth(t *testing.T) {
	t.Parallel()
	c := cluster()
	c.Spec.TLS = &streamsv1alpha1.TLSSpec{SecretName: "cert"}
	c.Spec.Auth = &streamsv1alpha1.AuthSpec{SecretName: "tokens"}
	ps := StatefulSet(c, params()).Spec.Template.Spec
	ctr := ps.Containers[0]
	for _, p := range []*corev1.Probe{ctr.StartupProbe, ctr.LivenessProbe, ctr.ReadinessProbe} {
		if p.HTTPGet.Scheme != corev1.URISchemeHTTPS {
			t.Errorf("probe scheme %s with TLS", p.HTTPGet.Scheme)
		}
	}
	vols := map[string]corev1.Volume{}
	for _, v := range ps.Volumes {
		vols[v.Name] = v
	}
	if v := vols[TLSVolumeName]; v.Secret == nil || v.Secret.SecretName != "cert" {
		t.Errorf("tls volume %+v", v)
	}
	// One projected volume: the user's tokens whole (tokens added later
	// reach the brokers without a restart), then the operator's token
	// alone and the StreamAccesses' tokens whole and optional, after the
	// user's so that they win a clash of names.
	auth := vols[AuthVolumeName].Projected
	if auth == nil || len(auth.Sources) != 3 {
		t.Fatalf("auth volume %+v: want one projected volume of three Secrets", vols[AuthVolumeName])
	}
	user, op, acc := auth.Sources[0].Secret, auth.Sources[1].Secret, auth.Sources[2].Secret
	if acc == nil || acc.Name != "demo-access-tokens" || len(acc.Items) != 0 || !ptr.Deref(acc.Optional, false) {
		t.Errorf("access source %+v: want the whole access Secret, optional (an absent one must not block a pod)", acc)
	}
	if user == nil || user.Name != "tokens" || len(user.Items) != 0 || ptr.Deref(user.Optional, false) {
		t.Errorf("user source %+v: want the whole Secret, required", user)
	}
	if op == nil || op.Name != "demo-operator-token" || !reflect.DeepEqual(op.Items, []corev1.KeyToPath{{Key: OperatorTokenKey, Path: OperatorTokenKey}}) {
		t.Errorf("operator source %+v: want picomq-operator only (no metrics token without a ServiceMonitor)", op)
	}
	if ptr.Deref(auth.DefaultMode, 0) != 0o440 {
		t.Errorf("auth mode %o", ptr.Deref(auth.DefaultMode, 0))
	}
	c.Spec.Auth.Metrics = streamsv1alpha1.MetricsAuthToken
	c.Spec.Monitoring.ServiceMonitor = true
	items := StatefulSet(c, params()).Spec.Template.Spec.Volumes
	var got []string
	for _, v := range items {
		if v.Name == AuthVolumeName {
			for _, it := range v.Projected.Sources[1].Secret.Items {
				got = append(got, it.Path)
			}
		}
	}
	if !slices.Equal(got, []string{OperatorTokenKey, MetricsTokenKey}) {
		t.Errorf("metrics Token with a ServiceMonitor: operator token files %v", got)
	}
	if r := ReservedTokenNames(c); !slices.Equal(r, []string{OperatorTokenKey, MetricsTokenKey}) {
		t.Errorf("reserved %v", r)
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range ctr.VolumeMounts {
		mounts[m.Name] = m
	}
	if m := mounts[TLSVolumeName]; m.MountPath != TLSMountPath || !m.ReadOnly {
		t.Errorf("tls mount %+v", m)
	}
	if m := mounts[AuthVolumeName]; m.MountPath != AuthMountPath || !m.ReadOnly {
		t.Errorf("auth mount %+v", m)
	}
}

func TestPolicyValue(t *testing.T) {
	t.Parallel()
	v, err := PolicyValue(streamsv1alpha1.StreamPolicy{
		Partitions: 8, MaxRecordBytes: 65536, RetainFor: ptr.To[streamsv1alpha1.Duration]("168h"), RetainBytes: 10,
		MaxBytes: 1 << 30, BlockTimeout: ptr.To[streamsv1alpha1.Duration]("5s"), SegmentBytes: 1 << 20, CompactAfter: ptr.To[streamsv1alpha1.Duration]("24h"),
	})
	want := stream.PolicyValue{Partitions: 8, MaxRecordBytes: 65536, RetainFor: 168 * time.Hour, RetainBytes: 10, MaxBytes: 1 << 30,
		BlockTimeout: 5 * time.Second, SegmentBytes: 1 << 20, CompactAfter: 24 * time.Hour}
	if err != nil || v != want {
		t.Errorf("PolicyValue = %+v, %v", v, err)
	}
	if v, err := PolicyValue(streamsv1alpha1.StreamPolicy{}); err != nil || v != (stream.PolicyValue{}) {
		t.Errorf("empty policy = %+v, %v", v, err)
	}
	if _, err := PolicyValue(streamsv1alpha1.StreamPolicy{CompactAfter: ptr.To[streamsv1alpha1.Duration]("-1h")}); err == nil || !strings.Contains(err.Error(), "compactAfter") {
		t.Errorf("negative duration: %v", err)
	}
}

func TestBuildersArePure(t *testing.T) {
	t.Parallel()
	c := cluster()
	before := c.DeepCopy()
	cm, _ := ConfigMap(c)
	_ = StatefulSet(c, StatefulSetParams{Replicas: 3, ConfigHash: ConfigHash(cm)})
	_, _, _, _, _, _ = HeadlessService(c), ClientService(c), ServiceAccount(c), Role(c), RoleBinding(c), PodDisruptionBudget(c)
	_ = ServiceMonitor(c)
	if !reflect.DeepEqual(c, before) {
		t.Errorf("a builder changed the StreamCluster")
	}
	a, b := StatefulSet(c, params()), StatefulSet(c, params())
	if !reflect.DeepEqual(a, b) {
		t.Errorf("two builds differ")
	}
}
