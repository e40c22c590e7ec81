// CoreDNS with only the plugins a kubeadm cluster's Corefile uses (errors, health, ready,
// kubernetes, prometheus, forward, cache, loop, reload, loadbalance; plus log and hosts), built by
// scripts/tools/kind.sh for the registry-free kind path. The stock build links every plugin,
// cloud DNS providers included, which triples the compile time on a 2-core machine.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/hosts"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

func init() {
	// The stock directive order (core/dnsserver/zdirectives.go), restricted to these plugins.
	dnsserver.Directives = []string{
		"reload", "ready", "health", "prometheus", "errors", "log", "loadbalance", "cache",
		"hosts", "kubernetes", "loop", "forward",
	}
}

func main() {
	coremain.Run()
}
