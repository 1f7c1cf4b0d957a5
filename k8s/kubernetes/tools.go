//go:build tools

// Package tools keeps the commands scripts/k8s builds in this module's
// requirements, so that `go mod tidy` records every module they need in
// go.mod and go.sum. It is never compiled (the build tag is never set).
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
