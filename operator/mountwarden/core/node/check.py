"""One pod volume, as a node has it mounted, against the contract its profile declares.

What the agent's `--check` and the operator's compliance share: each option that
differs or that nobody declared, the kernel facts behind findings that no option
comparison shows (see mountwarden.core.node.scan): a superblock shared with a mount
of other options, an nconnect that the server's first mount (or the kernel) fixed,
and how the mount is doing (mountwarden.core.node.activity).
"""

from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from mountwarden.core.findings import CheckResult, Finding, Reason, Severity
from mountwarden.core.node.activity import ProcessSamples, Thresholds, judge
from mountwarden.core.node.kubelet import KubeletPlugin, parse_volume_path
from mountwarden.core.options.compare import OriginHints, check
from mountwarden.core.options.normalize import (
    INHERITED_THROUGH_SUPERBLOCK,
    format_canonical,
    normalize,
)
from mountwarden.core.options.table import OptionValue


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


def check_volume(
    volume: VolumeObservation,
    declared: Mapping[str, OptionValue],
    *,
    required: Iterable[str] = (),
    forbidden: Iterable[str] = (),
    pv_mount_options: Sequence[str] | None = None,
    storage_class: str | None = None,
    thresholds: Thresholds | None = None,
    kernel_release: str | None = None,
) -> CheckResult:
    """Findings for one volume against its contract: options first, then why they may differ.

    ``declared`` is a canonical option dict (a ResolvedPolicy's ``options``); ``pv_mount_options``, the
    PV's spec.mountOptions when known, tells where an option nobody declared probably came from.
    """
    observed = normalize(list(volume.effective_options), observed=True).options
    origin = OriginHints(
        pv_options=normalize(list(pv_mount_options), observed=True).options if pv_mount_options is not None else None,
        storage_class=storage_class, shared_with=tuple(volume.shared_with))
    option_findings = check(declared, observed, required=required, forbidden=forbidden, origin=origin).findings
    return CheckResult(tuple(option_findings) + kernel_findings(volume, option_findings, declared,
                                                                  thresholds=thresholds, kernel_release=kernel_release))


def kernel_findings(
    volume: VolumeObservation,
    option_findings: Iterable[Finding],
    declared: Mapping[str, OptionValue],
    *,
    thresholds: Thresholds | None = None,
    kernel_release: str | None = None,
) -> tuple[Finding, ...]:
    """What the kernel did that no comparison of options shows, and how the mount is doing.

    ``option_findings`` compare ``declared`` (a profile's contract, or what a PersistentVolume asked for) with
    the mount; the ones a shared superblock explains, and an nconnect the server's first mount fixed, become
    findings of their own. The baseline (mountwarden.core.baseline) asks this of volumes no profile governs.
    """
    findings: list[Finding] = []
    observed = normalize(list(volume.effective_options), observed=True).options
    # A shared superblock explains only the options the kernel does not compare when it shares one
    # (kernel lab); any other difference gives a mount a superblock of its own, so the mounts sharing
    # this one asked for the same: the PV or the driver, not the superblock, is to blame.
    drift = [finding for finding in option_findings
             if finding.severity is not Severity.INFO and finding.option in INHERITED_THROUGH_SUPERBLOCK]
    if drift and volume.shared_with:
        findings.append(_superblock_shared(volume, drift))
    if (nconnect := _nconnect_ignored(volume, declared, observed, kernel_release)) is not None:
        findings.append(nconnect)
    if thresholds is not None:
        findings += _activity_findings(volume, thresholds)
    return tuple(findings)


def _activity_findings(volume: VolumeObservation, thresholds: Thresholds) -> list[Finding]:
    """Throughput, transport and stuck-process findings from what the agent sampled (a report's mount)."""
    states: ProcessSamples | None = getattr(volume, "processes", None)
    samples = [(f"pod {getattr(volume, 'pod_uid', None) or '(staging)'}", states)] if states else []
    return judge(getattr(volume, "activity", None), samples, thresholds,
                 server_responding=getattr(volume, "server_responding", None))


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


def _superblock_shared(volume: VolumeObservation, drift: list[Finding]) -> Finding:
    others = tuple(volume.shared_with)
    options = ", ".join(dict.fromkeys(_declared_text(finding) for finding in drift))
    return Finding(
        reason=Reason.SUPERBLOCK_SHARED,
        severity=Severity.worst(finding.severity for finding in drift),
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


def _nconnect_ignored(volume: VolumeObservation, declared: Mapping[str, OptionValue],
                      observed: Mapping[str, OptionValue], kernel_release: str | None = None) -> Finding | None:
    """nconnect declared, fewer transports opened (one xprt: line each in mountstats): who fixed the number.

    Judged by the transports the kernel opened, never by its version string: enterprise kernels carry
    nconnect backported (RHEL 8's 4.18); the release is only named in the message. A mount made without
    nconnect at all is an OptionMismatch, not this.
    """
    wanted = declared.get("nconnect")
    connections = volume.connections
    if not isinstance(wanted, int) or wanted < 2 or connections is None or connections >= wanted:
        return None
    server = volume.server or "the server"
    if volume.server_mounts >= 2:
        others = volume.server_mounts - 1
        return Finding(
            reason=Reason.NCONNECT_IGNORED,
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
            option="nconnect", expected=wanted, actual=connections,
        )
    if connections == 1 and isinstance(observed.get("nconnect"), int) and observed["nconnect"] > 1:
        running = f" (it runs Linux {kernel_release})" if kernel_release else ""
        return Finding(
            reason=Reason.NCONNECT_IGNORED,
            severity=Severity.WARNING,
            message=(f"nconnect={wanted} is declared, the mount table shows nconnect={observed['nconnect']} and this "
                     f"is the only mount of {server} on the node, but the kernel opened one connection (one xprt: "
                     f"line in mountstats): this node's kernel{running} does not do nconnect (Linux 5.3 brought it, "
                     "nfs(5); some older enterprise kernels carry it backported)."),
            remedy="Run the node on a kernel with nconnect (5.3 or later, or a backport), or spread the load over "
                   "mounts of different server addresses.",
            option="nconnect", expected=wanted, actual=connections,
        )
    return None
