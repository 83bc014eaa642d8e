"""Does every consumer of a profile really mount what the profile declares?

A consumer is one pod using one PersistentVolume of the profile's lineage. Its
verdict comes from its node's report: compliant, drifted (an option differs, a
shared superblock kept other options, a SQLite database sits on it against the
profile's policy) or unknown (no report, a stale report, the volume not in it).
"""

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

from mountwarden.core.findings import Finding
from mountwarden.core.impact import NO_IMPACT, Impact, by_impact, impact_of
from mountwarden.core.node.activity import Thresholds
from mountwarden.core.node.check import check_volume
from mountwarden.core.node.report import NodeReport, SqliteUse
from mountwarden.core.options.table import OptionValue
from mountwarden.core.vocabulary import BackendKind, SqlitePolicy

#: How many offenders the condition message and status name.
WORST_OFFENDERS = 5


class VolumeState(StrEnum):
    COMPLIANT = "compliant"
    DRIFTED = "drifted"
    UNKNOWN = "unknown"


class VerdictReason(StrEnum):
    """Why a pod volume is compliant, drifted or unknown (a drifted one's is its worst finding's reason)."""

    COMPLIANT = "Compliant"
    SQLITE_ON_NFS = "SQLiteOnNFS"
    NOT_SCHEDULED = "NotScheduled"
    REPORT_MISSING = "ReportMissing"
    REPORT_STALE = "ReportStale"
    NOT_MOUNTED = "NotMounted"


#: Why a volume is unverified in metrics when its node is one where no agent can run (Fargate, virtual nodes):
#: its report is missing for good, and no alert asks for it.
NO_AGENT = "NoAgent"


class ComplianceReason(StrEnum):
    """The reasons of a profile's Compliant condition."""

    COMPLIANT = "Compliant"
    DRIFTED = "Drifted"
    UNVERIFIED = "Unverified"
    NO_CONSUMERS = "NoConsumers"


@dataclass(frozen=True, slots=True)
class Consumer:
    """One pod using one PersistentVolume of the profile."""

    pod_uid: str
    namespace: str
    pod_name: str
    node: str | None
    volume_name: str  # the PV name: the kubelet's directory for CSI and in-tree NFS volumes
    #: The PV's spec.mountOptions and class, to say where an option nobody declared came from (None: unknown).
    pv_mount_options: tuple[str, ...] | None = None
    storage_class: str | None = None

    @property
    def pod(self) -> str:
        return f"{self.namespace}/{self.pod_name}"


@dataclass(frozen=True, slots=True)
class Contract:
    """What the profile declares, resolved."""

    options: Mapping[str, OptionValue]
    required: Sequence[str] = ()
    forbidden: Sequence[str] = ()
    sqlite: SqlitePolicy = SqlitePolicy.WARN
    #: When a volume's throughput, transport or processes are a finding (spec.throughput).
    thresholds: Thresholds = Thresholds()
    #: spec.backend.kind, resolved: efs, nfs or nfsv3-gateway.
    kind: BackendKind = BackendKind.NFS


@dataclass(frozen=True, slots=True)
class Verdict:
    consumer: Consumer
    state: VolumeState
    reason: str  # a VerdictReason or, when drifted, its worst finding's Reason
    message: str
    #: Every finding on the volume: its options, how it is doing, SQLite on it (unless the profile allows it).
    findings: tuple[Finding, ...] = ()
    #: The SQLite databases in use on it that count (none when the profile allows SQLite).
    sqlite: tuple[SqliteUse, ...] = ()

    def offender(self) -> dict:
        return {"pod": self.consumer.pod, "node": self.consumer.node or "", "volume": self.consumer.volume_name,
                "reason": self.reason, "message": self.message}


def assess(
    consumer: Consumer,
    contract: Contract,
    reports: Mapping[str, NodeReport],
    *,
    now: datetime,
    stale_after: timedelta,
    no_agent: Mapping[str, str] | None = None,
) -> Verdict:
    """The verdict on one consumer, from its node's report. ``no_agent``: nodes where no agent can run, and why
    (mountwarden.core.node.kinds): their missing reports are explained, not asked about."""
    report = reports.get(consumer.node or "")
    if consumer.node is None:
        return Verdict(consumer, VolumeState.UNKNOWN, VerdictReason.NOT_SCHEDULED, f"{consumer.pod} is not on a node yet")
    if report is None:
        why = (no_agent or {}).get(consumer.node)
        return Verdict(consumer, VolumeState.UNKNOWN, VerdictReason.REPORT_MISSING,
                       f"no NodeMountReport for node {consumer.node}: it is {why}, so its pods' mounts cannot be "
                       "audited" if why else
                       f"no NodeMountReport for node {consumer.node}: is the mountwarden agent running there?")
    if now - report.scan_time > stale_after:
        return Verdict(consumer, VolumeState.UNKNOWN, VerdictReason.REPORT_STALE,
                       f"the report of node {consumer.node} is {int((now - report.scan_time).total_seconds())} s "
                       "old: is the mountwarden agent running there?")
    observed = report.mount_of(consumer.pod_uid, (consumer.volume_name,))
    if observed is None:
        return Verdict(consumer, VolumeState.UNKNOWN, VerdictReason.NOT_MOUNTED,
                       f"{consumer.pod} has no mount of {consumer.volume_name} in the report of {consumer.node} "
                       "(not mounted yet, or not a network filesystem)")
    check = check_volume(observed, contract.options, required=contract.required, forbidden=contract.forbidden,
                         pv_mount_options=consumer.pv_mount_options, storage_class=consumer.storage_class,
                         thresholds=contract.thresholds, kernel_release=report.kernel_release)
    sqlite = tuple(use for use in report.sqlite
                   if use.pod_uid == consumer.pod_uid and use.volume_name == consumer.volume_name)
    counted_sqlite = sqlite if contract.sqlite != SqlitePolicy.ALLOW else ()
    findings = check.findings + tuple(use.finding() for use in counted_sqlite)
    # How a mount is doing (throughput, transport, stuck processes) is reported, never counted as drift.
    problems = [f for f in check.findings if f.counts and not f.is_health]
    if not problems and not (counted_sqlite and contract.sqlite == SqlitePolicy.FORBID):
        message = f"{consumer.pod} mounts {consumer.volume_name} as declared"
        if counted_sqlite:
            message += f"; SQLite in use on it ({counted_sqlite[0].mode} mode)"
        return Verdict(consumer, VolumeState.COMPLIANT, VerdictReason.COMPLIANT, message, findings, counted_sqlite)
    worst = by_impact(problems)[0] if problems else None
    reason = str(worst.reason) if worst else VerdictReason.SQLITE_ON_NFS
    message = f"{consumer.pod} on {consumer.node}: {worst.message if worst else counted_sqlite[0].message}"
    return Verdict(consumer, VolumeState.DRIFTED, reason, message, findings, counted_sqlite)


_OFFENDER_ORDER = (VolumeState.DRIFTED, VolumeState.UNKNOWN, VolumeState.COMPLIANT)


def _worst_impact(verdict: Verdict) -> Impact:
    return max((impact_of(finding) for finding in verdict.findings if finding.counts), default=NO_IMPACT)


@dataclass(frozen=True)
class ProfileCompliance:
    verdicts: tuple[Verdict, ...]
    sqlite_databases: int = 0
    by_pod: dict[str, VolumeState] = field(default_factory=dict)

    @staticmethod
    def of(verdicts: Sequence[Verdict]) -> "ProfileCompliance":
        by_pod: dict[str, VolumeState] = {}
        for verdict in verdicts:
            current = by_pod.get(verdict.consumer.pod_uid, VolumeState.COMPLIANT)
            # A pod is as bad as its worst volume: drifted beats unknown beats compliant.
            order = [VolumeState.COMPLIANT, VolumeState.UNKNOWN, VolumeState.DRIFTED]
            by_pod[verdict.consumer.pod_uid] = max(current, verdict.state, key=order.index)
        databases = {(v.consumer.volume_name, use.path or use.message) for v in verdicts for use in v.sqlite}
        return ProfileCompliance(tuple(verdicts), len(databases), by_pod)

    def counts(self) -> dict[str, dict[str, int]]:
        volumes = Counter(v.state for v in self.verdicts)
        pods = Counter(self.by_pod.values())
        return {
            "volumes": {state.value: volumes.get(state, 0) for state in VolumeState},
            "pods": {state.value: pods.get(state, 0) for state in VolumeState},
        }

    def unverified(self, no_agent: Mapping[str, str] | None = None) -> Counter[tuple[str, str]]:
        """Volumes no report confirms, by (node, why): the verdict's reason, except a missing report of a node where
        no agent can run (``no_agent``, as for ``assess``), which is NO_AGENT: nobody can bring that report."""
        return Counter((v.consumer.node or "",
                        NO_AGENT if v.reason == VerdictReason.REPORT_MISSING and v.consumer.node in (no_agent or {})
                        else str(v.reason))
                       for v in self.verdicts if v.state is VolumeState.UNKNOWN)

    def worst_offenders(self) -> list[Verdict]:
        """Drifted, then unknown, then compliant with SQLite on them; each by its worst finding's impact
        (core/impact.py), then by pod and volume."""
        offending = [v for v in self.verdicts if v.state is not VolumeState.COMPLIANT or v.sqlite]
        ordered = sorted(offending, key=lambda v: (v.consumer.pod, v.consumer.volume_name))
        ordered.sort(key=_worst_impact, reverse=True)
        return sorted(ordered, key=lambda v: _OFFENDER_ORDER.index(v.state))[:WORST_OFFENDERS]

    def condition(self) -> tuple[str, str, str]:
        """The Compliant condition: (status, reason, message)."""
        counts = self.counts()["volumes"]
        if not self.verdicts:
            return "True", ComplianceReason.NO_CONSUMERS, "no pod uses a volume of this profile"
        worst = self.worst_offenders()
        summary = (f"{counts['compliant']} of {len(self.verdicts)} pod volumes compliant, "
                   f"{counts['drifted']} drifted, {counts['unknown']} unknown")
        if counts["drifted"]:
            return "False", ComplianceReason.DRIFTED, summary + "; worst: " + "; ".join(v.message for v in worst[:3])
        if counts["unknown"]:
            return "Unknown", ComplianceReason.UNVERIFIED, summary + "; " + worst[0].message
        return "True", ComplianceReason.COMPLIANT, summary

    def to_status(self) -> dict:
        """The status.compliance object (checkedAt is the caller's)."""
        return {
            **self.counts(),
            "sqliteDatabases": self.sqlite_databases,
            "worstOffenders": [verdict.offender() for verdict in self.worst_offenders()],
        }
