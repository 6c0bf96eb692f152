// The dev node's cluster DNS: CoreDNS with only the plugins its Corefile names
// (crates/devenv/src/node/dns.yaml). `go install github.com/coredns/coredns` builds every
// plugin, the clouds' SDKs among them: several times the work, on every fresh machine.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/ready"
)

func init() {
	// The plugin chain's order, as CoreDNS's plugin.cfg gives it for these five.
	dnsserver.Directives = []string{"ready", "errors", "cache", "kubernetes", "forward"}
}

func main() {
	coremain.Run()
}
