"""The real node as a fixture: the kernel lab VM joined to the session's local control plane, with the chart on it.

One node for the whole session (a boot, the image's import and the chart's start take minutes under TCG, so every
real-node module shares them); each module leaves the release as it found it (`release_as_found`).

`real_node` runs containerd, runc and a kubelet built from the same source as the control plane, with a kernel NFS
server beside it; mountwarden's image (`make image`) is imported into its containerd and charts/mountwarden is
installed: the operator's two replicas and the agent run there as containers, and the agent's pod writes
lab-node-0's NodeMountReport. It fails (never skips) when the node cannot join or the chart does not come up, with
the kubelet's last log lines or the pods' states.
"""

import json
from collections.abc import Iterator

import pytest
from tests.support import close_after_directory, vm_directory, wait_for

from mountwarden.devcluster import DevClusterError
from mountwarden.lab.node import CHART_NAMESPACE, CHART_RELEASE, NODE_NAME, RealNode

#: Under TCG the replicas start in minutes (imports, then kopf's first lists), more when the host is busy.
CHART_START_SECONDS = 1800
#: pytest-timeout's limit for a real-node test, its fixtures included (the first one starts the node and the chart).
MODULE_TIMEOUT = 3 * CHART_START_SECONDS


#: Log lines of each chart pod attached to a failed real-node test: the operator's reasons live only there.
FAILURE_LOG_LINES = 300


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if vm_directory(item) == "tests/realnode/":
            item.add_marker(pytest.mark.realnode)
            item.add_marker(pytest.mark.cluster)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A failed real-node test carries the chart's pods' last log lines: the pods, and so their logs, are gone by
    the time anyone reads a CI log."""
    report = yield
    kube = getattr(item, "funcargs", {}).get("kube")
    if report.failed and call.when == "call" and kube is not None:
        for pod in kube.core.list_namespaced_pod(CHART_NAMESPACE).items:
            try:
                text = kube.core.read_namespaced_pod_log(pod.metadata.name, CHART_NAMESPACE,
                                                         tail_lines=FAILURE_LOG_LINES, _request_timeout=30)
            except Exception as error:  # the pod gone or its log unreadable: say so, the failure still shows
                text = f"(log unreadable: {error})"
            report.sections.append((f"log of pod {pod.metadata.name}", text))
    return report


@pytest.fixture(scope="session")
def real_node(cluster, mountwarden_image) -> Iterator[RealNode]:
    """The real node for the session's real-node tests, the chart installed on it; gone afterwards (the release, the
    Node object, its report), so that later tests on the session's cluster never meet a node or a release not theirs."""
    if cluster.dev_cluster is None:
        pytest.fail("the real node joins the local control plane: unset MOUNTWARDEN_TEST_CLUSTER", pytrace=False)
    try:
        # One operator replica (a standby under TCG costs every roll a start of minutes and keeps a core busy);
        # the takeover test scales to two for itself.
        node = cluster.dev_cluster.add_real_node(app_image=mountwarden_image, operator_replicas=1)
    except DevClusterError as error:
        pytest.fail(f"the real node did not join, or the chart did not come up on it: {error}", pytrace=False)
    removed = []

    def remove() -> None:
        if not removed:
            removed.append(node)
            cluster.dev_cluster.remove_real_node(node)

    close_after_directory("tests/realnode/", remove)  # not at the session's end: other tests may come after
    try:
        yield node
    finally:
        remove()


def operator_pods(kube) -> list:
    return [pod for pod in kube.core.list_namespaced_pod(
        CHART_NAMESPACE, label_selector="app.kubernetes.io/component=operator").items
        if pod.metadata.deletion_timestamp is None]


def active_operator(kube):
    """The operator pod that labelled itself active (the webhook Service routes to it alone), or None."""
    active = [pod for pod in operator_pods(kube) if (pod.metadata.labels or {}).get("mountwarden.io/active") == "true"]
    return active[0] if len(active) == 1 else None


def scale_operator(kube, replicas: int) -> int:
    """Scale the chart's operator Deployment (as `kubectl scale` would); returns the replicas it had."""
    (deployment,) = kube.apps.list_namespaced_deployment(
        CHART_NAMESPACE, label_selector="app.kubernetes.io/component=operator").items
    kube.apps.patch_namespaced_deployment_scale(deployment.metadata.name, CHART_NAMESPACE,
                                                {"spec": {"replicas": replicas}})
    return deployment.spec.replicas


def node_report(kube) -> dict | None:
    try:
        return kube.custom.get_cluster_custom_object("mountwarden.io", "v1alpha1", "nodemountreports", NODE_NAME)
    except Exception:  # not written yet
        return None


def release_revision(cluster) -> int:
    return int(json.loads(cluster.dev_cluster.helm("status", CHART_RELEASE, "-n", CHART_NAMESPACE,
                                                   "-o", "json").stdout)["version"])


@pytest.fixture(scope="module", autouse=True)
def release_as_found(real_node, cluster) -> Iterator[None]:
    """What a module changes with `helm upgrade` it takes back (`helm rollback` to the revision it found), so the
    next module on the shared node starts from the chart as installed."""
    found = release_revision(cluster)
    yield
    if release_revision(cluster) != found:
        cluster.dev_cluster.helm("rollback", CHART_RELEASE, str(found), "-n", CHART_NAMESPACE,
                                 "--wait", "--timeout", f"{CHART_START_SECONDS}s")


@pytest.fixture(scope="session")
def chart(real_node, kube) -> RealNode:
    """The chart at work on the node: one operator replica active (serving the webhooks) and the agent's report
    written, which the API server admits only once that replica answers its webhook through the Service."""
    wait_for(lambda: active_operator(kube), timeout=CHART_START_SECONDS, interval=5,
             what="an operator replica of the chart active on the real node")
    wait_for(lambda: node_report(kube), timeout=CHART_START_SECONDS, interval=5,
             what=f"the chart's agent writing NodeMountReport {NODE_NAME}")
    return real_node
