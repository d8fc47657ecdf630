package controllers

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
	"github.com/picomq/picomq/controllers/resources"
	"github.com/picomq/picomq/internal/testwait"
)

// StreamAccess (issue 31, access as a resource): the cluster in namespace
// "home", the applications' StreamAccesses in theirs, one manager over
// all of them. The brokers are not needed: what the operator does is
// write Secrets, which the brokers' token directory projects (the e2e
// test checks the brokers).

// newAccess creates a StreamAccess on StreamCluster demo of home, reading
// and writing <ns>/ unless mutate says otherwise.
func newAccess(t *testing.T, ns, name, home string, mutate func(*streamsv1alpha1.StreamAccess)) {
	t.Helper()
	a := &streamsv1alpha1.StreamAccess{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: streamsv1alpha1.StreamAccessSpec{
			ClusterRef: streamsv1alpha1.ClusterReference{Name: "demo", Namespace: home},
			Scopes:     []streamsv1alpha1.AccessScope{streamsv1alpha1.AccessRead, streamsv1alpha1.AccessWrite},
			Prefixes:   []string{ns + "/"},
		},
	}
	if mutate != nil {
		mutate(a)
	}
	if err := k8s.Create(context.Background(), a); err != nil {
		t.Fatal(err)
	}
}

func getAccess(t *testing.T, ns, name string) *streamsv1alpha1.StreamAccess {
	t.Helper()
	var a streamsv1alpha1.StreamAccess
	if err := get(t, ns, name, &a); err != nil {
		t.Fatal(err)
	}
	return &a
}

func updateAccess(t *testing.T, ns, name string, mutate func(*streamsv1alpha1.StreamAccess)) {
	t.Helper()
	testwait.NoError(t, 10*time.Second, "", func() error {
		var a streamsv1alpha1.StreamAccess
		if err := get(t, ns, name, &a); err != nil {
			return err
		}
		mutate(&a)
		return k8s.Update(context.Background(), &a)
	})
}

// waitAccess waits for the StreamAccess's Ready condition to have status
// and reason at its current generation.
func waitAccess(t *testing.T, ns, name string, status metav1.ConditionStatus, reason string) *streamsv1alpha1.StreamAccess {
	t.Helper()
	var a streamsv1alpha1.StreamAccess
	testwait.NoError(t, 15*time.Second, "", func() error {
		if err := get(t, ns, name, &a); err != nil {
			return err
		}
		c := condition(a.Status.Conditions, streamsv1alpha1.ConditionReady)
		if c.Status != status || c.Reason != reason || c.ObservedGeneration != a.Generation {
			return fmt.Errorf("Ready = %s/%s (%s) at generation %d of %d, want %s/%s", c.Status, c.Reason, c.Message, c.ObservedGeneration, a.Generation, status, reason)
		}
		return nil
	})
	return &a
}

// accessKey is the value of key in the cluster's access Secret, and
// whether it is there (no Secret: not there).
func accessKey(t *testing.T, home, key string) (string, bool) {
	t.Helper()
	var s corev1.Secret
	err := get(t, home, "demo-access-tokens", &s)
	if apierrors.IsNotFound(err) {
		return "", false
	}
	if err != nil {
		t.Fatal(err)
	}
	v, ok := s.Data[key]
	return string(v), ok
}

// waitAccessKey waits until key holds want in the access Secret ("": is
// absent).
func waitAccessKey(t *testing.T, home, key, want string) {
	t.Helper()
	testwait.NoError(t, 15*time.Second, "", func() error {
		got, ok := accessKey(t, home, key)
		if want == "" && ok {
			return fmt.Errorf("%s still in the access Secret", key)
		}
		if want != "" && got != want {
			return fmt.Errorf("%s = %q (present %v), want %q", key, redact(got), ok, redact(want))
		}
		return nil
	})
}

// redact keeps a token file's items and a token's first bytes.
func redact(v string) string {
	if i := strings.LastIndexByte(v, ':'); i >= 0 && len(v)-i > 6 {
		return v[:i+7] + "…"
	}
	return v
}

// authCluster is a cluster demo with spec.auth, admitting every namespace.
func authCluster(c *streamsv1alpha1.StreamCluster) {
	c.Spec.Auth = &streamsv1alpha1.AuthSpec{SecretName: "tokens"}
	c.Spec.AllowedNamespaces = streamsv1alpha1.AllowedNamespaces{From: streamsv1alpha1.NamespacesFromAll}
}

// shopNamespace is namespace "shop", created once per run (envtest never
// deletes a namespace, and only one test uses it).
func shopNamespace(t *testing.T) string {
	t.Helper()
	needsEnvtest(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}
	if err := k8s.Create(context.Background(), ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	return ns.Name
}

// A StreamAccess in namespace shop: Secret shop/orders-app holds a token
// that the cluster's access Secret grants as read:shop/,write:shop/;
// rotation replaces it; deletion removes it.
func TestStreamAccessGrantsRotatesAndRevokes(t *testing.T) {
	needsEnvtest(t)
	home, shop := newNamespace(t), shopNamespace(t)
	h := startManagerOver(t, Options{}, home, shop)
	newCluster(t, home, "demo", authCluster)
	newAccess(t, shop, "orders-app", home, nil)

	a := waitAccess(t, shop, "orders-app", metav1.ConditionTrue, streamsv1alpha1.ReasonAccepted)
	key := "access.shop.orders-app"
	if a.Status.Cluster != home+"/demo" || a.Status.SecretName != "orders-app" || a.Status.TokenName != key || a.Status.ObservedGeneration != a.Generation {
		t.Errorf("status %+v", a.Status)
	}
	var s corev1.Secret
	if err := get(t, shop, "orders-app", &s); err != nil {
		t.Fatal(err)
	}
	token := string(s.Data["token"])
	if resources.ValidateAccessToken(token) != nil || len(token) != resources.TokenHexLen {
		t.Fatalf("Secret token is not %d hex digits (%d bytes)", resources.TokenHexLen, len(token))
	}
	if got := string(s.Data["scopes"]); got != "read:shop/,write:shop/" {
		t.Errorf("scopes = %q", got)
	}
	if got := string(s.Data["url"]); got != "http://demo."+home+".svc:4437" {
		t.Errorf("url = %q", got)
	}
	if _, ok := s.Data["ca.crt"]; ok {
		t.Errorf("ca.crt without TLS")
	}
	if !metav1.IsControlledBy(&s, a) {
		t.Errorf("Secret owners %+v", s.OwnerReferences)
	}
	waitAccessKey(t, home, key, "read:shop/,write:shop/:"+token)
	var acc corev1.Secret
	if err := get(t, home, "demo-access-tokens", &acc); err != nil {
		t.Fatal(err)
	}
	if !metav1.IsControlledBy(&acc, getCluster(t, home, "demo")) {
		t.Errorf("access Secret owners %+v: it must go with the cluster", acc.OwnerReferences)
	}
	h.expectEvents("orders-app", "TokenIssued", eventNormal, 1)

	// Reconciled again (a spec change that renders the same items): the
	// token stays.
	updateAccess(t, shop, "orders-app", func(a *streamsv1alpha1.StreamAccess) {
		a.Spec.Scopes = []streamsv1alpha1.AccessScope{streamsv1alpha1.AccessWrite, streamsv1alpha1.AccessRead}
	})
	waitAccess(t, shop, "orders-app", metav1.ConditionTrue, streamsv1alpha1.ReasonAccepted)
	if got, _ := accessKey(t, home, key); got != "read:shop/,write:shop/:"+token {
		t.Errorf("the token changed on a reconcile: %q", redact(got))
	}

	// Rotation: a new token in the Secret and the access Secret, the
	// value recorded; the same value again rotates nothing.
	updateAccess(t, shop, "orders-app", func(a *streamsv1alpha1.StreamAccess) {
		a.Annotations = map[string]string{AnnotationRotateToken: "2026-01-01"}
	})
	testwait.NoError(t, 15*time.Second, "", func() error {
		if a := getAccess(t, shop, "orders-app"); a.Status.RotateToken != "2026-01-01" {
			return fmt.Errorf("status.rotateToken %q", a.Status.RotateToken)
		}
		return nil
	})
	if err := get(t, shop, "orders-app", &s); err != nil {
		t.Fatal(err)
	}
	rotated := string(s.Data["token"])
	if rotated == token || resources.ValidateAccessToken(rotated) != nil {
		t.Fatalf("rotation left the token as it was")
	}
	waitAccessKey(t, home, key, "read:shop/,write:shop/:"+rotated)
	h.expectEvents("orders-app", "TokenRotated", eventNormal, 1)

	// The application's Secret deleted by hand: written again with the
	// token in force (no rotation behind the application's back).
	if err := k8s.Delete(context.Background(), &s); err != nil {
		t.Fatal(err)
	}
	testwait.NoError(t, 15*time.Second, "", func() error {
		var again corev1.Secret
		if err := get(t, shop, "orders-app", &again); err != nil {
			return err
		}
		if again.UID == s.UID {
			return fmt.Errorf("not recreated yet")
		}
		if string(again.Data["token"]) != rotated {
			return fmt.Errorf("recreated with another token")
		}
		return nil
	})

	// Deleted: the key goes, and the StreamAccess with it.
	if err := k8s.Delete(context.Background(), getAccess(t, shop, "orders-app")); err != nil {
		t.Fatal(err)
	}
	waitAccessKey(t, home, key, "")
	testwait.NoError(t, 15*time.Second, "", func() error {
		if err := get(t, shop, "orders-app", &streamsv1alpha1.StreamAccess{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("StreamAccess still there (%v)", err)
		}
		return nil
	})
}

// tokenFrom: the user's token is granted and followed as it changes; a
// bad or missing one revokes it; the operator writes no token of its own.
func TestStreamAccessTokenFrom(t *testing.T) {
	needsEnvtest(t)
	home, app := newNamespace(t), newNamespace(t)
	startManagerOver(t, Options{}, home, app)
	newCluster(t, home, "demo", authCluster)
	ctx := context.Background()
	user := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: app, Name: "vault-token"},
		Data: map[string][]byte{"value": []byte("user-token-0123456789\n")}}
	if err := k8s.Create(ctx, user); err != nil {
		t.Fatal(err)
	}
	newAccess(t, app, "reader", home, func(a *streamsv1alpha1.StreamAccess) {
		a.Spec.Scopes = []streamsv1alpha1.AccessScope{streamsv1alpha1.AccessRead}
		a.Spec.SecretName = "reader-conn"
		a.Spec.TokenFrom = &streamsv1alpha1.TokenSource{SecretKeyRef: streamsv1alpha1.SecretKeySelector{Name: "vault-token", Key: "value"}}
	})
	waitAccess(t, app, "reader", metav1.ConditionTrue, streamsv1alpha1.ReasonAccepted)
	key := resources.AccessTokenName(app, "reader")
	waitAccessKey(t, home, key, "read:"+app+"/:user-token-0123456789")
	var s corev1.Secret
	if err := get(t, app, "reader-conn", &s); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Data["token"]; ok || string(s.Data["scopes"]) != "read:"+app+"/" || len(s.Data["url"]) == 0 {
		t.Errorf("Secret keys %v: want scopes and url, no token", keys(s.Data))
	}

	// Changed by its owner: followed.
	user.Data["value"] = []byte("user-token-rotated-9876")
	if err := k8s.Update(ctx, user); err != nil {
		t.Fatal(err)
	}
	waitAccessKey(t, home, key, "read:"+app+"/:user-token-rotated-9876")

	// A value the brokers would split: refused, and the token revoked; the
	// message never quotes it.
	user.Data["value"] = []byte("user:token-with-a-colon")
	if err := k8s.Update(ctx, user); err != nil {
		t.Fatal(err)
	}
	a := waitAccess(t, app, "reader", metav1.ConditionFalse, streamsv1alpha1.ReasonTokenInvalid)
	if msg := condition(a.Status.Conditions, streamsv1alpha1.ConditionReady).Message; strings.Contains(msg, "token-with") || !strings.Contains(msg, "':' or ','") {
		t.Errorf("TokenInvalid message %q", msg)
	}
	waitAccessKey(t, home, key, "")

	// Gone: TokenSecretNotFound; back: granted again.
	if err := k8s.Delete(ctx, user); err != nil {
		t.Fatal(err)
	}
	waitAccess(t, app, "reader", metav1.ConditionFalse, streamsv1alpha1.ReasonTokenSecretNotFound)
	user = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: app, Name: "vault-token"},
		Data: map[string][]byte{"value": []byte("user-token-back-0123456")}}
	if err := k8s.Create(ctx, user); err != nil {
		t.Fatal(err)
	}
	waitAccess(t, app, "reader", metav1.ConditionTrue, streamsv1alpha1.ReasonAccepted)
	waitAccessKey(t, home, key, "read:"+app+"/:user-token-back-0123456")
}

// A namespace the cluster does not admit gets no key; admitted, it gets
// one; refused again, the key goes. A cluster without spec.auth grants
// nothing. A Secret of the name that is not the StreamAccess's is left
// alone.
func TestStreamAccessRefusals(t *testing.T) {
	needsEnvtest(t)
	home, app := newNamespace(t), newNamespace(t)
	h := startManagerOver(t, Options{}, home, app)
	newCluster(t, home, "demo", func(c *streamsv1alpha1.StreamCluster) {
		c.Spec.Auth = &streamsv1alpha1.AuthSpec{SecretName: "tokens"}
	})
	newAccess(t, app, "app", home, nil)
	a := waitAccess(t, app, "app", metav1.ConditionFalse, streamsv1alpha1.ReasonNamespaceNotAllowed)
	if msg := condition(a.Status.Conditions, streamsv1alpha1.ConditionReady).Message; !containsAll(msg, home+"/demo", "namespace "+app, "from: Same") {
		t.Errorf("NamespaceNotAllowed message %q", msg)
	}
	key := resources.AccessTokenName(app, "app")
	if _, ok := accessKey(t, home, key); ok {
		t.Fatal("a namespace the cluster does not admit got a token")
	}
	if err := get(t, app, "app", &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("a Secret written for a StreamAccess not admitted (%v)", err)
	}
	h.expectEvents("app", streamsv1alpha1.ReasonNamespaceNotAllowed, eventWarning, 1)

	updateCluster(t, home, "demo", admitting(streamsv1alpha1.NamespacesFromSelector, teamSelector("shop")))
	labelNamespace(t, app, "team", "shop")
	waitAccess(t, app, "app", metav1.ConditionTrue, streamsv1alpha1.ReasonAccepted)
	testwait.NoError(t, 15*time.Second, "", func() error {
		if _, ok := accessKey(t, home, key); !ok {
			return fmt.Errorf("no key")
		}
		return nil
	})
	labelNamespace(t, app, "team", "")
	waitAccess(t, app, "app", metav1.ConditionFalse, streamsv1alpha1.ReasonNamespaceNotAllowed)
	waitAccessKey(t, home, key, "")
	h.expectEvents("app", "TokenRevoked", eventWarning, 1)

	// No spec.auth: nothing to grant.
	updateCluster(t, home, "demo", func(c *streamsv1alpha1.StreamCluster) {
		c.Spec.Auth = nil
		c.Spec.AllowedNamespaces = streamsv1alpha1.AllowedNamespaces{From: streamsv1alpha1.NamespacesFromAll}
	})
	waitAccess(t, app, "app", metav1.ConditionFalse, streamsv1alpha1.ReasonAuthNotEnabled)

	// Someone else's Secret of that name.
	ctx := context.Background()
	theirs := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: app, Name: "taken"}, Data: map[string][]byte{"x": []byte("y")}}
	if err := k8s.Create(ctx, theirs); err != nil {
		t.Fatal(err)
	}
	updateCluster(t, home, "demo", authCluster)
	newAccess(t, app, "taken", home, nil)
	waitAccess(t, app, "taken", metav1.ConditionFalse, streamsv1alpha1.ReasonSecretConflict)
	if err := get(t, app, "taken", theirs); err != nil || len(theirs.Data) != 1 || string(theirs.Data["x"]) != "y" {
		t.Errorf("their Secret was changed: %v %v", keys(theirs.Data), err)
	}
	if _, ok := accessKey(t, home, resources.AccessTokenName(app, "taken")); ok {
		t.Error("a token granted for a StreamAccess with no Secret of its own")
	}
	waitAccess(t, app, "app", metav1.ConditionTrue, streamsv1alpha1.ReasonAccepted)
}

// Deleting the cluster: its StreamAccesses are ClusterNotFound, and
// deleting one is not held by its finalizer.
func TestStreamAccessClusterDeleted(t *testing.T) {
	needsEnvtest(t)
	home, app := newNamespace(t), newNamespace(t)
	startManagerOver(t, Options{}, home, app)
	newCluster(t, home, "demo", authCluster)
	newAccess(t, app, "app", home, nil)
	waitAccess(t, app, "app", metav1.ConditionTrue, streamsv1alpha1.ReasonAccepted)
	if err := k8s.Delete(context.Background(), getCluster(t, home, "demo")); err != nil {
		t.Fatal(err)
	}
	a := waitAccess(t, app, "app", metav1.ConditionFalse, streamsv1alpha1.ReasonClusterNotFound)
	if a.Status.Cluster != "" || a.Status.TokenName != "" {
		t.Errorf("status still names the cluster: %+v", a.Status)
	}
	if err := k8s.Delete(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	testwait.NoError(t, 15*time.Second, "", func() error {
		if err := get(t, app, "app", &streamsv1alpha1.StreamAccess{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("StreamAccess still there (%v)", err)
		}
		return nil
	})
}

// A user token named like a StreamAccess's is reported: the brokers hold
// the StreamAccess's under that name.
func TestStreamAccessTokenNameClash(t *testing.T) {
	needsEnvtest(t)
	ns := newNamespace(t)
	startManager(t, ns, Options{NotReadyPollInterval: time.Hour})
	newCluster(t, ns, "demo", authCluster)
	key := resources.AccessTokenName(ns, "app")
	if err := k8s.Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tokens"},
		Data: map[string][]byte{key: []byte("read:0123456789abcdef0123")}}); err != nil {
		t.Fatal(err)
	}
	newAccess(t, ns, "app", "", nil)
	waitAccess(t, ns, "app", metav1.ConditionTrue, streamsv1alpha1.ReasonAccepted)
	waitDegraded(t, ns, "demo", streamsv1alpha1.ReasonReservedTokenName, "key "+key)
}

// spec.auth.urlSigning: a missing Secret and bad keys are Degraded with
// their own reasons, fixed through the Secret watch.
func TestStreamClusterURLSigningSecret(t *testing.T) {
	needsEnvtest(t)
	ns := newNamespace(t)
	startManager(t, ns, Options{NotReadyPollInterval: time.Hour})
	ctx := context.Background()
	if err := k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tokens"},
		Data: map[string][]byte{"app": []byte("read:0123456789abcdef0123")}}); err != nil {
		t.Fatal(err)
	}
	newCluster(t, ns, "demo", func(c *streamsv1alpha1.StreamCluster) {
		c.Spec.Auth = &streamsv1alpha1.AuthSpec{SecretName: "tokens", AnonymousReadPrefixes: []string{"public/"},
			URLSigning: &streamsv1alpha1.URLSigningSpec{SecretName: "url-keys"}}
	})
	waitDegraded(t, ns, "demo", streamsv1alpha1.ReasonURLSigningSecretNotFound, "Secret "+ns+"/url-keys does not exist")
	var cm corev1.ConfigMap
	testwait.NoError(t, 15*time.Second, "", func() error { return get(t, ns, "demo-config", &cm) })
	if cm.Data[resources.EnvAnonymousReadPrefixes] != "public/" || cm.Data[resources.EnvURLSigningKeysDir] != resources.URLSigningMountPath {
		t.Errorf("broker config %v", cm.Data)
	}
	keys := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "url-keys"},
		Data: map[string][]byte{"2026-01": []byte("too-short")}}
	if err := k8s.Create(ctx, keys); err != nil {
		t.Fatal(err)
	}
	waitDegraded(t, ns, "demo", streamsv1alpha1.ReasonURLSigningSecretInvalid, `key "2026-01" holds 9 bytes`)
	keys.Data["2026-01"] = []byte(strings.Repeat("k", 32))
	if err := k8s.Update(ctx, keys); err != nil {
		t.Fatal(err)
	}
	testwait.NoError(t, 20*time.Second, "", func() error {
		d := condition(getCluster(t, ns, "demo").Status.Conditions, streamsv1alpha1.ConditionDegraded)
		if d.Reason == streamsv1alpha1.ReasonURLSigningSecretInvalid || d.Reason == streamsv1alpha1.ReasonURLSigningSecretNotFound {
			return fmt.Errorf("still Degraded %s: %s", d.Reason, d.Message)
		}
		return nil
	})
}

// A StreamAccess deleted without its finalizer (removed by hand) leaves
// no token: the cluster's reconcile prunes keys no StreamAccess has, and
// leaves the others.
func TestStreamAccessTokenOfAGoneStreamAccessIsPruned(t *testing.T) {
	needsEnvtest(t)
	home, app := newNamespace(t), newNamespace(t)
	startManagerOver(t, Options{}, home, app)
	newCluster(t, home, "demo", authCluster)
	newAccess(t, app, "kept", home, nil)
	newAccess(t, app, "forced", home, nil)
	waitAccess(t, app, "kept", metav1.ConditionTrue, streamsv1alpha1.ReasonAccepted)
	waitAccess(t, app, "forced", metav1.ConditionTrue, streamsv1alpha1.ReasonAccepted)
	kept, forced := resources.AccessTokenName(app, "kept"), resources.AccessTokenName(app, "forced")
	testwait.NoError(t, 15*time.Second, "", func() error {
		if _, ok := accessKey(t, home, forced); !ok {
			return fmt.Errorf("no key yet")
		}
		return nil
	})
	keptValue, _ := accessKey(t, home, kept)

	// Stop the StreamAccess controller from seeing the deletion's
	// finalizer: remove it by hand, then delete.
	updateAccess(t, app, "forced", func(a *streamsv1alpha1.StreamAccess) { a.Finalizers = nil })
	if err := k8s.Delete(context.Background(), getAccess(t, app, "forced")); err != nil {
		t.Fatal(err)
	}
	waitAccessKey(t, home, forced, "")
	if got, _ := accessKey(t, home, kept); got != keptValue {
		t.Errorf("the pruning touched another StreamAccess's token")
	}
}
