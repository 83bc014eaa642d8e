"""What the end-to-end tests share: the release, kubectl and helm calls, tokens, operator processes."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import yaml
from tests.cluster_fixtures import ClusterUnderTest
from tests.support import ROOT

from mountwarden.handlers.standby import EXIT_STOOD_DOWN

CHART = ROOT / "charts" / "mountwarden"
RELEASE = "mountwarden"
RELEASE_NAMESPACE = "mountwarden-e2e"


def kubectl_json(cluster: ClusterUnderTest, *args: str) -> dict:
    return json.loads(cluster.kubectl(*args, "-o", "json").stdout)


def pods(cluster: ClusterUnderTest, component: str, namespace: str = RELEASE_NAMESPACE) -> list[dict]:
    return kubectl_json(cluster, "get", "pods", "-n", namespace, "-l",
                        f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component={component}")["items"]


def token_kubeconfig(cluster: ClusterUnderTest, path: Path, token: str) -> Path:
    """A kubeconfig that authenticates with ``token`` alone (the admin one also carries a client certificate)."""
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    context = next(c for c in config["contexts"] if c["name"] == config["current-context"])["context"]
    server = next(c for c in config["clusters"] if c["name"] == context["cluster"])["cluster"]
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "token",
        "clusters": [{"name": "cluster", "cluster": server}],
        "users": [{"name": "token", "user": {"token": token}}],
        "contexts": [{"name": "token", "context": {"cluster": "cluster", "user": "token"}}],
    }))
    return path


def pod_token(cluster: ClusterUnderTest, namespace: str, service_account: str, pod: dict) -> str:
    """A token of ``service_account`` bound to ``pod``: as kubelet gives the pod (node name included)."""
    return cluster.kubectl(
        "create", "token", service_account, "-n", namespace, "--duration=1h", "--bound-object-kind=Pod",
        f"--bound-object-name={pod['metadata']['name']}", f"--bound-object-uid={pod['metadata']['uid']}",
    ).stdout.strip()


def whoami(cluster: ClusterUnderTest, kubeconfig: Path) -> dict:
    result = subprocess.run([str(cluster.kubectl_path), f"--kubeconfig={kubeconfig}", "auth", "whoami", "-o", "json"],
                            capture_output=True, text=True, timeout=60, check=True)
    return json.loads(result.stdout)["status"]["userInfo"]


def secret_files(cluster: ClusterUnderTest, name: str, directory: Path) -> Path:
    """The webhook Secret's files, laid out as the pod's volume would have them."""
    directory.mkdir(parents=True, exist_ok=True)
    data = kubectl_json(cluster, "get", "secret", name, "-n", RELEASE_NAMESPACE)["data"]
    for key, value in data.items():
        (directory / key).write_bytes(base64.b64decode(value))
    return directory


class OperatorRun:
    """`mountwarden operator` in its own process group, logging to a file."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path, *, restart_stood_down: bool = False) -> None:
        self.log = log
        command = [sys.executable, "-m", "mountwarden", "operator", *args]
        if restart_stood_down:
            # As the kubelet restarts the container of a replica that stood down (EXIT_STOOD_DOWN,
            # mountwarden.handlers.standby); any other exit ends the run.
            command = ["sh", "-c", f'while :; do "$@"; s=$?; [ $s -eq {EXIT_STOOD_DOWN} ] || exit $s; done', "sh",
                       *command]
        self.process = subprocess.Popen(
            command,
            stdout=log.open("w"), stderr=subprocess.STDOUT, env={**os.environ, **env}, start_new_session=True,
        )

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, sig)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()

    def logs(self) -> str:
        return self.log.read_text()

    def assert_running(self) -> None:
        assert self.process.poll() is None, f"the operator exited:\n{self.logs()[-4000:]}"
