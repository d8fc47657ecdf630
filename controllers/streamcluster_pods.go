package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crevent "sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	streamsv1alpha1 "github.com/picomq/picomq/api/v1alpha1"
	"github.com/picomq/picomq/controllers/resources"
)

// Bounds of what Degraded says about failing pods: a condition message is
// read by people, and the termination message may be a log tail.
const (
	maxFailingPods      = 5
	maxTerminationNote  = 300
	maxWaitingNoteBytes = 200
)

// listBrokerPods returns the broker pods of c, by name.
func (r *StreamClusterReconciler) listBrokerPods(ctx context.Context, c *streamsv1alpha1.StreamCluster) ([]corev1.Pod, error) {
	var list corev1.PodList
	if err := r.Client.List(ctx, &list, client.InNamespace(c.Namespace), client.MatchingLabels(resources.SelectorLabels(c))); err != nil {
		return nil, err
	}
	slices.SortFunc(list.Items, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return list.Items, nil
}

// failingPods says, one line per pod, which broker pods are failing and
// why, in pod order; nil when none is. A pod that is starting (its image
// pulling, its container creating) is not failing; one whose container
// waits after a crash, cannot pull its image or cannot be scheduled is.
func failingPods(pods []corev1.Pod) []string {
	var out []string
	for i := range pods {
		if why := podFailure(&pods[i]); why != "" {
			out = append(out, why)
		}
	}
	return out
}

// podFailure says why pod is failing, or "".
func podFailure(pod *corev1.Pod) string {
	if !pod.DeletionTimestamp.IsZero() {
		return ""
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return fmt.Sprintf("%s cannot be scheduled: %s", pod.Name, clip(c.Message, maxWaitingNoteBytes))
		}
	}
	for _, cs := range slices.Concat(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses) {
		if why := containerFailure(cs); why != "" {
			return pod.Name + ": " + why
		}
	}
	return ""
}

// containerFailure says why a container is failing, or "": waiting for a
// reason other than starting, or exited with an error, with its restart
// count and its last termination (exit code and message: the broker's
// fatal error, or the tail of its log).
func containerFailure(cs corev1.ContainerStatus) string {
	var b strings.Builder
	switch st := cs.State; {
	case st.Waiting != nil && !startingReason(st.Waiting.Reason):
		fmt.Fprintf(&b, "container %s %s", cs.Name, st.Waiting.Reason)
		// A crash loop's waiting message only repeats the back-off; the
		// termination below says why.
		if st.Waiting.Reason != "CrashLoopBackOff" && st.Waiting.Message != "" {
			fmt.Fprintf(&b, " (%s)", clip(st.Waiting.Message, maxWaitingNoteBytes))
		}
	case st.Terminated != nil && st.Terminated.ExitCode != 0:
		fmt.Fprintf(&b, "container %s exited with code %d", cs.Name, st.Terminated.ExitCode)
		if m := terminationNote(st.Terminated); m != "" {
			fmt.Fprintf(&b, ": %s", m)
		}
		return b.String()
	default:
		return ""
	}
	fmt.Fprintf(&b, ", %s", restarts(cs.RestartCount))
	if last := cs.LastTerminationState.Terminated; last != nil {
		fmt.Fprintf(&b, ", last exit code %d", last.ExitCode)
		if m := terminationNote(last); m != "" {
			fmt.Fprintf(&b, ": %s", m)
		}
	}
	return b.String()
}

// startingReason is a container waiting reason of a pod on its way up.
func startingReason(reason string) bool {
	return reason == "" || reason == "ContainerCreating" || reason == "PodInitializing"
}

func restarts(n int32) string {
	if n == 1 {
		return "restarted once"
	}
	return fmt.Sprintf("restarted %d times", n)
}

// terminationNote is a termination's message (what the broker wrote to its
// termination log, or the end of its log), on one line and clipped to its
// end, where the error is; its reason when it has no message.
func terminationNote(t *corev1.ContainerStateTerminated) string {
	m := strings.Join(strings.Fields(t.Message), " ")
	if m == "" {
		return t.Reason
	}
	if len(m) > maxTerminationNote {
		m = "…" + m[len(m)-maxTerminationNote:]
	}
	return strings.ToValidUTF8(m, "")
}

func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	return strings.ToValidUTF8(truncate(s, n), "")
}

// failingMessage is Degraded's message for failing pods.
func failingMessage(failing []string, pods int) string {
	shown := failing
	if len(shown) > maxFailingPods {
		shown = shown[:maxFailingPods]
	}
	msg := fmt.Sprintf("%d of %d broker pods failing: %s", len(failing), pods, strings.Join(shown, "; "))
	if more := len(failing) - len(shown); more > 0 {
		msg += fmt.Sprintf("; and %d more", more)
	}
	return msg
}

// clusterOfPod maps a broker pod to its StreamCluster (the instance label
// the pod template carries).
func clusterOfPod(_ context.Context, o client.Object) []reconcile.Request {
	name := o.GetLabels()[resources.LabelInstance]
	if name == "" || o.GetLabels()[resources.LabelComponent] != resources.ComponentBroker {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: name}}}
}

// podFailureChanged passes the pod updates that change what Degraded says
// (a crash, a restart, a recovery), and pod creations and deletions; the
// StatefulSet's status already reports readiness.
type podFailureChanged struct{ predicate.Funcs }

func (podFailureChanged) Create(crevent.CreateEvent) bool   { return true }
func (podFailureChanged) Delete(crevent.DeleteEvent) bool   { return true }
func (podFailureChanged) Generic(crevent.GenericEvent) bool { return false }
func (podFailureChanged) Update(e crevent.UpdateEvent) bool {
	oldPod, ok1 := e.ObjectOld.(*corev1.Pod)
	newPod, ok2 := e.ObjectNew.(*corev1.Pod)
	return ok1 && ok2 && podFailure(oldPod) != podFailure(newPod)
}
