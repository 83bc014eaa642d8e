"""Rolling a profile's new options out to volumes that are already bound, one workload at a time.

A StorageClass's options apply only when a volume is provisioned, and a bound
PV's ``mountOptions`` apply only at the next mount. So a new version of a
profile reaches running consumers in three steps: patch the PVs (strategy
PatchBoundVolumes), restart each consuming workload the way ``kubectl rollout
restart`` does, and prove on the nodes that every replica really mounted the new
options. The proof matters: pods of one export on one node can share an NFS
superblock, and a new mount then silently keeps the first mount's options.

Everything here is pure: the world (PVs, pods, workloads, node reports) comes in
as plain dataclasses parsed from the objects' wire form, and the next actions and
the new ``status.rollout`` go out. The world, not the status, is the source of
truth for what was done: a restart is recorded in the workload's pod template
(``mountwarden.io/restarted-for: <class>``) and a PV patch in the PV itself
(``mountwarden.io/applied-version``), so a planner that lost its status after a
crash never restarts a workload twice and never patches a PV halfway.
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import NamedTuple

from mountwarden.core.compare import check
from mountwarden.core.options import Severity, normalize

RESTARTED_FOR_ANNOTATION = "mountwarden.io/restarted-for"
RESTARTED_AT_ANNOTATION = "mountwarden.io/restarted-at"
APPLIED_VERSION_ANNOTATION = "mountwarden.io/applied-version"
PREVIOUS_OPTIONS_ANNOTATION = "mountwarden.io/previous-mount-options"
APPROVE_ANNOTATION = "mountwarden.io/approve-rollout"

PATCH_BOUND_VOLUMES = "PatchBoundVolumes"
NEW_STORAGE_CLASS = "NewStorageClass"
MANUAL = "Manual"

RESTARTABLE_KINDS = ("Deployment", "StatefulSet", "DaemonSet")

MIGRATION_GUIDANCE = (
    "Volumes that exist keep their options; new PVCs get {target}. To move a consumer: create a PVC of class "
    "{target}, stop the writers, copy the data, point the workload at the new claim, then delete the old claim. "
    "Copy SQLite databases with `sqlite3 db '.backup new.db'` or `VACUUM INTO 'new.db'`, never with cp of a live "
    "file."
)


class Phase(StrEnum):
    AWAITING_APPROVAL = "AwaitingApproval"
    PROGRESSING = "Progressing"
    PAUSED = "Paused"
    WAITING = "Waiting"
    AWAITING_MIGRATION = "AwaitingMigration"
    COMPLETE = "Complete"


class State(StrEnum):
    PENDING = "Pending"
    RESTARTING = "Restarting"
    VERIFYING = "Verifying"
    DONE = "Done"
    BLOCKED = "Blocked"
    WAITING = "Waiting"


#: States in which a workload holds one of the maxConcurrentWorkloads slots.
IN_FLIGHT = (State.RESTARTING, State.VERIFYING)


def timestamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


# -- the world, parsed from the objects' wire form -----------------------------------------------


class WorkloadRef(NamedTuple):
    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}"


def controller_of(obj: Mapping) -> WorkloadRef | None:
    """The object's controlling owner (a ReplicaSet's Deployment, a pod's ReplicaSet...), if any."""
    metadata = obj.get("metadata") or {}
    for owner in metadata.get("ownerReferences") or []:
        if owner.get("controller"):
            return WorkloadRef(owner["kind"], metadata.get("namespace", ""), owner["name"])
    return None


@dataclass(frozen=True, slots=True)
class Version:
    """One StorageClass of the profile's lineage."""

    storage_class: str
    version: int
    mount_options: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Policy:
    """spec.rollout of the profile."""

    strategy: str = PATCH_BOUND_VOLUMES
    approval: str = MANUAL
    max_concurrent_workloads: int = 1
    verify_timeout_seconds: int = 600


@dataclass(frozen=True, slots=True)
class Target:
    """Where the rollout goes: the profile's current version, and every version that still exists."""

    profile: str
    version: Version
    lineage: tuple[Version, ...]
    policy: Policy = Policy()
    #: The value of the profile's mountwarden.io/approve-rollout annotation.
    approved_version: str | None = None

    @property
    def approved(self) -> bool:
        return self.policy.approval != MANUAL or self.approved_version == str(self.version.version)

    @property
    def patches_volumes(self) -> bool:
        return self.policy.strategy == PATCH_BOUND_VOLUMES

    @property
    def restarts_workloads(self) -> bool:
        """Whether the rollout moves anything now (and so needs the node reports to verify)."""
        return self.patches_volumes and self.approved

    def version_of(self, storage_class: str | None) -> int | None:
        """The version of a class of the lineage, also of one already deleted (named <profile>-v<N>)."""
        known = next((v.version for v in self.lineage if v.storage_class == storage_class), None)
        if known is not None or storage_class is None:
            return known
        prefix = f"{self.profile}-v"
        number = storage_class[len(prefix):]
        return int(number) if storage_class.startswith(prefix) and number.isdigit() else None


@dataclass(frozen=True, slots=True)
class Volume:
    """A PersistentVolume of the profile's lineage."""

    name: str
    storage_class: str
    mount_options: tuple[str, ...]
    #: (namespace, name) of the claim it is bound to.
    claim: tuple[str, str] | None = None
    #: The class whose options mountwarden last patched in (mountwarden.io/applied-version).
    applied_version: str | None = None
    previous_options: tuple[str, ...] = ()

    @staticmethod
    def from_object(obj: Mapping) -> "Volume":
        metadata = obj.get("metadata") or {}
        annotations = metadata.get("annotations") or {}
        spec = obj.get("spec") or {}
        ref = spec.get("claimRef") or {}
        bound = (obj.get("status") or {}).get("phase") == "Bound" and ref.get("name")
        previous = annotations.get(PREVIOUS_OPTIONS_ANNOTATION, "")
        return Volume(
            name=metadata["name"],
            storage_class=spec.get("storageClassName") or "",
            mount_options=tuple(spec.get("mountOptions") or ()),
            claim=(ref.get("namespace", ""), ref["name"]) if bound else None,
            applied_version=annotations.get(APPLIED_VERSION_ANNOTATION),
            previous_options=tuple(token for token in previous.split(",") if token),
        )


@dataclass(frozen=True, slots=True)
class Pod:
    namespace: str
    name: str
    uid: str
    node: str | None
    phase: str
    ready: bool
    terminating: bool
    started_at: datetime | None
    #: Claim name -> the pod's name for that volume.
    claims: Mapping[str, str]
    owner: WorkloadRef | None = None

    @property
    def live(self) -> bool:
        """Holding its mounts for the foreseeable future: not finished and not on its way out."""
        return not self.terminating and self.phase not in ("Succeeded", "Failed")

    @staticmethod
    def from_object(obj: Mapping) -> "Pod":
        metadata = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        claims = {
            volume["persistentVolumeClaim"]["claimName"]: volume["name"]
            for volume in spec.get("volumes") or []
            if volume.get("persistentVolumeClaim")
        }
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
        return Pod(
            namespace=metadata.get("namespace", ""),
            name=metadata["name"],
            uid=metadata["uid"],
            node=spec.get("nodeName"),
            phase=status.get("phase", "Pending"),
            ready=ready,
            terminating=bool(metadata.get("deletionTimestamp")),
            started_at=parse_time(status.get("startTime")),
            claims=claims,
            owner=controller_of(obj),
        )


@dataclass(frozen=True, slots=True)
class Workload:
    """A Deployment, StatefulSet or DaemonSet: what a restart needs to know about it."""

    ref: WorkloadRef
    #: Desired replicas (for a DaemonSet, the nodes it should run on).
    replicas: int
    resource_version: str
    restarted_for: str | None = None
    restarted_at: str | None = None
    #: Claims its pod template mounts, and (StatefulSet) its volumeClaimTemplates.
    claims: tuple[str, ...] = ()
    claim_templates: tuple[str, ...] = ()
    #: What its own rollout still waits for; empty once the rollout is complete.
    progress: str = ""

    @property
    def rolled_out(self) -> bool:
        return not self.progress

    def uses_claim(self, claim: str) -> bool:
        if claim in self.claims:
            return True
        # A StatefulSet's claims are <template>-<statefulset>-<ordinal>.
        for template in self.claim_templates:
            prefix = f"{template}-{self.ref.name}-"
            if claim.startswith(prefix) and claim[len(prefix):].isdigit():
                return True
        return False

    @staticmethod
    def from_object(obj: Mapping) -> "Workload":
        kind = obj["kind"]
        metadata = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        template = spec.get("template") or {}
        annotations = (template.get("metadata") or {}).get("annotations") or {}
        if kind == "DaemonSet":
            replicas = int(status.get("desiredNumberScheduled") or 0)
        else:
            replicas = int(spec.get("replicas", 1))
        return Workload(
            ref=WorkloadRef(kind, metadata.get("namespace", ""), metadata["name"]),
            replicas=replicas,
            resource_version=metadata.get("resourceVersion", ""),
            restarted_for=annotations.get(RESTARTED_FOR_ANNOTATION),
            restarted_at=annotations.get(RESTARTED_AT_ANNOTATION),
            claims=tuple(
                volume["persistentVolumeClaim"]["claimName"]
                for volume in (template.get("spec") or {}).get("volumes") or []
                if volume.get("persistentVolumeClaim")
            ),
            claim_templates=tuple(
                (t.get("metadata") or {}).get("name", "") for t in spec.get("volumeClaimTemplates") or []
            ),
            progress=rollout_progress(kind, metadata, spec, status, replicas),
        )


def rollout_progress(kind: str, metadata: Mapping, spec: Mapping, status: Mapping, replicas: int) -> str:
    """What the workload's own rollout waits for, as `kubectl rollout status` judges it; "" when complete."""
    if int(status.get("observedGeneration") or 0) < int(metadata.get("generation") or 0):
        return f"the {kind} controller has not seen the change yet"
    if kind == "Deployment":
        updated = int(status.get("updatedReplicas") or 0)
        total = int(status.get("replicas") or 0)
        available = int(status.get("availableReplicas") or 0)
        if updated < replicas:
            return f"{updated} of {replicas} replicas updated"
        if total > updated:
            return f"{total - updated} old replicas pending termination"
        if available < updated:
            return f"{available} of {updated} updated replicas available"
        return ""
    if kind == "StatefulSet":
        if (spec.get("updateStrategy") or {}).get("type") == "OnDelete":
            return "updateStrategy OnDelete: the StatefulSet replaces a pod only when it is deleted"
        updated = int(status.get("updatedReplicas") or 0)
        ready = int(status.get("readyReplicas") or 0)
        if updated < replicas:
            return f"{updated} of {replicas} replicas updated"
        if status.get("currentRevision") != status.get("updateRevision"):
            return "the update revision is not current yet"
        if ready < replicas:
            return f"{ready} of {replicas} replicas ready"
        return ""
    if kind == "DaemonSet":
        updated = int(status.get("updatedNumberScheduled") or 0)
        available = int(status.get("numberAvailable") or 0)
        if updated < replicas:
            return f"{updated} of {replicas} nodes updated"
        if available < replicas:
            return f"{available} of {replicas} nodes available"
        return ""
    raise ValueError(f"{kind} is not a workload mountwarden restarts")


@dataclass(frozen=True, slots=True)
class Autoscaler:
    """A HorizontalPodAutoscaler; at zero replicas it disables itself and never scales up again."""

    name: str
    target: WorkloadRef
    scaling_disabled: bool

    @staticmethod
    def from_object(obj: Mapping) -> "Autoscaler":
        metadata = obj.get("metadata") or {}
        ref = (obj.get("spec") or {}).get("scaleTargetRef") or {}
        conditions = (obj.get("status") or {}).get("conditions") or []
        disabled = any(
            c.get("type") == "ScalingActive" and c.get("status") == "False" and c.get("reason") == "ScalingDisabled"
            for c in conditions
        )
        return Autoscaler(
            name=metadata["name"],
            target=WorkloadRef(ref.get("kind", ""), metadata.get("namespace", ""), ref.get("name", "")),
            scaling_disabled=disabled,
        )


@dataclass(frozen=True, slots=True)
class Mount:
    """One mount of a NodeMountReport."""

    pod_uid: str | None
    volume_name: str
    mount_point: str
    superblock: str
    effective_options: tuple[str, ...]
    shared_with: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeReport:
    node: str
    scan_time: datetime
    mounts: tuple[Mount, ...]

    @staticmethod
    def from_object(obj: Mapping) -> "NodeReport":
        spec = obj.get("spec") or {}
        mounts = tuple(
            Mount(
                pod_uid=m.get("podUid"),
                volume_name=m.get("volumeName", ""),
                mount_point=m.get("mountPoint", ""),
                superblock=m.get("superblock", ""),
                effective_options=tuple(m.get("effectiveOptions") or ()),
                shared_with=tuple(m.get("sharedWith") or ()),
            )
            for m in spec.get("volumes") or []
        )
        scanned = parse_time(spec.get("scanTime")) or datetime.min.replace(tzinfo=UTC)
        return NodeReport(node=spec.get("nodeName") or obj["metadata"]["name"], scan_time=scanned, mounts=mounts)

    def mount_of(self, pod: Pod, names: Iterable[str]) -> Mount | None:
        wanted = set(names)
        return next((m for m in self.mounts if m.pod_uid == pod.uid and m.volume_name in wanted), None)

    def at(self, mount_point: str) -> Mount | None:
        return next((m for m in self.mounts if m.mount_point == mount_point), None)


@dataclass(frozen=True)
class World:
    """What the cluster holds for one profile's rollout."""

    #: PVs of the profile's lineage.
    volumes: tuple[Volume, ...]
    #: Pods in the namespaces of their claims.
    pods: tuple[Pod, ...] = ()
    workloads: tuple[Workload, ...] = ()
    #: The controller of each ReplicaSet and Job (None: nobody controls it).
    parents: Mapping[WorkloadRef, WorkloadRef | None] = field(default_factory=dict)
    autoscalers: tuple[Autoscaler, ...] = ()
    reports: Mapping[str, NodeReport] = field(default_factory=dict)

    def owner_of(self, pod: Pod) -> WorkloadRef | None:
        """The workload a pod belongs to: Deployment via its ReplicaSet, CronJob via its Job."""
        owner = pod.owner
        if owner is not None and owner.kind in ("ReplicaSet", "Job"):
            return self.parents.get(owner) or owner
        return owner


# -- the plan: volumes -> claims -> pods -> workloads --------------------------------------------


@dataclass(frozen=True, slots=True)
class VolumeChange:
    volume: Volume
    from_version: int | None
    #: PatchBoundVolumes: its options differ from the target's.
    needs_patch: bool
    #: NewStorageClass: it belongs to an older class.
    on_older_version: bool


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
            return _zero_message(self)
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
            "volumes": [
                {
                    "name": change.volume.name,
                    "storageClassName": change.volume.storage_class,
                    "claim": "/".join(change.volume.claim) if change.volume.claim else None,
                    "fromVersion": change.from_version,
                    "mountOptions": list(change.volume.mount_options),
                    "action": "patch" if change.needs_patch else "keep",
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
        }


def _satisfies(declared: Sequence[str], observed: Sequence[str]) -> bool:
    """A mount's options hold what was declared (an option the mount table omits counts as its default)."""
    return check(normalize(declared).options, normalize(observed, observed=True).options).compliant


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
    return Plan(target, tuple(changes), consumers, tuple(_warnings(target, changes, consumers)), world)


def _warnings(target: Target, changes: Sequence[VolumeChange], consumers: Sequence[Consumer]) -> list[str]:
    warnings = []
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
            warnings.append(f"{consumer.ref}: {_zero_message(consumer)}")
    if target.policy.approval == MANUAL and any(change.needs_patch for change in changes):
        warnings.append(f"approval is Manual: the rollout waits for the annotation {APPROVE_ANNOTATION}: "
                        f"\"{target.version.version}\" on StorageProfile {target.profile}")
    return warnings


def _zero_message(consumer: Consumer) -> str:
    if consumer.ref.kind == "DaemonSet":
        return "runs on no node: its pods start with the new options wherever it is scheduled next"
    if consumer.autoscaler is not None and consumer.autoscaler.scaling_disabled:
        return (f"at 0 replicas with HorizontalPodAutoscaler {consumer.autoscaler.name} disabled (an HPA never "
                "scales up from zero): a deliberate scale-up is needed; its pods then start with the new options")
    return "scaled to zero: a deliberate scale-up is needed; its pods then start with the new options"


# -- actions -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PatchVolume:
    """Set a PV's mountOptions in one patch, together with the record of what it had before."""

    name: str
    mount_options: tuple[str, ...]
    previous_options: tuple[str, ...]
    applied_version: str

    def body(self) -> dict:
        return {
            "metadata": {"annotations": {
                APPLIED_VERSION_ANNOTATION: self.applied_version,
                PREVIOUS_OPTIONS_ANNOTATION: ",".join(self.previous_options),
            }},
            "spec": {"mountOptions": list(self.mount_options)},
        }


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
    """Delete one replica (by UID) so that its controller recreates it and it mounts afresh."""

    namespace: str
    name: str
    uid: str


Action = PatchVolume | RestartWorkload | RemountPod


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


# -- verification: every replica, on its node --------------------------------------------------


class Check(StrEnum):
    OK = "ok"
    PENDING = "pending"  # no verdict yet: the node's report has not caught up
    STALE = "stale"  # kept an older version's superblock that nobody else holds now: a remount fixes it
    SHARED = "shared"  # kept an older version's superblock that another consumer holds
    ABSENT = "absent"  # neither the new options nor an old version's: the driver dropped them


@dataclass(frozen=True, slots=True)
class PodCheck:
    check: Check
    pod: Pod
    reason: str = ""
    message: str = ""


def verify_pod(pod: Pod, volume_names: Mapping[str, str], target: Target, world: World,
               siblings: frozenset[str]) -> PodCheck:
    """Compare one replica's mounts with the target on its node's report.

    ``volume_names`` maps each of the pod's lineage PVs to the pod's name for that
    volume; ``siblings`` are the UIDs of the pods of the same workload, whose
    sharing a superblock a remount of them all resolves.
    """
    where = f"pod {pod.namespace}/{pod.name} on node {pod.node}"
    report = world.reports.get(pod.node or "")
    if report is None:
        return PodCheck(Check.PENDING, pod, "ReportMissing",
                        f"{where}: no NodeMountReport for the node: is the mountwarden agent running there?")
    if pod.started_at is None or report.scan_time < pod.started_at:
        return PodCheck(Check.PENDING, pod, "ReportStale",
                        f"{where}: the node's report (scanned {timestamp(report.scan_time)}) predates the pod: "
                        "is the mountwarden agent running there?")
    older = [v.mount_options for v in target.lineage if v.storage_class != target.version.storage_class]
    for pv, pod_volume in sorted(volume_names.items()):
        mount = report.mount_of(pod, (pv, pod_volume))
        if mount is None:
            return PodCheck(Check.PENDING, pod, "MountNotReported",
                            f"{where}: the node's report does not show volume {pv} yet")
        if _satisfies(target.version.mount_options, mount.effective_options):
            continue
        volume = next((v for v in world.volumes if v.name == pv), None)
        previous = [volume.previous_options] if volume and volume.previous_options else []
        if not any(_satisfies(options, mount.effective_options) for options in [*older, *previous]):
            findings = check(normalize(target.version.mount_options).options,
                             normalize(mount.effective_options, observed=True).options).findings
            wrong = [finding.message for finding in findings if finding.severity is not Severity.INFO]
            return PodCheck(Check.ABSENT, pod, "OptionsAbsent",
                            f"{where}: volume {pv} is mounted without the new options (the driver dropped them?): "
                            + " ".join(wrong[:3]))
        kept = f"{where}: volume {pv} kept the old options of superblock {mount.superblock}"
        others = [point for point in mount.shared_with if not _sibling_mount(report.at(point), siblings)]
        if others:
            holders = ", ".join(_holder(report.at(point), point, world) for point in others)
            return PodCheck(Check.SHARED, pod, "SuperblockShared",
                            f"{kept}, which {holders} still holds on that node. Move or restart that consumer "
                            f"off node {pod.node}; mountwarden then remounts this pod.")
        return PodCheck(Check.STALE, pod, "Remounting", f"{kept} (a replaced replica held it when the pod started)")
    return PodCheck(Check.OK, pod)


def _sibling_mount(mount: Mount | None, siblings: frozenset[str]) -> bool:
    # A CSI staging mount (no pod) belongs to the volume itself and goes with its last pod on the node.
    return mount is not None and (mount.pod_uid is None or mount.pod_uid in siblings)


def _holder(mount: Mount | None, point: str, world: World) -> str:
    if mount is None:
        return f"the mount at {point}"
    pod = next((p for p in world.pods if p.uid == mount.pod_uid), None)
    return f"pod {pod.namespace}/{pod.name}" if pod else f"pod UID {mount.pod_uid} (mount {point})"


def _check_pods(pods: Sequence[Pod], target: Target, world: World) -> list[PodCheck]:
    claims = {v.claim: v.name for v in world.volumes if v.claim}
    siblings = frozenset(pod.uid for pod in pods)
    checks = []
    for pod in pods:
        volume_names = {claims[(pod.namespace, claim)]: name for claim, name in pod.claims.items()
                        if (pod.namespace, claim) in claims}
        checks.append(verify_pod(pod, volume_names, target, world, siblings))
    return checks


# -- the state machine -------------------------------------------------------------------------


@dataclass
class Progress:
    """One workload's line in status.rollout.workloads."""

    consumer: Consumer
    state: State
    reason: str
    message: str
    pod: str | None = None
    node: str | None = None
    restarted_at: str | None = None
    verifying_since: str | None = None
    done_at: str | None = None
    remounts: int = 0

    @property
    def busy(self) -> bool:
        """Holds a maxConcurrentWorkloads slot: restarting or verifying, or in a rollout of its own."""
        workload = self.consumer.workload
        return self.state in IN_FLIGHT or (self.state == State.PENDING and workload is not None
                                           and not workload.rolled_out)

    def to_wire(self) -> dict:
        ref = self.consumer.ref
        record = {
            "kind": ref.kind, "namespace": ref.namespace, "name": ref.name,
            "state": str(self.state), "reason": self.reason, "message": self.message,
            "replicas": self.consumer.replicas or 0, "volumes": list(self.consumer.volumes),
            "pod": self.pod, "node": self.node,
            "restartedAt": self.restarted_at, "verifyingSince": self.verifying_since, "doneAt": self.done_at,
            "remounts": self.remounts or None,
        }
        return {key: value for key, value in record.items() if value is not None}


def _previous_workloads(previous: Mapping | None, target: Target) -> dict[WorkloadRef, Mapping]:
    if not previous or previous.get("targetStorageClassName") != target.version.storage_class:
        return {}
    return {WorkloadRef(w["kind"], w["namespace"], w["name"]): w for w in previous.get("workloads") or []}


def _evaluate(consumer: Consumer, plan: Plan, before: Mapping, now: datetime) -> tuple[Progress, list[Action]]:
    """Where one workload stands, judged from the world; and what it needs next, short of being started."""
    target = plan.target
    workload = consumer.workload
    assert workload is not None
    storage_class = target.version.storage_class
    restarted = workload.restarted_for == storage_class
    restarted_at = workload.restarted_at if restarted else None
    remounts = int(before.get("remounts") or 0)
    if restarted and before.get("state") == State.DONE:
        # Verified once for this target; replicas added since mount the patched PVs anyway.
        return Progress(consumer, State.DONE, before.get("reason", "Verified"), before.get("message", ""),
                        restarted_at=restarted_at, done_at=before.get("doneAt"), remounts=remounts), []
    if workload.replicas == 0:
        reason = "ScalingDisabled" if consumer.autoscaler and consumer.autoscaler.scaling_disabled else "ScaledToZero"
        # Recording the restart at zero moves no pod, and makes a later scale-up count as the workload's rollout.
        restart = None if restarted else _restart(workload, storage_class, now)
        line = Progress(consumer, State.WAITING, reason, _zero_message(consumer),
                        restarted_at=restart.at if restart else restarted_at, remounts=remounts)
        return line, [restart] if restart else []
    if not restarted:
        if not workload.rolled_out:
            return Progress(consumer, State.PENDING, "RollingOut",
                            f"its own rollout runs ({workload.progress}): restarted once that is complete"), []
        return Progress(consumer, State.PENDING, "Queued", "waits for its turn"), []
    remounting = before.get("state") == State.RESTARTING and before.get("reason") == "Remounting"
    if not workload.rolled_out:
        return Progress(consumer, State.RESTARTING, "Remounting" if remounting else "RollingOut",
                        f"its rollout waits: {workload.progress}", pod=before.get("pod") if remounting else None,
                        node=before.get("node") if remounting else None,
                        restarted_at=restarted_at, remounts=remounts), []

    since = before.get("verifyingSince") if before.get("state") in (State.VERIFYING, State.BLOCKED) else None
    line = Progress(consumer, State.VERIFYING, "", "", restarted_at=restarted_at,
                    verifying_since=since or timestamp(now), remounts=remounts)
    live = [pod for pod in consumer.pods if pod.live]
    if sum(pod.ready for pod in live) < workload.replicas:
        line.reason = "WaitingForReplicas"
        line.message = f"{sum(pod.ready for pod in live)} of {workload.replicas} replicas ready"
        return line, []

    checks = _check_pods(live, target, plan.world)
    blocking = next((c for c in checks if c.check in (Check.ABSENT, Check.SHARED)), None)
    if blocking is not None:
        return _settle(line, State.BLOCKED, blocking.reason, blocking.message, blocking.pod), []
    stale = [c for c in checks if c.check == Check.STALE]
    if stale and remounts + len(stale) > 2 * workload.replicas:
        # Remounts that keep finding an old superblock mean something else holds it: stop deleting pods.
        return _settle(line, State.BLOCKED, "RemountsExhausted",
                       f"{stale[0].message}; {remounts} remounts did not help: look for another consumer of the "
                       "export on that node", stale[0].pod), []
    if stale:
        line.remounts = remounts + len(stale)
        message = "; ".join(c.message for c in stale) + ": remounting"
        return (_settle(line, State.RESTARTING, "Remounting", message, stale[0].pod),
                [RemountPod(c.pod.namespace, c.pod.name, c.pod.uid) for c in stale])
    pending = next((c for c in checks if c.check == Check.PENDING), None)
    if pending is None:
        return Progress(consumer, State.DONE, "Verified", f"every replica mounts the options of {storage_class}",
                        restarted_at=restarted_at, done_at=timestamp(now), remounts=remounts), []
    waited = now - (parse_time(line.verifying_since) or now)
    if waited >= timedelta(seconds=target.policy.verify_timeout_seconds):
        return _settle(line, State.BLOCKED, pending.reason,
                       f"{pending.message} (no verdict after {target.policy.verify_timeout_seconds}s)",
                       pending.pod), []
    return _settle(line, State.VERIFYING, pending.reason, pending.message, pending.pod), []


def _settle(line: Progress, state: State, reason: str, message: str, pod: Pod) -> Progress:
    line.state, line.reason, line.message, line.pod, line.node = state, reason, message, pod.name, pod.node
    if state == State.RESTARTING:
        line.verifying_since = None
    return line


def _restart(workload: Workload, storage_class: str, now: datetime) -> RestartWorkload:
    return RestartWorkload(workload.ref, workload.resource_version, storage_class, timestamp(now))


def advance(plan: Plan, previous: Mapping | None, now: datetime) -> Step:
    """One tick of the rollout: where every workload stands, what to do next, and the new status."""
    target = plan.target
    if not target.patches_volumes:
        return _migration_step(plan, previous, now)

    befores = _previous_workloads(previous, target)
    progress: list[Progress] = []
    actions: list[Action] = []
    if target.approved:
        # PVs first: a pod started from here on mounts the new options, whichever restart brings it.
        actions.extend(
            PatchVolume(change.volume.name, target.version.mount_options, change.volume.mount_options,
                        target.version.storage_class)
            for change in plan.volumes if change.needs_patch
        )
        for consumer in plan.workloads:
            line, needed = _evaluate(consumer, plan, befores.get(consumer.ref) or {}, now)
            progress.append(line)
            actions.extend(needed)
        paused = any(line.state == State.BLOCKED for line in progress)
        busy = sum(line.busy for line in progress)
        for line in progress:
            if line.state != State.PENDING or line.busy:
                continue
            if paused:
                line.reason, line.message = "Paused", "the rollout is paused by a blocked workload"
            elif busy < target.policy.max_concurrent_workloads:
                assert line.consumer.workload is not None
                restart = _restart(line.consumer.workload, target.version.storage_class, now)
                actions.append(restart)
                line.state, line.reason, line.message = State.RESTARTING, "RollingOut", "restart requested"
                line.restarted_at = restart.at
                busy += 1
    else:
        progress = [Progress(c, State.PENDING, "AwaitingApproval", "waits for approval") for c in plan.workloads]

    phase = _phase(target, progress)
    status = _status(plan, previous, phase, _message(plan, phase, progress), now)
    status["volumesPatched"] = sum(not change.needs_patch for change in plan.volumes) + sum(
        isinstance(action, PatchVolume) for action in actions)
    status["workloads"] = [line.to_wire() for line in progress]
    status["consumersOnOlderVersions"] = [_consumer_record(c, plan) for c in plan.others if _on_older(c, plan)]
    status["guidance"] = None
    return Step(tuple(actions), status, tuple(_events(previous, status, actions)))


def _on_older(consumer: Consumer, plan: Plan) -> bool:
    """A Job's or bare pod's replica still mounts older options (mountwarden never restarts them)."""
    if not plan.target.restarts_workloads:
        return True
    return any(c.check != Check.OK for c in _check_pods(consumer.pods, plan.target, plan.world))


def _consumer_record(consumer: Consumer, plan: Plan) -> dict:
    storage_classes = sorted({change.volume.storage_class for change in plan.volumes
                              if change.volume.name in consumer.volumes})
    return {
        "kind": consumer.ref.kind, "namespace": consumer.ref.namespace, "name": consumer.ref.name,
        "volumes": list(consumer.volumes), "storageClassNames": storage_classes,
        "note": consumer.note(plan.target),
    }


def _migration_step(plan: Plan, previous: Mapping | None, now: datetime) -> Step:
    """NewStorageClass: nothing is restarted; the consumers still on older versions are listed."""
    older = set(plan.covered_volumes)
    consumers = [c for c in plan.consumers if older.intersection(c.volumes)]
    phase = Phase.AWAITING_MIGRATION if older else Phase.COMPLETE
    if older:
        message = (f"{len(older)} volumes and {len(consumers)} consumers are on older versions; "
                   f"new PVCs get {plan.target.version.storage_class}")
    else:
        message = f"every volume is on {plan.target.version.storage_class}"
    status = _status(plan, previous, phase, message, now)
    status["volumesPatched"] = 0
    status["workloads"] = []
    status["consumersOnOlderVersions"] = [_consumer_record(c, plan) for c in consumers]
    status["guidance"] = MIGRATION_GUIDANCE.format(target=plan.target.version.storage_class) if older else None
    return Step((), status, tuple(_events(previous, status, [])))


def _phase(target: Target, progress: Sequence[Progress]) -> Phase:
    states = {line.state for line in progress}
    if not target.approved:
        return Phase.AWAITING_APPROVAL
    if State.BLOCKED in states:
        return Phase.PAUSED
    if states & {State.PENDING, State.RESTARTING, State.VERIFYING}:
        return Phase.PROGRESSING
    if State.WAITING in states:
        return Phase.WAITING
    return Phase.COMPLETE


def _message(plan: Plan, phase: Phase, progress: Sequence[Progress]) -> str:
    target = plan.target
    total = len(progress)
    done = sum(line.state == State.DONE for line in progress)
    if phase == Phase.AWAITING_APPROVAL:
        patches = sum(change.needs_patch for change in plan.volumes)
        return (f"{patches} volumes to patch and {total} workloads to restart: approve with `kubectl annotate "
                f"storageprofile {target.profile} {APPROVE_ANNOTATION}={target.version.version}`")
    if phase == Phase.PAUSED:
        blocked = next(line for line in progress if line.state == State.BLOCKED)
        return f"paused at {blocked.consumer.ref}: {blocked.reason}: {blocked.message}"
    if phase == Phase.PROGRESSING:
        current = [str(line.consumer.ref) for line in progress if line.state in IN_FLIGHT]
        return f"{done} of {total} workloads done; in progress: {', '.join(current) or 'none'}"
    if phase == Phase.WAITING:
        waiting = [str(line.consumer.ref) for line in progress if line.state == State.WAITING]
        return (f"{done} of {total} workloads done; {', '.join(waiting)} at zero replicas: a deliberate scale-up "
                "is needed before they can be verified")
    return f"{done} workloads restarted and verified with the options of {target.version.storage_class}"


def _status(plan: Plan, previous: Mapping | None, phase: Phase, message: str, now: datetime) -> dict:
    target = plan.target
    previous = previous or {}
    same_target = previous.get("targetStorageClassName") == target.version.storage_class
    if same_target:
        supersedes = previous.get("supersedes")
    elif previous and previous.get("phase") != Phase.COMPLETE:
        supersedes = previous.get("targetStorageClassName")
    else:
        supersedes = None
    from_versions = set(plan.from_versions) | set(previous.get("fromVersions") or [] if same_target else [])
    started = previous.get("startedAt") if same_target else None
    completed = previous.get("completedAt") if same_target else None
    return {
        "phase": str(phase),
        "strategy": target.policy.strategy,
        "targetVersion": target.version.version,
        "targetStorageClassName": target.version.storage_class,
        "fromVersions": sorted(from_versions),
        "message": message,
        "supersedes": supersedes,
        "startedAt": started or timestamp(now),
        "completedAt": (completed or timestamp(now)) if phase == Phase.COMPLETE else None,
        "volumes": plan.covered_volumes,
    }


def _events(previous: Mapping | None, status: Mapping, actions: Sequence[Action]) -> list[Event]:
    previous = previous or {}
    same_target = previous.get("targetStorageClassName") == status["targetStorageClassName"]
    events = []
    if status["supersedes"] and not same_target:
        events.append(Event(False, "RolloutSuperseded",
                            f"the rollout to {status['supersedes']} is superseded by {status['targetStorageClassName']}"))
    for action in actions:
        if isinstance(action, RestartWorkload):
            events.append(Event(False, "RestartingWorkload", f"restarting {action.ref} for {action.storage_class}"))
        elif isinstance(action, RemountPod):
            events.append(Event(False, "RemountingPod",
                                f"deleting pod {action.namespace}/{action.name} so that it mounts afresh"))
    blocked_before = {
        (w["kind"], w["namespace"], w["name"], w.get("reason"))
        for w in (previous.get("workloads") or [] if same_target else []) if w.get("state") == State.BLOCKED
    }
    for line in status["workloads"]:
        key = (line["kind"], line["namespace"], line["name"], line["reason"])
        if line["state"] == State.BLOCKED and key not in blocked_before:
            events.append(Event(True, line["reason"],
                                f"{line['kind']}/{line['namespace']}/{line['name']}: {line['message']}"))
    if status["phase"] != previous.get("phase") or not same_target:
        events.append(Event(False, f"Rollout{status['phase']}", status["message"]))
    return events


def needs_world(previous: Mapping | None, target: Target, lineage_volumes: Iterable[str],
                older_volumes: Iterable[str]) -> bool:
    """Whether this tick must read the cluster, judged from the status and an index of PVs by class.

    A finished (or unapproved) plan is left alone until its volumes change; an
    active one is driven every tick.
    """
    covered = set(lineage_volumes if target.patches_volumes else older_volumes)
    if not previous:
        return bool(set(older_volumes))
    if (previous.get("targetStorageClassName") != target.version.storage_class
            or previous.get("strategy") != target.policy.strategy):
        return True
    phase = previous.get("phase")
    if phase in (Phase.COMPLETE, Phase.AWAITING_MIGRATION):
        return covered != set(previous.get("volumes") or [])
    if phase == Phase.AWAITING_APPROVAL:
        return target.approved or covered != set(previous.get("volumes") or [])
    return True
