//go:build tools

// Package tools keeps the CNI plugins' commands in this module's requirements
// so that `go mod tidy` records everything they need in go.mod and go.sum.
// Never compiled (the build tag is never set).
package tools

import (
	_ "github.com/containernetworking/plugins/plugins/ipam/host-local"
	_ "github.com/containernetworking/plugins/plugins/main/bridge"
	_ "github.com/containernetworking/plugins/plugins/main/loopback"
)
