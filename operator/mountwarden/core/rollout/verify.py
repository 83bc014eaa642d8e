"""Verification: does every replica, on its node, really mount the target's options?

The proof matters: pods of one export on one node can share an NFS superblock,
and a new mount that differs only in options the kernel does not compare (timeo, retrans,
resvport, nconnect: kernel lab) silently runs with the first mount's.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from mountwarden.core.node.report import ReportedMount
from mountwarden.core.options.compare import check
from mountwarden.core.options.normalize import NOT_COMPARED_FOR_SUPERBLOCK, Severity, normalize
from mountwarden.core.rollout.world import Pod, Target, World, timestamp


class Check(StrEnum):
    OK = "ok"
    PENDING = "pending"  # no verdict yet: the node's report has not caught up
    STALE = "stale"  # kept an older version's superblock that nobody else holds now: a remount fixes it
    SHARED = "shared"  # kept an older version's superblock that another consumer holds
    ABSENT = "absent"  # neither the new options nor an old version's: the driver dropped them


@dataclass(frozen=True, slots=True)
class PodCheck:
    check: Check
    pod: Pod
    reason: str = ""
    message: str = ""


def verify_pod(pod: Pod, volume_names: Mapping[str, str], target: Target, world: World,
               siblings: frozenset[str]) -> PodCheck:
    """Compare one replica's mounts with the target on its node's report.

    ``volume_names`` maps each of the pod's lineage PVs to the pod's name for that
    volume; ``siblings`` are the UIDs of the pods of the same workload, whose
    sharing a superblock a remount of them all resolves.
    """
    where = f"pod {pod.namespace}/{pod.name} on node {pod.node}"
    report = world.reports.get(pod.node or "")
    if report is None:
        return PodCheck(Check.PENDING, pod, "ReportMissing",
                        f"{where}: no NodeMountReport for the node: is the mountwarden agent running there?")
    if pod.started_at is None or report.scan_time < pod.started_at:
        return PodCheck(Check.PENDING, pod, "ReportStale",
                        f"{where}: the node's report (scanned {timestamp(report.scan_time)}) predates the pod: "
                        "is the mountwarden agent running there?")
    older = [v.mount_options for v in target.lineage if v.storage_class != target.version.storage_class]
    for pv, pod_volume in sorted(volume_names.items()):
        mount = report.mount_of(pod.uid, (pv, pod_volume))
        if mount is None:
            return PodCheck(Check.PENDING, pod, "MountNotReported",
                            f"{where}: the node's report does not show volume {pv} yet")
        if _satisfies(target.version.mount_options, mount.effective_options):
            continue
        volume = next((v for v in world.volumes if v.name == pv), None)
        previous = [volume.previous_options] if volume and volume.previous_options else []
        if not any(_satisfies(options, mount.effective_options) for options in [*older, *previous]):
            findings = check(normalize(target.version.mount_options).options,
                             normalize(mount.effective_options, observed=True).options).findings
            wrong = [finding.message for finding in findings if finding.severity is not Severity.INFO]
            return PodCheck(Check.ABSENT, pod, "OptionsAbsent",
                            f"{where}: volume {pv} is mounted without the new options (the driver dropped them?): "
                            + " ".join(wrong[:3]))
        kept = f"{where}: volume {pv} kept the old options of superblock {mount.superblock}"
        others = [point for point in mount.shared_with if not _sibling_mount(report.at(point), siblings)]
        if others:
            holders = ", ".join(_holder(report.at(point), point, world) for point in others)
            return PodCheck(Check.SHARED, pod, "SuperblockShared",
                            f"{kept}, which {holders} still holds on that node. Move or restart that consumer "
                            f"off node {pod.node}; mountwarden then remounts this pod.")
        inherited = _differing_only_in_what_the_kernel_shares(target.version.mount_options, mount.effective_options)
        if inherited:
            # Measured in the kernel lab and on the real node: a mount made while any other mount of the
            # export exists through the node's client takes the existing superblock, and with it these values.
            kept += (f": the new options differ from it only in {', '.join(inherited)}, which the kernel does not "
                     "compare when it gives a new mount an existing superblock")
        return PodCheck(Check.STALE, pod, "Remounting", f"{kept} (a replaced replica held it when the pod started)")
    return PodCheck(Check.OK, pod)




def _satisfies(declared: Sequence[str], observed: Sequence[str]) -> bool:
    """A mount's options hold what was declared (an option the mount table omits counts as its default)."""
    return check(normalize(declared).options, normalize(observed, observed=True).options).compliant



def _differing_only_in_what_the_kernel_shares(declared: Sequence[str], observed: Sequence[str]) -> list[str]:
    """The differing options, when every one of them is one the kernel takes from an existing superblock."""
    findings = check(normalize(declared).options, normalize(observed, observed=True).options).findings
    names = sorted({finding.option for finding in findings if finding.severity is not Severity.INFO})
    return names if names and all(name in NOT_COMPARED_FOR_SUPERBLOCK for name in names) else []


def _sibling_mount(mount: ReportedMount | None, siblings: frozenset[str]) -> bool:
    # A CSI staging mount (no pod) belongs to the volume itself and goes with its last pod on the node.
    return mount is not None and (mount.pod_uid is None or mount.pod_uid in siblings)


def _holder(mount: ReportedMount | None, point: str, world: World) -> str:
    if mount is None:
        return f"the mount at {point}"
    pod = next((p for p in world.pods if p.uid == mount.pod_uid), None)
    if pod is not None:
        return f"pod {pod.namespace}/{pod.name}"
    name = world.pod_name_of(mount.pod_uid) if mount.pod_uid else None
    return f"pod {name}" if name else f"pod UID {mount.pod_uid} (mount {point})"


def check_pods(pods: Sequence[Pod], target: Target, world: World) -> list[PodCheck]:
    claims = {v.claim: v.name for v in world.volumes if v.claim}
    siblings = frozenset(pod.uid for pod in pods)
    checks = []
    for pod in pods:
        volume_names = {claims[(pod.namespace, claim)]: name for claim, name in pod.claims.items()
                        if (pod.namespace, claim) in claims}
        checks.append(verify_pod(pod, volume_names, target, world, siblings))
    return checks
