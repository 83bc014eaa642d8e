"""Node reports against profiles: pod Events when a mount drifts, compliance in each profile's status.

Everything is answered from in-memory indexes (reports, pods, PVs, classes,
profiles' contracts); the API is touched only to post Events and to write a
profile's status when its compliance changed.
"""

import os
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

import kopf
from pydantic import ValidationError

from mountwarden.api.base import GROUP, VERSION
from mountwarden.api.nodemountreport import PLURAL as REPORTS
from mountwarden.api.nodemountreport import MountedVolume
from mountwarden.api.storageprofile import PLURAL as PROFILES
from mountwarden.api.storageprofile import StorageProfileSpec
from mountwarden.core.compliance import (
    Consumer,
    Contract,
    NodeReportView,
    ProfileCompliance,
    SqliteUse,
    VolumeState,
    assess,
)
from mountwarden.core.conditions import find_condition
from mountwarden.core.nodescan import HEALTH_REASONS
from mountwarden.core.policy import backend_kind
from mountwarden.core.serverload import mount_loads, server_load
from mountwarden.core.storageclass import PROFILE_LABEL
from mountwarden.handlers import metrics
from mountwarden.handlers.errors import retry_transient

PROFILE = (GROUP, VERSION, PROFILES)
#: Seconds between compliance checks of each profile (read once, when the handlers are registered).
COMPLIANCE_INTERVAL_SECONDS = float(os.environ.get("MOUNTWARDEN_COMPLIANCE_INTERVAL", "30"))
#: A report older than this proves nothing: the agent heartbeats every 5 minutes.
STALE_AFTER = timedelta(seconds=float(os.environ.get("MOUNTWARDEN_REPORT_STALE_AFTER", "900")))

_EVENT_REASONS = {"OptionMismatch": "MountPolicyDrift", "UndeclaredOption": "MountPolicyDrift",
                  "SuperblockShared": "SuperblockShared", "NconnectIgnored": "NconnectIgnored"}


@kopf.index(GROUP, VERSION, REPORTS)
async def reports_by_node(name: str, spec: kopf.Spec, **_) -> dict:
    return {name: dict(spec)}


@kopf.index("pods")
async def pods_by_claim(name: str, namespace: str, uid: str, spec: kopf.Spec, **_) -> dict:
    claims = {(namespace, volume["persistentVolumeClaim"]["claimName"])
              for volume in spec.get("volumes") or [] if volume.get("persistentVolumeClaim")}
    if not claims:
        return {}  # {} clears the object's entries; None would keep them
    pod = {"uid": uid, "name": name, "namespace": namespace, "node": spec.get("nodeName")}
    return {claim: pod for claim in claims}


@kopf.index("pods")
async def pods_by_uid(name: str, namespace: str, uid: str, **_) -> dict:
    return {uid: {"name": name, "namespace": namespace}}


@kopf.index("persistentvolumes")
async def claims_by_volume(name: str, spec: kopf.Spec, **_) -> dict:
    claim = spec.get("claimRef") or {}
    if not claim.get("name"):
        return {}
    return {name: {"claim": (claim.get("namespace"), claim["name"]), "storageClass": spec.get("storageClassName"),
                   "mountOptions": tuple(spec.get("mountOptions") or ())}}


@kopf.index("storage.k8s.io", "v1", "storageclasses", labels={PROFILE_LABEL: kopf.PRESENT})
async def profiles_by_class(name: str, labels: kopf.Labels, **_) -> dict:
    return {name: labels[PROFILE_LABEL]}


@kopf.index("storage.k8s.io", "v1", "storageclasses", labels={PROFILE_LABEL: kopf.PRESENT})
async def lineages(name: str, labels: kopf.Labels, **_) -> dict:
    """Each profile's StorageClasses, so that a profile's volumes are found without scanning every PV."""
    return {labels[PROFILE_LABEL]: name}


@kopf.index(*PROFILE)
async def rollouts_under_way(name: str, status: kopf.Status, **_) -> dict:
    """Profiles whose rollout is not complete: their consumers mix old and new options on purpose."""
    phase = (status.get("rollout") or {}).get("phase")
    return {name: phase} if phase and phase != "Complete" else {}


@kopf.index(*PROFILE)
async def contracts(name: str, spec: kopf.Spec, status: kopf.Status, **_) -> dict:
    """Each valid profile's resolved contract (an invalid one governs nothing until it is fixed)."""
    try:
        profile = StorageProfileSpec.model_validate(dict(spec))
    except ValidationError:
        return {}
    policy = profile.resolve()
    if not policy.valid:
        return {}
    throughput_mode = (status.get("credits") or {}).get("throughputMode")
    return {name: Contract(policy.options, tuple(profile.required_options), tuple(profile.forbidden_options),
                           str(profile.sqlite), profile.thresholds(throughput_mode),
                           backend_kind(profile.backend.provisioner, profile.backend.kind))}


def _one(index: kopf.Index, key):
    store = index.get(key)
    return next(iter(store), None) if store else None


def report_view(spec: dict) -> NodeReportView | None:
    """A report's volumes and SQLite findings keyed for lookups; None when it cannot be read."""
    try:
        volumes = [MountedVolume.model_validate(volume) for volume in spec.get("volumes") or []]
        scan_time = datetime.fromisoformat(spec["scanTime"].replace("Z", "+00:00"))
    except (ValidationError, KeyError, ValueError):
        return None
    return NodeReportView(
        scan_time=scan_time,
        volumes={(v.pod_uid, v.volume_name): v for v in volumes if v.pod_uid},
        sqlite=[SqliteUse(f.get("podUid"), f.get("volumeName"), f.get("severity", "warning"), f.get("mode", "unknown"),
                          f.get("path"), f.get("message", "")) for f in spec.get("sqlite") or []],
        kernel_release=spec.get("kernelRelease"),
    )


def consumers_of(profile: str, lineages: kopf.Index, volumes_by_class: kopf.Index, claims_by_volume: kopf.Index,
                 pods_by_claim: kopf.Index) -> list[Consumer]:
    """Every (pod, PV) pair where the PV's class belongs to ``profile``."""
    consumers = []
    for storage_class in lineages.get(profile, []):
        for volume_name in volumes_by_class.get(storage_class, []):
            volume = _one(claims_by_volume, volume_name)
            for pod in pods_by_claim.get(volume["claim"], []) if volume else []:
                consumers.append(Consumer(pod["uid"], pod["namespace"], pod["name"], pod["node"], volume_name,
                                          volume.get("mountOptions"), volume.get("storageClass")))
    return consumers


def _reports(reports_by_node: kopf.Index, nodes: Iterable[str | None]) -> dict[str, NodeReportView]:
    views = {}
    for node in {n for n in nodes if n}:
        spec = _one(reports_by_node, node)
        view = report_view(spec) if spec is not None else None
        if view is not None:
            views[node] = view
    return views


@kopf.timer(*PROFILE, interval=COMPLIANCE_INTERVAL_SECONDS, initial_delay=2.0)
@retry_transient
def assess_compliance(
    name: str, status: kopf.Status, meta: kopf.Meta, patch: kopf.Patch, memo: kopf.Memo,
    contracts: kopf.Index, reports_by_node: kopf.Index, claims_by_volume: kopf.Index, lineages: kopf.Index,
    volumes_by_class: kopf.Index, pods_by_claim: kopf.Index, **_,
) -> None:
    contract = _one(contracts, name)
    if contract is None:
        return  # invalid spec: the Ready condition says why
    consumers = consumers_of(name, lineages, volumes_by_class, claims_by_volume, pods_by_claim)
    reports = _reports(reports_by_node, (c.node for c in consumers))
    now = datetime.now(UTC)
    compliance = ProfileCompliance.of([assess(c, contract, reports, now=now, stale_after=STALE_AFTER)
                                       for c in consumers])
    summary = compliance.to_status()
    previous = {k: v for k, v in (status.get("compliance") or {}).items() if k != "checkedAt"}
    if summary != previous:
        patch.status["compliance"] = {**summary, "checkedAt": now.strftime("%Y-%m-%dT%H:%M:%SZ")}
    servers = server_load(mount_loads(consumers, reports), kind=contract.kind)
    if servers != (status.get("servers") or []):
        patch.status["servers"] = servers
    state, reason, message = compliance.condition()
    current = find_condition(status.get("conditions"), "Compliant")
    if not current or (current["status"], current["reason"], current["message"]) != (state, reason, message):
        memo.conditions.set(name, "Compliant", state, reason, message, meta.get("generation"))
    metrics.record_compliance(name, compliance.counts(), compliance.sqlite_databases)


@kopf.on.event(GROUP, VERSION, REPORTS)
def announce_findings(
    name: str, spec: kopf.Spec, type: str, memo: kopf.Memo, contracts: kopf.Index, claims_by_volume: kopf.Index,
    profiles_by_class: kopf.Index, pods_by_uid: kopf.Index, rollouts_under_way: kopf.Index, **_,
) -> None:
    """Post a Warning Event on each pod whose mount drifted, is stuck or struggling, or runs SQLite on NFS.

    Each finding once. Option drift on a profile whose rollout is under way is expected (replicas wait
    their turn) and is reported in status only; the rollout itself says what blocks it. How a mount is
    doing (ThroughputPlateau, TransportUnhealthy, StuckOnNFS) is said whatever its options.
    """
    if type == "DELETED" or not spec:
        return
    view = report_view(dict(spec))
    if view is None:
        return
    posted: set = memo.posted_findings
    for pod_uid, volume_name in view.volumes:
        pod = _one(pods_by_uid, pod_uid)
        volume = _one(claims_by_volume, volume_name)
        profile = _one(profiles_by_class, volume["storageClass"]) if volume else None
        contract = _one(contracts, profile) if profile else None
        if pod is None or contract is None:
            continue
        verdict = assess(Consumer(pod_uid, pod["namespace"], pod["name"], name, volume_name,
                                  volume.get("mountOptions"), volume.get("storageClass")), contract,
                         {name: view}, now=view.scan_time, stale_after=STALE_AFTER)
        no_drift_events = verdict.state is not VolumeState.DRIFTED or profile in rollouts_under_way
        for finding in verdict.findings:
            if finding.reason in HEALTH_REASONS:  # how the mount is doing: said whatever its options
                _post_once(posted, pod_uid, pod, str(finding.reason),
                           f"{volume_name} on {name} (StorageProfile {profile}): {finding.message} {finding.remedy}")
        if not no_drift_events:
            for finding in verdict.findings:
                if finding.reason in _EVENT_REASONS and finding.severity != "info":
                    _post_once(posted, pod_uid, pod, _EVENT_REASONS[finding.reason],
                               f"{volume_name} on {name} (StorageProfile {profile}): {finding.message} "
                               f"{finding.remedy}".strip())
    for use in view.sqlite:
        pod = _one(pods_by_uid, use.pod_uid) if use.pod_uid else None
        if pod is not None:
            _post_once(posted, use.pod_uid, pod, "SQLiteOnNFS",
                       f"{use.volume_name or 'a network volume'} on {name}: {use.message}")


def _post_once(posted: set, pod_uid: str, pod: dict, reason: str, message: str) -> None:
    key = (pod_uid, reason, message)
    if key in posted:
        return
    posted.add(key)
    kopf.warn({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": pod["name"], "namespace": pod["namespace"], "uid": pod_uid}},
              reason=reason, message=message[:1000])
