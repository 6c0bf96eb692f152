// Command kube-controller-manager is the upstream controller manager (garbage collector,
// Deployments, ReplicaSets, EndpointSlices, ServiceAccount tokens...), linked from the
// k8s.io/kubernetes Go module. Built by ../../build.sh.
package main

import (
	"os"
	_ "time/tzdata" // CronJob time zones without a system tzdata

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // --logging-format=json
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // build-info metric
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() {
	os.Exit(cli.Run(app.NewControllerManagerCommand()))
}
