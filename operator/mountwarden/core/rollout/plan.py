"""The plan of a rollout: volumes -> claims -> pods -> the workloads that must remount them.

``build_plan`` is also the dry run that `mountwarden plan` prints.
"""

from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace

from mountwarden.core.options.effects import freshness_lost
from mountwarden.core.options.normalize import normalize
from mountwarden.core.rollout.world import (
    RESTARTABLE_KINDS,
    Autoscaler,
    Pod,
    Target,
    Volume,
    Workload,
    WorkloadRef,
    World,
)
from mountwarden.core.vocabulary import RolloutApproval


@dataclass(frozen=True, slots=True)
class VolumeChange:
    volume: Volume
    from_version: int | None
    #: PatchBoundVolumes: its options differ from the target's.
    needs_patch: bool
    #: NewStorageClass: it belongs to an older class.
    on_older_version: bool
    #: Of another class, taken over through spec.adopt and not adopted yet (patched and annotated on approval).
    adopting: bool = False

    @property
    def to_patch(self) -> bool:
        """PatchBoundVolumes patches it once approved: its options differ, or it is to be adopted."""
        return self.needs_patch or self.adopting

    @property
    def action(self) -> str:
        return "adopt" if self.adopting else "patch" if self.needs_patch else "keep"


@dataclass(frozen=True, slots=True)
class Consumer:
    """A workload, Job, CronJob or bare pod that mounts volumes of the lineage."""

    ref: WorkloadRef
    pods: tuple[Pod, ...]
    volumes: tuple[str, ...]
    workload: Workload | None = None
    autoscaler: Autoscaler | None = None

    @property
    def restartable(self) -> bool:
        return self.workload is not None

    @property
    def replicas(self) -> int | None:
        return self.workload.replicas if self.workload else None

    def note(self, target: Target) -> str:
        kind = self.ref.kind
        if not target.patches_volumes:
            return "keeps its volumes' options until migrated to a new PVC of " + target.version.storage_class
        if kind in ("Job", "CronJob"):
            return "picks up the new options at its next run"
        if kind == "Pod":
            return "a bare pod: mountwarden never deletes it; recreate it to mount the new options"
        if self.workload is None:
            return f"a {kind} mountwarden cannot restart: delete its pods to remount"
        if self.workload.replicas == 0:
            return zero_message(self)
        if self.workload.restarted_for == target.version.storage_class:
            return f"already restarted for {target.version.storage_class}"
        return "restarted, then verified on the nodes"


@dataclass(frozen=True)
class Plan:
    target: Target
    volumes: tuple[VolumeChange, ...]
    consumers: tuple[Consumer, ...]
    warnings: tuple[str, ...]
    world: World

    @property
    def freshness_lost(self) -> list[tuple[Consumer, str]]:
        """The consumers whose volumes the change makes staler, and by how much (the upload incident's lesson:
        before an option is removed, find who depends on it)."""
        if not self.target.patches_volumes:
            return []
        target = normalize(self.target.version.mount_options).options
        lost_by_volume = {change.volume.name: lost for change in self.volumes if change.needs_patch
                          and (lost := freshness_lost(normalize(change.volume.mount_options).options, target))}
        lost = [(consumer, next((lost_by_volume[v] for v in consumer.volumes if v in lost_by_volume), None))
                for consumer in self.consumers]
        return [(consumer, what) for consumer, what in lost if what is not None]

    @property
    def workloads(self) -> tuple[Consumer, ...]:
        return tuple(c for c in self.consumers if c.restartable)

    @property
    def others(self) -> tuple[Consumer, ...]:
        return tuple(c for c in self.consumers if not c.restartable)

    @property
    def covered_volumes(self) -> list[str]:
        """The PVs the plan is about: all of the lineage (patching), or those on older classes."""
        if self.target.patches_volumes:
            return sorted(change.volume.name for change in self.volumes)
        return sorted(change.volume.name for change in self.volumes if change.on_older_version)

    @property
    def from_versions(self) -> list[int]:
        moving = (c for c in self.volumes if (c.needs_patch if self.target.patches_volumes else c.on_older_version))
        return sorted({change.from_version for change in moving if change.from_version is not None})

    def action(self, consumer: Consumer) -> str:
        if not self.target.patches_volumes:
            return "migrate"
        workload = consumer.workload
        if workload is None or workload.restarted_for == self.target.version.storage_class:
            return "none"
        return "wait" if workload.replicas == 0 else "restart"

    def to_dict(self) -> dict:
        """The dry run as `mountwarden plan --json` prints it."""
        target = self.target
        return {
            "profile": target.profile,
            "fromVersions": self.from_versions,
            "toVersion": target.version.version,
            "toStorageClass": target.version.storage_class,
            "toMountOptions": list(target.version.mount_options),
            "strategy": target.policy.strategy,
            "approval": target.policy.approval,
            "approvalKey": target.approval_key,
            "volumes": [
                {
                    "name": change.volume.name,
                    "storageClassName": change.volume.storage_class,
                    "claim": "/".join(change.volume.claim) if change.volume.claim else None,
                    "fromVersion": change.from_version,
                    "mountOptions": list(change.volume.mount_options),
                    "action": change.action,
                }
                for change in self.volumes
            ],
            "workloads": [
                {
                    "kind": consumer.ref.kind,
                    "namespace": consumer.ref.namespace,
                    "name": consumer.ref.name,
                    "replicas": consumer.replicas,
                    "pods": [pod.name for pod in consumer.pods],
                    "volumes": list(consumer.volumes),
                    "action": self.action(consumer),
                    "note": consumer.note(target),
                }
                for consumer in self.consumers
            ],
            "warnings": list(self.warnings),
            "freshnessLoss": freshness_records(self),
        }



def freshness_records(plan: Plan) -> list[dict]:
    """Who loses freshness with the plan's change, as status.rollout.freshnessLoss and the plan's JSON say it."""
    return [{"kind": consumer.ref.kind, "namespace": consumer.ref.namespace, "name": consumer.ref.name,
             "pods": [pod.name for pod in consumer.pods], "volumes": list(consumer.volumes), "loses": lost}
            for consumer, lost in plan.freshness_lost]


def adopting(target: Target, taken: Collection[str], world: World) -> Target:
    """The target with the PVs its spec.adopt takes (``taken``), and which of them are not adopted yet."""
    names = frozenset(taken)
    return replace(target, adopted=names, adopting=frozenset(
        volume.name for volume in world.volumes if volume.name in names and volume.adopted_by != target.profile))


def _same_options(declared: Sequence[str], other: Sequence[str]) -> bool:
    return normalize(declared).options == normalize(other).options


def build_plan(target: Target, world: World) -> Plan:
    """Which volumes change and which consumers must remount them, in the order they will restart."""
    changes = []
    for volume in sorted(world.volumes, key=lambda v: v.name):
        changes.append(VolumeChange(
            volume=volume,
            from_version=target.version_of(volume.applied_version) or target.version_of(volume.storage_class),
            needs_patch=(target.patches_volumes
                         and not _same_options(target.version.mount_options, volume.mount_options)),
            on_older_version=volume.storage_class != target.version.storage_class,
            adopting=volume.name in target.adopting,
        ))
    volume_by_claim = {v.claim: v.name for v in world.volumes if v.claim}

    found: dict[WorkloadRef, tuple[list[Pod], set[str]]] = {}
    for pod in world.pods:
        mounted = {volume_by_claim[(pod.namespace, c)] for c in pod.claims if (pod.namespace, c) in volume_by_claim}
        if not mounted or not pod.live:
            continue
        ref = world.owner_of(pod) or WorkloadRef("Pod", pod.namespace, pod.name)
        pods, volumes = found.setdefault(ref, ([], set()))
        pods.append(pod)
        volumes.update(mounted)
    # Workloads at zero replicas have no pods: find them by the claims their template names.
    for workload in world.workloads:
        for (namespace, claim), volume in volume_by_claim.items():
            if namespace == workload.ref.namespace and workload.uses_claim(claim):
                found.setdefault(workload.ref, ([], set()))[1].add(volume)

    workloads = {w.ref: w for w in world.workloads}
    autoscalers = {a.target: a for a in world.autoscalers}
    consumers = tuple(
        Consumer(
            ref=ref,
            pods=tuple(sorted(pods, key=lambda p: p.name)),
            volumes=tuple(sorted(volumes)),
            workload=workloads.get(ref) if ref.kind in RESTARTABLE_KINDS else None,
            autoscaler=autoscalers.get(ref),
        )
        for ref, (pods, volumes) in sorted(found.items(), key=lambda item: (item[0].namespace, item[0].name,
                                                                            item[0].kind))
    )
    plan = Plan(target, tuple(changes), consumers, (), world)
    return Plan(target, plan.volumes, consumers, tuple(_warnings(plan)), world)


def _warnings(plan: Plan) -> list[str]:
    target, changes, consumers = plan.target, plan.volumes, plan.consumers
    warnings = []
    for consumer, lost in plan.freshness_lost:
        warnings.append(f"{consumer.ref} loses freshness: {lost}; check that it does not rely on it (an upload "
                        "service broke when flags it relied on were removed)")
    used = {volume for consumer in consumers for volume in consumer.volumes}
    for change in changes:
        if change.volume.claim is None:
            warnings.append(f"PersistentVolume {change.volume.name} is not bound to a claim")
        elif change.volume.name not in used and (change.needs_patch or change.on_older_version):
            warnings.append(f"PersistentVolume {change.volume.name} has no consumer now: its next mount gets "
                            + ("the new options" if target.patches_volumes else "its old options"))
    for consumer in consumers:
        if consumer.ref.kind == "Pod":
            warnings.append(f"pod {consumer.ref.namespace}/{consumer.ref.name} has no controller: "
                            "mountwarden reports it and never deletes it")
        elif consumer.workload is not None and consumer.workload.replicas == 0 and target.patches_volumes:
            warnings.append(f"{consumer.ref}: {zero_message(consumer)}")
    if target.policy.approval == RolloutApproval.MANUAL and any(change.to_patch for change in changes):
        warnings.append(f"approval is Manual: the rollout waits for the annotation {target.approve_annotation}: "
                        f"\"{target.approval_key}\" on StorageProfile {target.profile}")
    return warnings


def zero_message(consumer: Consumer) -> str:
    if consumer.ref.kind == "DaemonSet":
        return "runs on no node: its pods start with the new options wherever it is scheduled next"
    if consumer.autoscaler is not None and consumer.autoscaler.scaling_disabled:
        return (f"at 0 replicas with HorizontalPodAutoscaler {consumer.autoscaler.name} disabled (an HPA never "
                "scales up from zero): a deliberate scale-up is needed; its pods then start with the new options")
    return "scaled to zero: a deliberate scale-up is needed; its pods then start with the new options"
