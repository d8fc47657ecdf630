package v1alpha1_test

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// accessHead is a StreamAccess up to its spec's fields.
const accessHead = `
apiVersion: streams.picomq.io/v1alpha1
kind: StreamAccess
metadata: {name: bad}
spec:
  clusterRef: {name: demo, namespace: picomq-system}
`

// StreamAccess: every prefix form the broker takes is admitted, with both
// scopes and tokenFrom; what it would refuse (or a tenant must not have:
// admin) is refused with the rule's message.
func TestStreamAccessValidation(t *testing.T) {
	needsEnvtest(t)
	ctx := context.Background()
	for i, spec := range []string{
		"  scopes: [read, write]\n  prefixes: [shop/]\n",
		"  scopes: [read]\n  prefixes: [shop/orders, shop/eu/, a.b_c-D/x]\n  secretName: shop-token\n",
		"  scopes: [write]\n  prefixes: [" + strings.Repeat("a", 255) + "/]\n  tokenFrom: {secretKeyRef: {name: vault-token, key: token}}\n",
	} {
		u := object(t, accessHead+spec)
		u.SetName("ok-" + string(rune('a'+i)))
		if err := k8s.Create(ctx, u); err != nil {
			t.Errorf("refused:\n%s\n%v", spec, err)
			continue
		}
		cleanup(t, u)
	}
	long := object(t, accessHead+"  scopes: [read]\n  prefixes: [shop/]\n")
	long.SetName(strings.Repeat("a", 182))
	if err := k8s.Create(ctx, long); err != nil {
		t.Errorf("a 182-character name refused: %v", err)
	} else {
		cleanup(t, long)
	}

	for _, c := range []struct{ name, spec, want string }{
		{"admin", "  scopes: [admin]\n  prefixes: [shop/]\n", `supported values: "read", "write"`},
		{"no scope", "  scopes: []\n  prefixes: [shop/]\n", "spec.scopes in body should have at least 1 items"},
		{"no prefix", "  scopes: [read]\n  prefixes: []\n", "spec.prefixes in body should have at least 1 items"},
		{"missing prefixes", "  scopes: [read]\n", "spec.prefixes: Required value"},
		{"scope twice", "  scopes: [read, read]\n  prefixes: [shop/]\n", "Duplicate value"},
		{"dot-dot prefix", "  scopes: [read]\n  prefixes: [shop/../billing/]\n", "prefix segments '.' and '..' are not allowed"},
		{"slash alone", "  scopes: [read]\n  prefixes: [/]\n", "should match"},
		{"leading slash", "  scopes: [read]\n  prefixes: [/shop/]\n", "should match"},
		{"empty segment", "  scopes: [read]\n  prefixes: [shop//x]\n", "should match"},
		{"comma", "  scopes: [read]\n  prefixes: [\"shop,billing/\"]\n", "should match"},
		{"colon", "  scopes: [read]\n  prefixes: [\"shop:x\"]\n", "should match"},
		{"too long", "  scopes: [read]\n  prefixes: [" + strings.Repeat("a", 256) + "]\n", "255 characters at most"},
		{"tokenFrom the Secret written", "  scopes: [read]\n  prefixes: [shop/]\n  tokenFrom: {secretKeyRef: {name: bad, key: token}}\n", "tokenFrom names the Secret the operator writes"},
		{"tokenFrom the secretName", "  scopes: [read]\n  prefixes: [shop/]\n  secretName: s\n  tokenFrom: {secretKeyRef: {name: s, key: token}}\n", "tokenFrom names the Secret the operator writes"},
		{"secretName not a name", "  scopes: [read]\n  prefixes: [shop/]\n  secretName: Shop_Token\n", "spec.secretName in body should match"},
		{"bad tokenFrom key", "  scopes: [read]\n  prefixes: [shop/]\n  tokenFrom: {secretKeyRef: {name: v, key: \"a/b\"}}\n", "spec.tokenFrom.secretKeyRef.key in body should match"},
		{"anonymous prefix", clusterHead + "  auth: {secretName: t, anonymousReadPrefixes: [shop/../x]}\n", "prefix segments '.' and '..' are not allowed"},
		{"urlSigning without secret", clusterHead + "  auth: {secretName: t, urlSigning: {}}\n", "spec.auth.urlSigning.secretName: Required value"},
	} {
		t.Run(c.name, func(t *testing.T) {
			manifest := accessHead + c.spec
			if strings.HasPrefix(c.spec, clusterHead) {
				manifest = c.spec
			}
			u := object(t, manifest)
			err := k8s.Create(ctx, u)
			if err == nil {
				cleanup(t, u)
				t.Fatalf("accepted:\n%s", manifest)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("refused with %q, want %q", err, c.want)
			}
		})
	}

	tooLong := object(t, accessHead+"  scopes: [read]\n  prefixes: [shop/]\n")
	tooLong.SetName(strings.Repeat("a", 183))
	if err := k8s.Create(ctx, tooLong); err == nil || !strings.Contains(err.Error(), "at most 182 characters") {
		t.Errorf("a 183-character name: %v", err)
	}

	// Immutable: the cluster and the Secret pods mount.
	for _, c := range []struct {
		name   string
		mutate func(u *unstructured.Unstructured)
		want   string
	}{
		{"clusterRef", func(u *unstructured.Unstructured) { set(u, "other", "spec", "clusterRef", "name") }, "clusterRef is immutable"},
		{"secretName", func(u *unstructured.Unstructured) { set(u, "other", "spec", "secretName") }, "secretName is immutable"},
		{"secretName removed", func(u *unstructured.Unstructured) { unstructured.RemoveNestedField(u.Object, "spec", "secretName") }, "secretName cannot be added or removed"},
	} {
		t.Run("change "+c.name, func(t *testing.T) {
			u := object(t, accessHead+"  scopes: [read]\n  prefixes: [shop/]\n  secretName: conn\n")
			u.SetName("change-" + strings.ToLower(strings.ReplaceAll(c.name, " ", "-")))
			if err := k8s.Create(ctx, u); err != nil {
				t.Fatal(err)
			}
			cleanup(t, u)
			c.mutate(u)
			if err := k8s.Update(ctx, u); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("update error = %v, want %q", err, c.want)
			}
		})
	}
}
