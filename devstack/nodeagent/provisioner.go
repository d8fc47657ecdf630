package nodeagent

import (
	"context"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// The stack's default StorageClass: volumes are directories of the agent's
// state folder, bound once the scheduler picked the pod's node, as a
// local-volume provisioner does.
const (
	StorageClassName = "picomq-dev"
	Provisioner      = "picomq.dev/hostpath"
	// annSelectedNode is set on a claim by the scheduler for
	// WaitForFirstConsumer; annStorageProvisioner by the PV controller
	// when it hands the claim to an external provisioner.
	annSelectedNode        = "volume.kubernetes.io/selected-node"
	annStorageProvisioner  = "volume.kubernetes.io/storage-provisioner"
	annProvisionedBy       = "pv.kubernetes.io/provisioned-by"
	provisionerResyncEvery = 2 * time.Second
)

// StorageClass is the stack's default StorageClass.
func StorageClass() *storagev1.StorageClass {
	return &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{
			Name:        StorageClassName,
			Annotations: map[string]string{"storageclass.kubernetes.io/is-default-class": "true"},
		},
		Provisioner:       Provisioner,
		ReclaimPolicy:     ptr.To(corev1.PersistentVolumeReclaimDelete),
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer),
	}
}

// runProvisioner makes the StorageClass, then creates a PV for every claim
// of it the scheduler placed on one of the agent's nodes, and deletes the
// directory and the PV of every released volume it made.
func (a *Agent) runProvisioner(ctx context.Context) {
	sc := a.client.StorageV1().StorageClasses()
	for ctx.Err() == nil {
		_, err := sc.Create(ctx, StorageClass(), metav1.CreateOptions{})
		if err == nil || apierrors.IsAlreadyExists(err) {
			break
		}
		a.log.Error(err, "create the default StorageClass")
		sleep(ctx, time.Second)
	}
	for ctx.Err() == nil {
		for _, obj := range a.pvcs.List() {
			if err := a.provision(ctx, obj.(*corev1.PersistentVolumeClaim)); err != nil && ctx.Err() == nil {
				a.log.Error(err, "provision a volume")
			}
		}
		for _, obj := range a.pvs.List() {
			if err := a.reclaim(ctx, obj.(*corev1.PersistentVolume)); err != nil && ctx.Err() == nil {
				a.log.Error(err, "reclaim a volume")
			}
		}
		sleep(ctx, provisionerResyncEvery)
	}
}

func (a *Agent) provision(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	node := pvc.Annotations[annSelectedNode]
	if pvc.Spec.VolumeName != "" || pvc.Status.Phase != corev1.ClaimPending || !a.nodes[node] ||
		pvc.Annotations[annStorageProvisioner] != Provisioner || pvc.DeletionTimestamp != nil {
		return nil
	}
	name := "pvc-" + string(pvc.UID)
	dir := filepath.Join(a.opts.Dir, "volumes", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	size := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{annProvisionedBy: Provisioner}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
			AccessModes:                   pvc.Spec.AccessModes,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			StorageClassName:              StorageClassName,
			VolumeMode:                    pvc.Spec.VolumeMode,
			ClaimRef: &corev1.ObjectReference{
				Kind: "PersistentVolumeClaim", APIVersion: "v1",
				Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID,
			},
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: ptr.To(corev1.HostPathDirectory)},
			},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
					Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{node},
				}}}},
			}},
		},
	}
	_, err := a.client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	if err == nil {
		a.log.Info("provisioned a volume", "pv", name, "claim", pvc.Namespace+"/"+pvc.Name, "node", node, "dir", dir)
	}
	return err
}

func (a *Agent) reclaim(ctx context.Context, pv *corev1.PersistentVolume) error {
	if pv.Annotations[annProvisionedBy] != Provisioner || pv.Status.Phase != corev1.VolumeReleased ||
		pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete || pv.Spec.HostPath == nil {
		return nil
	}
	if err := os.RemoveAll(pv.Spec.HostPath.Path); err != nil {
		return err
	}
	err := a.client.CoreV1().PersistentVolumes().Delete(ctx, pv.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pv.UID}})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err == nil {
		a.log.Info("deleted a released volume", "pv", pv.Name)
	}
	return err
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
