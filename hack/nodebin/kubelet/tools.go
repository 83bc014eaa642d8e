//go:build tools

// Package tools pins the kubelet that the real node (the kernel lab VM) runs, from the same
// k8s.io/kubernetes source as the local control plane (hack/testbin).
package tools

import (
	_ "k8s.io/kubernetes/cmd/kubelet"
)
