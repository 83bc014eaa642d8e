"""Fixtures for tests that run the operator against the local control plane, and the moto server."""

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from moto.server import ThreadedMotoServer
from tests.integration.moto_server import (
    LEAKY_AWS_VARIABLES,
    MotoServer,
    dummy_aws_environment,
)
from tests.support import ROOT, Kube, OperatorProcess, free_port


@pytest.fixture(scope="session")
def _moto_server_process() -> Iterator[MotoServer]:
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield MotoServer(f"http://127.0.0.1:{port}")
    finally:
        server.stop()


@pytest.fixture
def moto_server(_moto_server_process: MotoServer, aws_env: dict[str, str]) -> MotoServer:
    _moto_server_process.reset()
    return _moto_server_process


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, str]:
    """Dummy credentials for moto in this process's environment (see dummy_aws_environment)."""
    env = dummy_aws_environment(tmp_path)
    for name in LEAKY_AWS_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


@pytest.fixture(scope="session")
def kube(cluster) -> Kube:
    return Kube(cluster.api_client())


@pytest.fixture(scope="session")
def crds_installed(cluster) -> None:
    for path in sorted((ROOT / "crds").glob("*.yaml")):
        cluster.kubectl("apply", "--server-side", "-f", str(path))
        name = yaml.safe_load(path.read_text())["metadata"]["name"]
        cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", f"crd/{name}")


@pytest.fixture(scope="module")
def operator(cluster, crds_installed, _moto_server_process: MotoServer, tmp_path_factory) -> Iterator[OperatorProcess]:
    """The operator for one test module, its AWS calls going to the session's moto server.

    Per module, not per session: a module that runs operators of its own (e2e/test_helm.py) must
    not share the cluster with one left running by an earlier module.
    """
    log_dir = tmp_path_factory.mktemp("operator")
    aws = {**dummy_aws_environment(log_dir), "AWS_ENDPOINT_URL": _moto_server_process.endpoint_url}
    process = OperatorProcess(str(cluster.kubeconfig), log_dir, extra_env=aws)
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
