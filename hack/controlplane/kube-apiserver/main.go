// Command kube-apiserver mirrors kubernetes' cmd/kube-apiserver/apiserver.go so
// that envtest has an API server on machines that cannot download the release
// binaries. The version is stamped by -ldflags in hack/envtest-assets.sh.
package main

import (
	"os"
	_ "time/tzdata" // CronJob time zones, as upstream

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
