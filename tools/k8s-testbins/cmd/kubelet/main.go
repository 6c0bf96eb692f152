// Command kubelet is the upstream node agent, linked from the k8s.io/kubernetes Go module
// (same release as kube-apiserver) so the dev cluster's node runs real Pods without
// downloading release binaries. Built by ../../build.sh.
package main

import (
	"context"
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // --logging-format=json
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // build-info metric
	"k8s.io/kubernetes/cmd/kubelet/app"
)

func main() {
	os.Exit(cli.Run(app.NewKubeletCommand(context.Background())))
}
