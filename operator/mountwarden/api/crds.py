"""The CRDs mountwarden defines, by file name under crds/."""

from mountwarden.api.crdgen import CrdSpec, build_crd, render_yaml
from mountwarden.api.storageprofile import KIND, PLURAL, StorageProfileSpec, StorageProfileStatus

STORAGE_PROFILE = CrdSpec(
    kind=KIND,
    plural=PLURAL,
    short_names=("sprof", "sp"),
    description="StorageProfile is one consumer pattern's NFS mount contract: its backend, cache policy and "
    "options, the PVCs it governs, and how changes roll out. It reconciles into StorageClasses "
    "<name>-v<N>.",
    spec_model=StorageProfileSpec,
    status_model=StorageProfileStatus,
    printer_columns=(
        {"name": "Class", "type": "string", "jsonPath": ".status.storageClassName"},
        {"name": "Version", "type": "integer", "jsonPath": ".status.version"},
        {"name": "Policy", "type": "string", "jsonPath": ".spec.cachePolicy"},
        {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ),
)

ALL: dict[str, CrdSpec] = {
    "mountwarden.io_storageprofiles.yaml": STORAGE_PROFILE,
}


def rendered() -> dict[str, str]:
    """File name -> YAML text of every CRD."""
    return {file_name: render_yaml(build_crd(spec)) for file_name, spec in ALL.items()}
