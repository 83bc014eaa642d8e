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
from mountwarden.api.nodemountreport import PLURAL as REPORTS
from mountwarden.api.storageprofile import PLURAL as PROFILES
from mountwarden.core.compliance import Consumer, ProfileCompliance, VolumeState, assess
from mountwarden.core.conditions import find_condition
from mountwarden.core.nodereport import NodeReport, UnreadableReport
from mountwarden.handlers import metrics
from mountwarden.handlers.config import OperatorConfig
from mountwarden.handlers.errors import retry_transient
from mountwarden.handlers.indexes import one

PROFILE = (GROUP, VERSION, PROFILES)
log = logging.getLogger(__name__)

_EVENT_REASONS = {"OptionMismatch": "MountPolicyDrift", "SuperblockShared": "SuperblockShared",
                  "NconnectIgnored": "NconnectIgnored"}


def consumers_of(profile: str, classes_by_profile: kopf.Index, volumes_by_class: kopf.Index,
                 claims_by_volume: kopf.Index, pods: PodPlacements) -> list[Consumer]:
    """Every (pod, PV) pair where the PV's class belongs to ``profile``."""
    consumers = []
    for storage_class in classes_by_profile.get(profile, []):
        for volume_name in volumes_by_class.get(storage_class.name, []):
            volume = one(claims_by_volume, volume_name)
            for pod in pods.of_claim(*volume["claim"]) if volume else []:
                consumers.append(Consumer(pod.uid, pod.namespace, pod.name, pod.node, volume_name))
    return consumers


def _reports(reports_by_node: kopf.Index, nodes: Iterable[str | None]) -> dict[str, NodeReport]:
    found = {node: one(reports_by_node, node) for node in {n for n in nodes if n}}
    return {node: report for node, report in found.items() if report is not None}


@with_cluster_indexes
@retry_transient
def assess_compliance(
    name: str, status: kopf.Status, meta: kopf.Meta, patch: kopf.Patch, memo: kopf.Memo,
    contracts: kopf.Index, reports_by_node: kopf.Index, claims_by_volume: kopf.Index, classes_by_profile: kopf.Index,
    volumes_by_class: kopf.Index, **_,
) -> None:
    contract = one(contracts, name)
    if contract is None:
        return  # invalid spec: the Ready condition says why
    consumers = consumers_of(name, classes_by_profile, volumes_by_class, claims_by_volume, memo.pods)
    reports = _reports(reports_by_node, (c.node for c in consumers))
    now = datetime.now(UTC)
    stale_after = timedelta(seconds=memo.config.report_stale_after)
    compliance = ProfileCompliance.of([assess(c, contract, reports, now=now, stale_after=stale_after)
                                       for c in consumers])
    summary = compliance.to_status()
    previous = {k: v for k, v in (status.get("compliance") or {}).items() if k != "checkedAt"}
    if summary != previous:
        patch.status["compliance"] = {**summary, "checkedAt": now.strftime("%Y-%m-%dT%H:%M:%SZ")}
    state, reason, message = compliance.condition()
    current = find_condition(status.get("conditions"), "Compliant")
    if not current or (current["status"], current["reason"], current["message"]) != (state, reason, message):
        memo.conditions.set(name, "Compliant", state, reason, message, meta.get("generation"))
        if not current or (current["status"], current["reason"]) != (state, reason):
            log.info("StorageProfile %s: Compliant %s (%s): %s", name, state, reason, message)
    metrics.record_compliance(name, compliance.counts(), compliance.sqlite_databases)


@with_cluster_indexes
def announce_findings(
    name: str, spec: kopf.Spec, type: str, memo: kopf.Memo, contracts: kopf.Index, claims_by_volume: kopf.Index,
    classes_by_name: kopf.Index, rollouts_under_way: kopf.Index, **_,
) -> None:
    """Post a Warning Event on each pod whose mount drifted or that runs SQLite on NFS, once per finding.

    Option drift on a profile whose rollout is under way is expected (replicas wait their turn) and is
    reported in status only; the rollout itself says what blocks it.
    """
    if type == "DELETED" or not spec:
        return
    try:
        report = NodeReport.from_spec(name, spec)
    except UnreadableReport:
        return
    posted: set = memo.posted_findings
    stale_after = timedelta(seconds=memo.config.report_stale_after)
    for pod_uid, volume_name in {(m.pod_uid, m.volume_name): None for m in report.mounts if m.pod_uid}:
        pod = memo.pods.get(pod_uid)
        volume = one(claims_by_volume, volume_name)
        storage_class = one(classes_by_name, volume["storageClass"]) if volume else None
        profile = storage_class.profile if storage_class else None
        contract = one(contracts, profile) if profile else None
        if pod is None or contract is None:
            continue
        verdict = assess(Consumer(pod_uid, pod.namespace, pod.name, name, volume_name), contract,
                         {name: report}, now=report.scan_time, stale_after=stale_after)
        if verdict.state is VolumeState.DRIFTED and profile not in rollouts_under_way:
            for finding in verdict.findings:
                if finding.reason in _EVENT_REASONS and finding.severity != "info":
                    _post_once(posted, pod_uid, pod, _EVENT_REASONS[finding.reason],
                               f"{volume_name} on {name} (StorageProfile {profile}): {finding.message} "
                               f"{finding.remedy}".strip())
    for use in report.sqlite:
        pod = memo.pods.get(use.pod_uid) if use.pod_uid else None
        if pod is not None:
            _post_once(posted, use.pod_uid, pod, "SQLiteOnNFS",
                       f"{use.volume_name or 'a network volume'} on {name}: {use.message}")


def _post_once(posted: set, pod_uid: str, pod: PodPlacement, reason: str, message: str) -> None:
    key = (pod_uid, reason, message)
    if key in posted:
        return
    posted.add(key)
    log.info("pod %s/%s: %s: %s", pod.namespace, pod.name, reason, message)
    kopf.warn({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod_uid}},
              reason=reason, message=message[:1000])


def register(registry: kopf.OperatorRegistry, config: OperatorConfig) -> None:
    kopf.timer(*PROFILE, interval=config.compliance_interval, initial_delay=2.0, registry=registry)(
        assess_compliance)
    kopf.on.event(GROUP, VERSION, REPORTS, registry=registry)(announce_findings)
