// Command kube-apiserver is the upstream Kubernetes API server, linked from the
// k8s.io/kubernetes Go module so integration tests can run a real control plane
// without downloading release binaries. Built by ../../build.sh.
package main

import (
	"os"
	_ "time/tzdata" // CronJob time zones without a system tzdata

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // --logging-format=json
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // build-info metric
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
