"""A real local control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler
and kwok (simulated nodes whose pods become Running and Ready), started as detached
processes whose pids, logs, certificates and kubeconfig live in one state directory.

Layout of the state directory:

    state.json         what `down` needs: pids (with start times), ports, binaries
    kubeconfig         admin (group system:masters); certificates embedded
    logs/<component>.log
    pki/               the CA, serving and client certificates, service-account keys
    kubeconfigs/       one per component, each with its own identity
    etcd/              etcd's data directory
    kwok.yaml          kwok's stages (the behaviour of the simulated kubelets)
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mountwarden.devcluster import pki as pki_
from mountwarden.devcluster import processes
from mountwarden.devcluster.binaries import Binaries, BinariesError, resolve, resolve_node_binaries
from mountwarden.devcluster.kubectl import run_kubectl
from mountwarden.devcluster.kwok_stages import STAGES

if TYPE_CHECKING:
    from mountwarden.lab.node import RealNode

ETCD = "etcd"
APISERVER = "kube-apiserver"
CONTROLLER_MANAGER = "kube-controller-manager"
SCHEDULER = "kube-scheduler"
KWOK = "kwok"
#: The real node's QEMU, when `up --real-node` started one (named after its Node).
REAL_NODE = "lab-node-0"
#: Start order; `down` stops them all at once.
COMPONENTS = (ETCD, APISERVER, CONTROLLER_MANAGER, SCHEDULER, KWOK)

#: How kwok recognises the nodes it simulates (and how users recognise them too).
KWOK_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
#: Pod IPs handed out by kwok: a /16 leaves room for tens of thousands of pods, and does
#: not overlap the Service range (10.0.0.0/24).
POD_CIDR = "10.244.0.0/16"
#: kwok renews each node's Lease at this period, well inside the node controller's grace
#: period, so simulated nodes never turn NotReady.
NODE_LEASE_SECONDS = 40
#: Client rate limits for the controllers and the scheduler: the defaults (20 and 50 QPS)
#: take minutes to create or bind thousands of pods, which benchmarks do.
CLIENT_QPS, CLIENT_BURST = "500", "1000"

#: The loopback port the API server sends its traffic into the cluster network to (webhooks' Services, the
#: kubelets): an HTTP CONNECT proxy there, when the real node runs (mountwarden.lab.node), reaches pod IPs.
CLUSTER_EGRESS = "cluster_egress"

#: The keys of state.json's "ports" each component listens on (a restart waits for them to be free).
_PORT_KEYS = {ETCD: ("etcd_client", "etcd_peer"), APISERVER: (APISERVER,), CONTROLLER_MANAGER: (CONTROLLER_MANAGER,),
              SCHEDULER: (SCHEDULER,)}

STATE_FILE = "state.json"
_POLL = 0.1  # seconds between readiness checks: short, since each check is one loopback request


class DevClusterError(RuntimeError):
    """The dev cluster could not start or stop; the message says which component and why."""

    def __init__(self, message: str, *, component: str | None = None, log_tail: str = "", log_path: str = ""):
        super().__init__(message)
        self.message = message
        self.component = component
        self.log_tail = log_tail
        self.log_path = log_path
        #: Components that had started and were stopped because of this error.
        self.stopped: list[str] = []

    def __str__(self) -> str:
        if not self.log_tail:
            return self.message
        return f"{self.message}\n--- last lines of {self.log_path} ---\n{self.log_tail}"


class AlreadyRunningError(DevClusterError):
    """`up` on a state directory whose cluster still runs."""


@dataclass
class ClusterInfo:
    """What `up` started: enough to use the cluster and to stop it."""

    state_dir: Path
    kubeconfig: Path
    api_server: str
    processes: dict[str, processes.RecordedProcess]
    nodes: list[str]
    binaries: Path
    version: str = ""
    startup_seconds: float = 0.0
    #: Seconds from the start of `up` to the end of each step, in order.
    timings: dict[str, float] = field(default_factory=dict)
    #: The real node (the kernel lab VM with a kubelet) when `up --real-node` started it, and its join time.
    real_node: str | None = None
    real_node_seconds: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "kubeconfig": str(self.kubeconfig),
            "state_dir": str(self.state_dir),
            "api_server": self.api_server,
            "processes": {name: {"pid": p.pid, "log": p.log} for name, p in self.processes.items()},
            "nodes": list(self.nodes),
            "binaries": str(self.binaries),
            "version": self.version,
            "startup_seconds": round(self.startup_seconds, 2),
            "timings": {step: round(t, 2) for step, t in self.timings.items()},
            "real_node": self.real_node,
            "real_node_seconds": self.real_node_seconds,
        }


class _Api:
    """Just enough of a Kubernetes REST client for bootstrapping, on the standard library.

    The kubernetes package takes about a second to import, longer than the API server
    needs to answer /readyz; this keeps `up` fast.
    """

    def __init__(self, server: str, ca: pki_.CertKey, client: pki_.CertKey):
        self.server = server
        self._context = ssl.create_default_context(cafile=str(ca.cert))
        self._context.load_cert_chain(str(client.cert), str(client.key))

    def request(self, method: str, path: str, body: Any = None, timeout: float = 5.0) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, context=self._context, timeout=timeout) as resp:
                status, raw = resp.status, resp.read()
        except urllib.error.HTTPError as e:
            status, raw = e.code, e.read()
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw.decode(errors="replace")


def _lost_its_port(log: Path, since: int) -> bool:
    """True when the component's log, from byte ``since`` on, says its listener could not bind."""
    try:
        with open(log, "rb") as f:
            f.seek(since)
            return b"address already in use" in f.read()
    except OSError:
        return False


def _healthz(port: int, timeout: float = 2.0) -> bool:
    """GET /healthz on a component's secure port (self-signed; the path is always allowed)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(
            f"https://127.0.0.1:{port}/healthz", context=context, timeout=timeout
        ) as r:
            return r.status == 200
    except (OSError, urllib.error.URLError):
        return False


def kwok_node(name: str, index: int, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A plain v1.Node that kwok will simulate: no taints, room for thousands of pods; ``labels`` added."""
    resources = {"cpu": "1000", "memory": "1Ti", "pods": "10000", "ephemeral-storage": "1Ti"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "type": "kwok",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                # Spread over zones like a real multi-AZ cluster (EFS mount targets are per AZ).
                "topology.kubernetes.io/zone": f"dev-zone-{'abc'[index % 3]}",
                **(labels or {}),
            },
            "annotations": {KWOK_NODE_ANNOTATION[0]: KWOK_NODE_ANNOTATION[1]},
        },
        "spec": {},
        "status": {
            "allocatable": resources,
            "capacity": resources,
            # kwok keeps an address that is already set: give each node its own.
            "addresses": [
                {"type": "InternalIP", "address": f"10.1.{index // 250}.{index % 250 + 1}"},
                {"type": "Hostname", "address": name},
            ],
        },
    }


def _node_ready(node: dict[str, Any]) -> bool:
    conditions = node.get("status", {}).get("conditions") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    # The node controller adds node.kubernetes.io/not-ready (NoSchedule) until it has seen
    # the node Ready; the scheduler would place nothing there before it removes the taint.
    tainted = any(
        t.get("key", "").startswith("node.kubernetes.io/") for t in node.get("spec", {}).get("taints") or []
    )
    return ready and not tainted


class DevCluster:
    """A local control plane in `state_dir`.

    `binaries` is a directory (or a Binaries); when None it is found the way
    `mountwarden dev-cluster up` finds it ($MOUNTWARDEN_TESTBIN_DIR or hack/testbin/build.sh).
    `on_progress` receives one short line per step; `on_build_output` each line that
    build.sh prints while it builds. With `stop_with_parent`, the components stop when the
    calling process dies (for test sessions); by default they run on detached.
    """

    def __init__(
        self,
        state_dir: str | Path,
        binaries: Binaries | str | Path | None = None,
        *,
        on_progress: Callable[[str], None] | None = None,
        on_build_output: Callable[[str], None] | None = None,
        stop_with_parent: bool = False,
    ):
        self.state_dir = Path(state_dir).expanduser().resolve()
        # A directory is checked when `up` needs it, so that the error surfaces there.
        self._binaries: Binaries | None = binaries if isinstance(binaries, Binaries) else None
        self._binaries_arg = None if isinstance(binaries, Binaries) else binaries
        self._on_progress = on_progress or (lambda _message: None)
        self._on_build_output = on_build_output
        # True for test sessions: if the process that ran `up` dies without `down`, the
        # components are killed instead of running on unattended. (Linux ties this to the
        # thread that started them: call `up` from a thread that lives as long as the cluster.)
        self._stop_with_parent = stop_with_parent
        # Popen objects of the processes this instance started, so that it can reap them.
        self._children: list[subprocess.Popen] = []

    # -- paths ---------------------------------------------------------------------------

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    @property
    def logs_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def state_file(self) -> Path:
        return self.state_dir / STATE_FILE

    @property
    def binaries(self) -> Binaries:
        """The binaries: as given, as recorded by the last `up` in this state dir, or resolved."""
        if self._binaries is None and self._binaries_arg is not None:
            self._binaries = resolve(self._binaries_arg)
        if self._binaries is None:
            recorded = self._read_state().get("binaries")
            if recorded and not Binaries(Path(recorded)).missing():
                self._binaries = Binaries(Path(recorded))
            else:
                self._binaries = resolve(on_output=self._on_build_output)
        return self._binaries

    def binary(self, name: str) -> Path:
        """Path of one binary by file name, e.g. binary('helm')."""
        return self.binaries.path(name)

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float | None = 120.0
    ) -> subprocess.CompletedProcess[str]:
        """Run the built kubectl against this cluster's admin kubeconfig."""
        return run_kubectl(
            self.binaries.kubectl, self.kubeconfig, *args, input=input, check=check, timeout=timeout
        )

    # -- state ---------------------------------------------------------------------------

    def _read_state(self) -> dict[str, Any]:
        try:
            return json.loads(self.state_file.read_text())
        except FileNotFoundError:
            return {}
        except ValueError as e:
            raise DevClusterError(
                f"{self.state_file} is not valid JSON ({e}); stop any processes it named by hand, "
                "then delete the file"
            ) from e

    def _write_state(self, state: dict[str, Any]) -> None:
        # Write then rename, so a crash never leaves a half-written file that `down` cannot read.
        tmp = self.state_file.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(state, indent=2) + "\n")
        os.replace(tmp, self.state_file)

    def _records(self) -> list[processes.RecordedProcess]:
        state = self._read_state()
        return [
            processes.RecordedProcess.from_dict(name, p) for name, p in state.get("processes", {}).items()
        ]

    def running(self) -> list[str]:
        """Names of this state dir's components that are running now."""
        return [r.name for r in self._records() if processes.is_ours(r)]

    def _strays(self) -> list[int]:
        # Components not in state.json (a crash between start and record) still name the
        # state dir in their arguments: every one has a path under it.
        return processes.processes_mentioning(str(self.state_dir) + os.sep, (*COMPONENTS, "qemu-system-x86_64"))

    def info(self) -> ClusterInfo | None:
        """The cluster recorded in the state dir by the last successful `up`, or None."""
        state = self._read_state()
        if not state.get("ready"):
            return None
        return ClusterInfo(
            state_dir=self.state_dir,
            kubeconfig=self.kubeconfig,
            api_server=state["api_server"],
            processes={r.name: r for r in self._records()},
            nodes=list(state.get("nodes", [])),
            binaries=Path(state.get("binaries", "")),
            version=state.get("version", ""),
            startup_seconds=float(state.get("startup_seconds", 0.0)),
            timings=dict(state.get("timings", {})),
            real_node=state.get("real_node"),
            real_node_seconds=state.get("real_node_seconds"),
        )

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold the state dir's lock, so that two `up`/`down` never interleave."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with open(self.state_dir / ".lock", "w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise DevClusterError(
                    f"another `mountwarden dev-cluster up` or `down` is working on {self.state_dir}; "
                    "wait for it to finish"
                ) from None
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    # -- up ------------------------------------------------------------------------------

    def up(self, nodes: int = 3, timeout: float = 180.0, *, real_node: bool = False) -> ClusterInfo:
        """Start the control plane and `nodes` simulated nodes; return once it is usable.

        Usable means: the API server answers /readyz, the `default` ServiceAccount exists
        in `default` (kube-controller-manager works), the scheduler is healthy, and every
        node is Ready and untainted (kwok works). With `real_node`, the kernel lab VM then joins as
        node lab-node-0 with containerd and a real kubelet (see add_real_node). On any failure, including Ctrl-C,
        everything already started is stopped, and the error carries the tail of the
        failing component's log.
        """
        if nodes < 1:
            raise DevClusterError(f"--nodes must be at least 1 (got {nodes}): pods need a node to run on")
        self._refuse_foreign_dir()
        self._refuse_if_running()  # before a build that may take minutes
        # Resolve (and maybe build) before touching the state dir, and outside the
        # start-up timeout. A directory recorded by an earlier run is not reused here:
        # `up` follows --binaries and the environment of today.
        if self._binaries is None:
            self._on_progress("finding the control-plane binaries")
            self._binaries = resolve(self._binaries_arg, on_output=self._on_build_output)
        binaries = self._binaries
        with self._locked():
            self._refuse_if_running()  # again, under the lock
            started = time.monotonic()
            try:
                info = self._up(binaries, nodes, started, started + timeout)
                if real_node:
                    self.add_real_node()
                    info = self.info()
                    assert info is not None
                return info
            except BaseException as e:
                self._on_progress("stopping what was started")
                stopped = self._stop_all()
                if isinstance(e, DevClusterError):
                    e.stopped = stopped
                raise

    def _refuse_foreign_dir(self) -> None:
        # `up` deletes what an earlier run left (logs/, pki/, etcd/...): never do that in a
        # directory that some other tool owns, such as a mistyped --state-dir ~.
        if not self.state_dir.exists() or self.state_file.exists():
            return
        if any(p.name != ".lock" for p in self.state_dir.iterdir()):
            raise DevClusterError(
                f"{self.state_dir} is not empty and holds no {STATE_FILE}, so it is not a dev-cluster "
                "state directory; choose a new or empty directory for --state-dir"
            )

    def _refuse_if_running(self) -> None:
        running = self.running()
        strays = self._strays()
        if not running and not strays:
            return
        state = self._read_state()
        what = ", ".join(running) if running else "processes " + ", ".join(map(str, strays))
        api = f" (API server {state['api_server']})" if state.get("api_server") else ""
        raise AlreadyRunningError(
            f"a dev cluster already runs in {self.state_dir}{api}: {what}.\n"
            f"Use it:      export KUBECONFIG={self.kubeconfig}\n"
            f"or stop it:  mountwarden dev-cluster down --state-dir {self.state_dir}"
        )

    def _clean_previous_run(self) -> None:
        # Each `up` makes a new cluster: a new CA would not match old etcd data (service
        # account tokens, secrets), so nothing of a previous run is reused.
        for name in ("etcd", "pki", "kubeconfigs", "logs", "flexvolume"):
            shutil.rmtree(self.state_dir / name, ignore_errors=True)
        for name in ("kubeconfig", "kwok.yaml", "egress-selector.yaml", "chart-values.yaml", STATE_FILE):
            (self.state_dir / name).unlink(missing_ok=True)

    def _up(self, binaries: Binaries, nodes: int, started: float, deadline: float) -> ClusterInfo:
        """The steps of `up`, each announcing itself in the line the dev cluster prints."""
        self._clean_previous_run()
        self.logs_dir.mkdir(parents=True)
        launch = _Launch(self, binaries, started, deadline)
        launch.generate_certificates()  # generating certificates
        launch.write_kubeconfigs()
        launch.start_etcd()  # starting etcd
        launch.start_apiserver()  # starting kube-apiserver
        launch.wait_for_etcd()
        launch.wait_for_apiserver()  # waiting for kube-apiserver /readyz
        launch.start_controllers_and_kwok()  # starting kube-controller-manager, kube-scheduler and kwok
        launch.create_nodes(nodes)  # creating N kwok nodes
        launch.wait_for_default_service_account()  # waiting for the default ServiceAccount (...)
        launch.wait_for_scheduler()  # waiting for kube-scheduler /healthz
        launch.wait_for_nodes()  # waiting for N nodes to be Ready (kwok)
        launch.record_ready()
        info = self.info()
        assert info is not None
        return info

    # -- waiting -------------------------------------------------------------------------

    def _wait(
        self,
        what: str,
        check: Callable[[], bool],
        watched: list[processes.RecordedProcess],
        deadline: float,
        blame: processes.RecordedProcess | None = None,
    ) -> None:
        """Poll `check` until it holds; fail early, with its log, when a watched process exits."""
        while True:
            for record in watched:
                if not processes.is_alive(record.pid):
                    raise DevClusterError(
                        f"{record.name} exited{self._exit_status(record.pid)} while waiting for {what}",
                        component=record.name,
                        log_tail=processes.tail(record.log),
                        log_path=record.log,
                    )
            if check():
                return
            if time.monotonic() > deadline:
                culprit = blame or watched[-1]
                raise DevClusterError(
                    f"timed out waiting for {what}",
                    component=culprit.name,
                    log_tail=processes.tail(culprit.log),
                    log_path=culprit.log,
                )
            time.sleep(_POLL)

    @staticmethod
    def _exit_status(pid: int) -> str:
        code = processes.exit_code(pid)
        if code is None:
            return ""
        return f" (killed by signal {-code})" if code < 0 else f" with exit code {code}"

    @staticmethod
    def _etcd_healthy(url: str) -> bool:
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as resp:
                return json.loads(resp.read()).get("health") == "true"
        except (OSError, ValueError, urllib.error.URLError):
            return False

    @staticmethod
    def _get_ok(api: _Api, path: str) -> bool:
        try:
            status, _ = api.request("GET", path, timeout=2)
        except (OSError, urllib.error.URLError):
            return False
        return status == 200

    @staticmethod
    def _nodes_ready(api: _Api, names: list[str]) -> bool:
        try:
            status, body = api.request("GET", "/api/v1/nodes?labelSelector=type%3Dkwok", timeout=2)
        except (OSError, urllib.error.URLError):
            return False
        if status != 200 or not isinstance(body, dict):
            return False
        ready = {n["metadata"]["name"] for n in body.get("items", []) if _node_ready(n)}
        return all(name in ready for name in names)

    # -- down ----------------------------------------------------------------------------

    def _stop_all(self, grace_seconds: float = processes.DEFAULT_GRACE_SECONDS) -> list[str]:
        by_name = {r.name: r for r in self._records()}
        # Clients first, then the API server, etcd last: the API server stopped together
        # with etcd hangs retrying it until killed, and etcd waits for its clients.
        phases = [
            [by_name.pop(name) for name in (REAL_NODE, KWOK, SCHEDULER, CONTROLLER_MANAGER) if name in by_name],
            [by_name.pop(name) for name in (APISERVER,) if name in by_name],
            [by_name.pop(name) for name in (ETCD,) if name in by_name],
            list(by_name.values()),  # anything a future version records
        ]
        recorded = {r.pid for phase in phases for r in phase}
        strays = [pid for pid in self._strays() if pid not in recorded]
        stopped = processes.stop(phases, extra_pids=strays, grace_seconds=grace_seconds)
        for child in self._children:
            child.poll()  # reap, and mark the Popen finished
        self._children.clear()
        state = self._read_state()
        if state:
            state["processes"] = {}
            state["ready"] = False
            self._write_state(state)
        return stopped

    def restart(self, component: str, *, timeout: float = 60.0,
                grace_seconds: float = processes.DEFAULT_GRACE_SECONDS) -> None:
        """Stop one component and start it again with the same arguments, as an outage would.

        For the chaos tests (an API server restarted under a running operator). The component keeps its
        ports, since its clients know it by them: it starts again once they are free, and the API server,
        whose /readyz this waits for, starts again if another process bound its port in the meantime
        (seen in CI). A port still held at the deadline fails with the processes that hold it.
        """
        deadline = time.monotonic() + timeout
        with self._locked():
            state = self._read_state()
            if component not in state.get("processes", {}):
                raise DevClusterError(f"{component} is not running in {self.state_dir}")
            old = processes.RecordedProcess.from_dict(component, state["processes"][component])
            recorded_ports = state.get("ports", {})
            ports = [recorded_ports[key] for key in _PORT_KEYS.get(component, ()) if key in recorded_ports]
            log = Path(old.log)
            processes.stop([[old]], grace_seconds=grace_seconds)
            pki_dir = self.state_dir / "pki"
            api = _Api(state["api_server"], pki_.CertKey(pki_dir / "ca.crt", pki_dir / "ca.key"),
                       pki_.CertKey(pki_dir / "admin.crt", pki_dir / "admin.key"))
            while True:
                self._wait_for_free_ports(component, ports, deadline)
                log_start = log.stat().st_size if log.exists() else 0
                new, popen = processes.spawn(component, old.args, log, cwd=self.state_dir,
                                             stop_with_parent=self._stop_with_parent)
                self._children.append(popen)
                state["processes"][component] = new.to_dict()
                self._write_state(state)
                if component != APISERVER:
                    return
                try:
                    self._wait("kube-apiserver to answer /readyz after its restart",
                               lambda: self._get_ok(api, "/readyz"), [new], deadline)
                    return
                except DevClusterError:
                    if time.monotonic() >= deadline or not _lost_its_port(log, log_start):
                        raise
                    self._on_progress(f"{component} found its port taken as it started again; retrying")

    def _wait_for_free_ports(self, component: str, ports: list[int], deadline: float) -> None:
        reported = False
        while busy := [port for port in ports if not processes.port_is_free(port)]:
            holders = {port: processes.port_holders(port) for port in busy}
            named = "; ".join(f"{port} by {', '.join(who) or 'an unknown process'}" for port, who in holders.items())
            if time.monotonic() >= deadline:
                raise DevClusterError(
                    f"{component} cannot start again: its port is still held ({named}). Its clients know it by "
                    "that port, so stop that process, or run `mountwarden dev-cluster down` and `up` for new ports",
                    component=component)
            if not reported:
                self._on_progress(f"waiting for {component}'s port to be free ({named})")
                reported = True
            time.sleep(_POLL)

    # -- the real node ----------------------------------------------------------------------

    def add_real_node(self, *, timeout: float = 1800.0, chart: bool = True, app_image=None,
                      operator_replicas: int = 2) -> RealNode:
        """Join the real node (the kernel lab VM with containerd and a kubelet) to this running cluster.

        Returns it once its Node is Ready; a node that does not join fails with the kubelet's
        last log lines, and its VM is stopped. `down` stops it with the rest. With `chart` (what users
        install), mountwarden's image (`make image`) is imported into the node's containerd and the chart
        is installed: its operator Deployment (two replicas, on this node) and its agent DaemonSet, whose pod
        here writes lab-node-0's NodeMountReport. ``app_image`` (an appimage.BuiltImage) is the image to run; by
        default the one $MOUNTWARDEN_IMAGE_DIR names, or `make image`'s for this checkout (built when missing).
        """
        from mountwarden.lab import appimage
        from mountwarden.lab.image import build_image, find_image
        from mountwarden.lab.node import NODE, NODE_NAME, NodeCredentials, RealNode

        state = self._read_state()
        if not state.get("ready"):
            raise DevClusterError(f"no dev cluster runs in {self.state_dir}: the real node joins a running one")
        self._on_progress("finding the real node's kubelet (hack/nodebin; about 10 minutes the first time)")
        try:
            node_binaries = resolve_node_binaries(on_output=self._on_build_output)
        except BinariesError as error:
            raise DevClusterError(str(error), component=NODE_NAME) from error
        self._on_progress("finding the lab's node image (about 5 minutes the first time)")
        image = find_image(NODE) or build_image(NODE, progress=self._on_progress)
        if chart and app_image is None:
            self._on_progress("finding mountwarden's image (make image; about 2 minutes the first time)")
            try:
                app_image = appimage.find_image() or appimage.build_image(progress=self._on_progress)
            except appimage.ImageBuildError as error:
                raise DevClusterError(str(error), component=NODE_NAME) from error
        pki_dir = self.state_dir / "pki"
        ca = pki_.CertKey(pki_dir / "ca.crt", pki_dir / "ca.key")
        workdir = self.state_dir / "real-node"
        client = pki_.issue_client(ca, workdir / "pki", "kubelet", f"system:node:{NODE_NAME}", "system:nodes")
        node = RealNode(image, node_binaries, int(state["ports"][APISERVER]),
                        NodeCredentials(ca.cert, client.cert, client.key), workdir=workdir,
                        launcher=self._real_node_launcher(NODE_NAME),
                        proxy_port=state["ports"].get(CLUSTER_EGRESS),
                        proxy_tls=(ca.cert, pki_dir / "egress-proxy.crt", pki_dir / "egress-proxy.key"),
                        images_dir=app_image.dir.parent if app_image else None)
        api = _Api(state["api_server"], ca, pki_.CertKey(pki_dir / "admin.crt", pki_dir / "admin.key"))
        started = time.monotonic()
        try:
            node.start(progress=self._on_progress)
            self._on_progress(f"waiting for {NODE_NAME} to be Ready (its kubelet registers it)")
            while not self._node_named_ready(api, NODE_NAME):
                if time.monotonic() - started > timeout or node.vm is None or not node.vm.alive:
                    raise DevClusterError(
                        f"the real node {NODE_NAME} did not become Ready in {timeout:.0f} s",
                        component=NODE_NAME, log_tail=node.kubelet_log(), log_path="/var/log/kubelet.log (in the VM)")
                time.sleep(2)
            ready = time.monotonic()
            if app_image is not None:
                self._on_progress(f"importing {app_image.name} ({app_image.digest[:19]}) into {NODE_NAME}'s containerd")
                node.import_image(app_image.archive)
                imported = time.monotonic()
                self.install_chart(app_image, operator_replicas=operator_replicas)
        except BaseException:
            node.stop()
            raise
        state = self._read_state()
        state["real_node"] = NODE_NAME
        state["real_node_seconds"] = round(ready - started, 1)
        if app_image is not None:
            state["chart"] = {"image": app_image.name, "digest": app_image.digest,
                              "import_seconds": round(imported - ready, 1),
                              "install_seconds": round(time.monotonic() - imported, 1)}
        self._write_state(state)
        return node

    def helm(self, *args: str, timeout: float = 1800.0, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run the built helm against this cluster, its state under the state dir (never ~/.config/helm)."""
        env = {**os.environ, **{f"HELM_{kind}_HOME": str(self.state_dir / "helm" / kind.lower())
                                for kind in ("CONFIG", "CACHE", "DATA")}}
        result = subprocess.run([str(self.binary("helm")), f"--kubeconfig={self.kubeconfig}", *args],
                                capture_output=True, text=True, timeout=timeout, env=env)
        if check and result.returncode != 0:
            raise DevClusterError(f"`helm {' '.join(args)}` exited {result.returncode}:\n{result.stderr.strip()}")
        return result

    def install_chart(self, image, *, values: dict | None = None, timeout: str = "20m",
                      operator_replicas: int = 2) -> None:
        """`helm upgrade --install` charts/mountwarden onto the real node, running ``image`` (an appimage.BuiltImage).

        Waits for the operator's replicas and the agents; a release that does not come up fails with its pods'
        states (where the kubelet and containerd say why).
        """
        from mountwarden.lab.node import CHART, CHART_NAMESPACE, CHART_RELEASE, NODE_NAME, chart_values

        path = self.state_dir / "chart-values.yaml"
        path.write_text(json.dumps(values if values is not None else chart_values(image.name, operator_replicas=operator_replicas), indent=2))
        self._on_progress(f"installing the chart ({CHART.name}) onto {NODE_NAME}: the operator's replicas and the agent")
        result = self.helm("upgrade", "--install", CHART_RELEASE, str(CHART), "-n", CHART_NAMESPACE,
                           "--create-namespace", "--wait", "--timeout", timeout, "-f", str(path), check=False)
        if result.returncode != 0:
            pods = self.kubectl("get", "pods", "-n", CHART_NAMESPACE, "-o", "wide", check=False).stdout
            events = self.kubectl("get", "events", "-n", CHART_NAMESPACE, "--sort-by=.lastTimestamp",
                                  check=False).stdout
            raise DevClusterError(f"the chart did not come up on {NODE_NAME}: {result.stderr.strip()}",
                                  component=NODE_NAME, log_tail=f"{pods}\n{events[-4000:]}",
                                  log_path=f"pods and events in namespace {CHART_NAMESPACE}")

    def uninstall_chart(self) -> None:
        from mountwarden.lab.node import CHART_NAMESPACE, CHART_RELEASE

        if self.helm("status", CHART_RELEASE, "-n", CHART_NAMESPACE, check=False).returncode == 0:
            self.helm("uninstall", CHART_RELEASE, "-n", CHART_NAMESPACE, "--wait", "--timeout", "10m")

    def remove_real_node(self, node: RealNode) -> None:
        """Uninstall the chart, stop the real node's VM and delete its Node and NodeMountReport, so that nothing is
        scheduled onto (and no DaemonSet waits for) a node that is gone."""
        from mountwarden.api.base import GROUP, VERSION
        from mountwarden.lab.node import NODE_NAME

        state = self._read_state()
        if state.get("chart"):
            self.uninstall_chart()
        node.stop()
        pki_dir = self.state_dir / "pki"
        api = _Api(state["api_server"], pki_.CertKey(pki_dir / "ca.crt", pki_dir / "ca.key"),
                   pki_.CertKey(pki_dir / "admin.crt", pki_dir / "admin.key"))
        for path in (f"/api/v1/nodes/{NODE_NAME}", f"/apis/{GROUP}/{VERSION}/nodemountreports/{NODE_NAME}"):
            status, body = api.request("DELETE", path, timeout=30)
            if status not in (200, 202, 404):
                raise DevClusterError(f"could not delete {path} of the stopped real node: {status} {body}",
                                      component=NODE_NAME)
        state.pop("real_node", None)
        state.pop("chart", None)
        self._write_state(state)

    def _real_node_launcher(self, name: str) -> Callable:
        """Starts the node's QEMU as a recorded component, so that `down` (and a dying test run) stops it."""

        def launch(argv, log_path: Path) -> subprocess.Popen:
            record, popen = processes.spawn(name, argv, log_path, cwd=self.state_dir,
                                            stop_with_parent=self._stop_with_parent)
            self._children.append(popen)
            state = self._read_state()
            state.setdefault("processes", {})[name] = record.to_dict()
            self._write_state(state)
            return popen

        return launch

    @staticmethod
    def _node_named_ready(api: _Api, name: str) -> bool:
        try:
            status, body = api.request("GET", f"/api/v1/nodes/{name}", timeout=5)
        except (OSError, urllib.error.URLError):
            return False
        return status == 200 and isinstance(body, dict) and _node_ready(body)

    def down(self, purge: bool = False, grace_seconds: float = processes.DEFAULT_GRACE_SECONDS) -> list[str]:
        """Stop every process of this state dir (SIGTERM, SIGKILL after `grace_seconds`).

        Idempotent. Returns the names of the components that were still running.
        With `purge`, also remove the state directory (only if it is a dev-cluster one).
        """
        if not self.state_dir.exists():
            return []
        if purge and not (self.state_file.exists() or not any(self.state_dir.iterdir())):
            raise DevClusterError(
                f"refusing to purge {self.state_dir}: it holds no {STATE_FILE}, so it is not a "
                "dev-cluster state directory; remove it yourself if you mean it"
            )
        with self._locked():
            stopped = self._stop_all(grace_seconds)
        if purge:
            shutil.rmtree(self.state_dir)
        return stopped


@contextlib.contextmanager
def local_cluster(state_dir: str | Path, *, nodes: int, timeout: float = 180.0,
                  real_node: bool = False) -> Iterator[ClusterInfo]:
    """A throwaway dev cluster for the length of the block (benchmarks): it stops with the block or its caller."""
    cluster = DevCluster(state_dir, stop_with_parent=True)
    try:
        yield cluster.up(nodes=nodes, timeout=timeout, real_node=real_node)
    finally:
        cluster.down()


class _Launch:
    """One run of `up`: what its steps share (certificates, ports, the processes started, the timings)."""

    def __init__(self, cluster: DevCluster, binaries: Binaries, started: float, deadline: float) -> None:
        self.cluster = cluster
        self.binaries = binaries
        self.started = started
        self.deadline = deadline
        self.state_dir = cluster.state_dir
        self.progress = cluster._on_progress
        self.timings: dict[str, float] = {}
        self.ports = dict(
            zip(
                ("etcd_client", "etcd_peer", APISERVER, CONTROLLER_MANAGER, SCHEDULER, CLUSTER_EGRESS),
                processes.free_ports(6),
                strict=True,
            )
        )
        self.api_server = f"https://127.0.0.1:{self.ports[APISERVER]}"
        self.etcd_url = f"http://127.0.0.1:{self.ports['etcd_client']}"
        self.started_processes: dict[str, processes.RecordedProcess] = {}
        self.node_names: list[str] = []
        self.state: dict[str, Any] = {}

    def step_done(self, step: str) -> None:
        self.timings[step] = time.monotonic() - self.started

    @property
    def everything(self) -> list[processes.RecordedProcess]:
        return list(self.started_processes.values())

    def start(self, name: str, binary: Path, args: list[str]) -> processes.RecordedProcess:
        record, popen = processes.spawn(
            name,
            [str(binary), *args],
            self.cluster.logs_dir / f"{name}.log",
            cwd=self.state_dir,
            stop_with_parent=self.cluster._stop_with_parent,
        )
        self.cluster._children.append(popen)
        self.started_processes[name] = record
        self.state["processes"][name] = record.to_dict()
        # Recorded at once: if `up` dies now, `down` still finds this process.
        self.cluster._write_state(self.state)
        return record

    def wait(self, what: str, check: Callable[[], bool], blame: str | None = None) -> None:
        self.cluster._wait(what, check, self.everything, self.deadline,
                           blame=self.started_processes[blame] if blame else None)

    # -- the steps, in order ---------------------------------------------------------------

    def generate_certificates(self) -> None:
        self.progress("generating certificates")
        self.certs = pki_.generate(self.state_dir / "pki")
        self.step_done("certificates")

    def write_kubeconfigs(self) -> None:
        """The admin's kubeconfig, one per component, kwok's stages, and the first state.json."""
        certs, kubeconfigs = self.certs, self.state_dir / "kubeconfigs"
        pki_.write_kubeconfig(
            self.cluster.kubeconfig, server=self.api_server, ca=certs.ca, user="mountwarden-dev-admin",
            client=certs.admin,
        )
        identities = {
            CONTROLLER_MANAGER: ("system:kube-controller-manager", certs.controller_manager),
            SCHEDULER: ("system:kube-scheduler", certs.scheduler),
            KWOK: ("kwok-controller", certs.kwok),
        }
        self.kubeconfigs = {
            name: pki_.write_kubeconfig(kubeconfigs / f"{name}.kubeconfig", server=self.api_server, ca=certs.ca,
                                        user=user, client=client)
            for name, (user, client) in identities.items()
        }
        self.kwok_config = self.state_dir / "kwok.yaml"
        self.kwok_config.write_text(STAGES)
        self.state = {
            "format": 1,
            "api_server": self.api_server,
            "binaries": str(self.binaries.dir),
            "ports": self.ports,
            "processes": {},
            "ready": False,
        }
        self.cluster._write_state(self.state)

    def start_etcd(self) -> None:
        peer_url = f"http://127.0.0.1:{self.ports['etcd_peer']}"
        self.progress("starting etcd")
        self.start(
            ETCD,
            self.binaries.etcd,
            [
                "--name=mountwarden-dev",
                f"--data-dir={self.state_dir / 'etcd'}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=mountwarden-dev={peer_url}",
                # A throwaway cluster: durability is not worth an fsync per write.
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )

    def start_apiserver(self) -> None:
        # No wait for etcd before this: the API server retries etcd while it starts, and the
        # second or so etcd may take to elect itself overlaps with the API server's start.
        certs = self.certs
        self.progress("starting kube-apiserver")
        self.start(
            APISERVER,
            self.binaries.kube_apiserver,
            [
                f"--etcd-servers={self.etcd_url}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.ports[APISERVER]}",
                # Otherwise the API server writes self-signed certificates to /var/run/kubernetes.
                f"--cert-dir={self.state_dir / 'pki'}",
                f"--tls-cert-file={certs.apiserver.cert}",
                f"--tls-private-key-file={certs.apiserver.key}",
                f"--client-ca-file={certs.ca.cert}",
                "--authorization-mode=Node,RBAC",
                f"--service-cluster-ip-range={pki_.SERVICE_CLUSTER_IP_RANGE}",
                "--allow-privileged=true",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={certs.service_account_pub}",
                f"--service-account-signing-key-file={certs.service_account_key}",
                # Front proxy: lets aggregated API servers (and the controller manager's
                # and scheduler's delegated authentication) trust the API server.
                f"--requestheader-client-ca-file={certs.front_proxy_ca.cert}",
                f"--requestheader-allowed-names={pki_.FRONT_PROXY_CLIENT}",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--proxy-client-cert-file={certs.front_proxy_client.cert}",
                f"--proxy-client-key-file={certs.front_proxy_client.key}",
                # The default admission plugins stay on, ServiceAccount among them: it
                # gives pods their service account as on any real cluster.
                # Pod IPs are not routable from here (they are inside the real node's VM), as from the control
                # planes of many managed clusters: like theirs, this one reaches the cluster network through a
                # proxy (its egress selector), and dials a Service's endpoints rather than its ClusterIP.
                f"--egress-selector-config-file={self.write_egress_selector()}",
                "--enable-aggregator-routing=true",
                # The kubelets' API (pod logs) as an administrator, by their InternalIP.
                f"--kubelet-client-certificate={certs.admin.cert}",
                f"--kubelet-client-key={certs.admin.key}",
                "--kubelet-preferred-address-types=InternalIP,Hostname",
            ],
        )

    def write_egress_selector(self) -> Path:
        """The API server's egress: `cluster` traffic (webhooks' Services, kubelets) through HTTP CONNECT over mutual
        TLS on a loopback port; control-plane traffic (URL webhooks, etcd) direct."""
        path = self.state_dir / "egress-selector.yaml"
        path.write_text(json.dumps({
            "apiVersion": "apiserver.k8s.io/v1beta1", "kind": "EgressSelectorConfiguration",
            "egressSelections": [{"name": "cluster", "connection": {
                "proxyProtocol": "HTTPConnect",
                "transport": {"tcp": {"url": f"https://127.0.0.1:{self.ports[CLUSTER_EGRESS]}", "tlsConfig": {
                    "caBundle": str(self.certs.ca.cert), "clientCert": str(self.certs.egress_client.cert),
                    "clientKey": str(self.certs.egress_client.key)}}}}}],
        }, indent=2))
        return path

    def wait_for_etcd(self) -> None:
        self.wait("etcd to answer /health", lambda: DevCluster._etcd_healthy(self.etcd_url), blame=ETCD)
        self.step_done(ETCD)

    def wait_for_apiserver(self) -> None:
        self.api = _Api(self.api_server, self.certs.ca, self.certs.admin)
        self.progress("waiting for kube-apiserver /readyz")
        self.wait("kube-apiserver to answer /readyz", lambda: DevCluster._get_ok(self.api, "/readyz"))
        self.step_done(APISERVER)

    def start_controllers_and_kwok(self) -> None:
        certs, kubeconfigs = self.certs, self.kubeconfigs
        self.progress("starting kube-controller-manager, kube-scheduler and kwok")
        always_allow = "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics"
        kcm_kubeconfig = kubeconfigs[CONTROLLER_MANAGER]
        self.start(
            CONTROLLER_MANAGER,
            self.binaries.kube_controller_manager,
            [
                f"--kubeconfig={kcm_kubeconfig}",
                f"--authentication-kubeconfig={kcm_kubeconfig}",
                f"--authorization-kubeconfig={kcm_kubeconfig}",
                f"--root-ca-file={certs.ca.cert}",
                f"--service-account-private-key-file={certs.service_account_key}",
                # Each controller acts as its own service account, as in a real cluster,
                # so that RBAC problems show up here first.
                "--use-service-account-credentials=true",
                # Lets tests obtain signed certificates through the CertificateSigningRequest API.
                f"--cluster-signing-cert-file={certs.ca.cert}",
                f"--cluster-signing-key-file={certs.ca.key}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.ports[CONTROLLER_MANAGER]}",
                always_allow,
                # One instance: leader election would only delay the start.
                "--leader-elect=false",
                "--controllers=*",
                # Otherwise it creates /usr/libexec/kubernetes/kubelet-plugins/volume/exec.
                f"--flex-volume-plugin-dir={self.state_dir / 'flexvolume'}",
                f"--kube-api-qps={CLIENT_QPS}",
                f"--kube-api-burst={CLIENT_BURST}",
            ],
        )
        scheduler_kubeconfig = kubeconfigs[SCHEDULER]
        self.start(
            SCHEDULER,
            self.binaries.kube_scheduler,
            [
                f"--kubeconfig={scheduler_kubeconfig}",
                f"--authentication-kubeconfig={scheduler_kubeconfig}",
                f"--authorization-kubeconfig={scheduler_kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.ports[SCHEDULER]}",
                always_allow,
                "--leader-elect=false",
                f"--kube-api-qps={CLIENT_QPS}",
                f"--kube-api-burst={CLIENT_BURST}",
            ],
        )
        self.start(
            KWOK,
            self.binaries.kwok,
            [
                f"--kubeconfig={kubeconfigs[KWOK]}",
                # Our own stages, and never the user's ~/.kwok/kwok.yaml.
                f"--config={self.kwok_config}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION[0]}={KWOK_NODE_ANNOTATION[1]}",
                f"--cidr={POD_CIDR}",
                "--node-ip=10.1.0.1",
                f"--node-lease-duration-seconds={NODE_LEASE_SECONDS}",
            ],
        )

    def create_nodes(self, nodes: int) -> None:
        self.node_names = [f"kwok-node-{i}" for i in range(nodes)]
        self.progress(f"creating {nodes} kwok node{'s' if nodes != 1 else ''}")
        for index, name in enumerate(self.node_names):
            status, body = self.api.request("POST", "/api/v1/nodes", kwok_node(name, index))
            if status not in (201, 409):
                raise DevClusterError(f"creating node {name} failed: HTTP {status}: {body}")
        self.step_done("nodes created")

    def wait_for_default_service_account(self) -> None:
        self.progress("waiting for the default ServiceAccount (kube-controller-manager)")
        self.wait("kube-controller-manager to create the default ServiceAccount",
                  lambda: DevCluster._get_ok(self.api, "/api/v1/namespaces/default/serviceaccounts/default"),
                  blame=CONTROLLER_MANAGER)
        self.step_done("default service account")

    def wait_for_scheduler(self) -> None:
        self.progress("waiting for kube-scheduler /healthz")
        self.wait("kube-scheduler to answer /healthz", lambda: _healthz(self.ports[SCHEDULER]), blame=SCHEDULER)
        self.step_done(SCHEDULER)

    def wait_for_nodes(self) -> None:
        nodes = len(self.node_names)
        self.progress(f"waiting for {nodes} node{'s' if nodes != 1 else ''} to be Ready (kwok)")
        self.wait("the kwok nodes to be Ready and untainted",
                  lambda: DevCluster._nodes_ready(self.api, self.node_names), blame=KWOK)
        self.step_done("nodes ready")

    def record_ready(self) -> None:
        """state.json says the cluster is ready, with its version and how long each step took."""
        status, version = self.api.request("GET", "/version")
        git_version = version.get("gitVersion", "") if isinstance(version, dict) else ""
        self.state.update(
            ready=True,
            nodes=self.node_names,
            version=git_version,
            startup_seconds=round(time.monotonic() - self.started, 3),
            timings={k: round(v, 3) for k, v in self.timings.items()},
        )
        self.cluster._write_state(self.state)
