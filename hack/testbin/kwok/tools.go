//go:build tools

// Package tools pins the kwok binary that the tests run.
package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
