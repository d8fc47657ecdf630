// Command kubectl mirrors kubernetes' cmd/kubectl/kubectl.go, so that the
// local stack (issue 20: `picomq dev`) and its tests have a kubectl of the
// control plane's version on machines that have none and cannot download
// one. The version is stamped by -ldflags in hack/controlplane-assets.sh.
package main

import (
	"os"

	_ "k8s.io/client-go/plugin/pkg/client/auth" // client auth plugins, as upstream
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	// The verbosity is read before the command is built, as upstream does,
	// so that klog is set while plugins and .kuberc are handled.
	logs.GlogSetter(cmd.GetLogVerbosity(os.Args)) //nolint:errcheck
	if err := cli.RunNoErrOutput(cmd.NewDefaultKubectlCommand()); err != nil {
		util.CheckErr(err)
	}
}
