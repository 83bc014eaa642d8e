"""Versioned StorageClasses: which class a profile needs, and what to do with the ones it has.

StorageClass ``parameters`` and ``mountOptions`` apply only when a volume is
provisioned, and a class cannot be edited in place, so every change of a
profile's effective content becomes a new class ``<profile>-v<N+1>``. A class
whose content hash matches is reused, never duplicated: this keeps the
reconcile idempotent across operator restarts and re-deliveries. Older versions
stay while volumes use them and are marked superseded.
"""

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

PROFILE_LABEL = "mountwarden.io/profile"
VERSION_LABEL = "mountwarden.io/version"
ORPHANED_LABEL = "mountwarden.io/orphaned"
HASH_ANNOTATION = "mountwarden.io/options-hash"
SUPERSEDED_BY_ANNOTATION = "mountwarden.io/superseded-by"
#: On a class (and its volumes) a StorageProfile took over through spec.adopt.
ADOPTED_BY_ANNOTATION = "mountwarden.io/adopted-by"
DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "mountwarden"


def class_name(profile: str, version: int) -> str:
    return f"{profile}-v{version}"


@dataclass(frozen=True, slots=True)
class DesiredClass:
    """Everything a StorageClass of the profile carries that affects new volumes."""

    provisioner: str
    parameters: Mapping[str, str]
    reclaim_policy: str
    volume_binding_mode: str
    allow_volume_expansion: bool | None
    mount_options: tuple[str, ...]

    def content_hash(self) -> str:
        content = {
            "provisioner": self.provisioner,
            "parameters": dict(sorted(self.parameters.items())),
            "reclaimPolicy": self.reclaim_policy,
            "volumeBindingMode": self.volume_binding_mode,
            "allowVolumeExpansion": self.allow_volume_expansion,
            "mountOptions": list(self.mount_options),
        }
        return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:16]

    def manifest(self, profile: str, version: int, *, default: bool) -> dict:
        """The StorageClass object to create for ``version`` of ``profile``."""
        annotations = {HASH_ANNOTATION: self.content_hash()}
        if default:
            annotations[DEFAULT_CLASS_ANNOTATION] = "true"
        body: dict = {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {
                "name": class_name(profile, version),
                "labels": {PROFILE_LABEL: profile, VERSION_LABEL: str(version), MANAGED_BY_LABEL: MANAGED_BY},
                "annotations": annotations,
            },
            "provisioner": self.provisioner,
            "parameters": dict(self.parameters),
            "reclaimPolicy": self.reclaim_policy,
            "volumeBindingMode": self.volume_binding_mode,
            "mountOptions": list(self.mount_options),
        }
        if self.allow_volume_expansion is not None:
            body["allowVolumeExpansion"] = self.allow_volume_expansion
        return body


@dataclass(frozen=True, slots=True)
class ExistingClass:
    """A StorageClass of the profile's lineage as found in the cluster."""

    name: str
    version: int
    content_hash: str
    is_default: bool = False
    superseded_by: str | None = None
    #: PersistentVolumes (and unbound PVCs) that still name this class.
    held_by: tuple[str, ...] = ()
    mount_options: tuple[str, ...] = ()
    created_at: str | None = None

    @staticmethod
    def from_object(obj: Mapping, held_by: Sequence[str] = ()) -> "ExistingClass | None":
        """Read a StorageClass (its wire form); None when it is not of a profile's lineage."""
        metadata = obj.get("metadata") or {}
        labels = metadata.get("labels") or {}
        annotations = metadata.get("annotations") or {}
        try:
            version = int(labels.get(VERSION_LABEL, ""))
        except ValueError:
            return None
        return ExistingClass(
            name=metadata["name"],
            version=version,
            content_hash=annotations.get(HASH_ANNOTATION, ""),
            is_default=annotations.get(DEFAULT_CLASS_ANNOTATION) == "true",
            superseded_by=annotations.get(SUPERSEDED_BY_ANNOTATION),
            held_by=tuple(sorted(held_by)),
            mount_options=tuple(obj.get("mountOptions") or ()),
            created_at=metadata.get("creationTimestamp"),
        )


@dataclass(frozen=True, slots=True)
class ClassPatch:
    """Metadata changes on one existing class: annotations and labels to set (None removes)."""

    name: str
    annotations: Mapping[str, str | None] = field(default_factory=dict)
    labels: Mapping[str, str | None] = field(default_factory=dict)

    def body(self) -> dict:
        metadata: dict = {}
        if self.annotations:
            metadata["annotations"] = dict(self.annotations)
        if self.labels:
            metadata["labels"] = dict(self.labels)
        return {"metadata": metadata}


@dataclass(frozen=True, slots=True)
class ClassPlan:
    """What to do, in this order: create, patch, delete. Every step is safe to repeat."""

    current_name: str
    current_version: int
    content_hash: str
    create: dict | None = None
    patches: tuple[ClassPatch, ...] = ()
    delete: tuple[str, ...] = ()

    @property
    def changes_anything(self) -> bool:
        return bool(self.create or self.patches or self.delete)


def plan_classes(
    profile: str,
    desired: DesiredClass,
    existing: Sequence[ExistingClass],
    *,
    make_default: bool,
    last_version: int = 0,
) -> ClassPlan:
    """Decide which class is current and what becomes of every other version.

    ``last_version`` is the highest version the profile ever had (from its
    status), so that numbers keep rising even after old classes were deleted.
    """
    wanted_hash = desired.content_hash()
    matching = sorted((c for c in existing if c.content_hash == wanted_hash), key=lambda c: c.version)
    create = None
    if matching:
        current = matching[-1]
        current_name, current_version = current.name, current.version
    else:
        current_version = max([last_version, *(c.version for c in existing)]) + 1
        current_name = class_name(profile, current_version)
        create = desired.manifest(profile, current_version, default=make_default)

    patches: list[ClassPatch] = []
    delete: list[str] = []
    for cls in sorted(existing, key=lambda c: c.version):
        if cls.name == current_name:
            annotations: dict[str, str | None] = {}
            if cls.superseded_by is not None:  # a rollback made an old version current again
                annotations[SUPERSEDED_BY_ANNOTATION] = None
            if cls.is_default != make_default:
                annotations[DEFAULT_CLASS_ANNOTATION] = "true" if make_default else None
            if annotations:
                patches.append(ClassPatch(cls.name, annotations))
            continue
        if not cls.held_by:
            delete.append(cls.name)
            continue
        annotations = {}
        if cls.superseded_by != current_name:
            annotations[SUPERSEDED_BY_ANNOTATION] = current_name
        if cls.is_default:
            annotations[DEFAULT_CLASS_ANNOTATION] = None
        if annotations:
            patches.append(ClassPatch(cls.name, annotations))
    return ClassPlan(current_name, current_version, wanted_hash, create, tuple(patches), tuple(delete))


def plan_release(existing: Sequence[ExistingClass]) -> ClassPlan:
    """When a profile is deleted: remove unused classes, keep used ones labelled orphaned."""
    patches = tuple(
        ClassPatch(cls.name, labels={ORPHANED_LABEL: "true"}) for cls in existing if cls.held_by
    )
    delete = tuple(cls.name for cls in existing if not cls.held_by)
    return ClassPlan("", 0, "", None, patches, delete)


def version_history(
    existing: Sequence[ExistingClass], plan: ClassPlan, desired: DesiredClass, *, now: str
) -> list[dict]:
    """The status history after ``plan`` is applied: every version that still exists, oldest first."""
    records = []
    for cls in sorted(existing, key=lambda c: c.version):
        if cls.name in plan.delete:
            continue
        current = cls.name == plan.current_name
        record = {
            "version": cls.version,
            "storageClassName": cls.name,
            "hash": cls.content_hash,
            "mountOptions": list(cls.mount_options),
            "createdAt": cls.created_at or now,
            "heldBy": list(cls.held_by),
        }
        if not current:
            record["supersededBy"] = plan.current_name
        records.append(record)
    if plan.create is not None:
        records.append({
            "version": plan.current_version,
            "storageClassName": plan.current_name,
            "hash": plan.content_hash,
            "mountOptions": list(desired.mount_options),
            "createdAt": now,
            "heldBy": [],
        })
    return records


@dataclass(frozen=True, slots=True)
class ClassEntry:
    """One StorageClass as the operator's indexes hold it (admission, compliance)."""

    name: str
    provisioner: str
    #: The mountwarden.io/profile label: the profile whose lineage this class is.
    profile: str | None = None
    version: int | None = None
    superseded_by: str | None = None
    is_default: bool = False
    content_hash: str = ""
    created_at: str = ""
    #: What it gives new volumes: their mountOptions, and the provisioner's parameters (the inventory's file system).
    mount_options: tuple[str, ...] = ()
    parameters: Mapping[str, str] = field(default_factory=dict)
    #: The StorageProfile that adopted it (mountwarden.io/adopted-by): new claims should use that profile's class.
    adopted_by: str | None = None

    @property
    def governed_by(self) -> str | None:
        """The profile whose contract its volumes are held to: its lineage's, or the one that adopted it."""
        return self.profile or self.adopted_by

    @staticmethod
    def from_object(obj: Mapping) -> "ClassEntry":
        """Read a StorageClass in its wire form."""
        metadata = obj.get("metadata") or {}
        labels = metadata.get("labels") or {}
        annotations = metadata.get("annotations") or {}
        version = labels.get(VERSION_LABEL, "")
        return ClassEntry(
            name=metadata["name"],
            provisioner=obj.get("provisioner", ""),
            profile=labels.get(PROFILE_LABEL),
            version=int(version) if version.isdigit() else None,
            superseded_by=annotations.get(SUPERSEDED_BY_ANNOTATION),
            is_default=annotations.get(DEFAULT_CLASS_ANNOTATION) == "true",
            content_hash=annotations.get(HASH_ANNOTATION, ""),
            created_at=metadata.get("creationTimestamp") or "",
            mount_options=tuple(obj.get("mountOptions") or ()),
            parameters=dict(obj.get("parameters") or {}),
            adopted_by=annotations.get(ADOPTED_BY_ANNOTATION),
        )
