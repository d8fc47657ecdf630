package v1alpha1

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestValidateStreamName(t *testing.T) {
	t.Parallel()
	good := []string{"a", "logs/api/prod", "A.b_c-d", "x/..y", "..a", strings.Repeat("a", 255)}
	for _, n := range good {
		if err := ValidateStreamName(n); err != nil {
			t.Errorf("ValidateStreamName(%q) = %v, want nil", n, err)
		}
	}
	bad := map[string]string{
		"":                       "empty",
		"/a":                     "empty segment",
		"a/":                     "empty segment",
		"a//b":                   "empty segment",
		"a/../b":                 `".." segment`,
		"..":                     `".." segment`,
		"a/./b":                  `"." segment`,
		"a b":                    "only letters",
		"a/b%2F":                 "only letters",
		"é":                      "only letters",
		strings.Repeat("a", 256): "more than 255",
	}
	for n, want := range bad {
		err := ValidateStreamName(n)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ValidateStreamName(%q) = %v, want an error containing %q", n, err, want)
		}
	}
}

func TestStreamNameDefaultsToMetadataName(t *testing.T) {
	t.Parallel()
	s := &Stream{ObjectMeta: metav1.ObjectMeta{Name: "orders"}}
	if got := s.StreamName(); got != "orders" {
		t.Fatalf("StreamName() = %q, want metadata.name", got)
	}
	s.Spec.Name = "shop/orders"
	if got := s.StreamName(); got != "shop/orders" {
		t.Fatalf("StreamName() = %q, want spec.name", got)
	}
}

func TestEffectiveReplicationFactor(t *testing.T) {
	t.Parallel()
	three := int32(2)
	cases := []struct {
		spec StreamClusterSpec
		want int32
	}{
		{StreamClusterSpec{}, 3},            // replicas default 3 -> min(3,3)
		{StreamClusterSpec{Replicas: 1}, 1}, // min(3,1)
		{StreamClusterSpec{Replicas: 5}, 3}, // min(3,5)
		{StreamClusterSpec{Replicas: 5, ReplicationFactor: &three}, 2},
	}
	for _, c := range cases {
		if got := c.spec.EffectiveReplicationFactor(); got != c.want {
			t.Errorf("%+v: EffectiveReplicationFactor() = %d, want %d", c.spec, got, c.want)
		}
	}
}

func TestEffectiveLeaseTimings(t *testing.T) {
	t.Parallel()
	lease, renew, retry, err := (&OwnershipSpec{}).EffectiveLeaseTimings()
	if err != nil || lease != 4*time.Second || renew != 3*time.Second || retry != time.Second {
		t.Fatalf("defaults = %s %s %s %v, want 4s 3s 1s", lease, renew, retry, err)
	}
	d := Duration("20s")
	lease, renew, retry, err = (&OwnershipSpec{LeaseDuration: d}).EffectiveLeaseTimings()
	if err != nil || lease != 20*time.Second || renew != 15*time.Second || retry != 5*time.Second {
		t.Fatalf("derived = %s %s %s %v, want 20s 15s 5s", lease, renew, retry, err)
	}
	r := Duration("20s")
	if _, _, _, err := (&OwnershipSpec{LeaseDuration: "15s", RenewDeadline: &r}).EffectiveLeaseTimings(); err == nil {
		t.Fatal("renewDeadline above leaseDuration accepted")
	}
	bad := Duration("-1s")
	if _, _, _, err := (&OwnershipSpec{LeaseDuration: bad}).EffectiveLeaseTimings(); err == nil || !strings.Contains(err.Error(), "leaseDuration") {
		t.Fatalf("negative leaseDuration: err = %v", err)
	}
}

func TestDurationParse(t *testing.T) {
	t.Parallel()
	for in, want := range map[Duration]time.Duration{"": 0, "1.5h": 90 * time.Minute, "500ms": 500 * time.Millisecond} {
		got, err := in.Parse()
		if err != nil || got.Duration != want {
			t.Errorf("Duration(%q).Parse() = %v, %v; want %v", in, got.Duration, err, want)
		}
	}
	for _, in := range []Duration{"-1s", "5", "abc"} {
		if _, err := in.Parse(); err == nil {
			t.Errorf("Duration(%q).Parse() accepted", in)
		}
	}
}

func TestEffectiveContentType(t *testing.T) {
	t.Parallel()
	if got := (&StreamSpec{}).EffectiveContentType(); got != DefaultContentType {
		t.Fatalf("got %q", got)
	}
}

func TestClusterNamespaceDefaultsToTheStreams(t *testing.T) {
	t.Parallel()
	s := &Stream{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders"}}
	if got := s.ClusterNamespace(); got != "shop" {
		t.Fatalf("ClusterNamespace() = %q, want the Stream's own", got)
	}
	s.Spec.ClusterRef.Namespace = "picomq-system"
	if got := s.ClusterNamespace(); got != "picomq-system" {
		t.Fatalf("ClusterNamespace() = %q, want clusterRef.namespace", got)
	}
}

// The allow rule of a cluster in picomq-system, for the namespaces a
// Stream may live in.
func TestAllowedNamespacesAdmits(t *testing.T) {
	t.Parallel()
	const home = "picomq-system"
	shop := map[string]string{"team": "shop", "kubernetes.io/metadata.name": "shop"}
	selector := func(sel metav1.LabelSelector) AllowedNamespaces {
		return AllowedNamespaces{From: NamespacesFromSelector, Selector: &sel}
	}
	cases := []struct {
		name   string
		rule   AllowedNamespaces
		ns     string
		labels map[string]string
		want   bool
		err    string
	}{
		{"own namespace, default rule", AllowedNamespaces{}, home, nil, true, ""},
		{"other namespace, default rule", AllowedNamespaces{}, "shop", shop, false, ""},
		{"other namespace, Same", AllowedNamespaces{From: NamespacesFromSame}, "shop", shop, false, ""},
		{"other namespace, All", AllowedNamespaces{From: NamespacesFromAll}, "shop", shop, true, ""},
		{"labels match", selector(metav1.LabelSelector{MatchLabels: map[string]string{"team": "shop"}}), "shop", shop, true, ""},
		{"labels differ", selector(metav1.LabelSelector{MatchLabels: map[string]string{"team": "billing"}}), "shop", shop, false, ""},
		{"no labels", selector(metav1.LabelSelector{MatchLabels: map[string]string{"team": "shop"}}), "shop", nil, false, ""},
		{"expression matches", selector(metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "team", Operator: metav1.LabelSelectorOpIn, Values: []string{"shop", "billing"}}}}), "shop", shop, true, ""},
		{"expression excludes", selector(metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "team", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"shop"}}}}), "shop", shop, false, ""},
		{"empty selector matches every namespace", selector(metav1.LabelSelector{}), "shop", nil, true, ""},
		// The cluster's own namespace is admitted whatever the selector.
		{"own namespace not selected", selector(metav1.LabelSelector{MatchLabels: map[string]string{"team": "billing"}}), home, nil, true, ""},
		{"Selector without selector", AllowedNamespaces{From: NamespacesFromSelector}, "shop", shop, false, "no selector"},
		{"selector that does not parse", selector(metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "team", Operator: "Near"}}}), "shop", shop, false, "allowedNamespaces.selector"},
		{"unknown from opens nothing", AllowedNamespaces{From: "Everywhere"}, "shop", shop, false, ""},
	}
	for _, c := range cases {
		got, err := c.rule.Admits(home, c.ns, c.labels)
		if got != c.want {
			t.Errorf("%s: Admits = %v, want %v", c.name, got, c.want)
		}
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%s: error %v", c.name, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.err)
		}
	}
}

func TestAllowedNamespacesString(t *testing.T) {
	t.Parallel()
	for rule, want := range map[*AllowedNamespaces]string{
		{}:                         "from: Same",
		{From: NamespacesFromAll}:  "from: All",
		{From: NamespacesFromSame}: "from: Same",
		{From: NamespacesFromSelector, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "shop"}}}: "from: Selector (team=shop)",
		{From: NamespacesFromSelector, Selector: &metav1.LabelSelector{}}:                                               "from: Selector (every namespace)",
	} {
		if got := rule.String(); got != want {
			t.Errorf("%+v: String() = %q, want %q", *rule, got, want)
		}
	}
}
