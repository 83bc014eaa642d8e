"""A real local Kubernetes control plane for tests and demos (`mountwarden dev-cluster`).

Usage: `DevCluster(state_dir).up(nodes=3)` starts etcd, kube-apiserver,
kube-controller-manager, kube-scheduler and kwok and returns a ClusterInfo;
`.kubectl("get", "nodes")` runs the built kubectl with the admin kubeconfig;
`.down()` stops every process it started. The binaries come from
$MOUNTWARDEN_TESTBIN_DIR or the repository's hack/testbin/build.sh.
"""

from mountwarden.devcluster.binaries import Binaries, BinariesError
from mountwarden.devcluster.binaries import resolve as resolve_binaries
from mountwarden.devcluster.cluster import (
    COMPONENTS,
    AlreadyRunningError,
    ClusterInfo,
    DevCluster,
    DevClusterError,
    local_cluster,
)
from mountwarden.devcluster.kubectl import KubectlError, run_kubectl

__all__ = [
    "COMPONENTS",
    "AlreadyRunningError",
    "Binaries",
    "BinariesError",
    "ClusterInfo",
    "DevCluster",
    "DevClusterError",
    "KubectlError",
    "local_cluster",
    "resolve_binaries",
    "run_kubectl",
]
