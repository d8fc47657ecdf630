package resources

import (
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
)

// EnvTerminationLog names the file the broker writes its fatal error to
// (cmd/broker --termination-log).
const EnvTerminationLog = "PICOMQ_TERMINATION_LOG"

// Timings of the broker pods.
const (
	// TerminationGracePeriodSeconds covers the preStop pause plus the
	// broker's own shutdown (20s for requests in flight, then flushing and
	// closing its streams), with room to spare.
	TerminationGracePeriodSeconds int64 = 60
	// PreStopSleepSeconds is how long a terminating broker keeps serving
	// before it receives SIGTERM: long enough for the endpoints controllers
	// and the other brokers to stop routing to it, so that the hand-off the
	// broker performs on SIGTERM (stop accepting, flush, close its streams
	// so that their next open happens on a live broker) is not raced by new
	// requests.
	PreStopSleepSeconds int64 = 5
	// DefaultStorageSize is a claim's size when spec.storage.size is unset
	// (the CRD defaults it; this covers objects that bypassed defaulting).
	DefaultStorageSize = "10Gi"
	// TmpSizeLimit bounds the /tmp emptyDir.
	TmpSizeLimit = "64Mi"
)

// StatefulSetParams are what the reconciler decides for the StatefulSet
// beyond the custom resource itself.
type StatefulSetParams struct {
	// Replicas is the replica count to apply: spec.replicas, except while a
	// scale-down waits for the departing brokers to drain, when it is the
	// current count.
	Replicas int32
	// ConfigHash is ConfigHash of the ConfigMap the pods load.
	ConfigHash string
	// DefaultImage is the operator's broker image, used when spec.image is
	// empty (with spec.version as its tag when that is set).
	DefaultImage string
}

// Image is the broker image of c: spec.image; else the default image's
// repository tagged spec.version; else the default image.
func Image(c *streamsv1alpha1.StreamCluster, defaultImage string) string {
	if c.Spec.Image != "" {
		return c.Spec.Image
	}
	if defaultImage == "" {
		defaultImage = DefaultImage
	}
	if c.Spec.Version != "" {
		return imageRepository(defaultImage) + ":" + c.Spec.Version
	}
	return defaultImage
}

// imageRepository strips the tag and digest of an image reference, minding
// registry ports (localhost:5000/picomq:1.0).
func imageRepository(image string) string {
	if i := strings.Index(image, "@"); i >= 0 {
		image = image[:i]
	}
	slash := strings.LastIndex(image, "/")
	if colon := strings.LastIndex(image, ":"); colon > slash {
		image = image[:colon]
	}
	return image
}

// StatefulSet builds the brokers' StatefulSet: Parallel pod management (the
// brokers must all start to elect a metadata leader), one PVC per broker
// kept when the cluster is deleted or scaled down, the restricted Pod
// Security profile, probes on /healthz and /readyz, a preStop pause, a
// default spread across hosts, and spec.podTemplate's overrides applied
// last.
func StatefulSet(c *streamsv1alpha1.StreamCluster, p StatefulSetParams) *appsv1.StatefulSet {
	selector := SelectorLabels(c)
	return &appsv1.StatefulSet{
		TypeMeta:   typeMeta("apps/v1", "StatefulSet"),
		ObjectMeta: objectMeta(c, StatefulSetName(c)),
		Spec: appsv1.StatefulSetSpec{
			Replicas:            ptr.To(p.Replicas),
			Selector:            &metav1.LabelSelector{MatchLabels: selector},
			ServiceName:         HeadlessServiceName(c),
			PodManagementPolicy: appsv1.ParallelPodManagement,
			UpdateStrategy:      appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType},
			PersistentVolumeClaimRetentionPolicy: &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
				WhenDeleted: appsv1.RetainPersistentVolumeClaimRetentionPolicyType,
				WhenScaled:  appsv1.RetainPersistentVolumeClaimRetentionPolicyType,
			},
			Template:             podTemplate(c, p),
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{VolumeClaimTemplate(c)},
		},
	}
}

// VolumeClaimTemplate is the claim every broker gets: ReadWriteOnce,
// spec.storage.size in spec.storage.storageClassName, with the fields set in
// spec.storage.volumeClaimTemplate winning.
func VolumeClaimTemplate(c *streamsv1alpha1.StreamCluster) corev1.PersistentVolumeClaim {
	var spec corev1.PersistentVolumeClaimSpec
	if t := c.Spec.Storage.VolumeClaimTemplate; t != nil {
		spec = *t.DeepCopy()
	}
	if len(spec.AccessModes) == 0 {
		spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	}
	if spec.VolumeMode == nil {
		// The apiserver's default, set here so that the template built is
		// the one the StatefulSet keeps: a claim template is compared and
		// applied whole.
		spec.VolumeMode = ptr.To(corev1.PersistentVolumeFilesystem)
	}
	if spec.StorageClassName == nil && c.Spec.Storage.StorageClassName != nil {
		spec.StorageClassName = ptr.To(*c.Spec.Storage.StorageClassName)
	}
	if _, ok := spec.Resources.Requests[corev1.ResourceStorage]; !ok {
		size := resource.MustParse(DefaultStorageSize)
		if c.Spec.Storage.Size != nil {
			size = c.Spec.Storage.Size.DeepCopy()
		}
		if spec.Resources.Requests == nil {
			spec.Resources.Requests = corev1.ResourceList{}
		}
		spec.Resources.Requests[corev1.ResourceStorage] = size
	}
	return corev1.PersistentVolumeClaim{
		TypeMeta: typeMeta("v1", "PersistentVolumeClaim"),
		ObjectMeta: metav1.ObjectMeta{
			Name: DataVolumeName,
			// No owner reference: claims outlive the cluster.
			Labels: Labels(c),
		},
		Spec: spec,
	}
}

func podTemplate(c *streamsv1alpha1.StreamCluster, p StatefulSetParams) corev1.PodTemplateSpec {
	// A copy: the built object shares nothing with c.
	o := c.Spec.PodTemplate.DeepCopy()
	selector := SelectorLabels(c)

	labels := Labels(c)
	if c.Spec.Version != "" {
		labels[LabelVersion] = c.Spec.Version
	}
	// Overrides win, except over the selector labels.
	for k, v := range withoutKeys(o.Labels, selector) {
		labels[k] = v
	}
	annotations := withoutKeys(o.Annotations, map[string]string{ConfigHashAnnotation: ""})
	annotations[ConfigHashAnnotation] = p.ConfigHash

	spread := []corev1.TopologySpreadConstraint{{
		MaxSkew:           1,
		TopologyKey:       corev1.LabelHostname,
		WhenUnsatisfiable: corev1.ScheduleAnyway,
		LabelSelector:     &metav1.LabelSelector{MatchLabels: selector},
	}}
	if len(o.TopologySpreadConstraints) > 0 {
		spread = o.TopologySpreadConstraints
	}

	spec := corev1.PodSpec{
		ServiceAccountName:            ServiceAccountName(c),
		AutomountServiceAccountToken:  ptr.To(true),
		EnableServiceLinks:            ptr.To(false),
		TerminationGracePeriodSeconds: ptr.To(TerminationGracePeriodSeconds),
		SecurityContext: &corev1.PodSecurityContext{
			RunAsNonRoot: ptr.To(true),
			RunAsUser:    ptr.To(BrokerUser),
			RunAsGroup:   ptr.To(BrokerUser),
			FSGroup:      ptr.To(BrokerUser),
			// Always would re-chmod the whole volume group-writable on every
			// mount; OnRootMismatch leaves the broker's 0700 data directory
			// alone after the first mount.
			FSGroupChangePolicy: ptr.To(corev1.FSGroupChangeOnRootMismatch),
			SeccompProfile:      &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		Containers:                []corev1.Container{container(c, p)},
		Volumes:                   volumes(c),
		TopologySpreadConstraints: spread,
		Affinity:                  o.Affinity,
		NodeSelector:              o.NodeSelector,
		Tolerations:               o.Tolerations,
		PriorityClassName:         o.PriorityClassName,
	}
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: annotations},
		Spec:       spec,
	}
}

func container(c *streamsv1alpha1.StreamCluster, p StatefulSetParams) corev1.Container {
	scheme := corev1.URISchemeHTTP
	if c.Spec.TLS != nil {
		scheme = corev1.URISchemeHTTPS
	}
	probe := func(path string, period, timeout, failures int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: path, Port: intstr.FromString(ClientPortName), Scheme: scheme,
			}},
			PeriodSeconds:    period,
			TimeoutSeconds:   timeout,
			FailureThreshold: failures,
			SuccessThreshold: 1,
		}
	}
	fieldEnv := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{
			FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: path},
		}}
	}
	mounts := []corev1.VolumeMount{
		{Name: DataVolumeName, MountPath: DataMountPath},
		{Name: TmpVolumeName, MountPath: "/tmp"},
	}
	if c.Spec.TLS != nil {
		mounts = append(mounts, corev1.VolumeMount{Name: TLSVolumeName, MountPath: TLSMountPath, ReadOnly: true})
	}
	if c.Spec.Auth != nil {
		mounts = append(mounts, corev1.VolumeMount{Name: AuthVolumeName, MountPath: AuthMountPath, ReadOnly: true})
		if c.Spec.Auth.URLSigning != nil {
			mounts = append(mounts, corev1.VolumeMount{Name: URLSigningVolumeName, MountPath: URLSigningMountPath, ReadOnly: true})
		}
	}
	if t := c.Spec.TieredStorage; t != nil {
		mounts = append(mounts, corev1.VolumeMount{Name: TierCredentialsVolumeName, MountPath: TierCredentialsMountPath, ReadOnly: true})
		if t.CASecret != nil {
			mounts = append(mounts, corev1.VolumeMount{Name: TierCAVolumeName, MountPath: TierCAMountPath, ReadOnly: true})
		}
	}
	ctr := corev1.Container{
		Name:    ContainerName,
		Image:   Image(c, p.DefaultImage),
		Command: []string{BrokerCommand},
		Ports: []corev1.ContainerPort{
			{Name: ClientPortName, ContainerPort: ClientPort, Protocol: corev1.ProtocolTCP},
			{Name: PeerPortName, ContainerPort: PeerPort, Protocol: corev1.ProtocolTCP},
		},
		EnvFrom: []corev1.EnvFromSource{{
			ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: ConfigMapName(c)}},
		}, {
			// The recorded cluster id: optional (it exists once the
			// brokers formed a cluster) and out of the config hash, so
			// recording it rolls nothing (see ClusterIDConfigMap).
			ConfigMapRef: &corev1.ConfigMapEnvSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: ClusterIDConfigMapName(c)},
				Optional:             ptr.To(true),
			},
		}},
		Env: []corev1.EnvVar{
			// The broker's node id is its pod name: stable across restarts,
			// and what the operator addresses it by.
			fieldEnv(EnvNodeID, "metadata.name"),
			// A broker that cannot start writes why to the container's
			// termination-message file, which the kubelet keeps in the pod's
			// status (lastState.terminated.message) and the operator reports
			// in Degraded. It is a property of the pod, not of the broker
			// configuration, so it is not in the ConfigMap (whose hash rolls
			// the pods).
			{Name: EnvTerminationLog, Value: corev1.TerminationMessagePathDefault},
			fieldEnv("POD_NAME", "metadata.name"),
			fieldEnv("POD_NAMESPACE", "metadata.namespace"),
		},
		VolumeMounts: mounts,
		// Startup allows a long metadata log replay (up to 10 minutes)
		// before liveness may restart the broker.
		StartupProbe:   probe("/healthz", 2, 2, 300),
		LivenessProbe:  probe("/healthz", 10, 5, 6),
		ReadinessProbe: probe("/readyz", 5, 2, 3),
		Lifecycle: &corev1.Lifecycle{
			PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: PreStopSleepSeconds}},
		},
		SecurityContext: &corev1.SecurityContext{
			RunAsNonRoot:             ptr.To(true),
			AllowPrivilegeEscalation: ptr.To(false),
			ReadOnlyRootFilesystem:   ptr.To(true),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
	if c.Spec.Resources != nil {
		c.Spec.Resources.DeepCopyInto(&ctr.Resources)
	}
	return ctr
}

func volumes(c *streamsv1alpha1.StreamCluster) []corev1.Volume {
	tmpLimit := resource.MustParse(TmpSizeLimit)
	vs := []corev1.Volume{{
		Name:         TmpVolumeName,
		VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &tmpLimit}},
	}}
	if c.Spec.TLS != nil {
		vs = append(vs, corev1.Volume{Name: TLSVolumeName, VolumeSource: corev1.VolumeSource{
			Secret: &corev1.SecretVolumeSource{SecretName: c.Spec.TLS.SecretName, DefaultMode: ptr.To[int32](0o440)},
		}})
	}
	if c.Spec.Auth != nil {
		vs = append(vs, authVolume(c))
		if u := c.Spec.Auth.URLSigning; u != nil {
			// Whole and required: the brokers re-read the directory as
			// keys are added and removed (rotation), and a missing Secret
			// is reported (URLSigningSecretNotFound) rather than started
			// without keys.
			vs = append(vs, corev1.Volume{Name: URLSigningVolumeName, VolumeSource: corev1.VolumeSource{
				Secret: &corev1.SecretVolumeSource{SecretName: u.SecretName, DefaultMode: ptr.To[int32](0o440)},
			}})
		}
	}
	if t := c.Spec.TieredStorage; t != nil {
		vs = append(vs, tierVolumes(t)...)
	}
	return vs
}

// tierVolumes project spec.tieredStorage's Secrets as the files the
// broker reads. The credentials are a volume, not env, and no hash of
// them is on the template: the kubelet updates the files when the Secret
// changes and the broker re-reads them, so a rotated key takes effect
// without a restart. Required: a broker must not start without the
// credentials of a bucket that may hold its older data.
func tierVolumes(t *streamsv1alpha1.TieredStorageSpec) []corev1.Volume {
	creds := t.CredentialsSecret
	idKey, secretKey := TierCredentialKeys(creds)
	vs := []corev1.Volume{{Name: TierCredentialsVolumeName, VolumeSource: corev1.VolumeSource{
		Secret: &corev1.SecretVolumeSource{
			SecretName: creds.Name,
			Items: []corev1.KeyToPath{
				{Key: idKey, Path: TierAccessKeyIDFile},
				{Key: secretKey, Path: TierSecretAccessKeyFile},
			},
			DefaultMode: ptr.To[int32](0o440),
		},
	}}}
	if ca := t.CASecret; ca != nil {
		key := TierCAKey(*ca)
		vs = append(vs, corev1.Volume{Name: TierCAVolumeName, VolumeSource: corev1.VolumeSource{
			Secret: &corev1.SecretVolumeSource{
				SecretName:  ca.Name,
				Items:       []corev1.KeyToPath{{Key: key, Path: TierCAFile}},
				DefaultMode: ptr.To[int32](0o440),
			},
		}})
	}
	return vs
}

// TierCAKey is the key of tieredStorage.caSecret that holds the bundle,
// the default applied.
func TierCAKey(ca streamsv1alpha1.SecretKeyRef) string {
	if ca.Key == "" {
		return CAKey
	}
	return ca.Key
}

// TierCredentialKeys are the keys of the credentials Secret that hold the
// access key id and the secret key, defaults applied.
func TierCredentialKeys(creds streamsv1alpha1.TierCredentials) (idKey, secretKey string) {
	idKey, secretKey = creds.AccessKeyIDKey, creds.SecretAccessKeyKey
	if idKey == "" {
		idKey = "accessKeyId"
	}
	if secretKey == "" {
		secretKey = "secretAccessKey"
	}
	return idKey, secretKey
}
