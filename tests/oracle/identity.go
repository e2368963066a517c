package main

import (
	"encoding/hex"

	"github.com/jxskiss/base62"
)

// encodeNodeID answers what Talos writes as a node's identity for these bytes: Talos generates
// 32 random bytes and keeps base62.EncodeToString of them
// (internal/app/machined/pkg/adapters/cluster/identity.go @ v1.14.1 and v1.13.9, with
// github.com/jxskiss/base62 at the version Talos's go.mod pins).
func encodeNodeID(req request) response {
	raw, err := hex.DecodeString(req.Hex)
	if err != nil {
		return failure(err)
	}

	return response{"encoded": base62.EncodeToString(raw)}
}
