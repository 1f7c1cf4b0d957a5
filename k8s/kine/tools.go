//go:build tools

// Package tools keeps kine's command in this module's requirements so that
// `go mod tidy` records everything it needs in go.mod and go.sum. Never
// compiled (the build tag is never set).
package tools

import _ "github.com/k3s-io/kine"
