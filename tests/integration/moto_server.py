"""A real local moto server (EFS, CloudWatch, ...) for tests that talk to AWS through boto3.

Import the fixtures into a test module (or, later, a conftest):
``from moto_server import aws_env, moto_server  # noqa: F401``.

- ``moto_server``: one ThreadedMotoServer per test session on 127.0.0.1 and a
  free port; its state is reset before each test that uses it.
- ``aws_env``: dummy credentials and region in the environment, with the
  shared config and credentials files pointed at empty files and the instance
  metadata service disabled, so that nothing of the host's AWS setup leaks in.
"""

import socket
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from moto.server import ThreadedMotoServer

REGION = "us-east-1"


@dataclass(frozen=True)
class MotoServer:
    endpoint_url: str
    region: str = REGION

    def reset(self) -> None:
        """Forget every resource and metric (moto's own reset API)."""
        request = urllib.request.Request(f"{self.endpoint_url}/moto-api/reset", method="POST")
        with urllib.request.urlopen(request, timeout=10):
            pass


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="session")
def _moto_server_process() -> Iterator[MotoServer]:
    port = _free_port()
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
    """Dummy credentials for moto, isolated from the host's ~/.aws and instance metadata."""
    empty = tmp_path / "aws-empty"
    empty.write_text("")
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_REGION": REGION,
        "AWS_CONFIG_FILE": str(empty),
        "AWS_SHARED_CREDENTIALS_FILE": str(empty),
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    for name in (
        "AWS_PROFILE",
        "AWS_DEFAULT_PROFILE",
        "AWS_ROLE_ARN",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    ):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env
