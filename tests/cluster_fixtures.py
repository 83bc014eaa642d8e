"""Test-wide setup: hypothesis profiles, and the real local control plane as fixtures.

`cluster` (session) starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
kwok with `mountwarden.devcluster` the first time a test asks for it, and stops them at the
end of the session. With MOUNTWARDEN_TEST_CLUSTER=existing and KUBECONFIG set, the tests
run against that cluster instead (kind, a cloud cluster...), which is never torn down.
A control plane that cannot start fails the tests that need it, with the reason; it never
skips them. Unit tests never request it, so they run without any of this.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import settings

from mountwarden.devcluster import (
    Binaries,
    BinariesError,
    DevCluster,
    DevClusterError,
    resolve_binaries,
    run_kubectl,
)

if TYPE_CHECKING:
    import kubernetes

# `bench` explores hard (HYPOTHESIS_PROFILE=bench); `default` stays quick. No deadline in
# either: with a control plane running on the same two cores, timings are not the property.
settings.register_profile("default", max_examples=100, deadline=None)
settings.register_profile("bench", max_examples=10_000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

#: MOUNTWARDEN_TEST_CLUSTER=existing: use the cluster in KUBECONFIG instead of starting one.
CLUSTER_MODE_VAR = "MOUNTWARDEN_TEST_CLUSTER"


@dataclass
class ClusterUnderTest:
    """What the tests get from the `cluster` fixture; every call names the kubeconfig explicitly."""

    kubeconfig: Path
    #: Directory of the binaries (kubectl, helm, ...); None when they come from PATH.
    binaries: Path | None
    node_names: list[str]
    kubectl_path: Path
    helm_path: Path | None
    #: Scratch space for helm's config, cache and data, so tests never touch ~/.config/helm.
    scratch: Path
    #: The local control plane (None for an existing cluster): pids, logs, start-up timings.
    dev_cluster: DevCluster | None = None
    api_server: str = ""
    startup_seconds: float | None = None
    _clients: list = field(default_factory=list, repr=False)

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float | None = 120.0
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this cluster; with check=True a failure raises with kubectl's stderr."""
        return run_kubectl(
            self.kubectl_path, self.kubeconfig, *args, input=input, check=check, timeout=timeout
        )

    def helm(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float | None = 300.0
    ) -> subprocess.CompletedProcess[str]:
        """Run helm against this cluster, with its state in the session's scratch directory."""
        if self.helm_path is None:
            pytest.fail(
                "helm is not available: set MOUNTWARDEN_TESTBIN_DIR or put helm on PATH", pytrace=False
            )
        env = {
            **os.environ,
            "HELM_CONFIG_HOME": str(self.scratch / "helm" / "config"),
            "HELM_CACHE_HOME": str(self.scratch / "helm" / "cache"),
            "HELM_DATA_HOME": str(self.scratch / "helm" / "data"),
        }
        command = [str(self.helm_path), f"--kubeconfig={self.kubeconfig}", *args]
        result = subprocess.run(
            command, input=input, capture_output=True, text=True, timeout=timeout, env=env
        )
        if check and result.returncode != 0:
            pytest.fail(
                f"`{' '.join(command)}` exited with {result.returncode}:\n{result.stderr}", pytrace=False
            )
        return result

    def api_client(self) -> kubernetes.client.ApiClient:
        """A new kubernetes ApiClient for this cluster (the caller may close it; closed at session end)."""
        import kubernetes

        client = kubernetes.config.new_client_from_config(config_file=str(self.kubeconfig))
        self._clients.append(client)
        return client

    def close(self) -> None:
        for client in self._clients:
            client.close()
        self._clients.clear()


def _terminal_line(config: pytest.Config, line: str) -> None:
    """Show a line while the session runs (build progress, start-up time), past output capture."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")
    if reporter is None:
        return
    if capture is None:
        reporter.write_line(line)
        return
    with capture.global_and_fixture_disabled():
        reporter.write_line(line)


@pytest.fixture(scope="session")
def testbin(request: pytest.FixtureRequest) -> Binaries:
    """The control-plane binaries: $MOUNTWARDEN_TESTBIN_DIR, else built by hack/testbin/build.sh."""
    try:
        return resolve_binaries(on_output=lambda line: _terminal_line(request.config, line))
    except BinariesError as e:
        reason = str(e)
    # Outside the except block, so that the report shows the reason and not a chained traceback.
    pytest.fail(f"the control-plane binaries are not available: {reason}", pytrace=False)


def _existing_cluster(request: pytest.FixtureRequest, scratch: Path) -> ClusterUnderTest:
    kubeconfig = os.environ.get("KUBECONFIG", "")
    if not kubeconfig or os.pathsep in kubeconfig or not Path(kubeconfig).is_file():
        pytest.fail(
            f"{CLUSTER_MODE_VAR}=existing needs KUBECONFIG naming one kubeconfig file (got {kubeconfig!r})",
            pytrace=False,
        )
    # kubectl and helm: the built ones when named, else the ones on PATH, else build them.
    binaries: Binaries | None = None
    if os.environ.get("MOUNTWARDEN_TESTBIN_DIR") or not (shutil.which("kubectl") and shutil.which("helm")):
        binaries = request.getfixturevalue("testbin")
    kubectl = binaries.kubectl if binaries else Path(shutil.which("kubectl") or "kubectl")
    helm = binaries.helm if binaries else Path(shutil.which("helm") or "helm")
    result = run_kubectl(kubectl, kubeconfig, "get", "nodes", "-o", "name", check=False, timeout=60)
    if result.returncode != 0:
        pytest.fail(
            f"the cluster in KUBECONFIG={kubeconfig} does not answer:\n{result.stderr}", pytrace=False
        )
    nodes = [line.removeprefix("node/") for line in result.stdout.split()]
    return ClusterUnderTest(
        kubeconfig=Path(kubeconfig),
        binaries=binaries.dir if binaries else None,
        node_names=nodes,
        kubectl_path=kubectl,
        helm_path=helm,
        scratch=scratch,
    )


@pytest.fixture(scope="session")
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ClusterUnderTest]:
    """A real Kubernetes API with kwok nodes: the local control plane, or the one in KUBECONFIG."""
    scratch = tmp_path_factory.mktemp("cluster-scratch")
    mode = os.environ.get(CLUSTER_MODE_VAR, "")
    if mode == "existing":
        handle = _existing_cluster(request, scratch)
        yield handle
        handle.close()
        return
    if mode not in ("", "local"):
        pytest.fail(
            f"{CLUSTER_MODE_VAR}={mode!r}: expected 'existing' (use KUBECONFIG) or unset", pytrace=False
        )

    binaries: Binaries = request.getfixturevalue("testbin")
    # stop_with_parent: a session killed outright (a CI timeout) takes its control plane along.
    dev = DevCluster(tmp_path_factory.mktemp("dev-cluster"), binaries, stop_with_parent=True)
    try:
        info = dev.up(nodes=3)
    except DevClusterError as e:
        reason = str(e)  # names the component, and ends with the tail of its log
    else:
        reason = ""
    if reason:
        pytest.fail(f"the local control plane could not start: {reason}", pytrace=False)
    _terminal_line(
        request.config,
        f"dev-cluster: Kubernetes {info.version} up in {info.startup_seconds:.1f}s at {info.api_server} "
        f"(state in {info.state_dir})",
    )
    handle = ClusterUnderTest(
        kubeconfig=info.kubeconfig,
        binaries=binaries.dir,
        node_names=list(info.nodes),
        kubectl_path=binaries.kubectl,
        helm_path=binaries.helm,
        scratch=scratch,
        dev_cluster=dev,
        api_server=info.api_server,
        startup_seconds=info.startup_seconds,
    )
    try:
        yield handle
    finally:
        handle.close()
        dev.down()


@pytest.fixture
def namespace(cluster: ClusterUnderTest) -> Iterator[str]:
    """A fresh namespace for one test, deleted afterwards (without waiting for it to go)."""
    import kubernetes

    name = f"mw-test-{uuid.uuid4().hex[:8]}"
    with kubernetes.config.new_client_from_config(config_file=str(cluster.kubeconfig)) as api:
        core = kubernetes.client.CoreV1Api(api)
        core.create_namespace({"metadata": {"name": name, "labels": {"mountwarden.io/test": "true"}}})
        # Pods are refused until the ServiceAccount controller has created `default` in
        # the new namespace (a few milliseconds): wait, so that tests need not retry.
        deadline = time.monotonic() + 30
        while True:
            try:
                core.read_namespaced_service_account("default", name)
                break
            except kubernetes.client.ApiException as e:
                if e.status != 404 or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        try:
            yield name
        finally:
            try:
                core.delete_namespace(name)
            except kubernetes.client.ApiException as e:
                if e.status != 404:
                    raise


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Tests that use the control plane (directly or through another fixture) carry the
    # `cluster` mark, so that `-m "not cluster"` runs only what needs no cluster.
    for item in items:
        if "cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.cluster)
