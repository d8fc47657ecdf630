// Command kube-controller-manager mirrors kubernetes'
// cmd/kube-controller-manager/controller-manager.go, so that the local stack
// (issue 20: `picomq dev`) has the real controllers — StatefulSets, the PV
// binder, endpoints, garbage collection — on machines that cannot download
// the release binaries. The version is stamped by -ldflags in
// hack/controlplane-assets.sh.
package main

import (
	"os"
	_ "time/tzdata" // CronJob time zones, as upstream

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() {
	os.Exit(cli.Run(app.NewControllerManagerCommand()))
}
