// Command kube-scheduler mirrors kubernetes' cmd/kube-scheduler/scheduler.go,
// so that the local stack (issue 20: `picomq dev`) places pods with the real
// scheduler (topology spread included) on machines that cannot download the
// release binaries. The version is stamped by -ldflags in
// hack/controlplane-assets.sh.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	os.Exit(cli.Run(app.NewSchedulerCommand()))
}
