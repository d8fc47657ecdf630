// Package crdapply applies the operator's own CustomResourceDefinitions
// (config/crd, embedded in the binary) with server-side apply at the
// manager's start (--manage-crds, on by default).
//
// Why the operator and not the installer: Helm installs a chart's crds/ on
// the first install only and never upgrades or deletes them, so a `helm
// upgrade` to an operator that knows a new field would leave the API server
// pruning that field from every object. Applying the CRDs of its own
// version at start makes every install path (Helm, kustomize, a bare
// Deployment) serve the schema the running operator reads. The field
// manager is picomq-operator and ownership is forced: whoever applied them
// before (helm, kubectl) hands the fields over instead of conflicting.
// GitOps users who manage the CRDs themselves turn it off.
package crdapply

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/picomq/picomq/config/crd"
)

// The operator may create and patch its own CRDs, and only them: the
// resourceNames limit the rule to these names (a patch that creates an
// object is authorised as a create of that name, so create is limited too).
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=get;create;patch,resourceNames=streamclusters.streams.picomq.io;streams.streams.picomq.io;streamaccesses.streams.picomq.io

// FieldManager owns the fields of the CRDs the operator applies.
const FieldManager = "picomq-operator"

// Load parses the embedded CRDs, sorted by name.
func Load() ([]*unstructured.Unstructured, error) {
	return load(crd.Bases, "bases")
}

func load(fsys fs.FS, dir string) ([]*unstructured.Unstructured, error) {
	names, err := fs.Glob(fsys, path.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	var out []*unstructured.Unstructured
	for _, name := range names {
		raw, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(raw, &u.Object); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if u.GetKind() != "CustomResourceDefinition" || u.GetName() == "" {
			return nil, fmt.Errorf("%s: not a named CustomResourceDefinition", name)
		}
		out = append(out, u)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no CRD in %s", dir)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetName() < out[j].GetName() })
	return out, nil
}

// Names are the names of the embedded CRDs (the RBAC rule's resourceNames).
func Names() []string {
	crds, err := Load()
	if err != nil {
		return nil
	}
	names := make([]string, len(crds))
	for i, c := range crds {
		names[i] = c.GetName()
	}
	return names
}

// Apply server-side applies crds as FieldManager, forcing ownership, then
// waits up to timeout until the API server serves each (Established).
func Apply(ctx context.Context, c client.Client, crds []*unstructured.Unstructured, timeout time.Duration) error {
	for _, u := range crds {
		obj := u.DeepCopy()
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj),
			client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
			return fmt.Errorf("apply CRD %s: %w", u.GetName(), err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for _, u := range crds {
		var last *apiextensionsv1.CustomResourceDefinition
		err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			got := &apiextensionsv1.CustomResourceDefinition{}
			if err := c.Get(ctx, client.ObjectKey{Name: u.GetName()}, got); err != nil {
				return false, nil
			}
			last = got
			for _, cond := range got.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			var conds any
			if last != nil {
				conds = last.Status.Conditions
			}
			return fmt.Errorf("CRD %s not established within %s: %v (conditions %v)", u.GetName(), timeout, err, conds)
		}
	}
	return nil
}
