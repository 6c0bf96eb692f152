// Command kubectl is the upstream Kubernetes CLI, linked from the k8s.io/kubectl
// Go module (same release as kube-apiserver). Built by ../../build.sh.
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
	// Same entry sequence as upstream cmd/kubectl, so -v and error output match.
	logs.GlogSetter(cmd.GetLogVerbosity(os.Args)) //nolint:errcheck
	if err := cli.RunNoErrOutput(cmd.NewDefaultKubectlCommand()); err != nil {
		util.CheckErr(err)
	}
}
