"""The CRDs mountwarden defines, by file name under crds/."""

from mountwarden.api import networkfilesystem, nodemountreport, storageprofile
from mountwarden.api.crdgen import CrdSpec, build_crd, render_yaml

STORAGE_PROFILE = CrdSpec(
    kind=storageprofile.KIND,
    plural=storageprofile.PLURAL,
    short_names=("sprof", "sp"),
    description="StorageProfile is one consumer pattern's NFS mount contract: its backend, cache policy and "
    "options, the PVCs it governs, and how changes roll out. It reconciles into StorageClasses "
    "<name>-v<N>.",
    spec_model=storageprofile.StorageProfileSpec,
    status_model=storageprofile.StorageProfileStatus,
    validations=(storageprofile.NAME_RULE,),
    printer_columns=(
        {"name": "Class", "type": "string", "jsonPath": ".status.storageClassName"},
        {"name": "Version", "type": "integer", "jsonPath": ".status.version"},
        {"name": "Policy", "type": "string", "jsonPath": ".spec.cachePolicy"},
        {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ),
)

NODE_MOUNT_REPORT = CrdSpec(
    kind=nodemountreport.KIND,
    plural=nodemountreport.PLURAL,
    short_names=("nmr",),
    description="NodeMountReport is what is really mounted on one node, written by that node's mountwarden "
    "agent: every pod volume on a network filesystem with its effective options and superblock, and the "
    "SQLite databases in use on them. Named after the node.",
    spec_model=nodemountreport.NodeMountReportSpec,
    status_model=None,
    printer_columns=(
        {"name": "Node", "type": "string", "jsonPath": ".spec.nodeName"},
        {"name": "Scanned", "type": "date", "jsonPath": ".spec.scanTime"},
        {"name": "Agent", "type": "string", "jsonPath": ".spec.agentVersion", "priority": 1},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ),
)

NETWORK_FILE_SYSTEM = CrdSpec(
    kind=networkfilesystem.KIND,
    plural=networkfilesystem.PLURAL,
    short_names=("netfs",),
    description="NetworkFileSystem is the operator's view of one file system on network storage (an EFS file "
    "system or an NFS server), kept whether or not a StorageProfile exists: its StorageClasses and "
    "PersistentVolumes, their claims, pods and nodes, which profile governs each or none, the options in the "
    "class, in the PV and in effect on the nodes, where they disagree, and every finding on its volumes. Written "
    "by the operator; named after the file system.",
    spec_model=networkfilesystem.NetworkFileSystemSpec,
    status_model=None,
    printer_columns=(
        {"name": "Kind", "type": "string", "jsonPath": ".spec.kind"},
        {"name": "Classes", "type": "integer", "jsonPath": ".spec.summary.classes"},
        {"name": "Volumes", "type": "integer", "jsonPath": ".spec.summary.volumes"},
        {"name": "Pods", "type": "integer", "jsonPath": ".spec.summary.pods"},
        {"name": "Ungoverned", "type": "integer", "jsonPath": ".spec.summary.ungoverned"},
        {"name": "Findings", "type": "integer", "jsonPath": ".spec.summary.findings"},
        {"name": "Checked", "type": "date", "jsonPath": ".spec.checkedAt"},
        {"name": "File system", "type": "string", "jsonPath": ".spec.fileSystem", "priority": 1},
    ),
)

ALL: dict[str, CrdSpec] = {
    "mountwarden.io_storageprofiles.yaml": STORAGE_PROFILE,
    "mountwarden.io_nodemountreports.yaml": NODE_MOUNT_REPORT,
    "mountwarden.io_networkfilesystems.yaml": NETWORK_FILE_SYSTEM,
}


def rendered() -> dict[str, str]:
    """File name -> YAML text of every CRD."""
    return {file_name: render_yaml(build_crd(spec)) for file_name, spec in ALL.items()}
