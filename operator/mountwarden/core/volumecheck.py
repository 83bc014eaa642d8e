"""One pod volume, as a node has it mounted, against the contract its profile declares.

What the agent's `--check` and the operator's compliance share: each option that
differs, and the two kernel facts behind findings that no option comparison
shows (see mountwarden.core.nodescan): a superblock shared with a mount of other
options, and an nconnect that the server's first mount fixed.
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from mountwarden.core.compare import Finding, check
from mountwarden.core.kubelet import KubeletPlugin, parse_volume_path
from mountwarden.core.options import (
    Severity,
    format_canonical,
    normalize,
)
from mountwarden.core.optiontable import OptionValue


class VolumeObservation(Protocol):
    """What the check needs of a volume: a NodeVolume (the agent), or a report's ReportedMount (the operator)."""

    @property
    def mount_point(self) -> str: ...

    @property
    def superblock(self) -> str: ...

    @property
    def effective_options(self) -> Sequence[str]: ...

    @property
    def shared_with(self) -> Sequence[str]: ...

    @property
    def server(self) -> str | None: ...

    @property
    def connections(self) -> int | None: ...

    @property
    def server_mounts(self) -> int: ...


class VolumeFindingReason(StrEnum):
    OPTION_MISMATCH = "OptionMismatch"  # an option in effect differs from the contract
    SUPERBLOCK_SHARED = "SuperblockShared"  # ... and another mount shares the superblock
    NCONNECT_IGNORED = "NconnectIgnored"  # the server's first mount fixed the connection count


@dataclass(frozen=True, slots=True)
class VolumeFinding:
    reason: VolumeFindingReason
    severity: Severity
    message: str
    remedy: str
    option: str | None = None
    expected: OptionValue | None = None
    actual: OptionValue | None = None
    #: The other mount points involved (sharing the superblock).
    other_mounts: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {
            "reason": str(self.reason),
            "severity": str(self.severity),
            "message": self.message,
            "remedy": self.remedy,
            "option": self.option,
            "expected": self.expected,
            "actual": self.actual,
            "other_mounts": list(self.other_mounts),
        }


@dataclass(frozen=True, slots=True)
class VolumeCheck:
    findings: tuple[VolumeFinding, ...]

    @property
    def compliant(self) -> bool:
        """Compliant means nothing worse than information, as for an option check."""
        return all(finding.severity is Severity.INFO for finding in self.findings)

    def to_dict(self) -> dict:
        return {"compliant": self.compliant, "findings": [finding.to_dict() for finding in self.findings]}


_SEVERITY_RANK = {Severity.INFO: 0, Severity.WARNING: 1, Severity.ERROR: 2}

_REMOUNT = (
    "The mount was made with other options: once the PV's mountOptions (or its StorageClass) carry the "
    "declared ones, restart the pod so that the kubelet mounts the volume again."
)


def check_volume(
    volume: VolumeObservation,
    declared: Mapping[str, OptionValue],
    *,
    required: Iterable[str] = (),
    forbidden: Iterable[str] = (),
) -> VolumeCheck:
    """Findings for one volume against its contract: options first, then why they may differ.

    ``declared`` is a canonical option dict (a ResolvedPolicy's ``options``).
    """
    observed = normalize(list(volume.effective_options), observed=True).options
    option_findings = check(declared, observed, required=required, forbidden=forbidden).findings
    findings = [_option_finding(finding) for finding in option_findings]
    drift = [finding for finding in option_findings if finding.severity is not Severity.INFO]
    if drift and volume.shared_with:
        findings.append(_superblock_shared(volume, drift))
    if (nconnect := _nconnect_ignored(volume, declared)) is not None:
        findings.append(nconnect)
    return VolumeCheck(tuple(findings))


def _option_finding(finding: Finding) -> VolumeFinding:
    return VolumeFinding(
        reason=VolumeFindingReason.OPTION_MISMATCH,
        severity=finding.severity,
        message=finding.message,
        remedy="" if finding.severity is Severity.INFO else _REMOUNT,
        option=finding.option,
        expected=finding.expected,
        actual=finding.actual,
    )


def describe_mount(mount_point: str) -> str:
    """A mount point with whom it belongs to, for messages."""
    kubelet = parse_volume_path(mount_point)
    if kubelet is None:
        return f"{mount_point} (not a pod volume)"
    if kubelet.plugin is KubeletPlugin.CSI_STAGING:
        return f"{mount_point} (staging mount of CSI driver {kubelet.driver or 'unknown'})"
    return f"{mount_point} (pod {kubelet.pod_uid}, volume {kubelet.volume_name})"


def _declared_text(finding: Finding) -> str:
    """What the contract asked for, in mount syntax: vers=4.1, noresvport, hard, not nolock."""
    if finding.expected is None:
        return f"not {finding.option}"  # a forbidden option
    if finding.expected == finding.option:
        return finding.option  # one flag of an exclusive group (hard, soft, softerr)
    return format_canonical(finding.option, finding.expected)


def _superblock_shared(volume: VolumeObservation, drift: list[Finding]) -> VolumeFinding:
    others = tuple(volume.shared_with)
    options = ", ".join(dict.fromkeys(_declared_text(finding) for finding in drift))
    return VolumeFinding(
        reason=VolumeFindingReason.SUPERBLOCK_SHARED,
        severity=max((finding.severity for finding in drift), key=_SEVERITY_RANK.__getitem__),
        message=(
            f"{volume.mount_point} shares superblock {volume.superblock} with "
            f"{'; '.join(describe_mount(other) for other in others)}. A superblock keeps the options of the "
            f"mount that created it, so the declared {options} may never have applied to this volume."
        ),
        remedy=(
            "Restart or move the other consumer(s) off this node so that the superblock goes away with its "
            "last mount, then restart this pod; or declare nosharecache so that this volume gets a "
            "superblock of its own (nfs(5) calls that a data risk: multiple cached copies of the same file on "
            "one client can become out of sync after a local update of one of them)."
        ),
        other_mounts=others,
    )


def _nconnect_ignored(volume: VolumeObservation, declared: Mapping[str, OptionValue]) -> VolumeFinding | None:
    wanted = declared.get("nconnect")
    connections = volume.connections
    if wanted is None or connections is None or connections == wanted or volume.server_mounts < 2:
        return None
    server = volume.server or "the server"
    others = volume.server_mounts - 1
    return VolumeFinding(
        reason=VolumeFindingReason.NCONNECT_IGNORED,
        severity=Severity.WARNING,
        message=(
            f"nconnect={wanted} is declared but the client has {connections} connection(s) to {server}: "
            f"nconnect is fixed by the first mount of a server and {others} other mount(s) on this node use "
            f"{server}, so this mount's nconnect was ignored."
        ),
        remedy=(
            f"Declare the same nconnect for every volume of {server}, or move the other consumers off this "
            "node so that the next mount sets it."
        ),
        option="nconnect",
        expected=wanted,
        actual=connections,
    )
