//go:build tools

// Package tools records the control-plane commands build.sh compiles, so that go.mod and
// go.sum pin their whole dependency graph.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
)
