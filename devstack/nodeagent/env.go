package nodeagent

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// lookups are what a container's environment refers to beyond the pod
// itself: ConfigMaps and Secrets of the pod's namespace, by name (nil:
// not found).
type lookups struct {
	configMap func(name string) (*corev1.ConfigMap, error)
	secret    func(name string) (*corev1.Secret, error)
}

// containerEnv resolves a container's environment as the kubelet does:
// the service variables first, then envFrom in order, then env in order
// (later wins), with $(VAR) expanded from the variables defined before
// it. It returns KEY=value pairs in a stable order.
func containerEnv(pod *corev1.Pod, c *corev1.Container, base map[string]string, look lookups) ([]string, error) {
	vars := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := vars[k]; !ok {
			order = append(order, k)
		}
		vars[k] = v
	}
	keys := make([]string, 0, len(base))
	for k := range base {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		set(k, base[k])
	}
	for _, from := range c.EnvFrom {
		var data map[string]string
		switch {
		case from.ConfigMapRef != nil:
			cm, err := look.configMap(from.ConfigMapRef.Name)
			if err != nil {
				return nil, err
			}
			if cm == nil {
				if optional(from.ConfigMapRef.Optional) {
					continue
				}
				return nil, fmt.Errorf("configmap %q not found", from.ConfigMapRef.Name)
			}
			data = cm.Data
		case from.SecretRef != nil:
			s, err := look.secret(from.SecretRef.Name)
			if err != nil {
				return nil, err
			}
			if s == nil {
				if optional(from.SecretRef.Optional) {
					continue
				}
				return nil, fmt.Errorf("secret %q not found", from.SecretRef.Name)
			}
			data = map[string]string{}
			for k, v := range s.Data {
				data[k] = string(v)
			}
		}
		ks := make([]string, 0, len(data))
		for k := range data {
			ks = append(ks, k)
		}
		slices.Sort(ks)
		for _, k := range ks {
			set(from.Prefix+k, data[k])
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			set(e.Name, expand(e.Value, vars))
			continue
		}
		v, ok, err := envSource(pod, e.ValueFrom, look)
		if err != nil {
			return nil, fmt.Errorf("env %s: %w", e.Name, err)
		}
		if ok {
			set(e.Name, v)
		}
	}
	out := make([]string, 0, len(order))
	for _, k := range order {
		out = append(out, k+"="+vars[k])
	}
	return out, nil
}

func optional(b *bool) bool { return b != nil && *b }

// envSource resolves a valueFrom; ok is false for an optional key that is
// absent (the variable is then not set).
func envSource(pod *corev1.Pod, src *corev1.EnvVarSource, look lookups) (string, bool, error) {
	switch {
	case src.FieldRef != nil:
		v, err := fieldValue(pod, src.FieldRef.FieldPath)
		return v, err == nil, err
	case src.ConfigMapKeyRef != nil:
		r := src.ConfigMapKeyRef
		cm, err := look.configMap(r.Name)
		if err != nil {
			return "", false, err
		}
		if cm != nil {
			if v, ok := cm.Data[r.Key]; ok {
				return v, true, nil
			}
		}
		if optional(r.Optional) {
			return "", false, nil
		}
		return "", false, fmt.Errorf("key %q of configmap %q not found", r.Key, r.Name)
	case src.SecretKeyRef != nil:
		r := src.SecretKeyRef
		s, err := look.secret(r.Name)
		if err != nil {
			return "", false, err
		}
		if s != nil {
			if v, ok := s.Data[r.Key]; ok {
				return string(v), true, nil
			}
		}
		if optional(r.Optional) {
			return "", false, nil
		}
		return "", false, fmt.Errorf("key %q of secret %q not found", r.Key, r.Name)
	case src.ResourceFieldRef != nil:
		// No cgroups here: limits are not enforced, and a container asking
		// for its limit gets what the pod declares.
		return resourceValue(pod, src.ResourceFieldRef)
	}
	return "", false, fmt.Errorf("unsupported valueFrom")
}

// fieldValue is a downward-API field of pod.
func fieldValue(pod *corev1.Pod, path string) (string, error) {
	if k, ok := strings.CutPrefix(path, "metadata.labels['"); ok {
		return pod.Labels[strings.TrimSuffix(k, "']")], nil
	}
	if k, ok := strings.CutPrefix(path, "metadata.annotations['"); ok {
		return pod.Annotations[strings.TrimSuffix(k, "']")], nil
	}
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.podIP":
		return pod.Status.PodIP, nil
	case "status.hostIP":
		return pod.Status.HostIP, nil
	case "status.podIPs":
		ips := make([]string, 0, len(pod.Status.PodIPs))
		for _, ip := range pod.Status.PodIPs {
			ips = append(ips, ip.IP)
		}
		return strings.Join(ips, ","), nil
	case "status.hostIPs":
		ips := make([]string, 0, len(pod.Status.HostIPs))
		for _, ip := range pod.Status.HostIPs {
			ips = append(ips, ip.IP)
		}
		return strings.Join(ips, ","), nil
	}
	return "", fmt.Errorf("downward API field %q is not supported", path)
}

func resourceValue(pod *corev1.Pod, r *corev1.ResourceFieldSelector) (string, bool, error) {
	for _, c := range pod.Spec.Containers {
		if r.ContainerName != "" && c.Name != r.ContainerName {
			continue
		}
		kind, name, ok := strings.Cut(r.Resource, ".")
		if !ok {
			break
		}
		list := c.Resources.Limits
		if kind == "requests" {
			list = c.Resources.Requests
		}
		q, ok := list[corev1.ResourceName(name)]
		if !ok {
			return "0", true, nil
		}
		if !r.Divisor.IsZero() {
			return fmt.Sprint(q.Value() / r.Divisor.Value()), true, nil
		}
		return q.String(), true, nil
	}
	return "", false, fmt.Errorf("resource field %q not found", r.Resource)
}

// expand replaces $(VAR) with vars[VAR] where VAR is defined, keeps
// $(VAR) as written where it is not, and turns $$ into $: Kubernetes'
// rules for env values, command and args.
func expand(s string, vars map[string]string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := vars[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

// envMap turns KEY=value pairs back into a map (for expanding command and
// args).
func envMap(env []string) map[string]string {
	m := make(map[string]string, len(env))
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}
