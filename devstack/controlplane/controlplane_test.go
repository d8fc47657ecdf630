package controlplane

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
)

// TestControllersAndSchedulerRun starts the control plane and checks that
// its controllers and its scheduler act: a Deployment becomes a Pod (the
// deployment and replica-set controllers of kube-controller-manager), and
// the Pod is bound to the one Ready Node (kube-scheduler); the stack's
// kubectl, through the kubeconfig Start wrote, sees the same.
func TestControllersAndSchedulerRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane: not a unit test")
	}
	bin := os.Getenv("PICOMQ_CONTROLPLANE_ASSETS")
	if bin == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("PICOMQ_CONTROLPLANE_ASSETS is unset: make test sets it from hack/controlplane-assets.sh")
		}
		t.Skip("PICOMQ_CONTROLPLANE_ASSETS unset (hack/controlplane-assets.sh prints the folder)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp, err := Start(ctx, Options{Dir: t.TempDir(), BinDir: bin})
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Stop()
	cfg, err := clientcmd.BuildConfigFromFlags("", cp.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	k, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-0", Labels: map[string]string{"kubernetes.io/hostname": "node-0"}}}
	node, err = k.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Status = corev1.NodeStatus{
		Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now(), Reason: "Test"}},
		Allocatable: corev1.ResourceList{corev1.ResourcePods: mustQuantity("10")},
		Capacity:    corev1.ResourceList{corev1.ResourcePods: mustQuantity("10")},
	}
	if _, err := k.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "probe"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example/probe"}}},
			},
		},
	}
	if _, err := k.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for {
		pods, err := k.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=probe"})
		if err == nil && len(pods.Items) == 1 && pods.Items[0].Spec.NodeName == "node-0" {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no pod of the Deployment bound to node-0: %v %v (logs in %s)", pods, err, cp.dir)
		case <-time.After(200 * time.Millisecond): // polls: a watch would need its own resync handling here
		}
	}

	// The stack's own kubectl, of the control plane's version, sees it too.
	out, err := exec.CommandContext(ctx, filepath.Join(bin, "kubectl"), "--kubeconfig", cp.Kubeconfig,
		"get", "pods", "-l", "app=probe", "-o", "jsonpath={.items[0].spec.nodeName}").CombinedOutput()
	if err != nil || string(out) != "node-0" {
		t.Errorf("kubectl get pods: %q, %v; want node-0", out, err)
	}
}

func mustQuantity(s string) resource.Quantity { return resource.MustParse(s) }
