"""Fixtures for tests that run the operator against the local control plane."""

import uuid
from collections.abc import Iterator

import pytest
import yaml
from tests.support import ROOT, Kube, OperatorProcess


@pytest.fixture(scope="session")
def kube(cluster) -> Kube:
    return Kube(cluster.api_client())


@pytest.fixture(scope="session")
def crds_installed(cluster) -> None:
    for path in sorted((ROOT / "crds").glob("*.yaml")):
        cluster.kubectl("apply", "--server-side", "-f", str(path))
        name = yaml.safe_load(path.read_text())["metadata"]["name"]
        cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", f"crd/{name}")


@pytest.fixture(scope="session")
def operator(cluster, crds_installed, tmp_path_factory) -> Iterator[OperatorProcess]:
    process = OperatorProcess(str(cluster.kubeconfig), tmp_path_factory.mktemp("operator"))
    process.start()
    yield process
    process.stop()


@pytest.fixture
def unique() -> str:
    """A short unique suffix so tests sharing one cluster never collide."""
    return uuid.uuid4().hex[:6]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """On a failure, attach the tail of the operator's log: the reason is usually there."""
    outcome = yield
    report = outcome.get_result()
    process = item.funcargs.get("operator") if hasattr(item, "funcargs") else None
    if report.failed and isinstance(process, OperatorProcess):
        report.sections.append(("operator log (tail)", process.logs()[-6000:]))
