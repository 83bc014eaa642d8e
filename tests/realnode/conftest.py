"""The real node as a fixture: the kernel lab VM joined to the session's local control plane.

`real_node` runs containerd, runc and a kubelet built from the same source as the control
plane, with a kernel NFS server beside it and mountwarden's agent writing its report. It
fails (never skips) when the node cannot join, with the kubelet's last log lines.
"""

from collections.abc import Iterator

import pytest

from mountwarden.devcluster import DevClusterError
from mountwarden.lab.node import RealNode


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/realnode/" in str(item.path):
            item.add_marker(pytest.mark.realnode)
            item.add_marker(pytest.mark.cluster)


@pytest.fixture(scope="module")
def real_node(cluster) -> Iterator[RealNode]:
    """The real node for this module's tests; gone afterwards, Node object included, so that later tests on
    the session's cluster (a DaemonSet, a scheduler) never meet a node that is not theirs."""
    if cluster.dev_cluster is None:
        pytest.fail("the real node joins the local control plane: unset MOUNTWARDEN_TEST_CLUSTER", pytrace=False)
    try:
        node = cluster.dev_cluster.add_real_node()
    except DevClusterError as error:
        pytest.fail(f"the real node did not join: {error}", pytrace=False)
    try:
        yield node
    finally:
        cluster.dev_cluster.remove_real_node(node)
