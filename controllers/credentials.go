package controllers

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
	"github.com/picomq/picomq/controllers/brokeradmin"
	"github.com/picomq/picomq/controllers/resources"
)

// Secrets are read with the APIReader, never through the manager's cache:
// a cached read would make the manager watch (and hold) every Secret of
// the watched namespaces. The controller watches Secrets' metadata only,
// to reconcile a cluster when one it names changes.

// secretProblem is what is wrong with a Secret a cluster names: a Degraded
// reason and a message naming the Secret.
type secretProblem struct {
	reason, message string
}

// checkSecrets reads the Secrets c names and returns the credentials its
// brokers are called with, and the first problem found (nil: none). err is
// a failure to read them at all (retried).
func checkSecrets(ctx context.Context, rd client.Reader, c *streamsv1alpha1.StreamCluster, now time.Time) (brokeradmin.Credentials, *secretProblem, error) {
	var creds brokeradmin.Credentials
	var problem *secretProblem
	if t := c.Spec.TLS; t != nil {
		s, err := getSecret(ctx, rd, c.Namespace, t.SecretName)
		switch {
		case err != nil:
			return creds, nil, err
		case s == nil:
			problem = &secretProblem{streamsv1alpha1.ReasonTLSSecretNotFound, fmt.Sprintf(
				"spec.tls.secretName: Secret %s/%s does not exist: the broker pods cannot start until it does (a cert-manager Certificate writes it)", c.Namespace, t.SecretName)}
		default:
			if err := validateTLSSecret(c, s, now); err != nil {
				problem = &secretProblem{streamsv1alpha1.ReasonTLSSecretInvalid, fmt.Sprintf("spec.tls.secretName: Secret %s/%s: %v", c.Namespace, t.SecretName, err)}
			} else {
				creds.CA = s.Data[resources.CAKey]
			}
		}
	}
	if a := c.Spec.Auth; a != nil {
		s, err := getSecret(ctx, rd, c.Namespace, a.SecretName)
		switch {
		case err != nil:
			return creds, nil, err
		case s == nil && problem == nil:
			problem = &secretProblem{streamsv1alpha1.ReasonAuthSecretNotFound, fmt.Sprintf(
				"spec.auth.secretName: Secret %s/%s does not exist: the broker pods cannot start until it does (one key per token, each value \"<scopes>:<token>\")", c.Namespace, a.SecretName)}
		case s != nil && problem == nil:
			for _, k := range resources.ReservedTokenNames(c) {
				if _, ok := s.Data[k]; ok {
					problem = &secretProblem{streamsv1alpha1.ReasonReservedTokenName, fmt.Sprintf(
						"spec.auth.secretName: Secret %s/%s has a key %s, the name of a token the operator manages (Secret %s): the brokers hold the operator's token under that name, not this one; rename the key",
						c.Namespace, a.SecretName, k, resources.OperatorTokenSecretName(c))}
					break
				}
			}
		}
		if s != nil && problem == nil {
			problem, err = accessTokenClash(ctx, rd, c, s)
			if err != nil {
				return creds, nil, err
			}
		}
		if u := a.URLSigning; u != nil && problem == nil {
			ks, err := getSecret(ctx, rd, c.Namespace, u.SecretName)
			switch {
			case err != nil:
				return creds, nil, err
			case ks == nil:
				problem = &secretProblem{streamsv1alpha1.ReasonURLSigningSecretNotFound, fmt.Sprintf(
					"spec.auth.urlSigning.secretName: Secret %s/%s does not exist: the broker pods cannot start until it does (one key per signing key: the key's id, its value 32 bytes or more)", c.Namespace, u.SecretName)}
			default:
				if err := resources.ValidateURLSigningKeys(ks.Data); err != nil {
					problem = &secretProblem{streamsv1alpha1.ReasonURLSigningSecretInvalid, fmt.Sprintf("spec.auth.urlSigning.secretName: Secret %s/%s: %v", c.Namespace, u.SecretName, err)}
				}
			}
		}
		op, err := getSecret(ctx, rd, c.Namespace, resources.OperatorTokenSecretName(c))
		if err != nil {
			return creds, nil, err
		}
		if op != nil && metav1.IsControlledBy(op, c) {
			if admin, _, ok := resources.ParseOperatorTokens(op.Data); ok {
				creds.Token = admin
			}
		}
	}
	if t := c.Spec.TieredStorage; t != nil && problem == nil {
		p, err := checkTierSecrets(ctx, rd, c.Namespace, t)
		if err != nil {
			return creds, nil, err
		}
		problem = p
	}
	return creds, problem, nil
}

// accessTokenClash reports a key of the user's auth Secret that a
// StreamAccess's token also has in the cluster's access Secret: the
// access Secret is projected after it, so the user's token of that name
// does not work.
func accessTokenClash(ctx context.Context, rd client.Reader, c *streamsv1alpha1.StreamCluster, user *corev1.Secret) (*secretProblem, error) {
	acc, err := getSecret(ctx, rd, c.Namespace, resources.AccessTokensSecretName(c))
	if err != nil || acc == nil {
		return nil, err
	}
	for _, k := range slices.Sorted(maps.Keys(user.Data)) {
		if _, ok := acc.Data[k]; ok {
			return &secretProblem{streamsv1alpha1.ReasonReservedTokenName, fmt.Sprintf(
				"spec.auth.secretName: Secret %s/%s has a key %s, the name of a StreamAccess's token (Secret %s): the brokers hold that StreamAccess's token under that name, not this one; rename the key",
				c.Namespace, c.Spec.Auth.SecretName, k, resources.AccessTokensSecretName(c))}, nil
		}
	}
	return nil, nil
}

// checkTierSecrets reports a tiered-storage Secret that is missing or
// lacks a key the spec names: the broker pods would wait for their volume.
func checkTierSecrets(ctx context.Context, rd client.Reader, ns string, t *streamsv1alpha1.TieredStorageSpec) (*secretProblem, error) {
	type need struct {
		field, name string
		keys        []string
	}
	idKey, secretKey := resources.TierCredentialKeys(t.CredentialsSecret)
	needs := []need{{"spec.tieredStorage.credentialsSecret", t.CredentialsSecret.Name, []string{idKey, secretKey}}}
	if ca := t.CASecret; ca != nil {
		needs = append(needs, need{"spec.tieredStorage.caSecret", ca.Name, []string{resources.TierCAKey(*ca)}})
	}
	for _, n := range needs {
		s, err := getSecret(ctx, rd, ns, n.name)
		if err != nil {
			return nil, err
		}
		if s == nil {
			return &secretProblem{streamsv1alpha1.ReasonTieredStorageSecretNotFound, fmt.Sprintf(
				"%s: Secret %s/%s does not exist: the broker pods cannot start until it does", n.field, ns, n.name)}, nil
		}
		for _, k := range n.keys {
			if len(s.Data[k]) == 0 {
				return &secretProblem{streamsv1alpha1.ReasonTieredStorageSecretNotFound, fmt.Sprintf(
					"%s: Secret %s/%s has no key %s (or it is empty): the broker pods cannot start until it does", n.field, ns, n.name, k)}, nil
			}
		}
	}
	return nil, nil
}

// getSecret reads a Secret, nil when it does not exist.
func getSecret(ctx context.Context, rd client.Reader, ns, name string) (*corev1.Secret, error) {
	s := &corev1.Secret{}
	err := rd.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, s)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

// validateTLSSecret checks what the brokers and the operator will do with
// the Secret: a certificate and its key that match, a CA they chain to,
// valid now, covering every broker's name and the client Service's (the
// names the operator, the brokers and clients dial).
func validateTLSSecret(c *streamsv1alpha1.StreamCluster, s *corev1.Secret, now time.Time) error {
	var missing []string
	for _, k := range []string{corev1.TLSCertKey, corev1.TLSPrivateKeyKey, resources.CAKey} {
		if len(s.Data[k]) == 0 {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("no %s (a kubernetes.io/tls Secret with tls.crt and tls.key, and ca.crt: the CA the brokers and the operator verify the brokers against)", strings.Join(missing, ", "))
	}
	pair, err := tls.X509KeyPair(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return fmt.Errorf("tls.crt and tls.key: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(s.Data[resources.CAKey]) {
		return errors.New("ca.crt holds no PEM certificate")
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return fmt.Errorf("tls.crt: %w", err)
	}
	inter := x509.NewCertPool()
	for _, der := range pair.Certificate[1:] {
		if ic, err := x509.ParseCertificate(der); err == nil {
			inter.AddCert(ic)
		}
	}
	names := []string{
		resources.PodName(c, 0) + "." + resources.HeadlessServiceName(c) + "." + c.Namespace + ".svc",
		resources.ClientServiceName(c) + "." + c.Namespace + ".svc",
	}
	for _, name := range names {
		if _, err := leaf.Verify(x509.VerifyOptions{
			DNSName: name, Roots: roots, Intermediates: inter, CurrentTime: now,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		}); err != nil {
			return fmt.Errorf("tls.crt does not verify for %s against ca.crt: %w (the certificate must cover *.%s.%s.svc and %s)",
				name, err, resources.HeadlessServiceName(c), c.Namespace, names[1])
		}
	}
	return nil
}

// ensureOperatorToken creates the operator's token Secret when it is
// missing, and rewrites it when it is not what the operator wrote; a valid
// one is left alone (the brokers hold its tokens). It returns the
// operator's admin token.
func ensureOperatorToken(ctx context.Context, cl client.Client, rd client.Reader, c *streamsv1alpha1.StreamCluster) (token string, created bool, err error) {
	name := resources.OperatorTokenSecretName(c)
	existing, err := getSecret(ctx, rd, c.Namespace, name)
	if err != nil {
		return "", false, err
	}
	if existing != nil {
		if !metav1.IsControlledBy(existing, c) {
			return "", false, fmt.Errorf("Secret %s/%s exists and is not the operator's (no controller reference to StreamCluster %s): delete or rename it, the operator keeps its own token there", c.Namespace, name, c.Name)
		}
		if admin, _, ok := resources.ParseOperatorTokens(existing.Data); ok {
			return admin, false, nil
		}
	}
	admin, err := newToken()
	if err != nil {
		return "", false, err
	}
	metrics, err := newToken()
	if err != nil {
		return "", false, err
	}
	want := resources.OperatorTokenSecret(c, admin, metrics)
	if existing == nil {
		if err := cl.Create(ctx, want); err != nil {
			return "", false, err
		}
		return admin, true, nil
	}
	// Rewritten in place, with optimistic locking: a concurrent repair
	// wins and this reconcile retries.
	existing.Data = want.Data
	existing.Type = want.Type
	if err := cl.Update(ctx, existing); err != nil {
		return "", false, err
	}
	return admin, true, nil
}

// newToken is TokenHexLen hex digits from crypto/rand.
func newToken() (string, error) {
	b := make([]byte, resources.TokenHexLen/2)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// clustersOfSecret maps a Secret to the clusters of its namespace that name
// it (spec.tls, spec.auth, spec.auth.urlSigning, spec.tieredStorage) or own it (the operator's
// token, the access Secret).
func clustersOfSecret(cl client.Reader) func(context.Context, client.Object) []reconcile.Request {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		var list streamsv1alpha1.StreamClusterList
		if err := cl.List(ctx, &list, client.InNamespace(o.GetNamespace())); err != nil {
			return nil
		}
		var out []reconcile.Request
		for i := range list.Items {
			c := &list.Items[i]
			names := []string{resources.OperatorTokenSecretName(c)}
			if c.Spec.TLS != nil {
				names = append(names, c.Spec.TLS.SecretName)
			}
			if a := c.Spec.Auth; a != nil {
				names = append(names, a.SecretName, resources.AccessTokensSecretName(c))
				if a.URLSigning != nil {
					names = append(names, a.URLSigning.SecretName)
				}
			}
			if t := c.Spec.TieredStorage; t != nil {
				names = append(names, t.CredentialsSecret.Name)
				if t.CASecret != nil {
					names = append(names, t.CASecret.Name)
				}
			}
			if slices.Contains(names, o.GetName()) {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(c)})
			}
		}
		return out
	}
}
