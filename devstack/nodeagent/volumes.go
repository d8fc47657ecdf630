package nodeagent

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// setUpVolumes makes every volume of the pod and returns where each lives
// on the host.
func (w *podWorker) setUpVolumes(ctx context.Context) (map[string]string, error) {
	out := map[string]string{}
	fsGroup := (*int64)(nil)
	policy := corev1.FSGroupChangeAlways
	if sc := w.pod.Spec.SecurityContext; sc != nil {
		fsGroup = sc.FSGroup
		if sc.FSGroupChangePolicy != nil {
			policy = *sc.FSGroupChangePolicy
		}
	}
	for _, v := range w.pod.Spec.Volumes {
		dir := filepath.Join(w.dir, "volumes", v.Name)
		switch {
		case v.PersistentVolumeClaim != nil:
			path, err := w.claimPath(v.PersistentVolumeClaim.ClaimName)
			if err != nil {
				return nil, err
			}
			if fsGroup != nil {
				if err := applyFSGroup(path, *fsGroup, policy); err != nil {
					return nil, fmt.Errorf("volume %s: fsGroup: %w", v.Name, err)
				}
			}
			out[v.Name] = path
			continue
		case v.HostPath != nil:
			if t := v.HostPath.Type; t != nil && *t == corev1.HostPathDirectoryOrCreate {
				if err := os.MkdirAll(v.HostPath.Path, 0o755); err != nil {
					return nil, err
				}
			}
			out[v.Name] = v.HostPath.Path
			continue
		case v.EmptyDir != nil:
			if err := os.MkdirAll(dir, 0o777); err != nil {
				return nil, err
			}
			if err := os.Chmod(dir, 0o777); err != nil {
				return nil, err
			}
		case v.ConfigMap != nil, v.Secret != nil, v.Projected != nil, v.DownwardAPI != nil:
			if err := w.writeVolume(ctx, v, dir); err != nil {
				return nil, fmt.Errorf("volume %s: %w", v.Name, err)
			}
		default:
			return nil, fmt.Errorf("volume %s: its type is not supported by the local stack (claims, emptyDir, hostPath, configMap, secret, projected and downwardAPI are)", v.Name)
		}
		if fsGroup != nil {
			if err := applyFSGroup(dir, *fsGroup, corev1.FSGroupChangeAlways); err != nil {
				return nil, err
			}
		}
		out[v.Name] = dir
	}
	return out, nil
}

// refreshVolumes writes the file volumes again, so that a changed
// ConfigMap or Secret reaches the pod's files, as the kubelet's sync does.
func (w *podWorker) refreshVolumes(ctx context.Context) error {
	for _, v := range w.pod.Spec.Volumes {
		if v.ConfigMap != nil || v.Secret != nil || v.Projected != nil || v.DownwardAPI != nil {
			if err := w.writeVolume(ctx, v, filepath.Join(w.dir, "volumes", v.Name)); err != nil {
				return fmt.Errorf("volume %s: %w", v.Name, err)
			}
		}
	}
	return nil
}

// claimPath is the host folder of the PV bound to claim.
func (w *podWorker) claimPath(claim string) (string, error) {
	obj, ok, err := w.a.pvcs.GetByKey(w.pod.Namespace + "/" + claim)
	if err != nil {
		return "", err
	}
	if !ok {
		return "", fmt.Errorf("persistentvolumeclaim %q not found", claim)
	}
	pvc := obj.(*corev1.PersistentVolumeClaim)
	if pvc.Status.Phase != corev1.ClaimBound || pvc.Spec.VolumeName == "" {
		return "", fmt.Errorf("persistentvolumeclaim %q is not bound yet", claim)
	}
	obj, ok, err = w.a.pvs.GetByKey(pvc.Spec.VolumeName)
	if err != nil {
		return "", err
	}
	if !ok {
		return "", fmt.Errorf("persistentvolume %q not found", pvc.Spec.VolumeName)
	}
	pv := obj.(*corev1.PersistentVolume)
	switch {
	case pv.Spec.HostPath != nil:
		return pv.Spec.HostPath.Path, nil
	case pv.Spec.Local != nil:
		return pv.Spec.Local.Path, nil
	}
	return "", fmt.Errorf("persistentvolume %q is neither hostPath nor local: the local stack cannot mount it", pv.Name)
}

// applyFSGroup gives the volume to group gid as the kubelet does: group
// ownership, group read-write (and execute where the owner has it), and
// setgid on directories. OnRootMismatch skips a volume whose root already
// has them.
func applyFSGroup(root string, gid int64, policy corev1.PodFSGroupChangePolicy) error {
	if policy == corev1.FSGroupChangeOnRootMismatch {
		if st, err := os.Stat(root); err == nil {
			if sys, ok := st.Sys().(*syscall.Stat_t); ok && int64(sys.Gid) == gid &&
				st.Mode()&0o070 == 0o070 && st.Mode()&os.ModeSetgid != 0 {
				return nil
			}
		}
	}
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		if err := os.Lchown(path, -1, int(gid)); err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		mode := info.Mode()
		perm := mode.Perm() | 0o060
		if mode&0o100 != 0 {
			perm |= 0o010
		}
		extra := mode & (os.ModeSticky)
		if d.IsDir() {
			extra |= os.ModeSetgid | 0o010
		}
		return os.Chmod(path, perm|extra)
	})
}

// writeVolume writes a ConfigMap, Secret, projected or downwardAPI volume
// into dir: its files replaced, files no longer in it removed.
func (w *podWorker) writeVolume(ctx context.Context, v corev1.Volume, dir string) error {
	files := map[string]file{}
	look := w.lookups(ctx)
	pod := w.withStatus()
	var err error
	switch {
	case v.ConfigMap != nil:
		err = configMapFiles(files, look, v.ConfigMap.Name, v.ConfigMap.Items, v.ConfigMap.Optional, mode(v.ConfigMap.DefaultMode, 0o644))
	case v.Secret != nil:
		err = secretFiles(files, look, v.Secret.SecretName, v.Secret.Items, v.Secret.Optional, mode(v.Secret.DefaultMode, 0o644))
	case v.DownwardAPI != nil:
		err = downwardFiles(files, pod, v.DownwardAPI.Items, mode(v.DownwardAPI.DefaultMode, 0o644))
	case v.Projected != nil:
		def := mode(v.Projected.DefaultMode, 0o644)
		for _, s := range v.Projected.Sources {
			switch {
			case s.ConfigMap != nil:
				err = configMapFiles(files, look, s.ConfigMap.Name, s.ConfigMap.Items, s.ConfigMap.Optional, def)
			case s.Secret != nil:
				err = secretFiles(files, look, s.Secret.Name, s.Secret.Items, s.Secret.Optional, def)
			case s.DownwardAPI != nil:
				err = downwardFiles(files, pod, s.DownwardAPI.Items, def)
			case s.ServiceAccountToken != nil:
				var token string
				token, err = w.serviceAccountToken(ctx, s.ServiceAccountToken)
				files[s.ServiceAccountToken.Path] = file{[]byte(token), def}
			default:
				err = fmt.Errorf("a projected source of this kind is not supported by the local stack")
			}
			if err != nil {
				break
			}
		}
	}
	if err != nil {
		return err
	}
	return writeFiles(dir, files)
}

type file struct {
	data []byte
	mode os.FileMode
}

func mode(m *int32, def os.FileMode) os.FileMode {
	if m == nil {
		return def
	}
	return os.FileMode(*m)
}

func configMapFiles(out map[string]file, look lookups, name string, items []corev1.KeyToPath, opt *bool, def os.FileMode) error {
	cm, err := look.configMap(name)
	if err != nil {
		return err
	}
	if cm == nil {
		if optional(opt) {
			return nil
		}
		return fmt.Errorf("configmap %q not found", name)
	}
	data := map[string][]byte{}
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		data[k] = v
	}
	return keyFiles(out, data, items, def, "configmap "+name)
}

func secretFiles(out map[string]file, look lookups, name string, items []corev1.KeyToPath, opt *bool, def os.FileMode) error {
	s, err := look.secret(name)
	if err != nil {
		return err
	}
	if s == nil {
		if optional(opt) {
			return nil
		}
		return fmt.Errorf("secret %q not found", name)
	}
	return keyFiles(out, s.Data, items, def, "secret "+name)
}

func keyFiles(out map[string]file, data map[string][]byte, items []corev1.KeyToPath, def os.FileMode, what string) error {
	if len(items) == 0 {
		for k, v := range data {
			out[k] = file{v, def}
		}
		return nil
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			return fmt.Errorf("%s has no key %q", what, it.Key)
		}
		out[it.Path] = file{v, mode(it.Mode, def)}
	}
	return nil
}

func downwardFiles(out map[string]file, pod *corev1.Pod, items []corev1.DownwardAPIVolumeFile, def os.FileMode) error {
	for _, it := range items {
		var v string
		var err error
		switch {
		case it.FieldRef != nil:
			if strings.HasPrefix(it.FieldRef.FieldPath, "metadata.labels") && !strings.Contains(it.FieldRef.FieldPath, "[") {
				v = keyValues(pod.Labels)
			} else if strings.HasPrefix(it.FieldRef.FieldPath, "metadata.annotations") && !strings.Contains(it.FieldRef.FieldPath, "[") {
				v = keyValues(pod.Annotations)
			} else {
				v, err = fieldValue(pod, it.FieldRef.FieldPath)
			}
		case it.ResourceFieldRef != nil:
			v, _, err = resourceValue(pod, it.ResourceFieldRef)
		}
		if err != nil {
			return err
		}
		out[it.Path] = file{[]byte(v), mode(it.Mode, def)}
	}
	return nil
}

func keyValues(m map[string]string) string {
	var b strings.Builder
	for k, v := range m {
		fmt.Fprintf(&b, "%s=%q\n", k, v)
	}
	return b.String()
}

// serviceAccountToken asks the API server for a token of the pod's
// service account bound to the pod, as the kubelet does for the projected
// volume the ServiceAccount admission adds.
func (w *podWorker) serviceAccountToken(ctx context.Context, p *corev1.ServiceAccountTokenProjection) (string, error) {
	sa := w.pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: ptr.To(ptr.Deref(p.ExpirationSeconds, 3607)),
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: w.pod.Name, UID: w.uid},
	}}
	if p.Audience != "" {
		req.Spec.Audiences = []string{p.Audience}
	}
	tr, err := w.a.client.CoreV1().ServiceAccounts(w.pod.Namespace).CreateToken(ctx, sa, req, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token of service account %s: %w", sa, err)
	}
	return tr.Status.Token, nil
}

// writeFiles makes dir hold exactly files, each replaced by a rename so
// that a reader never sees half a file.
func writeFiles(dir string, files map[string]file) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, f := range files {
		path := filepath.Join(dir, name)
		if !strings.HasPrefix(path, dir+string(filepath.Separator)) {
			return fmt.Errorf("file %q leaves its volume", name)
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, f.data, f.mode); err != nil {
			return err
		}
		if err := os.Chmod(tmp, f.mode); err != nil {
			return err
		}
		if err := os.Rename(tmp, path); err != nil {
			return err
		}
	}
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if _, ok := files[rel]; !ok {
			return os.Remove(path)
		}
		return nil
	})
}
