//go:build tools

// Package tools keeps upstream's two main packages in this module's requirements, so
// `go mod tidy` records every module they need.
package tools

import (
	_ "go.etcd.io/etcd/etcdutl/v3"
	_ "go.etcd.io/etcd/server/v3"
)
