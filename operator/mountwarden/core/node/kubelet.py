"""Which pod and volume a mount point belongs to, from the paths the kubelet mounts at.

The kubelet mounts every volume under its root directory (``--root-dir``,
/var/lib/kubelet unless configured otherwise)::

    <root>/pods/<pod-uid>/volumes/kubernetes.io~csi/<pv>/mount          CSI (NodePublishVolume)
    <root>/pods/<pod-uid>/volumes/kubernetes.io~nfs/<volume>             in-tree nfs
    <root>/pods/<pod-uid>/volume-subpaths/<volume>/<container>/<index>   a subPath bind mount
    <root>/plugins/kubernetes.io/csi/<driver>/<sha256>/globalmount       CSI staging (NodeStageVolume)
    <root>/plugins/kubernetes.io/csi/pv/<pv>/globalmount                 CSI staging, older kubelets

The CSI directory is named after the PV (after the pod's volume for an inline
ephemeral CSI volume). The newer staging directory is named after the SHA-256 of
the volume handle, so a staging mount names its driver but not its PV; the older
layout (pkg/volume/csi/csi_attacher.go, makeDeviceMountPath) named the PV under a
literal ``pv`` directory.

The kernel prints mount points with symlinks resolved: when /var/lib/kubelet is a
link to /data/kubelet, the mounts show up under /data/kubelet. Callers pass every
spelling of the root they know of (the configured one and where it resolves to).
"""

import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

DEFAULT_KUBELET_ROOT = "/var/lib/kubelet"

# A path segment: the kubelet never puts "/" inside a pod UID, volume or driver name.
_SEGMENT = r"[^/]+"
_POD_CSI = re.compile(rf"(?P<root>.*)/pods/(?P<uid>{_SEGMENT})/volumes/kubernetes\.io~csi/(?P<volume>{_SEGMENT})/mount")
_POD_NFS = re.compile(rf"(?P<root>.*)/pods/(?P<uid>{_SEGMENT})/volumes/kubernetes\.io~nfs/(?P<volume>{_SEGMENT})")
_SUBPATH = re.compile(
    rf"(?P<root>.*)/pods/(?P<uid>{_SEGMENT})/volume-subpaths/(?P<volume>{_SEGMENT})/{_SEGMENT}/[0-9]+"
)
_STAGING = re.compile(
    rf"(?P<root>.*)/plugins/kubernetes\.io/csi/(?P<driver>{_SEGMENT})/(?P<key>{_SEGMENT})/globalmount"
)
# The staging directory of newer kubelets: hex SHA-256 of the volume handle.
_VOLUME_HANDLE_HASH = re.compile(r"[0-9a-f]{64}")
# The older layout's literal directory, which a driver could in theory also be named.
_OLD_STAGING_DIR = "pv"


class KubeletPlugin(StrEnum):
    """Which kubelet path a volume is mounted under (the values of the report's ``plugin``)."""

    CSI = "csi"
    NFS = "nfs"
    CSI_STAGING = "csi-staging"


@dataclass(frozen=True, slots=True)
class KubeletVolume:
    """A mount point the kubelet made for a volume.

    ``volume_name`` is the PV name for CSI (or the pod's volume name for inline
    ephemeral CSI volumes and in-tree nfs); for a staging mount of a newer kubelet
    it is the SHA-256 directory, the only identity the path carries.
    """

    plugin: KubeletPlugin
    volume_name: str
    pod_uid: str | None
    driver: str | None
    kubelet_root: str


def normalize_root(root: str) -> str:
    """A root as the kernel prints paths: no trailing slash ("/" stays "")."""
    return root.rstrip("/")


def _root_accepted(found: str, roots: frozenset[str] | None) -> bool:
    return roots is None or found in roots


def parse_volume_path(mount_point: str, kubelet_roots: Iterable[str] | None = None) -> KubeletVolume | None:
    """The pod volume (or CSI staging mount) at ``mount_point``, or None for any other mount.

    With ``kubelet_roots`` None, any directory is accepted as the root: that is for
    naming the mount points of a report, whose kubelet root is not known.
    """
    roots = None if kubelet_roots is None else frozenset(normalize_root(root) for root in kubelet_roots)
    if match := _POD_CSI.fullmatch(mount_point):
        plugin, driver = KubeletPlugin.CSI, None
    elif match := _POD_NFS.fullmatch(mount_point):
        plugin, driver = KubeletPlugin.NFS, None
    elif match := _STAGING.fullmatch(mount_point):
        return _staging(match, roots)
    else:
        return None
    if not _root_accepted(match["root"], roots):
        return None
    return KubeletVolume(plugin, match["volume"], match["uid"], driver, match["root"])


def _staging(match: re.Match[str], roots: frozenset[str] | None) -> KubeletVolume | None:
    if not _root_accepted(match["root"], roots):
        return None
    driver, key = match["driver"], match["key"]
    if driver == _OLD_STAGING_DIR and not _VOLUME_HANDLE_HASH.fullmatch(key):
        # plugins/kubernetes.io/csi/pv/<pv>/globalmount: the PV is named, the driver is not.
        return KubeletVolume(KubeletPlugin.CSI_STAGING, key, None, None, match["root"])
    return KubeletVolume(KubeletPlugin.CSI_STAGING, key, None, driver, match["root"])


def is_subpath_mount(mount_point: str, kubelet_roots: Iterable[str] | None = None) -> bool:
    """True for the bind mount the kubelet makes for a container's ``subPath`` of a volume.

    It is the pod's own volume seen again, so it shares that volume's superblock
    without being another consumer of it.
    """
    match = _SUBPATH.fullmatch(mount_point)
    if match is None:
        return False
    return kubelet_roots is None or match["root"] in {normalize_root(root) for root in kubelet_roots}
