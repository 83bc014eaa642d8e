"""What a rollout tick asks the cluster to do, and the Events it posts: plain values the handler performs."""

from dataclasses import dataclass

from mountwarden.core.rollout.world import (
    ADOPTED_BY_ANNOTATION,
    APPLIED_VERSION_ANNOTATION,
    PREVIOUS_OPTIONS_ANNOTATION,
    RESTARTED_AT_ANNOTATION,
    RESTARTED_FOR_ANNOTATION,
    WorkloadRef,
    format_previous_options,
)


@dataclass(frozen=True, slots=True)
class PatchVolume:
    """Set a PV's mountOptions in one patch, together with the record of what it had before.

    Asked just before the restart of the first workload that mounts it (its turn), never earlier: until then a pod
    rescheduled for any other reason mounts the options it had.
    """

    name: str
    mount_options: tuple[str, ...]
    previous_options: tuple[str, ...]
    applied_version: str
    #: The profile adopting it (spec.adopt): recorded on the PV, which the profile governs from then on.
    adopted_by: str | None = None
    #: The PV's resourceVersion when it was read ("" patches unguarded: only for a PV never read).
    resource_version: str = ""

    def body(self) -> dict:
        annotations = {
            APPLIED_VERSION_ANNOTATION: self.applied_version,
            PREVIOUS_OPTIONS_ANNOTATION: format_previous_options(self.previous_options),
        }
        if self.adopted_by:
            annotations[ADOPTED_BY_ANNOTATION] = self.adopted_by
        metadata: dict = {"annotations": annotations}
        if self.resource_version:
            # Refused (409) if another writer changed the PV since it was read: the tick is retried on a fresh
            # read, so the previous options recorded are the PV's and nobody's change is overwritten unseen.
            metadata["resourceVersion"] = self.resource_version
        return {"metadata": metadata, "spec": {"mountOptions": list(self.mount_options)}}


@dataclass(frozen=True, slots=True)
class ReleaseVolume:
    """A PV the profile adopted and no longer names in spec.adopt: it stops being the profile's (its options stay)."""

    name: str

    def body(self) -> dict:
        return {"metadata": {"annotations": {ADOPTED_BY_ANNOTATION: None}}}


@dataclass(frozen=True, slots=True)
class RestartWorkload:
    """`kubectl rollout restart`, with the target recorded in the template so it happens once."""

    ref: WorkloadRef
    resource_version: str
    storage_class: str
    at: str

    def body(self) -> dict:
        # resourceVersion: refused (409) if the workload changed since it was read, so a restart is never
        # decided on a stale view of the template.
        return {
            "metadata": {"resourceVersion": self.resource_version},
            "spec": {"template": {"metadata": {"annotations": {
                RESTARTED_FOR_ANNOTATION: self.storage_class,
                RESTARTED_AT_ANNOTATION: self.at,
            }}}},
        }


@dataclass(frozen=True, slots=True)
class RemountPod:
    """Evict one replica (Eviction API, by UID) so that its controller recreates it and it mounts afresh.

    An eviction, never a delete: PodDisruptionBudgets hold, as for `kubectl drain`.
    """

    namespace: str
    name: str
    uid: str


Action = PatchVolume | RestartWorkload | RemountPod | ReleaseVolume


@dataclass(frozen=True, slots=True)
class Event:
    warning: bool
    reason: str
    message: str


@dataclass(frozen=True)
class Step:
    actions: tuple[Action, ...]
    #: status.rollout, every key present (None clears it: status is written as a merge patch).
    status: dict
    events: tuple[Event, ...] = ()
