// Command localcluster runs a PicoMQ cluster on this machine without
// Kubernetes: a kube-apiserver and etcd (envtest's, from
// hack/envtest-assets.sh, built once per machine) holding the slot Leases,
// and N brokers on loopback ports started from flags (a static peer list and
// a kubeconfig), as the cluster tests run them. It prints every broker's
// URL and a kubeconfig for `kubectl get leases`, then runs until Ctrl-C.
//
//	go run ./hack/localcluster              # 3 brokers, R=3
//	go run ./hack/localcluster -brokers 5
//
// Kill a broker (the pid is printed) to watch its slots move; the brokers'
// logs are under -dir.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/picomq/picomq/test/clusterharness"
)

func main() {
	os.Exit(run())
}

func run() int {
	brokers := flag.Int("brokers", 3, "brokers in the cluster")
	rf := flag.Int("replication-factor", 0, "replication factor R (0: min(3, brokers))")
	slots := flag.Int("slots", 64, "slot Leases")
	lease := flag.Duration("lease-duration", 3*time.Second, "--lease-duration (short, so that a failover shows quickly; the operator's default is 4s)")
	dir := flag.String("dir", "", "folder for the brokers' data and logs (default: a new temporary folder, kept)")
	flag.Parse()
	if *brokers < 1 {
		fmt.Fprintln(os.Stderr, "localcluster: -brokers must be at least 1")
		return 64
	}
	if *rf == 0 {
		*rf = min(3, *brokers)
	}
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		fmt.Fprintln(os.Stderr, "localcluster: finding kube-apiserver and etcd (hack/envtest-assets.sh builds them the first time: minutes)")
		out, err := exec.Command("hack/envtest-assets.sh").Output()
		if err != nil {
			fmt.Fprintf(os.Stderr, "localcluster: hack/envtest-assets.sh (run from the repository's root): %v\n", err)
			return 69
		}
		os.Setenv("KUBEBUILDER_ASSETS", strings.TrimSpace(string(out)))
	}
	if *dir == "" {
		d, err := os.MkdirTemp("", "picomq-localcluster-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "localcluster:", err)
			return 1
		}
		*dir = d
	}
	if err := os.MkdirAll(*dir, 0o700); err != nil {
		fmt.Fprintln(os.Stderr, "localcluster:", err)
		return 1
	}
	t := clusterharness.NewProgramTB("localcluster", *dir)
	defer clusterharness.RemoveBinary()
	defer t.RunCleanups()

	var c *clusterharness.Cluster
	err := t.Do(func() (err error) {
		c, err = clusterharness.TryStart(t, clusterharness.Options{
			Brokers: *brokers, Cluster: true, Slots: *slots, ReplicationFactor: *rf,
			LeaseDuration: *lease, LeaseRenewDeadline: *lease * 2 / 3, LeaseRetryPeriod: *lease / 6,
			LogLevel: "info", ReadyTimeout: 2 * time.Minute,
		})
		if err != nil {
			return err
		}
		return c.WaitFor(4**lease+30*time.Second, "every slot held", c.ClusterReady)
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "localcluster:", err)
		return 1
	}
	fmt.Printf("PicoMQ cluster of %d brokers (R=%d, %d slots, leases %v), data and logs in %s\n", *brokers, *rf, *slots, *lease, *dir)
	for i := range c.N() {
		b := c.Broker(i)
		fmt.Printf("  %s  %s  pid %d  log %s\n", b.Name, b.URL(), b.Pid(), filepath.Join(filepath.Dir(b.DataDir), "broker.log"))
	}
	fmt.Printf("Any broker serves any request, e.g.\n  curl -X PUT %s/v1/admin/streams/demo\n", c.URL(0))
	fmt.Printf("The slot Leases:\n  kubectl --kubeconfig %s get leases -l streams.picomq.io/cluster=%s\n", c.APIServer().Kubeconfig(0), c.Options().Name)
	fmt.Println("Ctrl-C stops everything.")

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	<-ctx.Done()
	fmt.Fprintln(os.Stderr, "localcluster: stopping")
	return 0
}
