"""The node agent's loop: scan, write the report if needed, serve /metrics, stop cleanly on SIGTERM.

The agent scans when the host's mount table changes (poll() on <proc-root>/1/mountinfo,
see mountwarden.agent.wakeup), so a new pod volume reaches its report within one scan,
and every interval anyway, for the counters and the heartbeat. A failed scan or write
is logged and counted and the next one is tried on schedule: the loop ends only when
told to (SIGTERM, SIGINT, ``--once``) or when the agent would write another node's
report (RefusedWrite), which no retry fixes.
"""

import json
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TextIO

from prometheus_client import start_http_server

from mountwarden.adapters.procreader import ProcRoot
from mountwarden.agent.activity import DEFAULT_PROCESS_ROUNDS, DEFAULT_WINDOW_SECONDS, ActivityTracker
from mountwarden.agent.failures import DEFAULT_KERNEL_LOG, FailureWatch
from mountwarden.agent.metrics import DEFAULT_MAX_VOLUME_SERIES, AgentMetrics
from mountwarden.agent.pods import NodePods
from mountwarden.agent.probe import DEFAULT_PROBE_TIMEOUT_SECONDS, NullProbe, ServerProbe
from mountwarden.agent.report import RefusedWrite, WriteOutcome, report_body
from mountwarden.agent.scan import SqliteScanner, UserspaceScanner, scan_node_report
from mountwarden.agent.wakeup import Wakeup
from mountwarden.api.nodemountreport import NodeMountReportSpec
from mountwarden.core.node.failures import DEFAULT_HELPER_STUCK_SECONDS
from mountwarden.core.node.scan import NodeScan

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AgentSettings:
    node_name: str
    proc_root: Path
    kubelet_root: str
    network_fstypes: tuple[str, ...]
    interval_seconds: float
    #: 0 serves no metrics.
    metrics_port: int
    #: How long a scan waits for each NFS server's statvfs() probe; 0 probes nothing.
    probe_timeout_seconds: float = DEFAULT_PROBE_TIMEOUT_SECONDS
    #: Rounds of process-state samples per scan (0: none), and the window rates and samples are kept for.
    process_samples: int = DEFAULT_PROCESS_ROUNDS
    activity_window_seconds: float = DEFAULT_WINDOW_SECONDS
    #: The kernel log to follow for the NFS client's words about its servers ("" or None: none).
    kernel_log: str | None = DEFAULT_KERNEL_LOG
    #: Seconds a mount.nfs or umount.nfs may live before it is MountHelperStuck.
    helper_stuck_seconds: float = DEFAULT_HELPER_STUCK_SECONDS
    #: Pod volumes whose per-volume series /metrics serves at most (agent/metrics.py).
    max_volume_series: int = DEFAULT_MAX_VOLUME_SERIES
    #: Whose mount namespace is scanned: 1 (the host's, through the proc root) or "self" (the agent's own, with
    #: the kubelet's pods directory propagated into it: no root needed for mountstats).
    mount_table: int | str = 1
    #: How servers are asked: "statvfs" of every pod volume (through /proc/1/root: root and CAP_SYS_PTRACE), or
    #: "null", the RPC NULL call to each server (any uid; no StaleFileHandle).
    probe: str = "statvfs"


class ReportSink(Protocol):
    """Where each scan's report goes: the API server (ReportWriter) or stdout (--dry-run)."""

    def sync(self, spec: NodeMountReportSpec) -> WriteOutcome: ...


class PrintedReport:
    """--dry-run: print the report that would be written, as one JSON document per scan."""

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out or sys.stdout  # looked up now, not at import: stdout may have been replaced since

    def sync(self, spec: NodeMountReportSpec) -> WriteOutcome:
        self.out.write(json.dumps(report_body(spec, owner=None, resource_version=None), indent=2) + "\n")
        self.out.flush()
        return WriteOutcome.PRINTED


def host_boot_id(proc: ProcRoot) -> str | None:
    """The running kernel's boot ID, which the kubelet also puts in its Node's status."""
    try:
        return (proc.path / "sys" / "kernel" / "random" / "boot_id").read_text().strip() or None
    except OSError:
        return None


class Agent:
    """One scan-and-write step at a time; ``run`` repeats it."""

    def __init__(
        self,
        settings: AgentSettings,
        sink: ReportSink,
        *,
        metrics: AgentMetrics | None = None,
        sqlite_scan: SqliteScanner | None = None,
        userspace_scan: UserspaceScanner | None = None,
        pods: NodePods | None = None,
    ) -> None:
        self.settings = settings
        self.sink = sink
        self.metrics = metrics or AgentMetrics(settings.node_name, max_volumes=settings.max_volume_series)
        self.sqlite_scan = sqlite_scan
        self.userspace_scan = userspace_scan
        self.proc = ProcRoot(settings.proc_root)
        self.probe = (None if not settings.probe_timeout_seconds
                      else NullProbe(settings.probe_timeout_seconds) if settings.probe == "null"
                      else ServerProbe(self.proc, settings.probe_timeout_seconds))
        self.tracker = ActivityTracker(self.proc, window_seconds=settings.activity_window_seconds,
                                       process_rounds=settings.process_samples)
        self.failures = FailureWatch(self.proc, node_name=settings.node_name, kernel_log=settings.kernel_log,
                                     helper_stuck_seconds=settings.helper_stuck_seconds)
        self.pods = pods
        self._wakeup: Wakeup | None = None
        #: The pods whose volumes the last scan found: a change of one of them is worth a scan now.
        self._reported_pods: frozenset[str] = frozenset()

    def pod_changed(self, uid: str) -> None:
        """The pod watch saw ``uid`` change: scan now when the report shows its volumes (else its mount will)."""
        if uid in self._reported_pods:
            self.nudge()

    def describe_pod(self, uid: str, volume_name: str) -> dict[str, str | None]:
        pod = self.pods.get(uid) if self.pods is not None else None
        if pod is None:
            return {}
        return {"pod_name": pod.name, "pod_namespace": pod.namespace, "pod_owner": pod.owner,
                "claim_name": self.pods.claim_of(pod, volume_name)}

    def _owners(self, scan: NodeScan) -> dict[str, tuple[str, str]]:
        """Each scanned pod's namespace and workload, for /metrics (none without the pods' watch)."""
        if self.pods is None:
            return {}
        pods = {uid: self.pods.get(uid) for uid in {volume.pod_uid for volume in scan.volumes if volume.pod_uid}}
        return {uid: (pod.namespace, pod.workload) for uid, pod in pods.items() if pod is not None}

    def nudge(self) -> None:
        """Scan again now (from another thread: something the report shows has changed)."""
        if self._wakeup is not None:
            self._wakeup.nudge()

    def step(self, *, woken: bool = False) -> bool:
        """Scan once and hand the report to the sink; False when either failed (logged and counted).

        ``woken``: the mount table changed. That scan samples process states once, not over its usual
        rounds 0.2 s apart, so that the report showing the change is written at once.
        """
        try:
            result = scan_node_report(
                self.proc,
                node_name=self.settings.node_name,
                kubelet_root=self.settings.kubelet_root,
                network_fstypes=self.settings.network_fstypes,
                sqlite_scan=self.sqlite_scan,
                userspace_scan=self.userspace_scan,
                probe=self.probe,
                mount_table=self.settings.mount_table,
                tracker=self.tracker,
                describe_pod=self.describe_pod if self.pods is not None else None,
                process_rounds=1 if woken else None,
                failures=self.failures,
            )
        except Exception:  # any failure of one scan: the next one may succeed
            log.exception("scan of %s failed", self.settings.proc_root)
            self.metrics.scan_errors.inc()
            return False
        self.metrics.scanned(result.scan, result.duration_seconds, at=time.monotonic(), recent=result.recent,
                             owners=self._owners(result.scan))
        self._reported_pods = frozenset(volume.pod_uid for volume in result.spec.volumes if volume.pod_uid)
        try:
            outcome = self.sink.sync(result.spec)
        except RefusedWrite:
            raise
        except Exception:  # the API server away, throttling, conflicts beyond retries: try next scan
            log.exception("writing the NodeMountReport %s failed", self.settings.node_name)
            self.metrics.write_errors.inc()
            return False
        self.metrics.written(outcome, at_unix=time.time())
        waited = f" ({result.waited_seconds:.1f} s of it waiting for servers that did not answer)" \
            if result.waited_seconds >= 0.05 else ""
        log.info("scanned %d volume(s) in %.3fs%s; report %s", len(result.spec.volumes), result.duration_seconds,
                 waited, outcome)
        if log.isEnabledFor(logging.DEBUG):  # formatted only when asked for: every scan passes here
            log.debug("scan time %s", result.account())
        return True

    def run(self, stop: threading.Event) -> None:
        """Step at once, on every change of the mount table, and every interval, until ``stop`` is set.

        The interval counts from the start of each step. A step woken by a change waits at
        least as long as the last step took: a node whose mounts churn never spends more than
        half its time scanning.
        """
        mountinfo = self.proc.path / str(self.settings.mount_table) / "mountinfo"
        self._wakeup = Wakeup(mountinfo)
        if not self._wakeup.follows_mounts:
            log.warning("cannot follow %s: scanning every %.0f s only", mountinfo,
                        self.settings.interval_seconds)
        try:
            woken = False
            while not stop.is_set():
                started = time.monotonic()
                self.step(woken=woken)
                remaining = self.settings.interval_seconds - (time.monotonic() - started)
                # The pauses between rounds of process samples are waiting, not scanning.
                took = time.monotonic() - started - self.tracker.paused
                woken = self._wakeup.wait(max(0.0, remaining)) and not stop.is_set()
                if woken:
                    self.metrics.woken.inc()
                    stop.wait(min(took, max(0.0, remaining)))
        finally:
            self._wakeup.close()
            self._wakeup = None

    def stop(self, stop: threading.Event) -> None:
        """Set ``stop`` and wake the loop (safe from a signal handler)."""
        stop.set()
        self.nudge()


def stop_on_signals(stop: Callable[[], None]) -> Callable[[], None]:
    """Call ``stop`` on SIGTERM and SIGINT; returns what puts the previous handlers back."""
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}

    def handle(signum: int, _frame: object) -> None:
        log.info("received %s: stopping after the current step", signal.Signals(signum).name)
        stop()

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    for sig in previous:
        signal.signal(sig, handle)
    return restore


def serve_metrics(agent: Agent, port: int) -> Callable[[], None]:
    """Serve /metrics on ``port`` (all addresses); returns what stops the server."""
    server, thread = start_http_server(port, registry=agent.metrics.registry)
    log.info("serving metrics on :%d/metrics", server.server_port)

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

    return stop


def run_agent(agent: Agent, *, once: bool) -> bool:
    """The whole agent: metrics server, signal handling, the loop (or one step); True when all went well."""
    stop_metrics = serve_metrics(agent, agent.settings.metrics_port) if agent.settings.metrics_port else None
    try:
        if agent.pods is not None:
            agent.pods.start()
            # Names in the first report: wait a moment for the node's pods, never for long.
            agent.pods.synced.wait(timeout=10)
        if once:
            return agent.step()
        stop = threading.Event()
        restore = stop_on_signals(lambda: agent.stop(stop))
        try:
            agent.run(stop)
        finally:
            restore()
        return True
    finally:
        if agent.pods is not None:
            agent.pods.stop()
        if stop_metrics is not None:
            stop_metrics()
        agent.failures.close()
        say_what_is_left_stuck(agent.proc)


def say_what_is_left_stuck(proc: ProcRoot) -> None:
    """The last word of an agent leaving calls blocked behind dead servers: which, and since when.

    Nothing waits for them: their threads are daemons that the process's exit ends (NFS waits are killable).
    """
    stuck = proc.calls.stuck_calls()
    if stuck:
        log.warning("exiting with %d call(s) still blocked in the kernel by servers that do not answer, "
                    "left behind: %s", len(stuck), "; ".join(map(str, stuck)))
