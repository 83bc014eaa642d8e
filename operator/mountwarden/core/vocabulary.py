"""The words of a StorageProfile's spec that the core decides by: one definition, for the core and the API alike.

mountwarden.api.storageprofile declares the spec's fields with these types (the CRD's enums come from
them); the core compares against them, never against string literals of its own.
"""

from enum import StrEnum


class Enforcement(StrEnum):
    """What admission does with a PVC that breaks the profile: warn, or refuse it."""

    WARN = "warn"
    DENY = "deny"


class SqlitePolicy(StrEnum):
    """SQLite on the profile's volumes: refused (with deny), warned about, or allowed."""

    FORBID = "forbid"
    WARN = "warn"
    ALLOW = "allow"


class RolloutStrategy(StrEnum):
    NEW_STORAGE_CLASS = "NewStorageClass"
    PATCH_BOUND_VOLUMES = "PatchBoundVolumes"


class RolloutApproval(StrEnum):
    AUTOMATIC = "Automatic"
    MANUAL = "Manual"


class BackendKind(StrEnum):
    """What serves the volumes: EFS, any NFS server, or an NFSv3-only gateway (no rpcbind, no locks)."""

    EFS = "efs"
    NFS = "nfs"
    NFSV3_GATEWAY = "nfsv3-gateway"


class StaleHandleRemedy(StrEnum):
    """What mountwarden does by itself about a pod on a stale file handle: nothing (say it), or evict the pod."""

    NONE = "None"
    EVICT = "Evict"
