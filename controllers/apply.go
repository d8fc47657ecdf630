package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/client-go/applyconfigurations"
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
	body, err := applyBody(obj, gvk)
	if err != nil {
		return 0, fmt.Errorf("building the apply of %s %s: %w", gvk.Kind, obj.GetName(), err)
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
			mapping, err := a.c.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
			if err != nil {
				return 0, err
			}
			return 0, apierrors.NewConflict(mapping.Resource.GroupResource(), obj.GetName(),
				fmt.Errorf("changed since resourceVersion %s", basedOn))
		}
	}
	if existed && holds(a.c.Scheme(), gvk, prev, body) {
		reflect.ValueOf(obj).Elem().Set(reflect.ValueOf(prev).Elem())
		return applyUnchanged, nil
	}
	if basedOn != "" {
		if err := unstructured.SetNestedField(body, basedOn, "metadata", "resourceVersion"); err != nil {
			return 0, err
		}
	}
	ac, err := applyConfiguration(body, gvk)
	if err != nil {
		return 0, fmt.Errorf("building the apply of %s %s: %w", gvk.Kind, obj.GetName(), err)
	}
	if err := a.c.Apply(ctx, ac, client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return 0, fmt.Errorf("applying %s %s: %w", gvk.Kind, obj.GetName(), err)
	}
	// The apply configuration now holds the server's answer.
	if err := decodeInto(obj, ac); err != nil {
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

// applyBody is obj as the body of an apply, unstructured: the fields its
// builder set, and nothing of what the server fills in (resourceVersion,
// uid, managed fields...) nor the status blocks, which the operator never
// owns. A StatefulSet's claim templates go without their status,
// apiVersion and kind too: the apiserver keeps none of them (it sets the
// status phase Pending), and the claim templates are compared whole.
//
// A typed object goes through client-go's apply configuration of its kind
// (applyconfigurations.ForKind), whose fields are all optional: decoding
// the object into it leaves out the members a Go struct cannot (null
// members such as creationTimestamp: null, empty omitempty lists and
// maps). A kind client-go does not know (the ServiceMonitor) is built
// unstructured, and taken as it is.
func applyBody(obj client.Object, gvk schema.GroupVersionKind) (map[string]any, error) {
	raw, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	if ac := applyconfigurations.ForKind(gvk); ac != nil {
		if err := json.Unmarshal(raw, ac); err != nil {
			return nil, err
		}
		if raw, err = json.Marshal(ac); err != nil {
			return nil, err
		}
	}
	var m map[string]any
	// utiljson keeps integers int64, as the unstructured converter does.
	if err := utiljson.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(gvk)
	u.SetResourceVersion("")
	u.SetUID("")
	u.SetGeneration(0)
	u.SetManagedFields(nil)
	unstructured.RemoveNestedField(m, "metadata", "creationTimestamp")
	unstructured.RemoveNestedField(m, "status")
	if claims, ok, _ := unstructured.NestedSlice(m, "spec", "volumeClaimTemplates"); ok {
		for _, c := range claims {
			if cm, ok := c.(map[string]any); ok {
				delete(cm, "status")
				delete(cm, "apiVersion")
				delete(cm, "kind")
			}
		}
		if err := unstructured.SetNestedSlice(m, claims, "spec", "volumeClaimTemplates"); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// applyConfiguration is body as what client.Apply sends: client-go's typed
// apply configuration of its kind, or an unstructured one for a kind
// client-go does not know.
func applyConfiguration(body map[string]any, gvk schema.GroupVersionKind) (runtime.ApplyConfiguration, error) {
	ac, ok := applyconfigurations.ForKind(gvk).(runtime.ApplyConfiguration)
	if !ok {
		return client.ApplyConfigurationFromUnstructured(&unstructured.Unstructured{Object: body}), nil
	}
	raw, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	return ac, json.Unmarshal(raw, ac)
}

// holds reports whether current already holds every field of body with
// the same value, that is whether applying body would change nothing: body
// merged into current's own apply body, by the kind's schema (lists whose
// elements have keys are merged by key, atomic lists and maps replaced
// whole), is current's. Members current has and body has not (defaults,
// other managers' fields) make no difference. The schema is client-go's
// for the kinds it knows, deduced from the objects for the others (maps
// merged by key, lists atomic). When either side does not fit the schema
// the answer is no: the apply is sent and the server decides.
func holds(scheme *runtime.Scheme, gvk schema.GroupVersionKind, current client.Object, body map[string]any) bool {
	have, err := applyBody(current, gvk)
	if err != nil {
		return false
	}
	tc := managedfields.NewDeducedTypeConverter()
	if applyconfigurations.ForKind(gvk) != nil {
		tc = applyconfigurations.NewTypeConverter(scheme)
	}
	haveTV, err := tc.ObjectToTyped(&unstructured.Unstructured{Object: have})
	if err != nil {
		return false
	}
	wantTV, err := tc.ObjectToTyped(&unstructured.Unstructured{Object: body})
	if err != nil {
		return false
	}
	merged, err := haveTV.Merge(wantTV)
	if err != nil {
		return false
	}
	cmp, err := haveTV.Compare(merged)
	return err == nil && cmp.IsSame()
}

// decodeInto sets obj (zeroed first) from v's JSON.
func decodeInto(obj client.Object, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	reflect.ValueOf(obj).Elem().SetZero()
	return json.Unmarshal(raw, obj)
}
