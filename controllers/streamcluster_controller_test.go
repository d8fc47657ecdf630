package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
	"github.com/picomq/picomq/controllers/brokeradmin"
	"github.com/picomq/picomq/controllers/resources"
	"github.com/picomq/picomq/internal/testwait"
)

// newCluster creates a StreamCluster (the apiserver fills the defaults).
func newCluster(t *testing.T, ns, name string, mutate func(*streamsv1alpha1.StreamCluster)) *streamsv1alpha1.StreamCluster {
	t.Helper()
	c := &streamsv1alpha1.StreamCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if mutate != nil {
		mutate(c)
	}
	if err := k8s.Create(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	return c
}

// updateCluster re-reads the cluster and applies mutate to its spec (or
// metadata), retrying on conflicts.
func updateCluster(t *testing.T, ns, name string, mutate func(*streamsv1alpha1.StreamCluster)) {
	t.Helper()
	testwait.NoError(t, 10*time.Second, "", func() error {
		var c streamsv1alpha1.StreamCluster
		if err := get(t, ns, name, &c); err != nil {
			return err
		}
		mutate(&c)
		return k8s.Update(context.Background(), &c)
	})
}

func getCluster(t *testing.T, ns, name string) *streamsv1alpha1.StreamCluster {
	t.Helper()
	var c streamsv1alpha1.StreamCluster
	if err := get(t, ns, name, &c); err != nil {
		t.Fatal(err)
	}
	return &c
}

// waitObserved waits until the cluster's status describes its current
// generation: the controller has reconciled the latest spec.
func waitObserved(t *testing.T, ns, name string) *streamsv1alpha1.StreamCluster {
	t.Helper()
	var c streamsv1alpha1.StreamCluster
	testwait.NoError(t, 15*time.Second, "", func() error {
		if err := get(t, ns, name, &c); err != nil {
			return err
		}
		if c.Status.ObservedGeneration != c.Generation {
			return fmt.Errorf("observedGeneration %d, generation %d", c.Status.ObservedGeneration, c.Generation)
		}
		return nil
	})
	return &c
}

func waitSTS(t *testing.T, ns, name string, cond func(*appsv1.StatefulSet) error) *appsv1.StatefulSet {
	t.Helper()
	var sts appsv1.StatefulSet
	testwait.NoError(t, 15*time.Second, "", func() error {
		if err := get(t, ns, name, &sts); err != nil {
			return err
		}
		if cond != nil {
			return cond(&sts)
		}
		return nil
	})
	return &sts
}

// setSTSStatus plays the StatefulSet controller: ready of the spec's
// replicas are ready, all at the current revision.
func setSTSStatus(t *testing.T, ns, name string, ready int32) {
	t.Helper()
	testwait.NoError(t, 10*time.Second, "", func() error {
		var sts appsv1.StatefulSet
		if err := get(t, ns, name, &sts); err != nil {
			return err
		}
		n := *sts.Spec.Replicas
		rev := fmt.Sprintf("%s-%d", name, sts.Generation)
		sts.Status = appsv1.StatefulSetStatus{
			ObservedGeneration: sts.Generation,
			Replicas:           n, ReadyReplicas: ready, CurrentReplicas: n, UpdatedReplicas: n, AvailableReplicas: ready,
			CurrentRevision: rev, UpdateRevision: rev,
		}
		return k8s.Status().Update(context.Background(), &sts)
	})
}

func wantCondition(c *streamsv1alpha1.StreamCluster, typ string, status metav1.ConditionStatus, reason string) error {
	got := condition(c.Status.Conditions, typ)
	if got.Status != status || got.Reason != reason {
		return fmt.Errorf("%s = %s/%s (%s), want %s/%s", typ, got.Status, got.Reason, got.Message, status, reason)
	}
	return nil
}

func TestStreamClusterCreatesChildrenWithOwnerReferences(t *testing.T) {
	needsEnvtest(t)
	ns := newNamespace(t)
	h := startManager(t, ns, Options{BrokerImage: "registry.example/picomq:test"})
	c := newCluster(t, ns, "demo", nil)

	owned := func(o client.Object) error {
		ref := metav1.GetControllerOf(o)
		if ref == nil || ref.UID != c.UID || ref.Kind != "StreamCluster" || !ptr.Deref(ref.BlockOwnerDeletion, false) {
			return fmt.Errorf("%T %s: controller reference %+v, want the StreamCluster's", o, o.GetName(), ref)
		}
		if o.GetLabels()[resources.LabelManagedBy] != resources.ManagedByValue {
			return fmt.Errorf("%T %s: labels %v lack managed-by", o, o.GetName(), o.GetLabels())
		}
		return nil
	}
	children := map[string]client.Object{
		"demo-broker":   &corev1.ServiceAccount{},
		"demo-config":   &corev1.ConfigMap{},
		"demo-headless": &corev1.Service{},
		"demo":          &corev1.Service{},
	}
	for name, obj := range children {
		testwait.NoError(t, 15*time.Second, "", func() error {
			if err := get(t, ns, name, obj); err != nil {
				return err
			}
			return owned(obj)
		})
	}
	for _, obj := range []client.Object{&rbacv1.Role{}, &rbacv1.RoleBinding{}} {
		testwait.NoError(t, 15*time.Second, "", func() error {
			if err := get(t, ns, "demo-broker", obj); err != nil {
				return err
			}
			return owned(obj)
		})
	}
	var pdb policyv1.PodDisruptionBudget
	testwait.NoError(t, 15*time.Second, "", func() error {
		if err := get(t, ns, "demo", &pdb); err != nil {
			return err
		}
		return owned(&pdb)
	})
	if pdb.Spec.MaxUnavailable.IntValue() != 1 {
		t.Errorf("PDB maxUnavailable = %v, want 1", pdb.Spec.MaxUnavailable)
	}
	sts := waitSTS(t, ns, "demo", func(s *appsv1.StatefulSet) error { return owned(s) })

	// The expected fields, as the apiserver stored them.
	if *sts.Spec.Replicas != 3 || sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement || sts.Spec.ServiceName != "demo-headless" {
		t.Errorf("StatefulSet spec: replicas %d, policy %s, service %s", *sts.Spec.Replicas, sts.Spec.PodManagementPolicy, sts.Spec.ServiceName)
	}
	if p := sts.Spec.PersistentVolumeClaimRetentionPolicy; p == nil || p.WhenDeleted != appsv1.RetainPersistentVolumeClaimRetentionPolicyType || p.WhenScaled != appsv1.RetainPersistentVolumeClaimRetentionPolicyType {
		t.Errorf("PVC retention policy = %+v, want Retain/Retain", p)
	}
	vct := sts.Spec.VolumeClaimTemplates[0]
	if q := vct.Spec.Resources.Requests[corev1.ResourceStorage]; q.String() != "10Gi" || len(vct.OwnerReferences) != 0 {
		t.Errorf("claim template: size %s, owners %v", q.String(), vct.OwnerReferences)
	}
	ctr := sts.Spec.Template.Spec.Containers[0]
	if ctr.Image != "registry.example/picomq:test" {
		t.Errorf("image = %s, want the operator's broker image", ctr.Image)
	}
	if ctr.ReadinessProbe.HTTPGet.Path != "/readyz" || ctr.LivenessProbe.HTTPGet.Path != "/healthz" || ctr.StartupProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("probes: %+v %+v %+v", ctr.ReadinessProbe.HTTPGet, ctr.LivenessProbe.HTTPGet, ctr.StartupProbe.HTTPGet)
	}
	if psc := sts.Spec.Template.Spec.SecurityContext; psc == nil || ptr.Deref(psc.FSGroupChangePolicy, "") != corev1.FSGroupChangeOnRootMismatch || !ptr.Deref(psc.RunAsNonRoot, false) {
		t.Errorf("pod security context = %+v", psc)
	}
	var cm corev1.ConfigMap
	if err := get(t, ns, "demo-config", &cm); err != nil {
		t.Fatal(err)
	}
	if got, want := sts.Spec.Template.Annotations[resources.ConfigHashAnnotation], resources.ConfigHash(&cm); got != want {
		t.Errorf("config hash on the pod template = %q, want %q (the ConfigMap's)", got, want)
	}
	var headless corev1.Service
	if err := get(t, ns, "demo-headless", &headless); err != nil {
		t.Fatal(err)
	}
	if headless.Spec.ClusterIP != corev1.ClusterIPNone || !headless.Spec.PublishNotReadyAddresses {
		t.Errorf("headless service: clusterIP %q, publishNotReadyAddresses %v", headless.Spec.ClusterIP, headless.Spec.PublishNotReadyAddresses)
	}
	var role rbacv1.Role
	if err := get(t, ns, "demo-broker", &role); err != nil {
		t.Fatal(err)
	}
	if len(role.Rules) != 2 || role.Rules[0].Resources[0] != "leases" || !slices.Equal(role.Rules[0].Verbs, resources.LeaseVerbs) ||
		role.Rules[1].Resources[0] != "events" || !slices.Equal(role.Rules[1].Verbs, []string{"create"}) {
		t.Errorf("role rules = %+v", role.Rules)
	}

	got := waitObserved(t, ns, "demo")
	if got.Status.Endpoint != "http://demo."+ns+".svc:4437" {
		t.Errorf("endpoint = %q", got.Status.Endpoint)
	}
	if err := wantCondition(got, streamsv1alpha1.ConditionReady, metav1.ConditionFalse, streamsv1alpha1.ReasonBrokersNotReady); err != nil {
		t.Error(err)
	}
	if err := wantCondition(got, streamsv1alpha1.ConditionDegraded, metav1.ConditionFalse, streamsv1alpha1.ReasonAsExpected); err != nil {
		t.Error(err)
	}
	testwait.NoError(t, 5*time.Second, "", func() error {
		if len(h.events.find("demo", "Created")) < 8 {
			return fmt.Errorf("want a Created event per child, got:\n%s", h.events)
		}
		return nil
	})
}

func TestStreamClusterSpecChangesPropagate(t *testing.T) {
	needsEnvtest(t)
	ns := newNamespace(t)
	startManager(t, ns, Options{})
	newCluster(t, ns, "demo", nil)
	waitSTS(t, ns, "demo", nil)

	updateCluster(t, ns, "demo", func(c *streamsv1alpha1.StreamCluster) {
		c.Spec.Replicas = 5
		c.Spec.Image = "example.org/broker:2"
		c.Spec.Resources = &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")}}
		c.Spec.Service.Type = corev1.ServiceTypeNodePort
		c.Spec.Service.Port = 8080
		c.Spec.Service.Annotations = map[string]string{"lb.example/internal": "true"}
		c.Spec.PodTemplate.NodeSelector = map[string]string{"disk": "ssd"}
		c.Spec.PodTemplate.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "picomq", Effect: corev1.TaintEffectNoSchedule}}
		c.Spec.PodTemplate.Labels = map[string]string{"team": "data"}
		c.Spec.PodDisruptionBudget.MaxUnavailable = ptr.To[int32](2)
	})
	waitSTS(t, ns, "demo", func(s *appsv1.StatefulSet) error {
		ps := s.Spec.Template.Spec
		switch {
		case *s.Spec.Replicas != 5:
			return fmt.Errorf("replicas %d", *s.Spec.Replicas)
		case ps.Containers[0].Image != "example.org/broker:2":
			return fmt.Errorf("image %s", ps.Containers[0].Image)
		case ps.Containers[0].Resources.Requests.Cpu().String() != "250m":
			return fmt.Errorf("resources %v", ps.Containers[0].Resources)
		case ps.NodeSelector["disk"] != "ssd" || len(ps.Tolerations) != 1:
			return fmt.Errorf("nodeSelector %v tolerations %v", ps.NodeSelector, ps.Tolerations)
		case s.Spec.Template.Labels["team"] != "data":
			return fmt.Errorf("labels %v", s.Spec.Template.Labels)
		}
		return nil
	})
	testwait.NoError(t, 10*time.Second, "", func() error {
		var svc corev1.Service
		if err := get(t, ns, "demo", &svc); err != nil {
			return err
		}
		if svc.Spec.Type != corev1.ServiceTypeNodePort || svc.Spec.Ports[0].Port != 8080 || svc.Annotations["lb.example/internal"] != "true" {
			return fmt.Errorf("client service: %s %d %v", svc.Spec.Type, svc.Spec.Ports[0].Port, svc.Annotations)
		}
		var pdb policyv1.PodDisruptionBudget
		if err := get(t, ns, "demo", &pdb); err != nil {
			return err
		}
		if pdb.Spec.MaxUnavailable.IntValue() != 2 {
			return fmt.Errorf("pdb maxUnavailable %v", pdb.Spec.MaxUnavailable)
		}
		return nil
	})
	if c := waitObserved(t, ns, "demo"); c.Status.Endpoint != "http://demo."+ns+".svc:8080" {
		t.Errorf("endpoint = %s, want port 8080", c.Status.Endpoint)
	}
}

func TestStreamClusterConfigChangeRollsPodsAndNothingElseDoes(t *testing.T) {
	needsEnvtest(t)
	ns := newNamespace(t)
	h := startManager(t, ns, Options{})
	newCluster(t, ns, "demo", nil)
	sts := waitSTS(t, ns, "demo", nil)
	hash0, gen0 := sts.Spec.Template.Annotations[resources.ConfigHashAnnotation], sts.Generation
	waitObserved(t, ns, "demo")

	// A status-only change of the cluster: no reconcile, nothing rolls.
	before := h.counts.get("streamcluster", ns, "demo")
	c := getCluster(t, ns, "demo")
	c.Status.MetadataLeader = "someone-else"
	if err := k8s.Status().Update(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	// A spec change outside the broker configuration: reconciled, nothing
	// rolls.
	updateCluster(t, ns, "demo", func(c *streamsv1alpha1.StreamCluster) {
		c.Spec.Service.Annotations = map[string]string{"a": "b"}
	})
	waitObserved(t, ns, "demo")
	sts = waitSTS(t, ns, "demo", nil)
	if h := sts.Spec.Template.Annotations[resources.ConfigHashAnnotation]; h != hash0 || sts.Generation != gen0 {
		t.Fatalf("a Service change touched the pod template: hash %s→%s, generation %d→%d", hash0, h, gen0, sts.Generation)
	}
	if n := h.counts.get("streamcluster", ns, "demo") - before; n > 3 {
		t.Errorf("%d reconciles for one spec change and one status write; want at most 3 (no status-write loop)", n)
	}

	// A broker configuration change: new ConfigMap data, new hash, the
	// pod template changes (the StatefulSet controller rolls the pods).
	updateCluster(t, ns, "demo", func(c *streamsv1alpha1.StreamCluster) {
		c.Spec.Broker.FlushLinger = ptr.To[streamsv1alpha1.Duration]("5ms")
		c.Spec.Broker.LongPollTimeout = ptr.To[streamsv1alpha1.Duration]("20s")
	})
	sts = waitSTS(t, ns, "demo", func(s *appsv1.StatefulSet) error {
		if s.Spec.Template.Annotations[resources.ConfigHashAnnotation] == hash0 {
			return fmt.Errorf("config hash unchanged")
		}
		return nil
	})
	if sts.Generation == gen0 {
		t.Errorf("the StatefulSet generation did not change with the config")
	}
	var cm corev1.ConfigMap
	if err := get(t, ns, "demo-config", &cm); err != nil {
		t.Fatal(err)
	}
	if cm.Data[resources.EnvFlushLinger] != "5ms" || cm.Data[resources.EnvLongPollTimeout] != "20s" {
		t.Errorf("ConfigMap data = %v", cm.Data)
	}
	if got := sts.Spec.Template.Annotations[resources.ConfigHashAnnotation]; got != resources.ConfigHash(&cm) {
		t.Errorf("hash %s is not the new ConfigMap's %s", got, resources.ConfigHash(&cm))
	}
	h.expectEvents("demo", "ConfigChanged", eventNormal, 1)
}

func TestStreamClusterPauseFreezesChildren(t *testing.T) {
	needsEnvtest(t)
	ns := newNamespace(t)
	h := startManager(t, ns, Options{})
	newCluster(t, ns, "demo", nil)
	sts0 := waitSTS(t, ns, "demo", nil)
	waitObserved(t, ns, "demo")

	updateCluster(t, ns, "demo", func(c *streamsv1alpha1.StreamCluster) {
		c.Spec.Paused = true
		c.Spec.Replicas = 5
		c.Spec.Broker.FlushLinger = ptr.To[streamsv1alpha1.Duration]("1ms")
	})
	c := waitObserved(t, ns, "demo")
	if err := wantCondition(c, streamsv1alpha1.ConditionProgressing, metav1.ConditionFalse, streamsv1alpha1.ReasonPaused); err != nil {
		t.Fatal(err)
	}
	// Deleting a child while paused: reconciled, not recreated either.
	before := h.counts.get("streamcluster", ns, "demo")
	if err := k8s.Delete(context.Background(), &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "demo"}}); err != nil {
		t.Fatal(err)
	}
	testwait.NoError(t, 10*time.Second, "", func() error {
		if h.counts.get("streamcluster", ns, "demo") == before {
			return fmt.Errorf("the deletion was not reconciled")
		}
		return nil
	})
	consistently(t, 500*time.Millisecond, func() error {
		if err := get(t, ns, "demo", &corev1.Service{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("paused: the deleted client Service was recreated (err %v)", err)
		}
		return nil
	})
	sts := waitSTS(t, ns, "demo", nil)
	if *sts.Spec.Replicas != 3 || sts.Generation != sts0.Generation {
		t.Errorf("paused: the StatefulSet changed (replicas %d, generation %d→%d)", *sts.Spec.Replicas, sts0.Generation, sts.Generation)
	}
	var cm corev1.ConfigMap
	if err := get(t, ns, "demo-config", &cm); err != nil || cm.Data[resources.EnvFlushLinger] != "" {
		t.Errorf("paused: the ConfigMap changed: %v %v", err, cm.Data)
	}
	if err := get(t, ns, "demo", &corev1.Service{}); !apierrors.IsNotFound(err) {
		t.Errorf("paused: the deleted client Service was recreated (err %v)", err)
	}
	h.expectEvents("demo", "Paused", eventNormal, 1)

	updateCluster(t, ns, "demo", func(c *streamsv1alpha1.StreamCluster) { c.Spec.Paused = false })
	waitSTS(t, ns, "demo", func(s *appsv1.StatefulSet) error {
		if *s.Spec.Replicas != 5 {
			return fmt.Errorf("replicas %d", *s.Spec.Replicas)
		}
		return nil
	})
	testwait.NoError(t, 10*time.Second, "", func() error { return get(t, ns, "demo", &corev1.Service{}) })
	h.expectEvents("demo", "Resumed", eventNormal, 1)
}

func TestStreamClusterStatefulSetStatusDrivesReadyAndProgressing(t *testing.T) {
	needsEnvtest(t)
	ns := newNamespace(t)
	h := startManager(t, ns, Options{NotReadyPollInterval: 300 * time.Millisecond})
	h.admin.set(func(f *fakeAdmin) {
		f.leader = "demo-1"
		f.slots = map[string]int32{"demo-0": 22, "demo-1": 21, "demo-2": 21}
	})
	newCluster(t, ns, "demo", nil)
	waitSTS(t, ns, "demo", nil)

	// Pods starting: 1 of 3 ready.
	setSTSStatus(t, ns, "demo", 1)
	testwait.NoError(t, 10*time.Second, "", func() error {
		c := getCluster(t, ns, "demo")
		if err := wantCondition(c, streamsv1alpha1.ConditionReady, metav1.ConditionFalse, streamsv1alpha1.ReasonBrokersNotReady); err != nil {
			return err
		}
		if err := wantCondition(c, streamsv1alpha1.ConditionProgressing, metav1.ConditionTrue, streamsv1alpha1.ReasonBrokersNotStarted); err != nil {
			return err
		}
		if c.Status.ReadyReplicas != 1 || c.Status.Replicas != 3 {
			return fmt.Errorf("replicas %d/%d", c.Status.ReadyReplicas, c.Status.Replicas)
		}
		return nil
	})
	// All ready, at the current revision.
	setSTSStatus(t, ns, "demo", 3)
	testwait.NoError(t, 10*time.Second, "", func() error {
		c := getCluster(t, ns, "demo")
		if err := wantCondition(c, streamsv1alpha1.ConditionReady, metav1.ConditionTrue, streamsv1alpha1.ReasonAllBrokersReady); err != nil {
			return err
		}
		if err := wantCondition(c, streamsv1alpha1.ConditionProgressing, metav1.ConditionFalse, streamsv1alpha1.ReasonStable); err != nil {
			return err
		}
		if c.Status.MetadataLeader != "demo-1" || len(c.Status.SlotsHeld) != 3 || c.Status.SlotsHeld[0] != (streamsv1alpha1.BrokerSlots{Broker: "demo-0", Slots: 22}) {
			return fmt.Errorf("leader %q, slots %v", c.Status.MetadataLeader, c.Status.SlotsHeld)
		}
		return nil
	})
	h.expectEvents("demo", "Ready", eventNormal, 1)

	// A spec change the StatefulSet controller has not observed yet:
	// Progressing (rolling update).
	updateCluster(t, ns, "demo", func(c *streamsv1alpha1.StreamCluster) { c.Spec.Image = "example.org/broker:3" })
	testwait.NoError(t, 10*time.Second, "", func() error {
		return wantCondition(getCluster(t, ns, "demo"), streamsv1alpha1.ConditionProgressing, metav1.ConditionTrue, streamsv1alpha1.ReasonRollingUpdate)
	})
	setSTSStatus(t, ns, "demo", 3)
	testwait.NoError(t, 10*time.Second, "", func() error {
		return wantCondition(getCluster(t, ns, "demo"), streamsv1alpha1.ConditionProgressing, metav1.ConditionFalse, streamsv1alpha1.ReasonStable)
	})

	// The brokers answer but know no metadata leader: not Ready, whatever
	// the pods' readiness said last.
	h.admin.set(func(f *fakeAdmin) { f.leader = "" })
	setSTSStatus(t, ns, "demo", 3) // any child event; the not-Ready poll would do too
	updateCluster(t, ns, "demo", func(c *streamsv1alpha1.StreamCluster) { c.Spec.Service.Annotations = map[string]string{"x": "y"} })
	testwait.NoError(t, 10*time.Second, "", func() error {
		return wantCondition(getCluster(t, ns, "demo"), streamsv1alpha1.ConditionReady, metav1.ConditionFalse, streamsv1alpha1.ReasonNoMetadataLeader)
	})
	h.expectEvents("demo", "NotReady", eventWarning, 1)
}

// A cluster-mode cluster as its brokers report it: the cluster id recorded
// once and passed to the brokers without rolling them, Ready only with a
// leader and every slot held (the message counting what is missing), the
// voters and the under-replicated objects shown, and a broker of another
// cluster reported, never recorded over the first id.
func TestStreamClusterReportsTheClusterItsBrokersFormed(t *testing.T) {
	needsEnvtest(t)
	ns := newNamespace(t)
	h := startManager(t, ns, Options{NotReadyPollInterval: 200 * time.Millisecond, ResyncPeriod: 500 * time.Millisecond})
	h.admin.set(func(f *fakeAdmin) {
		f.leader = "demo-1"
		f.slots = map[string]int32{"demo-0": 22, "demo-1": 21, "demo-2": 11}
	})
	newCluster(t, ns, "demo", nil)
	waitSTS(t, ns, "demo", nil)
	setSTSStatus(t, ns, "demo", 3)

	// 54 of 64 slots held: not Ready, and the message counts.
	testwait.NoError(t, 10*time.Second, "", func() error {
		c := getCluster(t, ns, "demo")
		if err := wantCondition(c, streamsv1alpha1.ConditionReady, metav1.ConditionFalse, streamsv1alpha1.ReasonSlotsUnheld); err != nil {
			return err
		}
		if msg := condition(c.Status.Conditions, streamsv1alpha1.ConditionReady).Message; !containsAll(msg, "10 of 64 slots have no live holder", "hold 54") {
			return fmt.Errorf("message %q", msg)
		}
		return nil
	})
	// No id reported yet: none recorded, none rendered.
	if c := getCluster(t, ns, "demo"); c.Status.ClusterID != "" {
		t.Fatalf("clusterId %q before any broker reported one", c.Status.ClusterID)
	}
	if err := get(t, ns, "demo-cluster-id", &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the cluster id ConfigMap exists before an id is recorded (err %v)", err)
	}
	sts0 := waitSTS(t, ns, "demo", nil)

	// The brokers report their cluster: recorded, rendered for the brokers,
	// and shown with the voters and the leader's count of objects lacking
	// copies (not the sum of every broker's count of the same objects).
	h.admin.set(func(f *fakeAdmin) {
		f.cluster = "c-1f2e"
		f.voters = []string{"demo-2", "demo-0", "demo-1"}
		f.under = map[string]int32{"demo-0": 3, "demo-1": 2, "demo-2": 3}
	})
	testwait.NoError(t, 10*time.Second, "", func() error {
		c := getCluster(t, ns, "demo")
		if c.Status.ClusterID != "c-1f2e" {
			return fmt.Errorf("clusterId %q", c.Status.ClusterID)
		}
		if !slices.Equal(c.Status.Voters, []string{"demo-0", "demo-1", "demo-2"}) || c.Status.UnderReplicated == nil || *c.Status.UnderReplicated != 2 {
			return fmt.Errorf("voters %v, underReplicated %v", c.Status.Voters, c.Status.UnderReplicated)
		}
		var cm corev1.ConfigMap
		if err := get(t, ns, "demo-cluster-id", &cm); err != nil {
			return err
		}
		if cm.Data[resources.EnvClusterID] != "c-1f2e" || !metav1.IsControlledBy(&cm, c) {
			return fmt.Errorf("cluster id ConfigMap %v, owners %v", cm.Data, cm.OwnerReferences)
		}
		return nil
	})
	h.expectEvents("demo", "ClusterIDRecorded", eventNormal, 1)
	// Recording it rolled nothing: the pod template and its config hash
	// are as they were; the broker ConfigMap does not carry the id.
	consistently(t, time.Second, func() error {
		sts := waitSTS(t, ns, "demo", nil)
		if sts.Generation != sts0.Generation || sts.Spec.Template.Annotations[resources.ConfigHashAnnotation] != sts0.Spec.Template.Annotations[resources.ConfigHashAnnotation] {
			return fmt.Errorf("the StatefulSet changed (generation %d→%d): recording the cluster id would roll every broker", sts0.Generation, sts.Generation)
		}
		return nil
	})
	var cfg corev1.ConfigMap
	if err := get(t, ns, "demo-config", &cfg); err != nil || cfg.Data[resources.EnvClusterID] != "" {
		t.Errorf("broker ConfigMap %v (err %v): the id belongs in demo-cluster-id", cfg.Data, err)
	}

	// Every slot held: Ready.
	h.admin.set(func(f *fakeAdmin) { f.slots["demo-2"] = 21 })
	testwait.NoError(t, 10*time.Second, "", func() error {
		return wantCondition(getCluster(t, ns, "demo"), streamsv1alpha1.ConditionReady, metav1.ConditionTrue, streamsv1alpha1.ReasonAllBrokersReady)
	})

	// No leader: not Ready.
	h.admin.set(func(f *fakeAdmin) { f.leader = "" })
	testwait.NoError(t, 10*time.Second, "", func() error {
		return wantCondition(getCluster(t, ns, "demo"), streamsv1alpha1.ConditionReady, metav1.ConditionFalse, streamsv1alpha1.ReasonNoMetadataLeader)
	})
	h.admin.set(func(f *fakeAdmin) { f.leader = "demo-1" })

	// A broker of another cluster: Degraded, naming it and both ids; the
	// recorded id and the brokers' ConfigMap stay; its slots do not count.
	h.admin.set(func(f *fakeAdmin) { f.clusters["demo-2"] = "c-9999" })
	testwait.NoError(t, 10*time.Second, "", func() error {
		c := getCluster(t, ns, "demo")
		if err := wantCondition(c, streamsv1alpha1.ConditionDegraded, metav1.ConditionTrue, streamsv1alpha1.ReasonClusterIDMismatch); err != nil {
			return err
		}
		if msg := condition(c.Status.Conditions, streamsv1alpha1.ConditionDegraded).Message; !containsAll(msg, "demo-2 reports cluster id c-9999", "recorded c-1f2e") {
			return fmt.Errorf("message %q", msg)
		}
		return wantCondition(c, streamsv1alpha1.ConditionReady, metav1.ConditionFalse, streamsv1alpha1.ReasonSlotsUnheld)
	})
	c := getCluster(t, ns, "demo")
	var cm corev1.ConfigMap
	if err := get(t, ns, "demo-cluster-id", &cm); err != nil || c.Status.ClusterID != "c-1f2e" || cm.Data[resources.EnvClusterID] != "c-1f2e" {
		t.Errorf("clusterId %q, ConfigMap %v (err %v): a mismatch must not overwrite the recorded id", c.Status.ClusterID, cm.Data, err)
	}
	h.expectEvents("demo", streamsv1alpha1.ReasonClusterIDMismatch, eventWarning, 1)
	h.expectEvents("demo", "ClusterIDRecorded", eventNormal, 1)
}

// The case: one broker, its pod ready, its name not resolving
// from the operator. The cluster is not Ready True (readiness is no
// evidence of a metadata leader), the condition says which broker could
// not be reached and why, and the log says it once, not at every
// reconcile.
func TestStreamClusterNotReadyWhenNoBrokerAnswers(t *testing.T) {
	needsEnvtest(t)
	ns := newNamespace(t)
	var logs logLines
	h := startManagerLogging(t, ns, restCfg, Options{NotReadyPollInterval: 100 * time.Millisecond}, logs.logger())
	h.admin.set(func(f *fakeAdmin) { f.leader = "demo-0"; f.down["demo-0"] = true })
	newCluster(t, ns, "demo", func(c *streamsv1alpha1.StreamCluster) { c.Spec.Replicas = 1 })
	waitSTS(t, ns, "demo", nil)
	setSTSStatus(t, ns, "demo", 1)
	var c *streamsv1alpha1.StreamCluster
	testwait.NoError(t, 10*time.Second, "", func() error {
		c = getCluster(t, ns, "demo")
		return wantCondition(c, streamsv1alpha1.ConditionReady, metav1.ConditionUnknown, streamsv1alpha1.ReasonBrokerUnreachable)
	})
	if msg := condition(c.Status.Conditions, streamsv1alpha1.ConditionReady).Message; !containsAll(msg, "broker demo-0 could not be reached", "no such host") {
		t.Errorf("Ready message %q does not say which broker and why", msg)
	}
	// Looked at again and again (every 100ms while not Ready): one log
	// line for the failure.
	start := h.counts.get("streamcluster", ns, "demo")
	testwait.NoError(t, 10*time.Second, "", func() error {
		if n := h.counts.get("streamcluster", ns, "demo") - start; n < 5 {
			return fmt.Errorf("%d reconciles", n)
		}
		return nil
	})
	if n := logs.count("broker did not answer the status call", "demo-0", "no such host"); n != 1 {
		t.Errorf("the unreachable broker was logged %d times over many reconciles, want once", n)
	}

	// It answers: Ready, and one line saying so.
	h.admin.set(func(f *fakeAdmin) { delete(f.down, "demo-0") })
	testwait.NoError(t, 10*time.Second, "", func() error {
		return wantCondition(getCluster(t, ns, "demo"), streamsv1alpha1.ConditionReady, metav1.ConditionTrue, streamsv1alpha1.ReasonAllBrokersReady)
	})
	if n := logs.count("broker answers the status call again", "demo-0"); n != 1 {
		t.Errorf("recovery logged %d times, want once", n)
	}
}

// A broker in CrashLoopBackOff: Degraded names the pod and why (its
// container's waiting reason, restart count, last termination message),
// instead of "AsExpected: nothing needs attention".
func TestStreamClusterDegradedNamesCrashLoopingBrokers(t *testing.T) {
	needsEnvtest(t)
	ns := newNamespace(t)
	h := startManager(t, ns, Options{})
	c := newCluster(t, ns, "demo", func(c *streamsv1alpha1.StreamCluster) { c.Spec.Replicas = 1 })
	waitSTS(t, ns, "demo", nil)
	setSTSStatus(t, ns, "demo", 0)

	// The pod the StatefulSet controller would make, crashing as the
	// kubelet reports it (there is no kubelet here).
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "demo-0", Labels: resources.Labels(c)},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "broker", Image: "broker:test"}}, AutomountServiceAccountToken: ptr.To(false)},
	}
	if err := k8s.Create(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	crashing := crashLooping("demo-0", 4, "broker: usage: --long-poll-timeout 0s: must be positive")
	pod.Status = crashing.Status
	if err := k8s.Status().Update(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	testwait.NoError(t, 10*time.Second, "", func() error {
		c := getCluster(t, ns, "demo")
		if err := wantCondition(c, streamsv1alpha1.ConditionDegraded, metav1.ConditionTrue, streamsv1alpha1.ReasonBrokersFailing); err != nil {
			return err
		}
		if msg := condition(c.Status.Conditions, streamsv1alpha1.ConditionDegraded).Message; !containsAll(msg,
			"demo-0", "CrashLoopBackOff", "restarted 4 times", "last exit code 64", "--long-poll-timeout 0s: must be positive") {
			return fmt.Errorf("Degraded message %q", msg)
		}
		return nil
	})
	h.expectEvents("demo", streamsv1alpha1.ReasonBrokersFailing, eventWarning, 1)

	// The broker runs again: nothing needs attention.
	pod.Status.ContainerStatuses[0].State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}
	if err := k8s.Status().Update(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	testwait.NoError(t, 10*time.Second, "", func() error {
		return wantCondition(getCluster(t, ns, "demo"), streamsv1alpha1.ConditionDegraded, metav1.ConditionFalse, streamsv1alpha1.ReasonAsExpected)
	})
}

// drainTable is a fake drain: each pod drains after a number of calls.
type drainTable struct {
	left map[string]int
}

func (d *drainTable) drain(pod string) (brokeradmin.DrainStatus, error) {
	n, ok := d.left[pod]
	if !ok {
		return brokeradmin.DrainStatus{}, fmt.Errorf("unexpected drain of %s", pod)
	}
	if n > 0 {
		d.left[pod] = n - 1
		return brokeradmin.DrainStatus{Phase: brokeradmin.DrainInProgress, SlotsHeld: int32(n), OpenStreams: int32(3 * n)}, nil
	}
	return brokeradmin.DrainStatus{Phase: brokeradmin.DrainComplete}, nil
}

func TestStreamClusterScaleDownWaitsForDrain(t *testing.T) {
	needsEnvtest(t)
	ns := newNamespace(t)
	h := startManager(t, ns, Options{DrainPollInterval: 200 * time.Millisecond})
	h.admin.set(func(f *fakeAdmin) { f.leader = "demo-0" })
	newCluster(t, ns, "demo", func(c *streamsv1alpha1.StreamCluster) { c.Spec.Replicas = 4 })
	waitSTS(t, ns, "demo", nil)
	setSTSStatus(t, ns, "demo", 4)

	// demo-3 drains after 3 calls, demo-2 after 8: the StatefulSet first
	// keeps 4, then goes to 3 once demo-3 is done, then to 2.
	var mu = make(chan struct{}, 1)
	table := &drainTable{left: map[string]int{"demo-2": 8, "demo-3": 3}}
	h.admin.set(func(f *fakeAdmin) {
		f.drain = func(pod string) (brokeradmin.DrainStatus, error) {
			mu <- struct{}{}
			defer func() { <-mu }()
			return table.drain(pod)
		}
	})
	updateCluster(t, ns, "demo", func(c *streamsv1alpha1.StreamCluster) { c.Spec.Replicas = 2 })
	testwait.NoError(t, 10*time.Second, "", func() error {
		c := getCluster(t, ns, "demo")
		return wantCondition(c, streamsv1alpha1.ConditionProgressing, metav1.ConditionTrue, streamsv1alpha1.ReasonDraining)
	})
	if sts := waitSTS(t, ns, "demo", nil); *sts.Spec.Replicas != 4 {
		t.Fatalf("StatefulSet replicas = %d while the brokers drain, want 4", *sts.Spec.Replicas)
	}
	waitSTS(t, ns, "demo", func(s *appsv1.StatefulSet) error {
		if *s.Spec.Replicas != 3 {
			return fmt.Errorf("replicas %d, want 3 once demo-3 drained", *s.Spec.Replicas)
		}
		return nil
	})
	waitSTS(t, ns, "demo", func(s *appsv1.StatefulSet) error {
		if *s.Spec.Replicas != 2 {
			return fmt.Errorf("replicas %d, want 2 once demo-2 drained", *s.Spec.Replicas)
		}
		return nil
	})
	if h.admin.called("Drain demo-1") != 0 || h.admin.called("Drain demo-0") != 0 {
		t.Errorf("brokers that stay were asked to drain")
	}
	setSTSStatus(t, ns, "demo", 2)
	testwait.NoError(t, 10*time.Second, "", func() error {
		c := getCluster(t, ns, "demo")
		if err := wantCondition(c, streamsv1alpha1.ConditionProgressing, metav1.ConditionFalse, streamsv1alpha1.ReasonStable); err != nil {
			return err
		}
		return wantCondition(c, streamsv1alpha1.ConditionReady, metav1.ConditionTrue, streamsv1alpha1.ReasonAllBrokersReady)
	})
	h.expectEvents("demo", "ScaledDown", eventNormal, 2)
	h.expectEvents("demo", "Draining", eventNormal, 1)
}

func TestStreamClusterScaleDownHeldWhenBrokersCannotDrain(t *testing.T) {
	needsEnvtest(t)
	ns := newNamespace(t)
	h := startManager(t, ns, Options{DrainPollInterval: 200 * time.Millisecond})
	h.admin.set(func(f *fakeAdmin) { f.leader = "demo-0" }) // drain nil: ErrNotSupported
	newCluster(t, ns, "demo", nil)
	waitSTS(t, ns, "demo", nil)
	setSTSStatus(t, ns, "demo", 3)

	updateCluster(t, ns, "demo", func(c *streamsv1alpha1.StreamCluster) { c.Spec.Replicas = 2 })
	testwait.NoError(t, 10*time.Second, "", func() error {
		c := getCluster(t, ns, "demo")
		if err := wantCondition(c, streamsv1alpha1.ConditionProgressing, metav1.ConditionFalse, streamsv1alpha1.ReasonScaleDownBlocked); err != nil {
			return err
		}
		return wantCondition(c, streamsv1alpha1.ConditionDegraded, metav1.ConditionTrue, streamsv1alpha1.ReasonScaleDownBlocked)
	})
	// Polled several times, never executed, one Warning event.
	testwait.NoError(t, 10*time.Second, "", func() error {
		if n := h.admin.called("Drain demo-2"); n < 3 {
			return fmt.Errorf("drain asked %d times", n)
		}
		return nil
	})
	if sts := waitSTS(t, ns, "demo", nil); *sts.Spec.Replicas != 3 {
		t.Fatalf("StatefulSet replicas = %d: the scale-down was executed blindly", *sts.Spec.Replicas)
	}
	h.expectEvents("demo", streamsv1alpha1.ReasonScaleDownBlocked, eventWarning, 1)
	c := getCluster(t, ns, "demo")
	if msg := condition(c.Status.Conditions, streamsv1alpha1.ConditionDegraded).Message; !containsAll(msg, "demo-2", "does not implement drain", "held at 3") {
		t.Errorf("Degraded message does not say why: %q", msg)
	}

	// A broker that does not answer holds it too: asked again (by the
	// drain poll) and refused, the StatefulSet keeps its replicas.
	var unanswered atomic.Int32
	h.admin.set(func(f *fakeAdmin) {
		f.drain = func(pod string) (brokeradmin.DrainStatus, error) {
			unanswered.Add(1)
			return brokeradmin.DrainStatus{}, fmt.Errorf("dial tcp: i/o timeout")
		}
	})
	testwait.NoError(t, 10*time.Second, "", func() error {
		if n := unanswered.Load(); n < 2 {
			return fmt.Errorf("drain asked %d times since the broker stopped answering", n)
		}
		return nil
	})
	if sts := waitSTS(t, ns, "demo", nil); *sts.Spec.Replicas != 3 {
		t.Fatalf("StatefulSet replicas = %d with an unreachable broker", *sts.Spec.Replicas)
	}

	// Reverting the scale-down clears the hold.
	updateCluster(t, ns, "demo", func(c *streamsv1alpha1.StreamCluster) { c.Spec.Replicas = 3 })
	testwait.NoError(t, 10*time.Second, "", func() error {
		c := getCluster(t, ns, "demo")
		if err := wantCondition(c, streamsv1alpha1.ConditionDegraded, metav1.ConditionFalse, streamsv1alpha1.ReasonAsExpected); err != nil {
			return err
		}
		return wantCondition(c, streamsv1alpha1.ConditionProgressing, metav1.ConditionFalse, streamsv1alpha1.ReasonStable)
	})
}

func TestStreamClusterRevertedScaleDownCancelsDrain(t *testing.T) {
	needsEnvtest(t)
	ns := newNamespace(t)
	h := startManager(t, ns, Options{DrainPollInterval: 200 * time.Millisecond})
	h.admin.set(func(f *fakeAdmin) {
		f.leader = "demo-0"
		f.drain = func(string) (brokeradmin.DrainStatus, error) {
			return brokeradmin.DrainStatus{Phase: brokeradmin.DrainInProgress, SlotsHeld: 5}, nil
		}
	})
	newCluster(t, ns, "demo", nil)
	waitSTS(t, ns, "demo", nil)
	setSTSStatus(t, ns, "demo", 3)
	updateCluster(t, ns, "demo", func(c *streamsv1alpha1.StreamCluster) { c.Spec.Replicas = 2 })
	testwait.NoError(t, 10*time.Second, "", func() error {
		if h.admin.called("Drain demo-2") == 0 {
			return fmt.Errorf("not asked to drain yet")
		}
		return nil
	})
	updateCluster(t, ns, "demo", func(c *streamsv1alpha1.StreamCluster) { c.Spec.Replicas = 3 })
	testwait.NoError(t, 10*time.Second, "", func() error {
		if h.admin.called("CancelDrain demo-2") == 0 {
			return fmt.Errorf("drain of demo-2 not cancelled")
		}
		return nil
	})
	if sts := waitSTS(t, ns, "demo", nil); *sts.Spec.Replicas != 3 {
		t.Errorf("replicas = %d", *sts.Spec.Replicas)
	}
}

// TestStreamClusterLeavesACordonAlone: a drain that stays a member (a
// cordon someone asked for, kubectl picomq drain) on a broker that stays
// is not cancelled, where a leftover leave-drain is.
func TestStreamClusterLeavesACordonAlone(t *testing.T) {
	needsEnvtest(t)
	ns := newNamespace(t)
	h := startManager(t, ns, Options{DrainPollInterval: 200 * time.Millisecond})
	h.admin.set(func(f *fakeAdmin) {
		f.leader = "demo-0"
		f.draining["demo-1"] = brokeradmin.DrainStatus{Phase: brokeradmin.DrainInProgress, Stay: true}
		f.draining["demo-2"] = brokeradmin.DrainStatus{Phase: brokeradmin.DrainInProgress}
	})
	newCluster(t, ns, "demo", nil)
	waitSTS(t, ns, "demo", nil)
	setSTSStatus(t, ns, "demo", 3)
	testwait.NoError(t, 10*time.Second, "", func() error {
		if h.admin.called("CancelDrain demo-2") == 0 {
			return fmt.Errorf("the leftover drain of demo-2 not cancelled")
		}
		return nil
	})
	// Another pass or two of the reconcile.
	updateCluster(t, ns, "demo", func(c *streamsv1alpha1.StreamCluster) { c.Labels = map[string]string{"touched": "1"} })
	time.Sleep(time.Second)
	if n := h.admin.called("CancelDrain demo-1"); n != 0 {
		t.Fatalf("the cordon of demo-1 was cancelled %d times", n)
	}
}

func TestStreamClusterDoesNotFightOtherFieldManagers(t *testing.T) {
	needsEnvtest(t)
	ns := newNamespace(t)
	h := startManager(t, ns, Options{DrainPollInterval: 200 * time.Millisecond})
	h.admin.set(func(f *fakeAdmin) {
		f.drain = func(string) (brokeradmin.DrainStatus, error) {
			return brokeradmin.DrainStatus{Phase: brokeradmin.DrainComplete}, nil
		}
	})
	newCluster(t, ns, "demo", nil)
	waitSTS(t, ns, "demo", nil)
	var svc corev1.Service
	testwait.NoError(t, 10*time.Second, "", func() error { return get(t, ns, "demo", &svc) })
	waitObserved(t, ns, "demo")

	// Another controller adds an annotation to the client Service, and
	// someone edits a field of the pod template the operator owns.
	svc.Annotations = map[string]string{"other.example/owned": "yes"}
	if err := k8s.Update(context.Background(), &svc, client.FieldOwner("other-controller")); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Patch(context.Background(), &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "demo"}},
		client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"template":{"spec":{"terminationGracePeriodSeconds":5}}}}`)), client.FieldOwner("kubectl")); err != nil {
		t.Fatal(err)
	}
	// The operator puts its own field back, and leaves the other's.
	waitSTS(t, ns, "demo", func(s *appsv1.StatefulSet) error {
		if g := ptr.Deref(s.Spec.Template.Spec.TerminationGracePeriodSeconds, 0); g != resources.TerminationGracePeriodSeconds {
			return fmt.Errorf("terminationGracePeriodSeconds %d", g)
		}
		return nil
	})
	testwait.NoError(t, 5*time.Second, "", func() error {
		var cur corev1.Service
		if err := get(t, ns, "demo", &cur); err != nil {
			return err
		}
		if cur.Annotations["other.example/owned"] != "yes" {
			return fmt.Errorf("the other manager's annotation was removed: %v", cur.Annotations)
		}
		return nil
	})

	// A StatefulSet scaled up by hand is brought back to spec.replicas the
	// only safe way: the extra broker is drained first.
	if err := k8s.Patch(context.Background(), &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "demo"}},
		client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"replicas":4}}`)), client.FieldOwner("kubectl")); err != nil {
		t.Fatal(err)
	}
	waitSTS(t, ns, "demo", func(s *appsv1.StatefulSet) error {
		if *s.Spec.Replicas != 3 || h.admin.called("Drain demo-3") == 0 {
			return fmt.Errorf("replicas %d, drain of demo-3 asked %d times", *s.Spec.Replicas, h.admin.called("Drain demo-3"))
		}
		return nil
	})

	// Steady state: a reconcile with nothing to change writes nothing.
	// The scale-down's last reconcile asked for another look one
	// DrainPollInterval later: counted below, it would pass for a loop.
	testwait.NoError(t, 10*time.Second, "the reconciles of the scale-down settled", func() error {
		c := h.counts.get("streamcluster", ns, "demo")
		time.Sleep(3 * 200 * time.Millisecond)
		if n := h.counts.get("streamcluster", ns, "demo"); n != c {
			return fmt.Errorf("%d more reconciles", n-c)
		}
		return nil
	})
	sts := waitSTS(t, ns, "demo", nil)
	var cm corev1.ConfigMap
	if err := get(t, ns, "demo-config", &cm); err != nil {
		t.Fatal(err)
	}
	before := h.counts.get("streamcluster", ns, "demo")
	cm.Labels["touch"] = "1" // an owned child changes: one reconcile
	if err := k8s.Update(context.Background(), &cm); err != nil {
		t.Fatal(err)
	}
	testwait.NoError(t, 5*time.Second, "", func() error {
		if h.counts.get("streamcluster", ns, "demo") == before {
			return fmt.Errorf("not reconciled")
		}
		return nil
	})
	consistently(t, 300*time.Millisecond, func() error {
		after := waitSTS(t, ns, "demo", nil)
		if after.ResourceVersion != sts.ResourceVersion {
			return fmt.Errorf("a no-op reconcile rewrote the StatefulSet (resourceVersion %s→%s)", sts.ResourceVersion, after.ResourceVersion)
		}
		return nil
	})
	if n := h.counts.get("streamcluster", ns, "demo") - before; n > 2 {
		t.Errorf("%d reconciles after one child change: a write loop", n)
	}
}

func TestStreamClusterStorageChangeIsReportedNotForced(t *testing.T) {
	needsEnvtest(t)
	ns := newNamespace(t)
	h := startManager(t, ns, Options{})
	newCluster(t, ns, "demo", nil)
	waitSTS(t, ns, "demo", nil)
	waitObserved(t, ns, "demo")
	updateCluster(t, ns, "demo", func(c *streamsv1alpha1.StreamCluster) {
		c.Spec.Storage.Size = ptr.To(resource.MustParse("50Gi"))
		c.Spec.Replicas = 4 // and a change that can be applied
	})
	testwait.NoError(t, 10*time.Second, "", func() error {
		return wantCondition(getCluster(t, ns, "demo"), streamsv1alpha1.ConditionDegraded, metav1.ConditionTrue, streamsv1alpha1.ReasonStorageImmutable)
	})
	sts := waitSTS(t, ns, "demo", nil)
	if q := sts.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[corev1.ResourceStorage]; q.String() != "10Gi" || *sts.Spec.Replicas != 4 {
		t.Errorf("claim size %s (want 10Gi kept), replicas %d (want 4 applied)", q.String(), *sts.Spec.Replicas)
	}
	h.expectEvents("demo", streamsv1alpha1.ReasonStorageImmutable, eventWarning, 1)
}

func TestStreamClusterServiceMonitorOnlyWhenTheCRDExists(t *testing.T) {
	needsEnvtest(t)
	ns := newNamespace(t)
	h := startManager(t, ns, Options{})
	newCluster(t, ns, "demo", func(c *streamsv1alpha1.StreamCluster) { c.Spec.Monitoring.ServiceMonitor = true })
	waitSTS(t, ns, "demo", nil)
	c := waitObserved(t, ns, "demo")
	if err := wantCondition(c, streamsv1alpha1.ConditionDegraded, metav1.ConditionFalse, streamsv1alpha1.ReasonAsExpected); err != nil {
		t.Errorf("a missing ServiceMonitor CRD degraded the cluster: %v", err)
	}
	h.expectEvents("demo", "ServiceMonitorUnavailable", eventWarning, 1)

	installServiceMonitorCRD(t)
	// The next generation applies it.
	updateCluster(t, ns, "demo", func(c *streamsv1alpha1.StreamCluster) { c.Spec.Service.Annotations = map[string]string{"n": "1"} })
	sm := &unstructured.Unstructured{}
	sm.SetGroupVersionKind(resources.ServiceMonitorGVK)
	testwait.NoError(t, 20*time.Second, "", func() error {
		if err := get(t, ns, "demo", sm); err != nil {
			return err
		}
		if ref := metav1.GetControllerOf(sm); ref == nil || ref.Name != "demo" {
			return fmt.Errorf("owner %v", ref)
		}
		return nil
	})
	updateCluster(t, ns, "demo", func(c *streamsv1alpha1.StreamCluster) { c.Spec.Monitoring.ServiceMonitor = false })
	testwait.NoError(t, 10*time.Second, "", func() error {
		if err := get(t, ns, "demo", sm); !apierrors.IsNotFound(err) {
			return fmt.Errorf("ServiceMonitor still there (%v)", err)
		}
		return nil
	})
}

// installServiceMonitorCRD installs a minimal monitoring.coreos.com/v1
// ServiceMonitor CRD (once per suite) and waits until it is served.
func installServiceMonitorCRD(t *testing.T) {
	t.Helper()
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "servicemonitors.monitoring.coreos.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "monitoring.coreos.com",
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "servicemonitors", Singular: "servicemonitor", Kind: "ServiceMonitor", ListKind: "ServiceMonitorList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {Type: "object", XPreserveUnknownFields: ptr.To(true)},
					},
				}},
			}},
		},
	}
	if _, err := envtest.InstallCRDs(restCfg, envtest.CRDInstallOptions{
		CRDs: []*apiextensionsv1.CustomResourceDefinition{crd}, MaxTime: 20 * time.Second, PollInterval: 100 * time.Millisecond,
	}); err != nil {
		t.Fatal(err)
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// A broker back with the data of a member a recovery removed stays up
// serving nothing: the cluster is Degraded (MemberRemoved) naming it and
// its PVC, not Ready though the kubelet still counts its pod, its slots
// are not listed, one Warning says so; wiped, it is a member again.
func TestStreamClusterReportsARemovedBroker(t *testing.T) {
	needsEnvtest(t)
	ns := newNamespace(t)
	h := startManager(t, ns, Options{NotReadyPollInterval: 200 * time.Millisecond, ResyncPeriod: 500 * time.Millisecond})
	h.admin.set(func(f *fakeAdmin) {
		f.leader, f.cluster = "demo-0", "c-1"
		f.slots = map[string]int32{"demo-0": 22, "demo-1": 21, "demo-2": 21}
	})
	newCluster(t, ns, "demo", nil)
	waitSTS(t, ns, "demo", nil)
	setSTSStatus(t, ns, "demo", 3)
	testwait.NoError(t, 10*time.Second, "", func() error {
		return wantCondition(getCluster(t, ns, "demo"), streamsv1alpha1.ConditionReady, metav1.ConditionTrue, streamsv1alpha1.ReasonAllBrokersReady)
	})

	const problem = "MEMBER_REMOVED (0.16.1.14): This broker was removed from the cluster [member=demo-2~old]"
	h.admin.set(func(f *fakeAdmin) {
		f.removed["demo-2"] = problem
		f.slots["demo-0"] = 43
	})
	testwait.NoError(t, 10*time.Second, "", func() error {
		c := getCluster(t, ns, "demo")
		if err := wantCondition(c, streamsv1alpha1.ConditionDegraded, metav1.ConditionTrue, streamsv1alpha1.ReasonMemberRemoved); err != nil {
			return err
		}
		if msg := condition(c.Status.Conditions, streamsv1alpha1.ConditionDegraded).Message; !containsAll(msg,
			"broker demo-2 (member demo-2~old) was removed from the cluster for good", "serves nothing",
			"kubectl delete pvc data-demo-2 --wait=false && kubectl delete pod demo-2", "demo-2 says: "+problem) {
			return fmt.Errorf("Degraded message %q", msg)
		}
		// The StatefulSet still says 3 ready: the removed one is not.
		if err := wantCondition(c, streamsv1alpha1.ConditionReady, metav1.ConditionFalse, streamsv1alpha1.ReasonBrokersNotReady); err != nil {
			return err
		}
		if msg := condition(c.Status.Conditions, streamsv1alpha1.ConditionReady).Message; !containsAll(msg, "2 of 3 brokers ready", "removed from the cluster: demo-2") {
			return fmt.Errorf("Ready message %q", msg)
		}
		if want := []streamsv1alpha1.BrokerSlots{{Broker: "demo-0", Slots: 43}, {Broker: "demo-1", Slots: 21}}; !slices.Equal(c.Status.SlotsHeld, want) {
			return fmt.Errorf("slotsHeld %v, want %v", c.Status.SlotsHeld, want)
		}
		if c.Status.MetadataLeader != "demo-0" {
			return fmt.Errorf("metadataLeader %q", c.Status.MetadataLeader)
		}
		return nil
	})
	h.expectEvents("demo", streamsv1alpha1.ReasonMemberRemoved, eventWarning, 1)
	// Looked at again and again (every NotReadyPollInterval): still one.
	time.Sleep(time.Second)
	h.expectEvents("demo", streamsv1alpha1.ReasonMemberRemoved, eventWarning, 1)

	// Its PVC deleted, it joins as a new member: nothing needs attention.
	h.admin.set(func(f *fakeAdmin) {
		delete(f.removed, "demo-2")
		f.slots["demo-0"] = 22
	})
	testwait.NoError(t, 10*time.Second, "", func() error {
		c := getCluster(t, ns, "demo")
		if err := wantCondition(c, streamsv1alpha1.ConditionDegraded, metav1.ConditionFalse, streamsv1alpha1.ReasonAsExpected); err != nil {
			return err
		}
		return wantCondition(c, streamsv1alpha1.ConditionReady, metav1.ConditionTrue, streamsv1alpha1.ReasonAllBrokersReady)
	})
	h.expectEvents("demo", streamsv1alpha1.ReasonMemberRemoved, eventWarning, 1)
}
