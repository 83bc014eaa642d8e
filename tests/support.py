"""Helpers shared by the tests: polling, clients, the operator process and its context, StorageProfile bodies."""

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import kubernetes

from mountwarden.api.nodemountreport import read_node_report
from mountwarden.core.node.report import NodeReport
from mountwarden.handlers.admission import AdmissionState
from mountwarden.handlers.config import OperatorConfig
from mountwarden.handlers.context import OperatorContext
from mountwarden.handlers.posted import PostedFindings

ROOT = Path(__file__).resolve().parents[1]
GROUP, VERSION = "mountwarden.io", "v1alpha1"


def operator_context(*, ready: bool = True, **fields) -> OperatorContext:
    """The operator's context for handler tests, admission answering (``ready``); clients not given are None."""
    admission = AdmissionState()
    if ready:
        admission.ready.set()
    defaults = {"config": OperatorConfig(), "kube_client": None, "storage_classes": None, "conditions": None,
                "posted_findings": PostedFindings(), "watches": None, "pods": None, "credit_fetcher": None,
                "admission": admission}
    return OperatorContext(**{**defaults, **fields})


class WaitTimedOut(AssertionError):
    """A condition never held: what was waited for, and the last value seen."""


def wait_for(condition: Callable[[], object], *, timeout: float = 60.0, interval: float = 0.25,
             what: str | Callable[[], str] = "") -> object:
    """Poll until ``condition()`` is truthy and return it; WaitTimedOut with ``what`` and the last value otherwise
    (``what`` may be a callable, asked only then, to say the state the wait ended in)."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        last = condition()
        if last:
            return last
        time.sleep(interval)
    described = what() if callable(what) else what
    raise WaitTimedOut(f"timed out after {timeout:.0f}s waiting for {described or condition}: last value {last!r}")


class Kube:
    """The few typed clients the operator tests use, on one ApiClient."""

    def __init__(self, api_client: kubernetes.client.ApiClient) -> None:
        self.custom = kubernetes.client.CustomObjectsApi(api_client)
        self.storage = kubernetes.client.StorageV1Api(api_client)
        self.core = kubernetes.client.CoreV1Api(api_client)
        self.apps = kubernetes.client.AppsV1Api(api_client)
        self.client = api_client

    def profile(self, name: str) -> dict | None:
        try:
            return self.custom.get_cluster_custom_object(GROUP, VERSION, "storageprofiles", name)
        except kubernetes.client.ApiException as error:
            if error.status == 404:
                return None
            raise

    def apply_profile(self, body: dict) -> dict:
        name = body["metadata"]["name"]
        current = self.profile(name)
        if current is None:
            return self.custom.create_cluster_custom_object(GROUP, VERSION, "storageprofiles", body)
        return self.custom.patch_cluster_custom_object(GROUP, VERSION, "storageprofiles", name, {"spec": body["spec"]})

    def delete_profile(self, name: str) -> None:
        try:
            self.custom.delete_cluster_custom_object(GROUP, VERSION, "storageprofiles", name)
        except kubernetes.client.ApiException as error:
            if error.status != 404:
                raise

    def classes_of(self, profile: str) -> dict[str, object]:
        items = self.storage.list_storage_class(label_selector=f"mountwarden.io/profile={profile}").items
        return {item.metadata.name: item for item in items}

    def condition(self, profile: str, type_: str) -> dict | None:
        body = self.profile(profile) or {}
        return next((c for c in (body.get("status") or {}).get("conditions", []) if c["type"] == type_), None)


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The samples a /metrics endpoint on this machine serves: (name, sorted labels) -> value."""
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        return parse_metrics(response.read().decode())


def parse_metrics(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The samples of a /metrics page: (name, sorted labels) -> value."""
    from prometheus_client.parser import text_string_to_metric_families

    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


#: Where the tests of each emulated VM live (conftest.py): each directory's tests run together, in a lane of its own.
VM_TEST_DIRECTORIES = ("tests/kernel/", "tests/realnode/")
#: Kernel modules that boot a lab VM of their own (they stop the server, or rpcbind, for good) and never touch the
#: shared one: they run first in the lab's lane, before the shared VM boots (conftest.py).
OWN_VM_MODULES = ("tests/kernel/test_gateway.py", "tests/kernel/test_dead_server.py",
                  "tests/kernel/test_server_not_responding.py")
#: The fixture of the shared lab VM, which no module of OWN_VM_MODULES may use (a second shared VM would boot).
SHARED_LAB_FIXTURE = "lab_vm"
_vm_closers: dict[str, list[Callable[[], None]]] = {}


def vm_directory(item) -> str | None:
    """The VM test directory of a pytest item, or None."""
    path = item.path.as_posix() if item is not None else ""
    return next((directory for directory in VM_TEST_DIRECTORIES if f"/{directory}" in path), None)


def close_after_directory(directory: str, close: Callable[[], None]) -> None:
    """Run ``close`` once after the last test of ``directory`` instead of at the session's end: a VM left up
    would take a core from every test after it."""
    _vm_closers.setdefault(directory, []).append(close)


def close_vm_resources(directory: str) -> None:
    for close in reversed(_vm_closers.pop(directory, [])):
        close()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class OperatorProcess:
    """`mountwarden operator` as a separate process, as users run it; restartable and killable."""

    def __init__(self, kubeconfig: str, log_dir: Path, extra_env: dict[str, str] | None = None,
                 fault: str = "", args: tuple[str, ...] = ()) -> None:
        self.kubeconfig = kubeconfig
        self.log_dir = log_dir
        self.extra_env = extra_env or {}
        #: More options of `mountwarden operator` (--peering, --priority).
        self.args = args
        #: Python run in the operator's process before it starts: a fault injected on purpose (chaos tests).
        self.fault = fault
        self.process: subprocess.Popen | None = None
        self.starts = 0
        self.metrics_port = free_port()

    @property
    def log_path(self) -> Path:
        return self.log_dir / f"operator-{self.starts}.log"

    def start(self) -> None:
        self.starts += 1
        env = {**os.environ, "MOUNTWARDEN_COLLECT_INTERVAL": "2", "MOUNTWARDEN_CREDIT_INTERVAL": "10",
               "MOUNTWARDEN_COMPLIANCE_INTERVAL": "2",
               # Longer than any test waits for a rollout: only events can move one on.
               "MOUNTWARDEN_ROLLOUT_INTERVAL": "3600",
               **self.extra_env}
        entry = ["-c", f"{self.fault}\nfrom mountwarden.cli import main\nmain()"] if self.fault else ["-m", "mountwarden"]
        self.process = subprocess.Popen(
            [sys.executable, *entry, "operator", "--kubeconfig", self.kubeconfig, "--verbose",
             "--metrics-port", str(self.metrics_port), *self.args],
            stdout=self.log_path.open("w"), stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            os.killpg(self.process.pid, sig)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.process = None

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Freeze the process (SIGSTOP): it holds its connections but answers nothing, as a hung operator."""
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.killpg(self.process.pid, signal.SIGCONT)

    def restart(self, sig: int = signal.SIGTERM) -> None:
        self.stop(sig)
        self.start()

    def logs(self) -> str:
        return "\n".join(path.read_text() for path in sorted(self.log_dir.glob("operator-*.log")))

    def assert_running(self) -> None:
        assert self.process is not None and self.process.poll() is None, f"operator exited:\n{self.logs()[-4000:]}"


def report_spec(node: str, *, volumes: list[dict] = (), sqlite: list[dict] = (), **fields) -> dict:
    """A NodeMountReport's spec as every agent writes it, the fields a test does not care about filled in."""
    return {"nodeName": node, "scanTime": "2026-03-01T12:00:00Z", "agentVersion": "0.1.0",
            "networkFstypes": ["nfs", "nfs4"], **fields,
            "volumes": [{"plugin": "csi", "fstype": "nfs4", "source": "fs-1.efs:/", "optionsSource": "mountstats",
                         **volume} for volume in volumes],
            "sqlite": [{"severity": "warning", "mode": "unknown", "device": "0:50", "inode": 1, "message": "",
                        "remedy": "", **database} for database in sqlite]}


def profile_events(kube: "Kube", profile: str, reason: str) -> list[str]:
    """A StorageProfile's Events wherever kopf wrote them: a cluster-scoped object's go to the namespace the operator
    runs in (its pod's, kopf/_cogs/clients/events.py), "default" out of a cluster. `kubectl describe` looks in all."""
    return [event.message for event in kube.core.list_event_for_all_namespaces(
        field_selector=f"involvedObject.kind=StorageProfile,involvedObject.name={profile},reason={reason}").items]


def put_report(kube: "Kube", node: str, spec: dict) -> None:
    """Write the node's NodeMountReport as its agent does: created the first time, its spec replaced after."""
    import kubernetes

    try:
        kube.custom.patch_cluster_custom_object(GROUP, VERSION, "nodemountreports", node, {"spec": spec})
    except kubernetes.client.ApiException as error:
        if error.status != 404:
            raise
        kube.custom.create_cluster_custom_object(GROUP, VERSION, "nodemountreports", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "NodeMountReport", "metadata": {"name": node}, "spec": spec})


def read_report(node: str, **spec) -> "NodeReport":
    """``report_spec`` read as the operator reads a report."""
    return read_node_report(node, report_spec(node, **spec))


def profile_body(name: str, cache_policy: str = "staging", *, provisioner: str = "efs.csi.aws.com",
                 parameters: dict | None = None, **spec) -> dict:
    """A StorageProfile; by default on EFS (with a file system, so its credit watch is on). ``spec`` adds fields."""
    if parameters is None:
        parameters = ({"provisioningMode": "efs-ap", "fileSystemId": "fs-0123456789abcdef0"}
                      if provisioner == "efs.csi.aws.com" else {})
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "StorageProfile",
        "metadata": {"name": name},
        "spec": {"backend": {"provisioner": provisioner, "parameters": parameters}, "cachePolicy": cache_policy, **spec},
    }
