package stack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/picomq/picomq/devstack/nodeagent"
)

// serveOnLoopback relays the host's loopback listener to target (a
// Service's ClusterIP and port, which the host routes to the agent), so
// that the client Service has an address that stays the same across
// restarts of the stack.
func serveOnLoopback(ctx context.Context, ln net.Listener, target string) {
	go func() { <-ctx.Done(); ln.Close() }()
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer conn.Close()
			d := net.Dialer{Timeout: 5 * time.Second}
			up, err := d.DialContext(ctx, "tcp", target)
			if err != nil {
				return
			}
			defer up.Close()
			nodeagent.Relay(conn, up)
		}()
	}
}

// waitNodes waits until n nodes are Ready.
func waitNodes(ctx context.Context, k kubernetes.Interface, n int, agentDone <-chan error) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	for {
		nodes, err := k.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		ready := 0
		if err == nil {
			for _, node := range nodes.Items {
				for _, c := range node.Status.Conditions {
					if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
						ready++
					}
				}
			}
			if ready >= n {
				return nil
			}
		}
		select {
		case err := <-agentDone:
			return fmt.Errorf("%w: %v", errAgentStopped, err)
		case <-ctx.Done():
			return errors.Join(fmt.Errorf("%d of %d nodes ready", ready, n), ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}
