"""One finding, whatever found it: a reason, a severity on one scale, a message, its remedy, and its evidence.

Every check of the core emits this type: a mount's options against its contract
(core/options/compare.py, core/node/check.py), how a mount is doing
(core/node/activity.py), SQLite on a network mount (core/sqlite.py), a file system's
burst credits, an admission review (core/admission.py). Whoever shows findings to a
person only renders them: status and pod Events (handlers/findings.py),
PolicyReports (core/policyreport.py), metrics (handlers/metrics.py), the CLI.

The reason is the word every door uses for the same thing: the Event's reason (or the
Event reason it maps to), the PolicyReport's rule, the metric's label and the runbook's
heading (docs/runbook.md).
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

#: A mount option's value: a flag's truth, a number, a word (the option table types each option's values).
OptionValue = bool | int | str


class Severity(StrEnum):
    """How bad a finding is, worst first. At admission an error refuses the request; a warning is shown."""

    CRITICAL = "critical"  # data at risk now: SQLite in WAL mode across hosts
    ERROR = "error"  # the contract does not hold where consistency or durability depend on it
    WARNING = "warning"  # it costs or risks something (performance, credits, a rollout's progress)
    INFO = "info"  # worth knowing; never counts against compliance

    @property
    def rank(self) -> int:
        """Higher is worse: info 0, warning 1, error 2, critical 3."""
        return _RANK[self]

    @staticmethod
    def worst(severities: Iterable["Severity"]) -> "Severity | None":
        return max(severities, key=lambda severity: severity.rank, default=None)


_RANK = {Severity.INFO: 0, Severity.WARNING: 1, Severity.ERROR: 2, Severity.CRITICAL: 3}


class Reason(StrEnum):
    # A pod volume's options against its contract.
    OPTION_MISMATCH = "OptionMismatch"  # an option in effect differs from the contract
    UNDECLARED_OPTION = "UndeclaredOption"  # an option nobody declared changes what the mount does
    SUPERBLOCK_SHARED = "SuperblockShared"  # ... and another mount shares the superblock
    NCONNECT_IGNORED = "NconnectIgnored"  # the server's first mount fixed the connection count (or the kernel)
    # How a mount is doing: never drift, whatever its options.
    THROUGHPUT_PLATEAU = "ThroughputPlateau"  # one connection near the per-flow cap, requests queueing
    TRANSPORT_UNHEALTHY = "TransportUnhealthy"  # retransmissions, major timeouts, reconnects
    STUCK_ON_NFS = "StuckOnNFS"  # the pod's processes in uninterruptible sleep in most samples
    # How a mount broke (core/node/failures.py): found on the node, each needing a person (docs/runbook.md).
    STALE_FILE_HANDLE = "StaleFileHandle"  # the server answered ESTALE: it no longer knows the mount's root
    SERVER_NOT_RESPONDING = "ServerNotResponding"  # a server the node's mounts wait on (hard) or fail on (soft)
    STUCK_TERMINATING = "StuckTerminating"  # a deleted pod whose NFS volume cannot be unmounted
    ORPHANED_MOUNT = "OrphanedMount"  # a pod volume still mounted whose pod no longer exists
    MOUNT_HELPER_STUCK = "MountHelperStuck"  # mount.nfs or umount.nfs alive far past its timeouts
    TLS_TUNNEL_DOWN = "TLSTunnelDown"  # a mount through efs-utils' local TLS tunnel, with nothing listening
    # What is stored on it.
    SQLITE_ON_NFS = "SQLiteOnNFS"
    # A pod that talks NFS with no kernel mount: beyond the audit.
    USERSPACE_NFS_CLIENT = "UserspaceNFSClient"
    # A file system's burst credits.
    CREDITS_DRAINING = "CreditsDraining"
    CREDITS_EMPTY = "CreditsEmpty"
    CREDITS_TRAP = "CreditsTrap"
    # Where a volume's bytes go: a mount target of another zone than the node's.
    CROSS_AZ_MOUNT = "CrossAZMount"
    # What admission tells whoever creates a PVC or changes a StorageProfile (docs/runbook.md, "Admission warnings").
    SUPERSEDED_CLASS = "SupersededClass"
    PROFILE_MISMATCH = "ProfileMismatch"
    UNGOVERNED_NETWORK_CLASS = "UngovernedNetworkClass"
    SQLITE_CLAIM_ON_NFS = "SQLiteClaimOnNFS"
    STRICT_ON_BURSTING = "StrictOnBursting"
    UNGOVERNED_DEFAULT = "UngovernedDefault"
    INVALID_SPEC = "InvalidSpec"
    OPTION_WARNING = "OptionWarning"
    OVERLAPPING_CONSUMERS = "OverlappingConsumers"
    NEW_VERSION = "NewVersion"
    FOREIGN_REPORT_WRITE = "ForeignReportWrite"
    # The baseline: what a pod volume no StorageProfile governs is held to (core/baseline.py), beside the
    # reasons above that apply to any mount (SQLiteOnNFS, SuperblockShared, NconnectIgnored, how it is doing).
    ROUND_TRIP_OPTIONS = "RoundTripOptions"  # sync, actimeo=0, lookupcache=none, noac: the import's flags
    SOFT_WRITABLE_MOUNT = "SoftWritableMount"  # soft or softerr on a read-write mount
    LOCAL_LOCKS_ACROSS_NODES = "LocalLocksAcrossNodes"  # locks kept on each node, writers on several
    MISSING_NORESVPORT = "MissingNoresvport"  # an EFS mount on a privileged source port
    # A StorageProfile that cannot take over a class or volume it names in spec.adopt (core/adoption.py).
    ADOPTION_REFUSED = "AdoptionRefused"


#: How a mount is doing, not what it was mounted with: said whatever its options, never counted as drift.
HEALTH_REASONS = frozenset({Reason.THROUGHPUT_PLATEAU, Reason.TRANSPORT_UNHEALTHY, Reason.STUCK_ON_NFS})
#: How a mount broke: said on the pod or the node whatever governs the volume, never counted as drift.
FAILURE_REASONS = frozenset({Reason.STALE_FILE_HANDLE, Reason.SERVER_NOT_RESPONDING, Reason.STUCK_TERMINATING,
                             Reason.ORPHANED_MOUNT, Reason.MOUNT_HELPER_STUCK, Reason.TLS_TUNNEL_DOWN})


@dataclass(frozen=True, slots=True)
class Subject:
    """The object a finding is about: a Pod, a StorageProfile, a PersistentVolumeClaim."""

    kind: str
    name: str
    namespace: str | None = None
    uid: str | None = None
    api_version: str = "v1"

    def reference(self) -> dict:
        ref = {"apiVersion": self.api_version, "kind": self.kind, "name": self.name, "namespace": self.namespace,
               "uid": self.uid}
        return {key: value for key, value in ref.items() if value}


@dataclass(frozen=True, slots=True)
class Finding:
    reason: Reason
    severity: Severity
    message: str
    remedy: str = ""
    #: The object it is about; None until whoever found it knows (a check of one mount knows no pod).
    subject: Subject | None = None
    #: The StorageProfile whose contract it concerns, when one does.
    profile: str | None = None
    #: Where and on what it was found, as policy UIs show it: node, volume, path, mode, fileSystemId.
    evidence: Mapping[str, str] = field(default_factory=dict)
    #: For a finding on one option: the option, what the contract implies, what is in effect.
    option: str | None = None
    expected: OptionValue | None = None
    actual: OptionValue | None = None
    #: Other mount points involved (sharing the superblock).
    other_mounts: tuple[str, ...] = ()

    @property
    def undeclared(self) -> bool:
        """An option the contract does not name, held to the kernel default."""
        return self.reason is Reason.UNDECLARED_OPTION

    @property
    def is_health(self) -> bool:
        return self.reason in HEALTH_REASONS

    @property
    def counts(self) -> bool:
        """Whether it counts against compliance: anything worse than information."""
        return self.severity is not Severity.INFO

    def about(self, subject: Subject | None = None, *, profile: str | None = None, **evidence: str) -> "Finding":
        """The same finding, now known to be about ``subject`` (and ``profile``), with more evidence."""
        return replace(self, subject=subject or self.subject, profile=profile or self.profile,
                       evidence={**self.evidence, **{k: v for k, v in evidence.items() if v}})

    def with_message(self, message: str) -> "Finding":
        """The same finding, said with the context of where it was shown (its volume, node, profile)."""
        return replace(self, message=message)

    @property
    def identity(self) -> tuple:
        """Stays the same while the finding lasts (its message may change: a credit forecast, a count)."""
        subject = self.subject
        return (self.profile, self.reason, subject.kind if subject else None,
                subject.namespace if subject else None, (subject.uid or subject.name) if subject else None,
                self.evidence.get("volume", ""), self.option or self.evidence.get("option", ""))

    def to_dict(self) -> dict[str, Any]:
        """The CLI's JSON of a finding (every key always present)."""
        return {
            "reason": str(self.reason),
            "severity": str(self.severity),
            "message": self.message,
            "remedy": self.remedy,
            "option": self.option,
            "expected": self.expected,
            "actual": self.actual,
            "undeclared": self.undeclared,
            "other_mounts": list(self.other_mounts),
            "evidence": dict(self.evidence),
        }


@dataclass(frozen=True, slots=True)
class CheckResult:
    """The findings of one check (of options, of a volume)."""

    findings: tuple[Finding, ...]

    @property
    def compliant(self) -> bool:
        """Compliant means nothing worse than information: no error and no warning."""
        return not any(finding.counts for finding in self.findings)

    def to_dict(self) -> dict:
        return {"compliant": self.compliant, "findings": [finding.to_dict() for finding in self.findings]}
