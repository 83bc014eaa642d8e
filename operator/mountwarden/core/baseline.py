"""The baseline: what a pod volume on network storage is held to when no StorageProfile governs it.

Nobody declared a contract for such a volume, so its contract is the kernel's defaults and the hazards
mountwarden exists for, each found in what its node's report says the kernel has in effect:

- RoundTripOptions: ``sync``, ``actimeo=0`` (or ``acdirmax=0``), ``lookupcache=none`` or ``noac``: every
  stat(), open() or write() a round trip, each metered on EFS; the flags behind the 8-hour import;
- SoftWritableMount: ``soft`` or ``softerr`` on a read-write mount: a slow server becomes lost writes;
- LocalLocksAcrossNodes: ``nolock`` or ``local_lock=posix|all`` on a volume mounted read-write on more than
  one node: each node grants its own locks;
- MissingNoresvport: an EFS mount on a privileged source port, against AWS's recommended options;
- SuperblockShared and NconnectIgnored, against what the PersistentVolume asked for (its mountOptions):
  options the kernel took from another mount's superblock, an nconnect the server's first mount fixed;
- SQLiteOnNFS, and how the mount is doing (ThroughputPlateau, TransportUnhealthy, StuckOnNFS).

Every baseline finding is published under one policy name, ``mountwarden-baseline`` (PolicyReports, the
``mountwarden_findings`` gauge), and posted on its pod as governed findings are.
"""

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from mountwarden.core.findings import Finding, Reason, Severity, Subject
from mountwarden.core.node.activity import Thresholds
from mountwarden.core.node.check import kernel_findings
from mountwarden.core.node.report import ReportedMount, SqliteUse
from mountwarden.core.options.compare import compare
from mountwarden.core.options.effects import EFS_METERING, Cost, cost_phrase, credit_costs, effect
from mountwarden.core.options.normalize import effective_value, normalize
from mountwarden.core.options.table import OptionValue

#: The policy of every baseline finding: the PolicyReport results' policy, the metric's profile label.
BASELINE_POLICY = "mountwarden-baseline"
#: What found them (mountwarden.handlers.findings keeps one list of findings per policy and source).
BASELINE_SOURCE = "baseline"
#: What a published finding says after its volume and node.
WHERE_BASELINE = " (no StorageProfile governs it: the baseline)"

#: The runbook's words for each remedy (docs/runbook.md, "Baseline findings").
ROUND_TRIP_REMEDY = (
    "Give the volume a contract: a StorageProfile whose cache policy fits its consumers (staging: stat() never "
    "stale for one GETATTR each; cached: others' changes up to 10 minutes late, almost no round trips) that adopts "
    "its class (spec.adopt). Or remove the flags from the PersistentVolume's spec.mountOptions and restart its pods."
)
SOFT_REMEDY = (
    "Mount it hard, the kernel default: remove soft (or softerr) from the PersistentVolume's spec.mountOptions, or "
    "adopt its class with a StorageProfile that requires hard, then restart its pods. Keep soft for read-only "
    "mounts."
)
LOCAL_LOCKS_REMEDY = (
    "Let locks reach the server: remove nolock and local_lock from the PersistentVolume's spec.mountOptions (NFSv4 "
    "always sends them; NFSv3 needs rpcbind and statd), or keep every writer on one node; then restart its pods."
)
NORESVPORT_REMEDY = (
    "Add noresvport to the PersistentVolume's spec.mountOptions (the EFS CSI driver's mount helper adds it), or "
    "adopt its class with a StorageProfile on efs.csi.aws.com, whose options include it; then restart its pods."
)
#: Where the import's flags come from, for every message that names them.
THE_INCIDENT = ("sync, actimeo=0 and lookupcache=none made a SQLite import on EFS take 8 hours instead of 10 "
                "minutes (the incident)")


@dataclass(frozen=True, slots=True)
class UngovernedMount:
    """One pod volume on network storage that no StorageProfile governs, as its node's report has it."""

    pod_uid: str
    namespace: str
    pod_name: str
    node: str
    #: The PersistentVolume's name, or the pod's name for an in-line volume.
    volume_name: str
    mount: ReportedMount
    #: What the PersistentVolume asked for (spec.mountOptions); None for an in-line volume.
    pv_mount_options: tuple[str, ...] | None = None
    storage_class: str | None = None
    efs: bool = False
    kernel_release: str | None = None
    #: SQLite databases the node's report found in use on it.
    sqlite: tuple[SqliteUse, ...] = ()

    @property
    def pod(self) -> str:
        return f"{self.namespace}/{self.pod_name}"

    @property
    def persistent(self) -> bool:
        return self.pv_mount_options is not None

    @property
    def options(self) -> dict[str, OptionValue]:
        """The options in effect, as the kernel printed them (defaults for what it did not print)."""
        return normalize(list(self.mount.effective_options), observed=True).options

    @property
    def writable(self) -> bool:
        return not effective_value(self.options, "ro")

    @property
    def local_locks(self) -> str | None:
        """The options that keep POSIX locks on this node, as the kernel shows them; None when locks reach the server."""
        options = self.options
        held = [text for text, applies in (("nolock", effective_value(options, "lock") is False),
                                           (f"local_lock={options.get('local_lock')}",
                                            options.get("local_lock") in ("posix", "all"))) if applies]
        return ",".join(held) or None


@dataclass(frozen=True, slots=True)
class BaselineVerdict:
    mount: UngovernedMount
    findings: tuple[Finding, ...]

    @property
    def meets_baseline(self) -> bool:
        return not any(finding.counts for finding in self.findings)

    def published(self) -> list[Finding]:
        """Its findings as they go out: each on its pod, under the baseline policy, said with where it is."""
        mount = self.mount
        pod = Subject("Pod", mount.pod_name, mount.namespace, mount.pod_uid)
        where = f"{mount.volume_name} on {mount.node}{WHERE_BASELINE}"
        return [finding.with_message(f"{where}: {finding.message} {finding.remedy}".strip())
                .about(pod, profile=BASELINE_POLICY, node=mount.node, volume=mount.volume_name,
                       option=finding.option or "")
                for finding in self.findings if finding.counts]


def round_trip_options(options: Mapping[str, OptionValue], *, efs: bool) -> Finding | None:
    """The import's flags in effect: every stat(), open() or write() a round trip (on EFS, each metered)."""
    costs = credit_costs(options)
    if not costs:
        return None
    flags = [flag for flag, _ in costs]
    noac = "sync" in flags and "actimeo=0" in flags
    cost = Cost.NONE
    for _, part in costs:
        cost |= part
    metered = f", each request {EFS_METERING}" if efs else ""
    said = ", ".join(flags) + (" (noac sets sync and actimeo=0)" if noac else "")
    return Finding(
        Reason.ROUND_TRIP_OPTIONS, Severity.WARNING,
        f"{said} {'is' if len(flags) == 1 else 'are'} in effect on this mount (the node's mount table), which makes "
        f"{cost_phrase(cost)}{metered}. {'It is one of' if len(flags) == 1 else 'They are'} the flags behind the "
        f"8-hour import: {THE_INCIDENT}.",
        ROUND_TRIP_REMEDY, option=",".join(flags), evidence={"options": ",".join(flags)})


def soft_writable(options: Mapping[str, OptionValue]) -> Finding | None:
    flag = next((name for name in ("soft", "softerr") if options.get(name)), None)
    if flag is None or effective_value(options, "ro"):
        return None
    timeo, retrans = effective_value(options, "timeo"), effective_value(options, "retrans")
    soft = effect(flag, True)
    assert soft is not None
    return Finding(
        Reason.SOFT_WRITABLE_MOUNT, Severity.ERROR,
        f"{flag} is in effect on a read-write mount (timeo={timeo}, retrans={retrans}): {soft.text}",
        SOFT_REMEDY, option=flag, expected="hard", actual=flag)


def local_locks_across_nodes(mount: UngovernedMount, writer_nodes: Iterable[str]) -> Finding | None:
    held = mount.local_locks
    nodes = sorted(set(writer_nodes) | {mount.node})
    if held is None or not mount.writable or len(nodes) < 2:
        return None
    return Finding(
        Reason.LOCAL_LOCKS_ACROSS_NODES, Severity.ERROR,
        f"{held} keeps POSIX locks on this node, and {mount.volume_name} is mounted read-write on {len(nodes)} "
        f"nodes ({', '.join(nodes)}): a lock taken on one node is not seen on the others, so two writers can hold "
        "it at once and corrupt what it protects, a SQLite database first (kernel lab: a second NFSv3 client with "
        "nolock is granted the same lock).",
        LOCAL_LOCKS_REMEDY, option=held, evidence={"nodes": ",".join(nodes)})


def missing_noresvport(options: Mapping[str, OptionValue], *, efs: bool) -> Finding | None:
    if not efs or effective_value(options, "resvport") is False:
        return None
    return Finding(
        Reason.MISSING_NORESVPORT, Severity.WARNING,
        "this EFS mount uses a privileged source port (resvport, the kernel default). AWS mounts EFS with "
        "noresvport: the client then takes a new non-privileged source port when it reconnects, which keeps the "
        "file system available after a reconnection or a network recovery (EFS User Guide, 'Mount settings used "
        "by EFS mount helper').",
        NORESVPORT_REMEDY, option="noresvport", expected=False, actual=True)


def judge(mount: UngovernedMount, *, writer_nodes: Iterable[str] = (),
          thresholds: Thresholds | None = None) -> BaselineVerdict:
    """The baseline's findings on one pod volume; ``writer_nodes``: the nodes where its PV is mounted read-write."""
    options = mount.options
    findings = [found for found in (round_trip_options(options, efs=mount.efs), soft_writable(options),
                                    local_locks_across_nodes(mount, writer_nodes),
                                    missing_noresvport(options, efs=mount.efs)) if found is not None]
    # What the PV asked for is what the kernel should have done: a difference it took from a shared
    # superblock, or an nconnect the server's first mount fixed, is the kernel's doing.
    asked = normalize(list(mount.pv_mount_options or ()), observed=True).options
    findings += kernel_findings(mount.mount, compare(asked, options), asked,
                                thresholds=thresholds or Thresholds(), kernel_release=mount.kernel_release)
    findings += [use.finding() for use in mount.sqlite]
    return BaselineVerdict(mount, tuple(findings))


def audit(mounts: Sequence[UngovernedMount], thresholds: Thresholds | None = None) -> list[BaselineVerdict]:
    """Every ungoverned pod volume against the baseline; a PV's read-write mounts are counted across the nodes."""
    writers: dict[str, set[str]] = defaultdict(set)
    for mount in mounts:
        if mount.persistent and mount.writable:
            writers[mount.volume_name].add(mount.node)
    return [judge(mount, writer_nodes=writers[mount.volume_name] if mount.persistent else (), thresholds=thresholds)
            for mount in mounts]
