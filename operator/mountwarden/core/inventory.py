"""The inventory: every StorageClass and PersistentVolume on network storage, by file system, profile or none.

For each file system (an EFS file system, or an NFS server: mountwarden.core.networkstorage) it says
which classes and volumes live there, their claims, the pods using them and their nodes, which
StorageProfile governs each (its lineage, or one that adopted it) or none, and the options three ways:
in the class, in the PV, and in effect on the nodes (the NodeMountReports). Where those disagree it
says so (PVs of one class carrying different options, a PV whose options its class no longer has, a
node whose mount differs from what its PV asks for). Every pod volume is judged: against its profile's
contract (mountwarden.core.compliance), or, when none governs it, against the baseline
(mountwarden.core.baseline).

``mountwarden inventory`` builds it from the objects it lists; the operator from its indexes, into one
NetworkFileSystem object per file system. Both feed the same function: ``take_inventory``.
"""

from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from mountwarden.core.admission import is_network_provisioner
from mountwarden.core.adoption import Adopter
from mountwarden.core.baseline import BASELINE_POLICY, BaselineVerdict, UngovernedMount, audit
from mountwarden.core.compliance import Consumer, Contract, Verdict, VolumeState, assess
from mountwarden.core.findings import Finding, Severity
from mountwarden.core.networkstorage import NetworkVolume, class_file_system, efs_file_system_of, object_name
from mountwarden.core.node.activity import Thresholds
from mountwarden.core.node.report import NodeReport, ReportedMount
from mountwarden.core.options.compare import compare, values_said
from mountwarden.core.options.normalize import normalize, with_kernel_defaults
from mountwarden.core.options.presets import EFS_PROVISIONER
from mountwarden.core.options.table import OptionValue
from mountwarden.core.policyreport import compliance_findings
from mountwarden.core.storageclass import ClassEntry

#: What a volume's contract is when no profile governs it.
BASELINE = "baseline"


class PodLike(Protocol):
    """A pod as the inventory needs it (mountwarden.adapters.pods.PodPlacement is one)."""

    @property
    def uid(self) -> str: ...

    @property
    def namespace(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def node(self) -> str | None: ...

    @property
    def claims(self) -> tuple[str, ...]: ...


def _options(text: Sequence[str]) -> dict[str, OptionValue]:
    return normalize(list(text), observed=True).options


def same_options(first: Sequence[str], second: Sequence[str]) -> bool:
    """Whether two option lists ask for the same, once normalized (order, spelling, defaults said or not)."""
    return with_kernel_defaults(_options(first)) == with_kernel_defaults(_options(second))


def _said(options: Sequence[str]) -> str:
    return ",".join(normalize(list(options), observed=True).mount_options) or "(none)"


@dataclass(frozen=True, slots=True)  # one per pod volume, every pass
class PodVolume:
    """One pod using one volume: where, with what in effect, and its verdict."""

    pod: str
    uid: str
    node: str | None
    #: The profile whose contract judged it, or "baseline".
    contract: str
    state: VolumeState
    reason: str
    effective_options: tuple[str, ...] | None = None
    findings: tuple[Finding, ...] = ()
    #: The verdict said in a sentence (why it is unknown: no report, not mounted); for `kubectl mountwarden why`.
    message: str = ""

    def to_dict(self) -> dict:
        return {"pod": self.pod, "uid": self.uid, "node": self.node, "contract": self.contract,
                "state": str(self.state), "reason": self.reason,
                "effectiveOptions": list(self.effective_options) if self.effective_options is not None else None,
                "findings": [str(finding.reason) for finding in self.findings if finding.counts]}


@dataclass(slots=True)
class VolumeView:
    volume: NetworkVolume
    class_options: tuple[str, ...] | None
    governed_by: str | None
    adoption: dict | None
    pods: list[PodVolume] = field(default_factory=list)

    def to_dict(self) -> dict:
        volume = self.volume
        return {
            "name": volume.name, "storageClassName": volume.storage_class,
            "claim": "/".join(volume.claim) if volume.claim else None,
            "source": volume.source, "server": volume.server, "path": volume.path,
            "governedBy": self.governed_by, "adoption": self.adoption,
            "options": {"storageClass": list(self.class_options) if self.class_options is not None else None,
                        "persistentVolume": list(volume.mount_options)},
            "nodes": sorted({pod.node for pod in self.pods if pod.node}),
            "pods": [pod.to_dict() for pod in self.pods],
        }


@dataclass
class ClassView:
    entry: ClassEntry
    #: The profile whose spec.adopt names it and has not adopted it yet.
    adoption_pending_by: str | None = None
    volumes: int = 0

    def to_dict(self) -> dict:
        cls = self.entry
        return {"name": cls.name, "provisioner": cls.provisioner, "governedBy": cls.profile,
                "adoptedBy": cls.adopted_by, "adoptionPendingBy": self.adoption_pending_by,
                "default": cls.is_default, "mountOptions": list(cls.mount_options), "volumes": self.volumes}


@dataclass
class InlineVolume:
    """A pod's in-line NFS volume (no PersistentVolume): judged by the baseline."""

    volume_name: str
    server: str | None
    pod: PodVolume

    def to_dict(self) -> dict:
        return {"volumeName": self.volume_name, "server": self.server, **self.pod.to_dict()}


@dataclass
class FileSystemView:
    name: str
    efs: bool
    servers: set[str] = field(default_factory=set)
    classes: dict[str, ClassView] = field(default_factory=dict)
    volumes: list[VolumeView] = field(default_factory=list)
    inline: list[InlineVolume] = field(default_factory=list)
    disagreements: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    @property
    def object_name(self) -> str:
        return object_name(self.name)

    @property
    def pod_volumes(self) -> list[PodVolume]:
        return [pod for volume in self.volumes for pod in volume.pods] + [inline.pod for inline in self.inline]

    def summary(self) -> dict:
        pods = self.pod_volumes
        severities = defaultdict(int)
        for finding in self.findings:
            severities[str(finding.severity)] += 1
        return {
            "classes": len(self.classes), "volumes": len(self.volumes), "inlineVolumes": len(self.inline),
            "claims": len({volume.volume.claim for volume in self.volumes if volume.volume.claim}),
            "pods": len({pod.uid for pod in pods}), "nodes": len({pod.node for pod in pods if pod.node}),
            "governed": sum(volume.governed_by is not None for volume in self.volumes),
            "ungoverned": sum(volume.governed_by is None for volume in self.volumes) + len(self.inline),
            "adoptionPending": sum(bool(volume.adoption and volume.adoption["state"] == "Pending")
                                   for volume in self.volumes),
            "podVolumes": {str(state): sum(pod.state is state for pod in pods) for state in VolumeState},
            "findings": sum(finding.counts for finding in self.findings),
            "findingsBySeverity": {str(s): severities.get(str(s), 0) for s in (Severity.CRITICAL, Severity.ERROR,
                                                                                Severity.WARNING)},
            "disagreements": len(self.disagreements),
        }

    def to_dict(self) -> dict:
        return {**self.head_dict(), "volumes": list(self.volume_dicts())}

    def head_dict(self) -> dict:
        """Everything ``to_dict`` says but the volumes (``volume_dicts``), in the same order of keys."""
        return {
            "name": self.name, "objectName": self.object_name, "kind": "efs" if self.efs else "nfs",
            "servers": sorted(self.servers), "summary": self.summary(),
            "classes": [cls.to_dict() for cls in sorted(self.classes.values(), key=lambda c: c.entry.name)],
            "volumes": [],
            "inlineVolumes": [inline.to_dict() for inline in self.inline],
            "disagreements": list(self.disagreements),
            "findings": [finding_dict(finding) for finding in self.findings],
        }

    def volume_dicts(self) -> Iterator[dict]:
        """Each volume's dict, made as it is asked for: one file system's volumes as dicts at once are most of a
        pass's memory at scale (13 MiB at 20,000 pods), and its NetworkFileSystem keeps at most 1 MB of them."""
        return (volume.to_dict() for volume in self.volumes)


def finding_dict(finding: Finding) -> dict:
    """A finding as the inventory lists it: what, where (pod, node, volume), under which contract."""
    subject = finding.subject
    return {"reason": str(finding.reason), "severity": str(finding.severity), "policy": finding.profile,
            "pod": f"{subject.namespace}/{subject.name}" if subject and subject.namespace else None,
            "node": finding.evidence.get("node"), "volume": finding.evidence.get("volume"),
            "option": finding.option, "message": finding.message}


@dataclass
class Inventory:
    file_systems: list[FileSystemView]
    notes: list[str]
    checked_at: datetime

    @property
    def baseline_findings(self) -> list[Finding]:
        return [f for fs in self.file_systems for f in fs.findings if f.profile == BASELINE_POLICY]

    def to_dict(self) -> dict:
        totals: dict[str, int] = defaultdict(int)
        for fs in self.file_systems:
            for key, value in fs.summary().items():
                if isinstance(value, int):
                    totals[key] += value
        return {"checkedAt": self.checked_at.strftime("%Y-%m-%dT%H:%M:%SZ"), "fileSystems": len(self.file_systems),
                "summary": dict(totals), "notes": list(self.notes),
                "items": [fs.to_dict() for fs in self.file_systems]}


@dataclass(frozen=True)
class ClusterFacts:
    """Everything the inventory reads, from the operator's indexes or from the objects the CLI listed."""

    classes: Iterable[ClassEntry]
    volumes: Iterable[NetworkVolume]
    pods_of_claim: Callable[[str, str], Sequence[PodLike]]
    pod_of_uid: Callable[[str], PodLike | None]
    #: Each node's report, believed only about its own pods (mountwarden.core.node.report.of_own_pods).
    reports: Mapping[str, NodeReport]
    contracts: Mapping[str, Contract]
    adopters: Iterable[Adopter] = ()
    #: A PV that is not known as network storage but whose mount a report shows (another CSI driver's), by name.
    reported_volume: Callable[[str], NetworkVolume | None] = lambda name: None
    network_provisioners: Collection[str] = ()


def _placed(facts: ClusterFacts, volumes: dict[str, NetworkVolume]) -> tuple[
        dict[str, list[tuple[str, ReportedMount]]], list[tuple[str, ReportedMount, PodLike]]]:
    """Each report's pod mounts: of a PV (the kubelet names the directory after the PV; ``volumes`` gains those of
    other CSI drivers a report shows as NFS), or in-line."""
    mounts_of: dict[str, list[tuple[str, ReportedMount]]] = defaultdict(list)
    inline: list[tuple[str, ReportedMount, PodLike]] = []
    for node, report in sorted(facts.reports.items()):
        for mount in report.mounts:
            pod = facts.pod_of_uid(mount.pod_uid) if mount.pod_uid else None
            if pod is None:
                continue  # a staging mount, or a pod gone
            volume = volumes.get(mount.volume_name)
            if volume is None and (found := facts.reported_volume(mount.volume_name)) is not None:
                volume = volumes[found.name] = found
            if volume is not None and volume.claim and volume.claim[0] == pod.namespace \
                    and volume.claim[1] in pod.claims:
                mounts_of[volume.name].append((node, mount))
            else:
                inline.append((node, mount, pod))
    return mounts_of, inline


def _ungoverned(pod: PodLike, node: str, volume_name: str, mount: ReportedMount, report: NodeReport,
                volume: NetworkVolume | None, *, efs: bool) -> UngovernedMount:
    return UngovernedMount(
        pod.uid, pod.namespace, pod.name, node, volume_name, mount, volume.mount_options if volume else None,
        (volume.storage_class or None) if volume else None, efs=efs, kernel_release=report.kernel_release,
        sqlite=tuple(use for use in report.sqlite if use.pod_uid == pod.uid and use.volume_name == volume_name))


class _FileSystems(dict):
    """File system name -> its view, made on first use."""

    def of(self, name: str, efs: bool) -> FileSystemView:
        found = self.setdefault(name, FileSystemView(name, efs))
        found.efs = found.efs or efs
        return found


def take_inventory(facts: ClusterFacts, *, now: datetime, stale_after: timedelta, baseline: bool = True,
                   thresholds: Thresholds | None = None) -> Inventory:
    """Every network volume and class by file system, each pod volume judged (a profile's contract, or the
    baseline when ``baseline`` is on)."""
    classes = {cls.name: cls for cls in facts.classes}
    volumes = {volume.name: volume for volume in facts.volumes}
    adopters = sorted(facts.adopters, key=lambda a: (a.created_at, a.profile))
    mounts_of, inline = _placed(facts, volumes)
    notes = [] if facts.reports else [
        "no NodeMountReport: what is in effect on the nodes is unknown (is the mountwarden agent running?); "
        "classes and volumes are listed from their objects"]

    def governor(volume: NetworkVolume) -> str | None:
        cls = classes.get(volume.storage_class)
        return next((p for p in ((cls.profile if cls else None), volume.adopted_by) if p and p in facts.contracts),
                    None)

    file_systems = _FileSystems()
    # Volumes, each under its file system, with its pods: a governed one's judged by its profile now, the others
    # by the baseline below, all at once (a PV's writers are counted across the nodes).
    # Each volume's view and the file system it is filed under, while the inventory is taken. Not a field of the
    # view: a view pointing back at its file system made every inventory a reference cycle, which reference counting
    # cannot free (the scale bench's census at 20,000 pods found 80,000 pod volumes alive).
    views: dict[str, tuple[VolumeView, FileSystemView]] = {}
    ungoverned: list[UngovernedMount] = []
    governed: list[tuple[FileSystemView, str, Verdict]] = []
    for name in sorted(volumes):
        volume, mounts = volumes[name], mounts_of.get(name, [])
        servers = {mount.server for _, mount in mounts if mount.server}
        cls = classes.get(volume.storage_class)
        key = (volume.file_system or (cls and class_file_system(cls.provisioner, cls.parameters))
               or next((efs_file_system_of(s) or s for s in sorted(servers)), None) or volume.source)
        efs = volume.efs or bool(efs_file_system_of(key)) or (cls is not None and cls.provisioner == EFS_PROVISIONER)
        fs = file_systems.of(key, efs)
        fs.servers |= servers | ({volume.server} if volume.server else set())
        governed_by = governor(volume)
        view = VolumeView(volume, cls.mount_options if cls else None, governed_by, _adoption(volume, adopters))
        views[name] = (view, fs)
        fs.volumes.append(view)
        if cls is not None:
            fs.classes.setdefault(cls.name, ClassView(cls)).volumes += 1
        by_pod = {mount.pod_uid: (node, mount) for node, mount in mounts}
        for pod in sorted(facts.pods_of_claim(*volume.claim) if volume.claim else [], key=lambda p: (p.namespace,
                                                                                                      p.name)):
            placed = by_pod.get(pod.uid)
            if governed_by is not None:
                consumer = Consumer(pod.uid, pod.namespace, pod.name, pod.node, name, volume.mount_options,
                                    volume.storage_class or None)
                verdict = assess(consumer, facts.contracts[governed_by],
                                 {pod.node: facts.reports[pod.node]} if pod.node in facts.reports else {},
                                 now=now, stale_after=stale_after)
                view.pods.append(PodVolume(f"{pod.namespace}/{pod.name}", pod.uid, pod.node, governed_by,
                                           verdict.state, verdict.reason,
                                           placed[1].effective_options if placed else None, verdict.findings,
                                           verdict.message))
                governed.append((fs, governed_by, verdict))
            elif placed is not None:
                node, mount = placed
                ungoverned.append(_ungoverned(pod, node, name, mount, facts.reports[node], volume, efs=efs))
            else:
                reason, message = _unseen(pod, facts.reports)
                view.pods.append(PodVolume(f"{pod.namespace}/{pod.name}", pod.uid, pod.node, BASELINE,
                                           VolumeState.UNKNOWN, reason, message=message))
    ungoverned += [_ungoverned(pod, node, mount.volume_name, mount, facts.reports[node], None,
                               efs=bool(efs_file_system_of(mount.server))) for node, mount, pod in inline]

    # Classes on network storage that no volume of theirs showed, each under the file system it names.
    listed = {name for fs in file_systems.values() for name in fs.classes}
    for cls in classes.values():
        if cls.name in listed or not (is_network_provisioner(cls.provisioner, facts.network_provisioners)
                                      or cls.profile):
            continue
        key = class_file_system(cls.provisioner, cls.parameters) or cls.provisioner
        fs = file_systems.of(key, cls.provisioner == EFS_PROVISIONER or bool(efs_file_system_of(key)))
        fs.classes[cls.name] = ClassView(cls)
    for fs in file_systems.values():
        for view in fs.classes.values():
            view.adoption_pending_by = next((a.profile for a in adopters if view.entry.name in a.storage_class_names
                                             and view.entry.adopted_by != a.profile), None)

    for verdict in audit(ungoverned, thresholds) if baseline else []:
        _file_baseline(verdict, verdict.findings, views, file_systems)
    if not baseline:
        for mount in ungoverned:
            _file_baseline(None, (), views, file_systems, mount)
    for fs, profile, verdict in governed:
        fs.findings += compliance_findings(profile, [verdict])
    for fs in file_systems.values():
        for view in fs.volumes:
            view.pods.sort(key=lambda p: p.pod)
        fs.disagreements = _disagreements(fs, classes, mounts_of)
    return Inventory(sorted(file_systems.values(), key=lambda fs: fs.name), notes, now)


def _file_baseline(verdict: BaselineVerdict | None, findings: Sequence[Finding],
                   views: Mapping[str, tuple[VolumeView, FileSystemView]],
                   file_systems: _FileSystems, mount: UngovernedMount | None = None) -> None:
    """One ungoverned pod volume's verdict, under its volume (or, in-line, its server), its findings under its file
    system."""
    mount = verdict.mount if verdict is not None else mount
    assert mount is not None
    counting = [f for f in findings if f.counts]
    state = VolumeState.DRIFTED if counting else VolumeState.COMPLIANT
    reason = str(counting[0].reason) if counting else ("MeetsBaseline" if verdict is not None else "BaselineOff")
    message = counting[0].message if counting else (f"{mount.pod} mounts {mount.volume_name} within the baseline"
                                                     if verdict is not None else "the baseline is off")
    pod_volume = PodVolume(mount.pod, mount.pod_uid, mount.node, BASELINE, state, reason,
                           mount.mount.effective_options, tuple(findings), message)
    if mount.persistent:
        view, fs = views[mount.volume_name]
        view.pods.append(pod_volume)
    else:
        fs = file_systems.of(efs_file_system_of(mount.mount.server) or mount.mount.server or "unknown", mount.efs)
        if mount.mount.server:
            fs.servers.add(mount.mount.server)
        fs.inline.append(InlineVolume(mount.volume_name, mount.mount.server, pod_volume))
    if verdict is not None:
        fs.findings += verdict.published()


def _unseen(pod: PodLike, reports: Mapping[str, NodeReport]) -> tuple[str, str]:
    """Why an ungoverned pod volume has no verdict: its reason, and the same in a sentence."""
    if pod.node is None:
        return "NotScheduled", f"{pod.namespace}/{pod.name} is not on a node yet"
    if pod.node in reports:
        return "NotMounted", (f"the report of node {pod.node} shows no mount of it for {pod.namespace}/{pod.name} "
                              "(not mounted yet, or not a network filesystem)")
    return "ReportMissing", f"no NodeMountReport for node {pod.node}: is the mountwarden agent running there?"


def _adoption(volume: NetworkVolume, adopters: Sequence[Adopter]) -> dict | None:
    if volume.adopted_by:
        return {"profile": volume.adopted_by, "state": "Adopted"}
    pending = next((a.profile for a in sorted(adopters, key=lambda a: (a.created_at, a.profile))
                    if volume.name in a.listed), None)
    return {"profile": pending, "state": "Pending"} if pending else None


def _shown(pairs: Iterable[tuple[str, str]], left: str, right: str) -> str:
    return ", ".join(f"{right} {b} where {left} {a}" for a, b in pairs)


def _disagreements(fs: FileSystemView, classes: Mapping[str, ClassEntry],
                   mounts_of: Mapping[str, list[tuple[str, ReportedMount]]]) -> list[str]:
    """Where the class, the PV and the node's mount say different things, each naming the objects."""
    found = []
    by_class: dict[str, dict[tuple, list[str]]] = defaultdict(lambda: defaultdict(list))
    for view in fs.volumes:
        volume = view.volume
        if volume.storage_class:
            by_class[volume.storage_class][_said(volume.mount_options)].append(volume.name)
    for name, variants in sorted(by_class.items()):
        if len(variants) > 1:
            said = "; ".join(f"{options}: {', '.join(pvs)}" for options, pvs in sorted(variants.items(),
                                                                                       key=lambda item: item[1]))
            found.append(f"the PersistentVolumes of StorageClass {name} carry {len(variants)} different sets of "
                         f"options: {said}")
    for view in fs.volumes:
        volume = view.volume
        cls = classes.get(volume.storage_class)
        if cls is not None and not same_options(cls.mount_options, volume.mount_options):
            found.append(f"PersistentVolume {volume.name} carries options its StorageClass {cls.name} does not have "
                         f"(any more): the PV has {_said(volume.mount_options)}, the class "
                         f"{_said(cls.mount_options)}")
        asked = _options(volume.mount_options)
        for node, mount in mounts_of.get(volume.name, []):
            # Only what the PV names: a mount helper adds options of its own (EFS's: noresvport, timeo), and the
            # kernel shows what an option implies (nolock on NFSv3: local_lock=all).
            drift = [f for f in compare(asked, _options(mount.effective_options)) if f.severity is not Severity.INFO]
            if drift:
                pairs = [values_said(f) for f in drift]
                found.append(f"node {node} mounts PersistentVolume {volume.name} (pod UID {mount.pod_uid}) with "
                             f"options it does not ask for: {_shown(pairs, 'the PV asks', 'the kernel has')}")
    return found
