package nodeagent

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestExpand(t *testing.T) {
	vars := map[string]string{"POD_IP": "198.18.16.4", "EMPTY": ""}
	for in, want := range map[string]string{
		"$(POD_IP):4437":     "198.18.16.4:4437",
		"$(MISSING)":         "$(MISSING)",
		"$$(POD_IP)":         "$(POD_IP)",
		"a$(EMPTY)b":         "ab",
		"$(unterminated":     "$(unterminated",
		"cost $5":            "cost $5",
		"trailing $":         "trailing $",
		"$(POD_IP)$(POD_IP)": "198.18.16.4198.18.16.4",
	} {
		if got := expand(in, vars); got != want {
			t.Errorf("expand(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestContainerEnv resolves the broker pod's kind of environment: two
// envFrom ConfigMaps (one optional and absent), downward-API fields, an
// expansion of an earlier variable, and a later env winning over envFrom.
func TestContainerEnv(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "demo-0", Namespace: "default", UID: "u-1", Labels: map[string]string{"app": "x"}},
		Spec:       corev1.PodSpec{NodeName: "picomq-dev-1"},
		Status:     corev1.PodStatus{PodIP: "198.18.16.4"},
	}
	field := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	c := &corev1.Container{
		EnvFrom: []corev1.EnvFromSource{
			{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "demo-config"}}},
			{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "demo-cluster-id"}, Optional: ptr.To(true)}},
		},
		Env: []corev1.EnvVar{
			field("NODE_ID", "metadata.name"),
			field("POD_IP", "status.podIP"),
			field("APP", "metadata.labels['app']"),
			{Name: "LISTEN", Value: "$(POD_IP):4437"},
			{Name: "PICOMQ_SLOTS", Value: "8"},
		},
	}
	look := lookups{
		configMap: func(name string) (*corev1.ConfigMap, error) {
			if name == "demo-config" {
				return &corev1.ConfigMap{Data: map[string]string{"PICOMQ_SLOTS": "64", "PICOMQ_CLUSTER": "demo"}}, nil
			}
			return nil, nil
		},
		secret: func(string) (*corev1.Secret, error) { return nil, nil },
	}
	env, err := containerEnv(pod, c, map[string]string{"HOSTNAME": "demo-0"}, look)
	if err != nil {
		t.Fatal(err)
	}
	got := envMap(env)
	want := map[string]string{
		"HOSTNAME": "demo-0", "PICOMQ_CLUSTER": "demo", "PICOMQ_SLOTS": "8", "NODE_ID": "demo-0",
		"POD_IP": "198.18.16.4", "APP": "x", "LISTEN": "198.18.16.4:4437",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("env %v, want exactly %v", env, want)
	}
	// A required ConfigMap that is absent is an error naming it.
	c.EnvFrom[0].ConfigMapRef.Name = "absent"
	if _, err := containerEnv(pod, c, nil, look); err == nil || !strings.Contains(err.Error(), `"absent"`) {
		t.Errorf("missing ConfigMap: %v", err)
	}
}

func TestIdentity(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{SecurityContext: &corev1.PodSecurityContext{
		RunAsUser: ptr.To[int64](65532), RunAsGroup: ptr.To[int64](65532), FSGroup: ptr.To[int64](65532), SupplementalGroups: []int64{4242},
	}}}
	uid, gid, groups := identity(pod, &corev1.Container{}, 1)
	if *uid != 65532 || *gid != 65532 || !slices.Equal(groups, []int64{65532, 65532, 4242}) {
		t.Errorf("pod identity: %d %d %v", *uid, *gid, groups)
	}
	// runAsNonRoot without a user: the image's user, as its USER says.
	nonRoot := &corev1.Pod{Spec: corev1.PodSpec{SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true)}}}
	uid, gid, _ = identity(nonRoot, &corev1.Container{}, 65532)
	if uid == nil || *uid != 65532 || *gid != 65532 {
		t.Errorf("non-root default: %v %v", uid, gid)
	}
	// A container's own user wins.
	uid, _, _ = identity(pod, &corev1.Container{SecurityContext: &corev1.SecurityContext{RunAsUser: ptr.To[int64](1000)}}, 1)
	if *uid != 1000 {
		t.Errorf("container user: %d", *uid)
	}
	if uid, _, _ := identity(&corev1.Pod{}, &corev1.Container{}, 65532); uid != nil {
		t.Errorf("a pod that names no user and allows root runs as root: %v", *uid)
	}
}

func TestRestarts(t *testing.T) {
	for _, c := range []struct {
		policy corev1.RestartPolicy
		code   int32
		want   bool
	}{
		{corev1.RestartPolicyAlways, 0, true}, {corev1.RestartPolicyAlways, 1, true},
		{corev1.RestartPolicyOnFailure, 0, false}, {corev1.RestartPolicyOnFailure, 137, true},
		{corev1.RestartPolicyNever, 1, false}, {"", 0, true},
	} {
		if got := restarts(c.policy, c.code); got != c.want {
			t.Errorf("restarts(%s, %d) = %v", c.policy, c.code, got)
		}
	}
}

// TestPodStatus checks the phases and conditions a worker reports.
func TestPodStatus(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyAlways}}
	now := time.Now()
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	ready := func(st corev1.PodStatus) corev1.ConditionStatus {
		for _, c := range st.Conditions {
			if c.Type == corev1.PodReady {
				return c.Status
			}
		}
		return ""
	}
	// No sandbox yet: Pending, waiting with the reason.
	st := podStatus(pod, podView{waitingReason: "ContainerCreating", waitingMessage: "claim not bound", containers: []containerView{{name: "broker"}}}, now)
	if st.Phase != corev1.PodPending || st.ContainerStatuses[0].State.Waiting.Message != "claim not bound" || ready(st) != corev1.ConditionFalse {
		t.Errorf("pending: %+v", st)
	}
	// Running, not ready yet.
	v := podView{podIP: "198.18.16.2", hostIP: "198.18.0.2", startTime: now, containers: []containerView{{name: "broker", state: running}}}
	st = podStatus(pod, v, now)
	if st.Phase != corev1.PodRunning || ready(st) != corev1.ConditionFalse || st.PodIP != "198.18.16.2" || st.PodIPs[0].IP != "198.18.16.2" {
		t.Errorf("running: %+v", st)
	}
	// Ready; the transition time of a condition that did not change stays.
	v.containers[0].ready = true
	st = podStatus(pod, v, now)
	if ready(st) != corev1.ConditionTrue {
		t.Errorf("ready: %+v", st)
	}
	pod.Status = st
	later := podStatus(pod, v, now.Add(time.Minute))
	for i, c := range later.Conditions {
		if !c.LastTransitionTime.Equal(&st.Conditions[i].LastTransitionTime) {
			t.Errorf("condition %s moved its transition time", c.Type)
		}
	}
	// Back-off after a crash: still Running (the kubelet's phase), not ready.
	v.containers[0] = containerView{name: "broker", everTerminated: true, restarts: 1,
		state: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}}
	if st := podStatus(pod, v, now); st.Phase != corev1.PodRunning || ready(st) != corev1.ConditionFalse || st.ContainerStatuses[0].RestartCount != 1 {
		t.Errorf("back-off: %+v", st)
	}
	// A job-like pod that finished.
	never := &corev1.Pod{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever}}
	done := func(code int32) podView {
		return podView{podIP: "198.18.16.3", containers: []containerView{{name: "c", everTerminated: true,
			state: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code}}}}}
	}
	if st := podStatus(never, done(0), now); st.Phase != corev1.PodSucceeded {
		t.Errorf("exit 0: %s", st.Phase)
	}
	if st := podStatus(never, done(2), now); st.Phase != corev1.PodFailed {
		t.Errorf("exit 2: %s", st.Phase)
	}
}

func TestIPPoolHandsOutEachAddressOnceAndReusesLast(t *testing.T) {
	p := newIPPool(netip.MustParsePrefix("198.18.16.0/29"))
	seen := map[netip.Addr]bool{}
	var got []netip.Addr
	for {
		ip, err := p.get()
		if err != nil {
			break
		}
		if seen[ip] {
			t.Fatalf("%s handed out twice", ip)
		}
		seen[ip] = true
		got = append(got, ip)
		if len(got) > 8 {
			t.Fatal("more addresses than the range holds")
		}
	}
	if len(got) != 7 || got[0] != netip.MustParseAddr("198.18.16.1") {
		t.Fatalf("addresses %v", got)
	}
	p.put(got[2])
	p.put(got[0])
	// Round robin: the first freed is the next handed out, after the end.
	if ip, _ := p.get(); ip != got[0] {
		t.Errorf("next %s, want %s", ip, got[0])
	}
	if ip, _ := p.get(); ip != got[2] {
		t.Errorf("next %s, want %s", ip, got[2])
	}
}

func TestTailDropsTheCutLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	var b strings.Builder
	for i := range 100 {
		b.WriteString(strings.Repeat("x", 10) + " line " + string(rune('a'+i%26)) + "\n")
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	got := tail(path, 3, 1000)
	if lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n"); len(lines) != 3 || !strings.HasSuffix(lines[2], "line v") {
		t.Errorf("tail: %q", got)
	}
	got = tail(path, 80, 100)
	if !strings.HasPrefix(got, "xxxxxxxxxx line") {
		t.Errorf("a cut line is kept: %q", got)
	}
}

// TestWriteFilesReplacesTheVolume checks that a ConfigMap volume written
// again holds exactly the new keys, with their modes.
func TestWriteFilesReplacesTheVolume(t *testing.T) {
	dir := t.TempDir()
	if err := writeFiles(dir, map[string]file{"a": {[]byte("1"), 0o644}, "sub/b": {[]byte("2"), 0o600}}); err != nil {
		t.Fatal(err)
	}
	if err := writeFiles(dir, map[string]file{"a": {[]byte("3"), 0o440}}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "a")); string(b) != "3" {
		t.Errorf("a = %q", b)
	}
	if st, _ := os.Stat(filepath.Join(dir, "a")); st.Mode().Perm() != 0o440 {
		t.Errorf("mode %v", st.Mode())
	}
	if _, err := os.Stat(filepath.Join(dir, "sub", "b")); err == nil {
		t.Error("a key no longer in the volume stays")
	}
	if err := writeFiles(dir, map[string]file{"../escape": {[]byte("x"), 0o644}}); err == nil {
		t.Error("a path leaving the volume is written")
	}
}

func TestApplyFSGroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown needs root")
	}
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "data"), 0o700)
	os.WriteFile(filepath.Join(dir, "data", "f"), nil, 0o600)
	if err := applyFSGroup(dir, 4242, corev1.FSGroupChangeOnRootMismatch); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(filepath.Join(dir, "data"))
	if st.Mode()&os.ModeSetgid == 0 || st.Mode().Perm()&0o070 != 0o070 {
		t.Errorf("dir mode %v", st.Mode())
	}
	if f, _ := os.Stat(filepath.Join(dir, "data", "f")); f.Mode().Perm() != 0o660 {
		t.Errorf("file mode %v", f.Mode())
	}
	// The broker's own 0700 directory made after the first mount is left
	// alone: OnRootMismatch sees the root already right.
	os.Mkdir(filepath.Join(dir, "mine"), 0o700)
	os.Chmod(filepath.Join(dir, "mine"), 0o700)
	if err := applyFSGroup(dir, 4242, corev1.FSGroupChangeOnRootMismatch); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(filepath.Join(dir, "mine")); st.Mode().Perm() != 0o700 {
		t.Errorf("OnRootMismatch walked a volume whose root was right: %v", st.Mode())
	}
}
