//go:build tools

// Package tools pins syft, the SBOM generator that describes the image `make image` builds.
package tools

import _ "github.com/anchore/syft/cmd/syft"
