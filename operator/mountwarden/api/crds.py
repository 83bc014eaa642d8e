"""The CRDs mountwarden defines, by file name under crds/."""

from mountwarden.api import nodemountreport, storageprofile
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

ALL: dict[str, CrdSpec] = {
    "mountwarden.io_storageprofiles.yaml": STORAGE_PROFILE,
    "mountwarden.io_nodemountreports.yaml": NODE_MOUNT_REPORT,
}


def rendered() -> dict[str, str]:
    """File name -> YAML text of every CRD."""
    return {file_name: render_yaml(build_crd(spec)) for file_name, spec in ALL.items()}
