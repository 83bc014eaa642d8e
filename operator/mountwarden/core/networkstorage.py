"""Which PersistentVolumes are on network storage, and which file system each one lives on.

A file system is what a person names the storage by: an EFS file system (``fs-0123456789abcdef0``), or an
NFS server (its address or host name). A volume says which in its source: an in-tree ``nfs`` source names
the server (an EFS mount target's DNS name carries the file system's id), an EFS CSI volume's handle starts
with the file system's id, the NFS CSI driver names its server in the volume's attributes. A volume whose
source names none (another CSI driver) is filed under what its node's report says it mounts, else under
its driver.

What counts as network storage: an in-tree ``nfs`` source, and a CSI volume of a driver known to mount NFS
(mountwarden.core.admission.is_network_provisioner: EFS, the NFS CSI driver, FSx for OpenZFS, Filestore,
any name with an ``nfs`` word, and the operator's --network-provisioner list).
"""

import hashlib
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from mountwarden.core.admission import is_network_provisioner
from mountwarden.core.options.presets import EFS_PROVISIONER
from mountwarden.core.storageclass import ADOPTED_BY_ANNOTATION

#: The DNS name of an EFS mount target (or of the file system, in any region): fs-<id>.efs.<region>.amazonaws.com.
EFS_HOST = re.compile(r"^(?:[a-z0-9-]+\.)?(fs-[0-9a-f]{8,40})\.efs\.[a-z0-9-]+\.amazonaws\.com(?:\.cn)?\.?$")
EFS_ID = re.compile(r"^fs-[0-9a-f]{8,40}$")
#: The annotation the external provisioners write on the PVs they made.
PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"
#: The source of an in-tree NFS volume.
IN_TREE_NFS = "nfs"


def efs_file_system_of(server: str | None) -> str | None:
    """The EFS file system a server's name belongs to, or None (an IP address, another server)."""
    match = EFS_HOST.match((server or "").lower())
    return match.group(1) if match else None


@dataclass(frozen=True, slots=True)
class NetworkVolume:
    """A PersistentVolume on network storage, as much as the inventory, the baseline and adoption need."""

    name: str
    #: spec.storageClassName ("" for none).
    storage_class: str
    mount_options: tuple[str, ...]
    #: (namespace, name) of the claim it is bound to (spec.claimRef).
    claim: tuple[str, str] | None
    #: "nfs" (in-tree) or the CSI driver's name.
    source: str
    #: The NFS server it names (None when its source names none).
    server: str | None = None
    #: The export path (in-tree, NFS CSI share) or the CSI volume handle.
    path: str | None = None
    file_system_id: str | None = None
    #: The provisioner that made it (pv.kubernetes.io/provisioned-by), or None for a volume made by hand.
    provisioner: str | None = None
    #: The StorageProfile that adopted it (mountwarden.io/adopted-by).
    adopted_by: str | None = None

    @property
    def efs(self) -> bool:
        return self.file_system_id is not None or self.source == EFS_PROVISIONER

    @property
    def file_system(self) -> str | None:
        """What the volume's own source says it lives on: the EFS file system, else the server."""
        return self.file_system_id or self.server

    @staticmethod
    def from_object(pv: Mapping, network_drivers: Collection[str] = ()) -> "NetworkVolume | None":
        """Read a PersistentVolume (its wire form); None when it is not on network storage."""
        spec = pv.get("spec") or {}
        metadata = pv.get("metadata") or {}
        annotations = metadata.get("annotations") or {}
        claim = spec.get("claimRef") or {}
        nfs, csi = spec.get("nfs"), spec.get("csi")
        if nfs:
            source, server, path = IN_TREE_NFS, nfs.get("server"), nfs.get("path")
            file_system_id = efs_file_system_of(server)
        elif csi and is_network_provisioner(csi.get("driver") or "", network_drivers):
            source = csi["driver"]
            attributes = csi.get("volumeAttributes") or {}
            server, path = attributes.get("server"), attributes.get("share") or csi.get("volumeHandle")
            handle = (csi.get("volumeHandle") or "").split(":")[0]
            file_system_id = handle if source == EFS_PROVISIONER and EFS_ID.match(handle) else efs_file_system_of(server)
        else:
            return None
        return NetworkVolume(
            name=metadata["name"],
            storage_class=spec.get("storageClassName") or "",
            mount_options=tuple(spec.get("mountOptions") or ()),
            claim=(claim.get("namespace") or "", claim["name"]) if claim.get("name") else None,
            source=source, server=server, path=path, file_system_id=file_system_id,
            provisioner=annotations.get(PROVISIONED_BY),
            adopted_by=annotations.get(ADOPTED_BY_ANNOTATION),
        )


def class_file_system(provisioner: str, parameters: Mapping[str, str]) -> str | None:
    """The file system a StorageClass provisions on, when its parameters name it (EFS fileSystemId, NFS server)."""
    if provisioner == EFS_PROVISIONER and parameters.get("fileSystemId"):
        return parameters["fileSystemId"]
    server = parameters.get("server")
    return efs_file_system_of(server) or server


_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,200}[a-z0-9])?$")


def object_name(file_system: str) -> str:
    """A Kubernetes object name for a file system: itself when it is one (fs-..., an IPv4 address, a host name),
    else a readable form with a digest that keeps two different names apart (an IPv6 address, upper case)."""
    if _NAME.match(file_system) and ".." not in file_system:
        return file_system
    readable = re.sub(r"[^a-z0-9]+", "-", file_system.lower()).strip("-")[:180] or "unnamed"
    return f"{readable}-{hashlib.sha256(file_system.encode()).hexdigest()[:8]}"
