package nodeagent

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// podView is what a pod's worker knows, from which podStatus builds the
// status it reports.
type podView struct {
	hostIP, podIP string
	startTime     time.Time
	// waiting, while the sandbox is not ready (volumes not bound, a
	// ConfigMap missing), says why: containers are then Waiting with it.
	waitingReason, waitingMessage string
	containers                    []containerView // in spec order
}

// containerView is one container's state as its runner last published it.
type containerView struct {
	name, image    string
	state, last    corev1.ContainerState
	restarts       int32
	ready          bool
	started        bool
	containerID    string
	everTerminated bool
}

// podStatus builds the pod's status from the worker's view, keeping the
// transition times of conditions that did not change.
func podStatus(pod *corev1.Pod, v podView, now time.Time) corev1.PodStatus {
	st := corev1.PodStatus{
		HostIP:   v.hostIP,
		PodIP:    v.podIP,
		QOSClass: pod.Status.QOSClass,
	}
	if v.hostIP != "" {
		st.HostIPs = []corev1.HostIP{{IP: v.hostIP}}
	}
	if v.podIP != "" {
		st.PodIPs = []corev1.PodIP{{IP: v.podIP}}
	}
	if !v.startTime.IsZero() {
		t := metav1.NewTime(v.startTime)
		st.StartTime = &t
	}
	allReady, running, succeeded, failed := len(v.containers) > 0, 0, 0, 0
	for i, c := range v.containers {
		cs := corev1.ContainerStatus{
			Name:                 c.name,
			Image:                c.image,
			ImageID:              "picomq-dev://" + c.image,
			ContainerID:          c.containerID,
			State:                c.state,
			LastTerminationState: c.last,
			RestartCount:         c.restarts,
			Ready:                c.ready,
			Started:              &v.containers[i].started,
		}
		if v.waitingReason != "" {
			cs.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: v.waitingReason, Message: v.waitingMessage}}
			cs.Ready = false
		}
		if cs.State == (corev1.ContainerState{}) {
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}
		}
		st.ContainerStatuses = append(st.ContainerStatuses, cs)
		allReady = allReady && cs.Ready
		switch {
		case cs.State.Running != nil:
			running++
		case cs.State.Terminated != nil && cs.State.Terminated.ExitCode == 0:
			succeeded++
		case cs.State.Terminated != nil:
			failed++
		case cs.State.Waiting != nil && c.everTerminated:
			running++ // restarting: the pod is still running
		}
	}
	n := len(v.containers)
	switch {
	case v.podIP == "" || v.waitingReason != "":
		st.Phase = corev1.PodPending
	case succeeded == n && n > 0:
		st.Phase = corev1.PodSucceeded
	case failed > 0 && succeeded+failed == n && pod.Spec.RestartPolicy != corev1.RestartPolicyAlways:
		st.Phase = corev1.PodFailed
	case running > 0 || succeeded+failed > 0:
		st.Phase = corev1.PodRunning
	default:
		st.Phase = corev1.PodPending
	}
	cond := func(t corev1.PodConditionType, ok bool, reason string) {
		status := corev1.ConditionFalse
		if ok {
			status, reason = corev1.ConditionTrue, ""
		}
		c := corev1.PodCondition{Type: t, Status: status, Reason: reason}
		c.LastTransitionTime = metav1.NewTime(now)
		for _, old := range pod.Status.Conditions {
			if old.Type == t && old.Status == status {
				c.LastTransitionTime = old.LastTransitionTime
			}
		}
		st.Conditions = append(st.Conditions, c)
	}
	cond(corev1.PodReadyToStartContainers, v.podIP != "", "SandboxNotReady")
	cond(corev1.PodInitialized, true, "")
	cond(corev1.ContainersReady, allReady, "ContainersNotReady")
	cond(corev1.PodReady, allReady, "ContainersNotReady")
	cond(corev1.PodScheduled, true, "")
	return st
}
