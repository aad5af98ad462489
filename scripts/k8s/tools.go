//go:build tools

// Package tools pins the main packages built from this module; it is never
// compiled (build tag "tools") and exists so that `go mod tidy` keeps every
// dependency of the control-plane binaries (and of the optional kubelet) in go.mod and go.sum.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
