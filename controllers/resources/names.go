// Package resources holds the pure builders of a StreamCluster's child
// objects: one function per child, from the custom resource (and the few
// inputs the reconciler decides, such as the replica count during a held
// scale-down) to the object the operator applies. Nothing here talks to a
// cluster, so every builder and every override is unit-tested on its own.
//
// Builders set owner references, labels and every field the operator owns;
// fields they leave unset are left to the apiserver's defaults and to other
// controllers, because the reconciler applies the objects with server-side
// apply.
package resources

import (
	"maps"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
)

// Ports, paths and identities the brokers run with.
const (
	// ContainerName is the broker container's name.
	ContainerName = "broker"
	// ClientPortName names the client port (HTTP API, Durable Streams,
	// admin, probes, metrics) on containers and Services.
	ClientPortName = "client"
	// ClientPort is the port the broker listens on inside the pod. The client
	// Service maps spec.service.port to it, so changing that port does not
	// restart the brokers.
	ClientPort = streamsv1alpha1.DefaultClientPort
	// PeerPortName names the port brokers use among themselves (metadata log,
	// object replication).
	PeerPortName = "peer"
	// PeerPort is the peer port inside the pod.
	PeerPort int32 = 4438

	// DataVolumeName is the volume claim template's name: the PVC of pod
	// demo-0 is data-demo-0.
	DataVolumeName = "data"
	// DataMountPath is where the broker's PVC is mounted.
	DataMountPath = "/var/lib/picomq"
	// DataDir is the broker's data directory: a subdirectory of the mount
	// that the broker creates with mode 0700. The broker refuses a
	// group-writable data directory, and kubelet makes the volume's root
	// group-writable for fsGroup.
	DataDir = DataMountPath + "/data"
	// TmpVolumeName is the emptyDir mounted on /tmp (the root file system is
	// read-only).
	TmpVolumeName = "tmp"
	// TLSVolumeName and TLSMountPath hold the server certificate when
	// spec.tls is set.
	TLSVolumeName = "tls"
	TLSMountPath  = "/etc/picomq/tls"
	// CAKey is the TLS Secret's CA bundle, as cert-manager names it.
	CAKey = "ca.crt"
	// AuthVolumeName and AuthMountPath hold the accepted bearer tokens when
	// spec.auth is set.
	AuthVolumeName = "auth"
	AuthMountPath  = "/etc/picomq/auth"
	// TierCredentialsVolumeName and TierCredentialsMountPath hold
	// spec.tieredStorage's access key as two files, TierAccessKeyIDFile
	// and TierSecretAccessKeyFile.
	TierCredentialsVolumeName = "tier-credentials"
	TierCredentialsMountPath  = "/etc/picomq/tier-credentials"
	TierAccessKeyIDFile       = "access-key-id"
	TierSecretAccessKeyFile   = "secret-access-key"
	// TierCAVolumeName and TierCAMountPath hold tieredStorage.caSecret's
	// bundle as TierCAFile.
	TierCAVolumeName = "tier-ca"
	TierCAMountPath  = "/etc/picomq/tier-ca"
	TierCAFile       = "ca.crt"

	// BrokerUser is the user and group the broker runs as (distroless
	// "nonroot"), and the fsGroup of its volume.
	BrokerUser int64 = 65532

	// BrokerCommand is the broker binary in the PicoMQ image.
	BrokerCommand = "/broker"

	// DefaultImageRepository is where PicoMQ images are published.
	DefaultImageRepository = "ghcr.io/picomq/picomq"
	// DefaultImage is the broker image when neither the operator nor the
	// StreamCluster names one.
	DefaultImage = DefaultImageRepository + ":latest"
)

// Labels and annotations the operator sets.
const (
	LabelName      = "app.kubernetes.io/name"
	LabelInstance  = "app.kubernetes.io/instance"
	LabelComponent = "app.kubernetes.io/component"
	LabelManagedBy = "app.kubernetes.io/managed-by"
	LabelPartOf    = "app.kubernetes.io/part-of"
	LabelVersion   = "app.kubernetes.io/version"
	// LabelServiceRole tells the two Services apart (peers, client), so that
	// the ServiceMonitor selects only the headless one.
	LabelServiceRole = "streams.picomq.io/service-role"

	// NameValue is app.kubernetes.io/name of every broker object.
	NameValue = "picomq"
	// ComponentBroker is app.kubernetes.io/component of every broker object.
	ComponentBroker = "broker"
	// ManagedByValue is app.kubernetes.io/managed-by of every child object;
	// the operator's cache selects owned objects by it.
	ManagedByValue = "picomq-operator"

	// ConfigHashAnnotation, on the pod template, is the hash of the broker
	// ConfigMap's data: a config change changes it and so rolls the pods, and
	// nothing else does.
	ConfigHashAnnotation = "streams.picomq.io/config-hash"
)

// HeadlessServiceName is the headless Service giving each broker a DNS name
// (demo-0.demo-headless.ns.svc).
func HeadlessServiceName(c *streamsv1alpha1.StreamCluster) string { return c.Name + "-headless" }

// ClientServiceName is the Service applications connect to.
func ClientServiceName(c *streamsv1alpha1.StreamCluster) string { return c.Name }

// ConfigMapName is the broker configuration's ConfigMap.
func ConfigMapName(c *streamsv1alpha1.StreamCluster) string { return c.Name + "-config" }

// ClusterIDConfigMapName is the ConfigMap holding the recorded cluster id
// (see ClusterIDConfigMap).
func ClusterIDConfigMapName(c *streamsv1alpha1.StreamCluster) string { return c.Name + "-cluster-id" }

// ServiceAccountName is the brokers' ServiceAccount; the Role and the
// RoleBinding share its name.
func ServiceAccountName(c *streamsv1alpha1.StreamCluster) string { return c.Name + "-broker" }

// StatefulSetName is the brokers' StatefulSet; its pods are <name>-<ordinal>.
func StatefulSetName(c *streamsv1alpha1.StreamCluster) string { return c.Name }

// PodDisruptionBudgetName is the brokers' PodDisruptionBudget.
func PodDisruptionBudgetName(c *streamsv1alpha1.StreamCluster) string { return c.Name }

// ServiceMonitorName is the brokers' ServiceMonitor.
func ServiceMonitorName(c *streamsv1alpha1.StreamCluster) string { return c.Name }

// SelectorLabels select the broker pods of c; they never change after
// creation (a StatefulSet's selector is immutable).
func SelectorLabels(c *streamsv1alpha1.StreamCluster) map[string]string {
	return map[string]string{
		LabelName:      NameValue,
		LabelInstance:  c.Name,
		LabelComponent: ComponentBroker,
	}
}

// Labels are set on every child object of c.
func Labels(c *streamsv1alpha1.StreamCluster) map[string]string {
	l := SelectorLabels(c)
	l[LabelManagedBy] = ManagedByValue
	l[LabelPartOf] = NameValue
	return l
}

// objectMeta is the metadata every child shares: name, namespace, labels and
// the controller reference to c.
func objectMeta(c *streamsv1alpha1.StreamCluster, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:            name,
		Namespace:       c.Namespace,
		Labels:          Labels(c),
		OwnerReferences: []metav1.OwnerReference{OwnerReference(c)},
	}
}

// OwnerReference is the controller reference children carry: deleting the
// StreamCluster deletes them (but not the PVCs, which the StatefulSet's
// retention policy keeps).
func OwnerReference(c *streamsv1alpha1.StreamCluster) metav1.OwnerReference {
	return *metav1.NewControllerRef(c, streamsv1alpha1.GroupVersion.WithKind("StreamCluster"))
}

// PodName is the name of the broker pod with that ordinal.
func PodName(c *streamsv1alpha1.StreamCluster, ordinal int32) string {
	return StatefulSetName(c) + "-" + itoa(ordinal)
}

// Scheme is http, or https when spec.tls is set.
func Scheme(c *streamsv1alpha1.StreamCluster) string {
	if c.Spec.TLS != nil {
		return "https"
	}
	return "http"
}

// Endpoint is the URL clients use: the client Service's cluster DNS name and
// port.
func Endpoint(c *streamsv1alpha1.StreamCluster) string {
	return Scheme(c) + "://" + ClientServiceName(c) + "." + c.Namespace + ".svc:" + itoa(servicePort(c))
}

// BrokerURL is the URL of one broker pod, through the headless Service.
func BrokerURL(c *streamsv1alpha1.StreamCluster, pod string) string {
	return Scheme(c) + "://" + pod + "." + HeadlessServiceName(c) + "." + c.Namespace + ".svc:" + itoa(ClientPort)
}

func servicePort(c *streamsv1alpha1.StreamCluster) int32 {
	if c.Spec.Service.Port > 0 {
		return c.Spec.Service.Port
	}
	return streamsv1alpha1.DefaultClientPort
}

func itoa(i int32) string { return strconv.FormatInt(int64(i), 10) }

// withoutKeys returns m without the keys of protected (a fresh map).
func withoutKeys(m map[string]string, protected map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		if _, ok := protected[k]; !ok {
			out[k] = v
		}
	}
	return out
}

// merged returns base with extra's entries added where base has none.
func merged(base, extra map[string]string) map[string]string {
	out := maps.Clone(base)
	if out == nil {
		out = map[string]string{}
	}
	for k, v := range extra {
		if _, ok := out[k]; !ok {
			out[k] = v
		}
	}
	return out
}
