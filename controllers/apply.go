package controllers

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// applyOutcome says what an apply did.
type applyOutcome int

const (
	applyUnchanged applyOutcome = iota
	applyCreated
	applyUpdated
)

// applier applies the builders' typed objects with server-side apply, as
// the operator's field manager: the operator owns exactly the fields its
// builders set, and leaves every other field (defaults, other controllers'
// annotations, a user's additions) alone; a field of its own that someone
// changed is set back (ForceOwnership).
type applier struct {
	c      client.Client
	reader client.Reader // where the current object is read (the cache, for owned kinds)
}

// apply applies obj and reports whether it was created, updated or left as
// it was. When the current object already holds every field obj sets, with
// the same values (whatever the server and other managers added), nothing
// is sent: a steady-state reconcile makes no write and no request. obj is
// updated with the server's answer (or with the current object).
func (a applier) apply(ctx context.Context, obj client.Object) (applyOutcome, error) {
	return a.applyIfUnchanged(ctx, obj, "")
}

// applyIfUnchanged is apply with a precondition: when basedOn is not
// empty, the object must still be at that resourceVersion (the one the
// caller decided from), or the apply fails with a Conflict and nothing is
// written. The server checks it too, so a change that lands between the
// read and the write is not overwritten.
func (a applier) applyIfUnchanged(ctx context.Context, obj client.Object, basedOn string) (applyOutcome, error) {
	gvk, err := apiutil.GVKForObject(obj, a.c.Scheme())
	if err != nil {
		return 0, err
	}
	u, err := toApplyConfiguration(obj, gvk.GroupVersion().String(), gvk.Kind)
	if err != nil {
		return 0, err
	}
	existed := true
	prev := obj.DeepCopyObject().(client.Object)
	switch err := a.reader.Get(ctx, client.ObjectKeyFromObject(obj), prev); {
	case apierrors.IsNotFound(err):
		existed = false
	case err != nil:
		return 0, fmt.Errorf("reading %s %s: %w", gvk.Kind, obj.GetName(), err)
	}
	if basedOn != "" {
		if !existed || prev.GetResourceVersion() != basedOn {
			return 0, apierrors.NewConflict(schemaGroupResource(gvk.Group, gvk.Kind), obj.GetName(),
				fmt.Errorf("changed since resourceVersion %s", basedOn))
		}
		u.SetResourceVersion(basedOn)
	}
	if existed {
		have, err := toUnstructured(prev)
		if err != nil {
			return 0, err
		}
		body := u.DeepCopy().Object
		delete(body, "apiVersion")
		delete(body, "kind")
		if md, ok := body["metadata"].(map[string]any); ok {
			delete(md, "resourceVersion")
		}
		if contains(have, body) {
			return applyUnchanged, setFrom(obj, have)
		}
	}
	if err := a.c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return 0, fmt.Errorf("applying %s %s: %w", gvk.Kind, obj.GetName(), err)
	}
	if err := setFrom(obj, u.Object); err != nil {
		return 0, fmt.Errorf("decoding applied %s %s: %w", gvk.Kind, obj.GetName(), err)
	}
	switch {
	case !existed:
		return applyCreated, nil
	case prev.GetResourceVersion() == obj.GetResourceVersion():
		return applyUnchanged, nil
	}
	return applyUpdated, nil
}

func schemaGroupResource(group, kind string) schema.GroupResource {
	return schema.GroupResource{Group: group, Resource: strings.ToLower(kind)}
}

// setFrom decodes m into obj.
func setFrom(obj client.Object, m map[string]any) error {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		u.Object = runtime.DeepCopyJSON(m)
		return nil
	}
	return runtime.DefaultUnstructuredConverter.FromUnstructured(m, obj)
}

func toUnstructured(obj client.Object) (map[string]any, error) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		return u.Object, nil
	}
	return runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
}

// contains reports whether have holds every member of want with the same
// value: maps may have more members, lists must have the same length and
// each element contain want's. An empty map or list in want is held by a
// missing member (the server drops them).
func contains(have, want any) bool {
	switch w := want.(type) {
	case map[string]any:
		h, ok := have.(map[string]any)
		if !ok {
			return len(w) == 0 && have == nil
		}
		for k, wv := range w {
			hv, ok := h[k]
			if !ok {
				if isEmpty(wv) {
					continue
				}
				return false
			}
			if !contains(hv, wv) {
				return false
			}
		}
		return true
	case []any:
		h, ok := have.([]any)
		if !ok {
			return len(w) == 0 && have == nil
		}
		if len(h) != len(w) {
			return false
		}
		for i := range w {
			if !contains(h[i], w[i]) {
				return false
			}
		}
		return true
	case int64:
		switch h := have.(type) {
		case int64:
			return h == w
		case float64:
			return h == float64(w)
		}
		return false
	case float64:
		switch h := have.(type) {
		case int64:
			return float64(h) == w
		case float64:
			return h == w
		}
		return false
	default:
		return have == want
	}
}

func isEmpty(v any) bool {
	switch x := v.(type) {
	case map[string]any:
		return len(x) == 0
	case []any:
		return len(x) == 0
	}
	return false
}

// toApplyConfiguration turns a built object into the body of an apply: its
// fields as set by the builder, with what a typed Go object cannot leave
// out removed — null members (creationTimestamp: null) and the empty
// status blocks, which the operator never owns.
func toApplyConfiguration(obj client.Object, apiVersion, kind string) (*unstructured.Unstructured, error) {
	var m map[string]any
	if u, ok := obj.(*unstructured.Unstructured); ok {
		m = runtime.DeepCopyJSON(u.Object)
	} else {
		var err error
		m, err = runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			return nil, err
		}
	}
	delete(m, "status")
	if spec, ok := m["spec"].(map[string]any); ok {
		if vcts, ok := spec["volumeClaimTemplates"].([]any); ok {
			for _, v := range vcts {
				if vm, ok := v.(map[string]any); ok {
					delete(vm, "status")
				}
			}
		}
	}
	pruneNulls(m)
	u := &unstructured.Unstructured{Object: m}
	u.SetAPIVersion(apiVersion)
	u.SetKind(kind)
	// The server fills these; sending them would be refused or owned.
	u.SetResourceVersion("")
	u.SetManagedFields(nil)
	u.SetUID("")
	u.SetGeneration(0)
	return u, nil
}

// pruneNulls removes null members from m, recursively; a map left empty
// by it is removed too.
func pruneNulls(m map[string]any) {
	for k, v := range m {
		switch x := v.(type) {
		case nil:
			delete(m, k)
		case map[string]any:
			had := len(x) > 0
			pruneNulls(x)
			if had && len(x) == 0 {
				delete(m, k)
			}
		case []any:
			for _, e := range x {
				if em, ok := e.(map[string]any); ok {
					pruneNulls(em)
				}
			}
		}
	}
}
