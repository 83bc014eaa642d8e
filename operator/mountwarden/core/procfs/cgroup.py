"""/proc/<pid>/cgroup: which cgroups a process is in, and so which pod and container it runs for.

    12:memory:/kubepods/burstable/pod3d1b6e2d-0d6c-4b5e-9a3f-1c2d3e4f5a6b/<64 hex>   (v1)
    0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod3d1b6e2d_0d6c_4b5e_9a3f_1c2d3e4f5a6b.slice/cri-containerd-<64 hex>.scope   (v2)

Each line is ``hierarchy-ID:controller-list:path``; cgroup v2 has one line with
ID 0 and no controllers. The kubelet names pod cgroups in one of two ways:

- cgroupfs driver: ``.../kubepods[/burstable|/besteffort]/pod<uid>/<container>``
  where the container is a bare 64-hex ID (containerd, docker) or ``crio-<id>``;
- systemd driver: ``...kubepods[-burstable|-besteffort]-pod<uid_with_underscores>.slice``
  then ``cri-containerd-<id>.scope``, ``docker-<id>.scope``, ``crio-<id>.scope``
  (``crio-conmon-<id>.scope`` is CRI-O's monitor process for that container).
  A kubelet with its own cgroup root (kind: ``/kubelet.slice/kubelet-kubepods.slice/...``)
  prefixes every slice name, so slice names are matched by what they contain.

Pod UIDs are returned dashed. Static pods have a 32-hex UID without dashes (the
kubelet's hash of the manifest), kept as it is because the kubelet's own
``pods/<uid>`` directory uses the same form.
"""

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path

from mountwarden.core.procfs.lines import parse_lines
from mountwarden.core.procfs.mountinfo import is_decimal

_UID_DASHED = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_UID_UNDERSCORED = r"[0-9a-f]{8}_[0-9a-f]{4}_[0-9a-f]{4}_[0-9a-f]{4}_[0-9a-f]{12}"
_UID_STATIC_POD = r"[0-9a-f]{32}"

_CGROUPFS_POD = re.compile(rf"pod({_UID_DASHED}|{_UID_STATIC_POD})")
_CGROUPFS_QOS_PARENTS = {"kubepods": "guaranteed", "burstable": "burstable", "besteffort": "besteffort"}
# The ":runtime:id" tail is containerd's systemd cgroupsPath written as a path,
# seen in the wild (falco's "containerd_unknown" case).
_SYSTEMD_POD = re.compile(
    rf"(?:.+-)?kubepods(?:-(burstable|besteffort))?-pod({_UID_UNDERSCORED}|{_UID_STATIC_POD})\.slice"
    r"(?::(cri-containerd|crio|docker):([0-9a-f]{64}))?"
)
_CONTAINER = re.compile(r"(?:(cri-containerd|crio-conmon|crio|docker)-)?([0-9a-f]{64})(?:\.scope)?")
_RUNTIMES = {"cri-containerd": "containerd", "crio": "crio", "crio-conmon": "crio-conmon", "docker": "docker"}
_DELETED_SUFFIX = " (deleted)"


@dataclass(frozen=True, slots=True)
class PodCgroup:
    """The pod (and container, when the path goes that deep) a cgroup path belongs to.

    ``container_runtime`` is "containerd", "crio", "docker", "crio-conmon" (CRI-O's
    monitor process, not the workload) or None when the path does not say (a bare
    ID under the cgroupfs driver). ``container_id`` is None for a pod-level cgroup.
    """

    pod_uid: str
    qos_class: str
    cgroup_driver: str
    container_runtime: str | None
    container_id: str | None


@dataclass(frozen=True, slots=True)
class CgroupEntry:
    """One line: a hierarchy, its controllers (empty for cgroup v2) and the process's cgroup in it."""

    hierarchy_id: int
    controllers: tuple[str, ...]
    path: str
    is_deleted: bool
    line_number: int

    @property
    def is_unified(self) -> bool:
        """True for the cgroup v2 line (``0::/path``)."""
        return self.hierarchy_id == 0 and not self.controllers


@dataclass(frozen=True, slots=True)
class CgroupResult:
    entries: tuple[CgroupEntry, ...]
    skipped_line_numbers: tuple[int, ...]

    @property
    def skipped_lines(self) -> int:
        return len(self.skipped_line_numbers)

    @property
    def pod(self) -> PodCgroup | None:
        """The pod this process runs for, from the v2 line when present, else the first v1 line that names one."""
        ordered = sorted(self.entries, key=lambda entry: not entry.is_unified)
        for entry in ordered:
            pod = parse_pod_cgroup_path(entry.path)
            if pod is not None:
                return pod
        return None


def parse_pod_cgroup_path(path: str) -> PodCgroup | None:
    """Find the pod UID, QoS class and container in a kubelet-made cgroup path; None if it is not one."""
    segments = [segment for segment in path.split("/") if segment]
    for position, segment in enumerate(segments):
        following = segments[position + 1] if position + 1 < len(segments) else None
        systemd = _SYSTEMD_POD.fullmatch(segment)
        if systemd is not None:
            qos, uid, runtime, container_id = systemd.groups()
            pod = PodCgroup(
                pod_uid=uid.replace("_", "-"),
                qos_class=qos or "guaranteed",
                cgroup_driver="systemd",
                container_runtime=_RUNTIMES.get(runtime or ""),
                container_id=container_id,
            )
            return pod if container_id else _with_container(pod, following)
        cgroupfs = _CGROUPFS_POD.fullmatch(segment)
        if cgroupfs is not None and position > 0 and segments[position - 1] in _CGROUPFS_QOS_PARENTS:
            pod = PodCgroup(
                pod_uid=cgroupfs.group(1),
                qos_class=_CGROUPFS_QOS_PARENTS[segments[position - 1]],
                cgroup_driver="cgroupfs",
                container_runtime=None,
                container_id=None,
            )
            return _with_container(pod, following)
    return None


def parse_cgroup(text: str) -> CgroupResult:
    """Parse /proc/<pid>/cgroup text; malformed lines are skipped and their 1-based numbers kept."""
    entries, skipped = parse_lines(text, _parse_line)
    return CgroupResult(entries=entries, skipped_line_numbers=skipped)


def read_cgroup(path: str | os.PathLike[str]) -> CgroupResult:
    return parse_cgroup(Path(path).read_text(encoding="utf-8", errors="surrogateescape"))


def _with_container(pod: PodCgroup, segment: str | None) -> PodCgroup:
    container = _CONTAINER.fullmatch(segment) if segment else None
    if container is None:
        return pod
    runtime, container_id = container.groups()
    return replace(pod, container_runtime=_RUNTIMES.get(runtime or ""), container_id=container_id)


def _parse_line(line: str, line_number: int) -> CgroupEntry | None:
    # The path may itself hold colons (containerd's "slice:runtime:id" form).
    fields = line.split(":", 2)
    if len(fields) != 3:
        return None
    hierarchy_id, controllers, path = fields
    if not is_decimal(hierarchy_id) or not path.startswith("/"):
        return None
    # cgroup v2 marks a process left in a removed cgroup with this suffix.
    is_deleted = path.endswith(_DELETED_SUFFIX)
    return CgroupEntry(
        hierarchy_id=int(hierarchy_id),
        controllers=tuple(controllers.split(",")) if controllers else (),
        path=path.removesuffix(_DELETED_SUFFIX),
        is_deleted=is_deleted,
        line_number=line_number,
    )
