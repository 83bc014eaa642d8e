"""Node reports against profiles: pod Events when a mount drifts, compliance in each profile's status.

Everything is answered from memory: kopf's indexes (reports, PVs, classes, profiles'
contracts) and the pods' placements (mountwarden.adapters.pods); the API is touched only
to post Events and to write a profile's status when its compliance changed.
"""

import logging
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

import kopf

from mountwarden.adapters.pods import PodPlacement, PodPlacements
from mountwarden.adapters.watches import with_cluster_indexes
from mountwarden.api.base import GROUP, VERSION
from mountwarden.api.nodemountreport import node_report
from mountwarden.api.storageprofile import PLURAL as PROFILES
from mountwarden.core.compliance import Consumer, ProfileCompliance, VolumeState, assess
from mountwarden.core.conditions import find_condition
from mountwarden.core.findings import Reason, Subject
from mountwarden.core.node.report import NodeReport, of_own_pods
from mountwarden.core.policyreport import compliance_findings
from mountwarden.core.serverload import mount_loads, server_load
from mountwarden.handlers import findings, metrics
from mountwarden.handlers.collector import during_burst
from mountwarden.handlers.config import OperatorConfig
from mountwarden.handlers.context import OperatorContext
from mountwarden.handlers.errors import retry_transient
from mountwarden.handlers.indexes import one

PROFILE = (GROUP, VERSION, PROFILES)
log = logging.getLogger(__name__)

#: Findings on a volume's options posted as pod Events (not while the profile's rollout is under way).
DRIFT_REASONS = frozenset({Reason.OPTION_MISMATCH, Reason.UNDECLARED_OPTION, Reason.SUPERBLOCK_SHARED,
                           Reason.NCONNECT_IGNORED})


def consumers_of(profile: str, classes_by_profile: kopf.Index, volumes_by_class: kopf.Index,
                 claims_by_volume: kopf.Index, pods: PodPlacements,
                 volumes_by_adopter: kopf.Index | None = None) -> list[Consumer]:
    """Every (pod, PV) pair where the PV's class belongs to ``profile``, or the PV is one it adopted."""
    names = [name for storage_class in classes_by_profile.get(profile, [])
             for name in volumes_by_class.get(storage_class.name, [])]
    names += [name for name in (volumes_by_adopter or {}).get(profile, []) if name not in names]
    consumers = []
    for volume_name in names:
        volume = one(claims_by_volume, volume_name)
        for pod in pods.of_claim(*volume["claim"]) if volume else []:
            consumers.append(Consumer(pod.uid, pod.namespace, pod.name, pod.node, volume_name,
                                      volume.get("mountOptions"), volume.get("storageClass")))
    return consumers


def _reports(reports_by_node: kopf.Index, nodes: Iterable[str | None], pods: PodPlacements,
             ) -> dict[str, NodeReport]:
    """The nodes' reports, each believed only about the pods scheduled on its node."""
    found = {node: node_report(reports_by_node, node) for node in {n for n in nodes if n}}
    return {node: of_own_pods(report, pods.node_of)[0] for node, report in found.items() if report is not None}


@with_cluster_indexes
@retry_transient
@during_burst  # a Consumer and a Verdict per pod volume, every interval (mountwarden.handlers.collector)
def assess_compliance(
    name: str, status: kopf.Status, meta: kopf.Meta, patch: kopf.Patch, memo: OperatorContext,
    contracts: kopf.Index, reports_by_node: kopf.Index, claims_by_volume: kopf.Index, classes_by_profile: kopf.Index,
    volumes_by_class: kopf.Index, volumes_by_adopter: kopf.Index, nodes: kopf.Index, **_,
) -> None:
    contract = one(contracts, name)
    if contract is None:
        return  # invalid spec: the Ready condition says why
    consumers = consumers_of(name, classes_by_profile, volumes_by_class, claims_by_volume, memo.pods,
                             volumes_by_adopter)
    reports = _reports(reports_by_node, (c.node for c in consumers), memo.pods)
    now = datetime.now(UTC)
    stale_after = timedelta(seconds=memo.config.report_stale_after)
    no_agent = {c.node: facts.no_agent for c in consumers if c.node and (facts := one(nodes, c.node))
                and facts.no_agent}
    compliance = ProfileCompliance.of([assess(c, contract, reports, now=now, stale_after=stale_after,
                                              no_agent=no_agent) for c in consumers])
    summary = compliance.to_status()
    previous = {k: v for k, v in (status.get("compliance") or {}).items() if k != "checkedAt"}
    if summary != previous:
        patch.status["compliance"] = {**summary, "checkedAt": now.strftime("%Y-%m-%dT%H:%M:%SZ")}
    servers = server_load(mount_loads(consumers, reports), kind=contract.kind)
    if servers != (status.get("servers") or []):
        patch.status["servers"] = servers
    state, reason, message = compliance.condition()
    current = find_condition(status.get("conditions"), "Compliant")
    memo.conditions.set(name, "Compliant", state, reason, message, meta.get("generation"), writer="compliance",
                        current=status)
    if not current or (current["status"], current["reason"]) != (state, reason):
        log.info("StorageProfile %s: Compliant %s (%s): %s", name, state, reason, message)
    metrics.record_compliance(name, compliance.counts(), compliance.sqlite_databases)
    metrics.record_unverified(name, compliance.unverified(no_agent))
    findings.publish(memo, name, findings.COMPLIANCE, compliance_findings(name, compliance.verdicts))


@with_cluster_indexes
def announce_findings(
    name: str, report: NodeReport, memo: OperatorContext, contracts: kopf.Index,
    claims_by_volume: kopf.Index, classes_by_name: kopf.Index, rollouts_under_way: kopf.Index, **_,
) -> None:
    """Post a Warning Event on each pod whose mount drifted, is stuck or struggling, or runs SQLite on NFS.

    Only about pods scheduled on the report's node: entries naming any other pod are dropped, counted
    (mountwarden_report_entries_dropped_total) and logged. Each finding once. Option drift on a profile
    whose rollout is under way is expected (replicas wait their turn) and is reported in status only; the
    rollout itself says what blocks it. How a mount is doing (ThroughputPlateau, TransportUnhealthy,
    StuckOnNFS) is said whatever its options.
    """
    _announce_userspace_clients(name, report, memo)
    report, foreign = of_own_pods(report, memo.pods.node_of)
    for entry in foreign:
        metrics.REPORT_ENTRIES_DROPPED.labels(entry.node, entry.reason).inc()
        # A pod gone while its mount lingers is ordinary; a pod of another node is not.
        log.log(logging.WARNING if entry.reason == "other-node" else logging.DEBUG, "%s", entry)
    stale_after = timedelta(seconds=memo.config.report_stale_after)
    for pod_uid, volume_name in {(m.pod_uid, m.volume_name): None for m in report.mounts if m.pod_uid}:
        pod = memo.pods.get(pod_uid)
        volume = one(claims_by_volume, volume_name)
        storage_class = one(classes_by_name, volume["storageClass"]) if volume else None
        # Its class's lineage, or the profile that adopted the PV (mountwarden.io/adopted-by on the PV).
        profile = (storage_class.profile if storage_class else None) or (volume.get("adoptedBy") if volume else None)
        contract = one(contracts, profile) if profile else None
        if pod is None or contract is None:
            continue
        verdict = assess(Consumer(pod_uid, pod.namespace, pod.name, name, volume_name,
                                  volume.get("mountOptions"), volume.get("storageClass")), contract,
                         {name: report}, now=report.scan_time, stale_after=stale_after)
        drifted = verdict.state is VolumeState.DRIFTED and profile not in rollouts_under_way
        where = f"{volume_name} on {name} (StorageProfile {profile})"
        for finding in verdict.findings:
            if finding.is_health or (drifted and finding.reason in DRIFT_REASONS and finding.counts):
                said = finding.with_message(f"{where}: {finding.message} {finding.remedy}".strip())
                findings.post_once(memo.posted_findings, said.about(_pod(pod_uid, pod), profile=profile))
    for use in report.sqlite:
        pod = memo.pods.get(use.pod_uid) if use.pod_uid else None
        if pod is not None:
            said = use.finding().with_message(f"{use.volume_name or 'a network volume'} on {name}: {use.message}")
            findings.post_once(memo.posted_findings, said.about(_pod(use.pod_uid, pod)))


def _announce_userspace_clients(node: str, report: NodeReport, memo: OperatorContext) -> None:
    """A pod's process that talks NFS itself: an Event on the pod when the operator tracks it on this node; on the
    Node when it does not (a pod with no claim): the node speaks of a process of its own. Another node's pod is
    not believed (of_own_pods counts it)."""
    for client in report.userspace_clients:
        scheduled = memo.pods.node_of(client.pod_uid)
        said = client.finding().with_message(f"on {node}: {client.message}")
        if scheduled == node:
            findings.post_once(memo.posted_findings, said.about(_pod(client.pod_uid, memo.pods.get(client.pod_uid))))
        elif scheduled is None:
            findings.post_once(memo.posted_findings, said.about(Subject("Node", node, uid=f"node/{node}")))


def _pod(uid: str, pod: PodPlacement) -> Subject:
    return Subject("Pod", pod.name, pod.namespace, uid)


def forget_profile_series(name: str, type: str, **_) -> None:
    """A deleted profile's metric series go with it (its timers are stopped by then)."""
    if type == "DELETED":
        metrics.forget_profile(name)


def register(registry: kopf.OperatorRegistry, config: OperatorConfig) -> None:
    kopf.timer(*PROFILE, interval=config.compliance_interval, initial_delay=2.0, registry=registry)(
        assess_compliance)
    kopf.on.event(*PROFILE, registry=registry)(forget_profile_series)
