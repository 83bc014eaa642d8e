"""How the nodes' mounts broke: the agents' failures and what only the API adds, out as Events, metrics, PolicyReports.

The agent judges what its node alone shows (mountwarden.core.node.failures: StaleFileHandle,
ServerNotResponding, MountHelperStuck, TLSTunnelDown) and writes it in its NodeMountReport's
``failures``; the operator adds what needs the cluster's pods: a deleted pod whose NFS volume stays
mounted and stuck (StuckTerminating), a pod volume whose pod no longer exists (OrphanedMount). Time
alone makes those two, so besides every change of a report, every report is judged again every
``--failure-interval`` seconds (by the active replica only).

Each finding goes out as every finding does: a Warning Event once (on its pod, or on the Node as the
kubelet writes its own), the ``mountwarden_mount_failures`` gauge, and a result of the PolicyReports
(policy ``mountwarden-failures``). It goes when its cause ends: the report no longer says it, the pod is
gone, the mount is gone. Only what a report says of its own node's pods is believed (of_own_pods).
Nothing here acts on a failure: a profile may ask for pods on a stale handle to be evicted
(mountwarden.handlers.remediation); the rest needs a person, and each finding says what to do.
"""

import asyncio
import contextlib
import logging
import threading
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import kopf

from mountwarden.adapters.kube import TransientApiError, warn_node
from mountwarden.adapters.pods import PodPlacements
from mountwarden.core.findings import Finding, Reason, Subject
from mountwarden.core.node.failures import DeletingPod, orphaned_mounts, stuck_terminating
from mountwarden.core.node.report import NodeFinding, NodeReport, of_own_pods
from mountwarden.core.rollout import parse_time
from mountwarden.handlers import findings, metrics
from mountwarden.handlers.config import OperatorConfig
from mountwarden.handlers.context import OperatorContext

#: The PolicyReports' policy of every failure (a failure breaks no profile's contract: the mount broke).
FAILURE_POLICY = "mountwarden-failures"
log = logging.getLogger(__name__)


class MountFailures:
    """Each node's last report, since when each of its mounts has had no pod, and the failures found last."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reports: dict[str, NodeReport] = {}
        self._orphaned: dict[str, dict[str, datetime]] = {}
        self._found: dict[str, tuple[Finding, ...]] = {}

    def follow(self, node: str, report: NodeReport | None) -> None:
        with self._lock:
            if report is None:
                self._reports.pop(node, None)
                self._orphaned.pop(node, None)
            else:
                self._reports[node] = report

    @property
    def nodes(self) -> list[str]:
        with self._lock:
            return sorted(self._reports.keys() | self._found.keys())

    def judge(self, node: str, pods: PodPlacements, *, now: datetime, after: timedelta,
              stale_after: timedelta) -> list[Finding]:
        """The node's failures now; none from a report too old to prove anything (ReportStale says so)."""
        with self._lock:
            report = self._reports.get(node)
        if report is None or now - report.scan_time > stale_after:
            found: list[NodeFinding] = []
        else:
            own, _ = of_own_pods(report, pods.node_of)
            found = [*own.findings, *stuck_terminating(own, _deleting(own, pods), now=now, after=after),
                     *orphaned_mounts(report, self._orphans(node, report, pods, now), now=now, after=after)]
        rendered = [render(node, finding, pods) for finding in found]
        with self._lock:
            if report is None:
                self._found.pop(node, None)
            else:
                self._found[node] = tuple(rendered)
        return rendered

    def _orphans(self, node: str, report: NodeReport, pods: PodPlacements, now: datetime) -> dict[str, datetime]:
        """Pod volumes whose pod the cluster does not know, each since it was first seen so."""
        if not pods.synced.is_set():
            return {}  # before the pods are listed, every pod looks gone
        with self._lock:
            before = self._orphaned.get(node, {})
            orphaned = {mount.mount_point: before.get(mount.mount_point, now) for mount in report.mounts
                        if mount.pod_uid and pods.node_of(mount.pod_uid) is None}
            self._orphaned[node] = orphaned
        return orphaned

    def found(self, reason: Reason) -> list[Finding]:
        """Every node's failures of ``reason`` as last judged."""
        with self._lock:
            return [finding for node in self._found.values() for finding in node if finding.reason is reason]


def _deleting(report: NodeReport, pods: PodPlacements) -> dict[str, DeletingPod]:
    deleting = {}
    for mount in report.mounts:
        pod = pods.get(mount.pod_uid) if mount.pod_uid else None
        if pod is not None and pod.deleting_at:
            deleting[pod.uid] = DeletingPod(pod.uid, pod.namespace, pod.name, parse_time(pod.deleting_at))
    return deleting


def render(node: str, found: NodeFinding, pods: PodPlacements) -> Finding:
    """A node's finding on its pod (or on the Node), the pods named, the remedy said with it."""
    finding = found.finding
    message = finding.message
    named = []
    for uid in dict.fromkeys([*([found.pod_uid] if found.pod_uid else []), *found.pods]):
        pod = pods.get(uid)
        if pod is not None:  # the agent names a pod by UID when it does not know its name
            message = message.replace(f"pod UID {uid}", f"pod {pod.namespace}/{pod.name}")
            named.append(f"{pod.namespace}/{pod.name}")
    if found.pods and named:
        message += f" Pods: {', '.join(named)}."
    pod = pods.get(found.pod_uid) if found.pod_uid else None
    subject = Subject("Pod", pod.name, pod.namespace, pod.uid) if pod is not None else Subject("Node", node)
    said = replace(finding, message=findings.with_remedy(message, finding.remedy))
    return said.about(subject, profile=FAILURE_POLICY, node=node)


def publish(memo: OperatorContext, node: str, found: list[Finding]) -> None:
    """A node's failures: each an Event once, the gauge, the PolicyReports."""
    for finding in found:
        if finding.subject is not None and finding.subject.kind == "Node":
            if memo.posted_findings.first_time(node, str(finding.reason), finding.message):
                log.info("node %s: %s: %s", node, finding.reason, finding.message)
                try:
                    warn_node(memo.kube_client, node, str(finding.reason), finding.message)
                except TransientApiError as error:
                    log.warning("could not post the %s Event on node %s (%s): posted at a later judgement",
                                finding.reason, node, error)
                    memo.posted_findings.forget(node, str(finding.reason), finding.message)
        else:
            findings.post_once(memo.posted_findings, finding)
    metrics.record_mount_failures(node, found)
    if memo.policy_reports is not None:
        memo.policy_reports.record(FAILURE_POLICY, f"node/{node}", found)


def judge_node(memo: OperatorContext, node: str, now: datetime | None = None) -> None:
    config = memo.config
    found = memo.mount_failures.judge(node, memo.pods, now=now or datetime.now(UTC),
                                      after=timedelta(seconds=config.stuck_after),
                                      stale_after=timedelta(seconds=config.report_stale_after))
    publish(memo, node, found)


def follow_report(memo: OperatorContext, node: str, report: NodeReport | None) -> None:
    """A node's report changed: judge its failures again (a report deleted, None, takes its failures along)."""
    memo.mount_failures.follow(node, report)
    judge_node(memo, node)


async def judge_every_node(memo: OperatorContext, active) -> None:
    """Every ``failure_interval``: judge every node again (time alone makes some failures), when active."""
    while True:
        await asyncio.sleep(memo.config.failure_interval)
        try:
            # No report event yet: no node to judge, and no context to post Events through.
            if memo.event_context.ready and await asyncio.to_thread(active):
                for node in memo.mount_failures.nodes:
                    await memo.event_context.run(judge_node, memo, node)
        except Exception:  # a bug or the API away must not end the loop: the next round tries again
            log.exception("judging the nodes' mount failures failed")


async def start_judging(memo: OperatorContext, **_) -> None:
    memo.mount_failures = MountFailures()
    # A paused replica's reports are stale: only the active one judges (and posts, and evicts).
    memo.failure_loop = asyncio.get_running_loop().create_task(judge_every_node(memo, memo.replica_active))


async def stop_judging(memo: OperatorContext, **_) -> None:
    if memo.failure_loop is not None:
        memo.failure_loop.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await memo.failure_loop


def register(registry: kopf.OperatorRegistry, config: OperatorConfig) -> None:
    kopf.on.startup(registry=registry)(start_judging)
    kopf.on.cleanup(registry=registry)(stop_judging)
