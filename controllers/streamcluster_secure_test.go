package controllers

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
	"github.com/picomq/picomq/controllers/brokeradmin"
	"github.com/picomq/picomq/controllers/resources"
	"github.com/picomq/picomq/internal/testwait"
)

// credsAdmin is the fake BrokerAdmin, remembering the credentials each
// status call carried.
type credsAdmin struct {
	*fakeAdmin
	mu   sync.Mutex
	seen []brokeradmin.Credentials
}

func (a *credsAdmin) Status(ctx context.Context, b brokeradmin.Broker) (brokeradmin.NodeStatus, error) {
	a.mu.Lock()
	a.seen = append(a.seen, b.Credentials)
	a.mu.Unlock()
	return a.fakeAdmin.Status(ctx, b)
}

func (a *credsAdmin) last() brokeradmin.Credentials {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.seen) == 0 {
		return brokeradmin.Credentials{}
	}
	return a.seen[len(a.seen)-1]
}

// waitDegraded waits for Degraded with reason (and, unless "", a message
// containing sub).
func waitDegraded(t *testing.T, ns, name, reason, sub string) {
	t.Helper()
	testwait.NoError(t, 20*time.Second, "", func() error {
		c := getCluster(t, ns, name)
		d := condition(c.Status.Conditions, streamsv1alpha1.ConditionDegraded)
		if d.Reason != reason || !containsAll(d.Message, sub) {
			return fmt.Errorf("Degraded %s %s: %q, want %s mentioning %q", d.Status, d.Reason, d.Message, reason, sub)
		}
		return nil
	})
}

// TestStreamClusterSecure: a TLS+auth cluster with a NetworkPolicy is
// admitted and reconciled into brokers with HTTPS probes, one projected
// token volume and the operator's own token; each missing or wrong Secret
// is Degraded with its reason, and fixing it (no spec change) clears it,
// through the Secret watch; the operator calls the brokers with the CA and
// its token; disabling the NetworkPolicy removes it.
func TestStreamClusterSecure(t *testing.T) {
	ns := newNamespace(t)
	admin := &credsAdmin{fakeAdmin: newFakeAdmin()}
	// A poll slower than every wait below: only the Secret watch can make
	// the operator notice a fixed Secret in time.
	startManager(t, ns, Options{BrokerAdmin: admin, OperatorNamespace: "picomq-system", NotReadyPollInterval: time.Hour})
	ctx := context.Background()
	newCluster(t, ns, "secure", func(c *streamsv1alpha1.StreamCluster) {
		c.Spec.Replicas = 3
		c.Spec.TLS = &streamsv1alpha1.TLSSpec{SecretName: "secure-tls"}
		c.Spec.Auth = &streamsv1alpha1.AuthSpec{SecretName: "secure-tokens"}
		c.Spec.NetworkPolicy = &streamsv1alpha1.NetworkPolicySpec{Enabled: true}
	})

	// Nothing exists yet: Degraded names the TLS Secret, and the children
	// are applied anyway (the pods start once the Secrets exist).
	waitDegraded(t, ns, "secure", streamsv1alpha1.ReasonTLSSecretNotFound, "Secret "+ns+"/secure-tls does not exist")
	var sts appsv1.StatefulSet
	testwait.NoError(t, 20*time.Second, "", func() error { return get(t, ns, "secure", &sts) })
	ctr := sts.Spec.Template.Spec.Containers[0]
	for _, p := range []*corev1.Probe{ctr.StartupProbe, ctr.LivenessProbe, ctr.ReadinessProbe} {
		if p.HTTPGet.Scheme != corev1.URISchemeHTTPS {
			t.Errorf("probe %s over %s", p.HTTPGet.Path, p.HTTPGet.Scheme)
		}
	}
	var auth *corev1.ProjectedVolumeSource
	for _, v := range sts.Spec.Template.Spec.Volumes {
		if v.Name == resources.AuthVolumeName {
			auth = v.Projected
		}
	}
	if auth == nil || len(auth.Sources) != 3 || auth.Sources[0].Secret.Name != "secure-tokens" || auth.Sources[1].Secret.Name != "secure-operator-token" ||
		auth.Sources[2].Secret.Name != "secure-access-tokens" {
		t.Fatalf("auth volume %+v: want the user's tokens, the operator's and the StreamAccesses', projected", auth)
	}
	var cm corev1.ConfigMap
	if err := get(t, ns, "secure-config", &cm); err != nil {
		t.Fatal(err)
	}
	if cm.Data[resources.EnvTLSCAFile] != "/etc/picomq/tls/ca.crt" || cm.Data[resources.EnvAuthTokensDir] != "/etc/picomq/auth" || cm.Data[resources.EnvMetricsAuth] != "open" {
		t.Errorf("broker config %v", cm.Data)
	}

	// The operator's token: created once, owned, never rotated by a
	// reconcile.
	var tok corev1.Secret
	testwait.NoError(t, 20*time.Second, "", func() error { return get(t, ns, "secure-operator-token", &tok) })
	c := getCluster(t, ns, "secure")
	if !metav1.IsControlledBy(&tok, c) {
		t.Errorf("token Secret owners %v", tok.OwnerReferences)
	}
	token, _, ok := resources.ParseOperatorTokens(tok.Data)
	if !ok {
		t.Fatalf("token Secret data is not admin:<64 hex>: keys %v", keys(tok.Data))
	}

	// The NetworkPolicy: client port from this namespace and the
	// operator's, peer port from the brokers only.
	var np networkingv1.NetworkPolicy
	testwait.NoError(t, 20*time.Second, "", func() error { return get(t, ns, "secure-brokers", &np) })
	if len(np.Spec.Ingress) != 2 || len(np.Spec.Ingress[1].From) != 1 || np.Spec.Ingress[1].From[0].PodSelector == nil {
		t.Errorf("NetworkPolicy ingress %+v", np.Spec.Ingress)
	}
	if !metav1.IsControlledBy(&np, c) {
		t.Errorf("NetworkPolicy owners %v", np.OwnerReferences)
	}

	// A TLS Secret without its key, then a valid one: each change is seen
	// through the watch.
	certs := newCerts(t, time.Now().Add(-time.Minute), "*.secure-headless."+ns+".svc", "secure."+ns+".svc")
	bad := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "secure-tls"}, Data: map[string][]byte{"tls.crt": certs.crt, "ca.crt": certs.ca}}
	if err := k8s.Create(ctx, bad); err != nil {
		t.Fatal(err)
	}
	waitDegraded(t, ns, "secure", streamsv1alpha1.ReasonTLSSecretInvalid, "no tls.key")
	bad.Data["tls.key"] = certs.key
	if err := k8s.Update(ctx, bad); err != nil {
		t.Fatal(err)
	}
	waitDegraded(t, ns, "secure", streamsv1alpha1.ReasonAuthSecretNotFound, "Secret "+ns+"/secure-tokens does not exist")

	// A user token named like the operator's.
	tokens := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "secure-tokens"},
		Data: map[string][]byte{"picomq-operator": []byte("admin:0123456789abcdef0123456789")}}
	if err := k8s.Create(ctx, tokens); err != nil {
		t.Fatal(err)
	}
	waitDegraded(t, ns, "secure", streamsv1alpha1.ReasonReservedTokenName, "key picomq-operator")
	tokens.Data = map[string][]byte{"app": []byte("read,write:0123456789abcdef0123456789")}
	if err := k8s.Update(ctx, tokens); err != nil {
		t.Fatal(err)
	}
	testwait.NoError(t, 20*time.Second, "", func() error {
		d := condition(getCluster(t, ns, "secure").Status.Conditions, streamsv1alpha1.ConditionDegraded)
		if slices.Contains([]string{streamsv1alpha1.ReasonTLSSecretNotFound, streamsv1alpha1.ReasonTLSSecretInvalid,
			streamsv1alpha1.ReasonAuthSecretNotFound, streamsv1alpha1.ReasonReservedTokenName}, d.Reason) {
			return fmt.Errorf("still Degraded %s: %s", d.Reason, d.Message)
		}
		return nil
	})
	// The operator now calls the brokers with the CA and its token.
	testwait.NoError(t, 20*time.Second, "", func() error {
		got := admin.last()
		if string(got.CA) != string(certs.ca) || got.Token != token {
			return fmt.Errorf("status call credentials: CA %d bytes, token set %v", len(got.CA), got.Token != "")
		}
		return nil
	})
	if err := get(t, ns, "secure-operator-token", &tok); err != nil {
		t.Fatal(err)
	}
	if now, _, _ := resources.ParseOperatorTokens(tok.Data); now != token {
		t.Error("the operator's token changed across reconciles")
	}

	// Deleted by hand: the operator writes a new one.
	if err := k8s.Delete(ctx, &tok); err != nil {
		t.Fatal(err)
	}
	testwait.NoError(t, 20*time.Second, "", func() error {
		var again corev1.Secret
		if err := get(t, ns, "secure-operator-token", &again); err != nil {
			return err
		}
		if _, _, ok := resources.ParseOperatorTokens(again.Data); !ok || again.UID == tok.UID {
			return fmt.Errorf("not rewritten")
		}
		return nil
	})

	// NetworkPolicy off: removed.
	updateCluster(t, ns, "secure", func(c *streamsv1alpha1.StreamCluster) { c.Spec.NetworkPolicy.Enabled = false })
	testwait.NoError(t, 20*time.Second, "", func() error {
		err := get(t, ns, "secure-brokers", &networkingv1.NetworkPolicy{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("NetworkPolicy still there (%v)", err)
	})
}

func keys(m map[string][]byte) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
