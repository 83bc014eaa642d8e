"""The world of a rollout, parsed from the objects' wire form: the target, PVs, pods, workloads, reports.

Plain frozen dataclasses, each with ``from_object`` reading the Kubernetes JSON
it stands for. The world, not the status, is the source of truth for what was
done: a restart is recorded in the workload's pod template
(``mountwarden.io/restarted-for: <class>``) and a PV patch in the PV itself
(``mountwarden.io/applied-version``), so a planner that lost its status after a
crash never restarts a workload twice and never patches a PV halfway.
"""

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import NamedTuple

from mountwarden.core.adoption import approval_key, approves
from mountwarden.core.node.report import NodeReport
from mountwarden.core.selectors import selector_matches
from mountwarden.core.storageclass import ADOPTED_BY_ANNOTATION
from mountwarden.core.vocabulary import RolloutApproval, RolloutStrategy

RESTARTED_FOR_ANNOTATION = "mountwarden.io/restarted-for"
RESTARTED_AT_ANNOTATION = "mountwarden.io/restarted-at"
APPLIED_VERSION_ANNOTATION = "mountwarden.io/applied-version"
PREVIOUS_OPTIONS_ANNOTATION = "mountwarden.io/previous-mount-options"
APPROVE_ANNOTATION = "mountwarden.io/approve-rollout"


RESTARTABLE_KINDS = ("Deployment", "StatefulSet", "DaemonSet")


def timestamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))

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

    strategy: RolloutStrategy = RolloutStrategy.PATCH_BOUND_VOLUMES
    approval: RolloutApproval = RolloutApproval.MANUAL
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

    #: PVs of other classes that the profile adopts (spec.adopt), and those of them not adopted yet: an approval
    #: given before they joined does not cover them (mountwarden.core.adoption.approval_key).
    adopted: frozenset[str] = frozenset()
    adopting: frozenset[str] = frozenset()
    #: The annotation that approves it.
    approve_annotation: str = APPROVE_ANNOTATION

    @property
    def approval_key(self) -> str:
        """The value of the approval annotation that approves this target."""
        return approval_key(self.version.version, self.adopting)

    @property
    def approved(self) -> bool:
        if self.policy.approval != RolloutApproval.MANUAL:
            return True
        # PVs are adopted at their workload's turn: midway, an approval given for all of them still covers the rest.
        return approves(self.approved_version, self.version.version, self.adopting) or bool(
            self.adopting and self.approved_version == approval_key(self.version.version, self.adopted))

    @property
    def patches_volumes(self) -> bool:
        return self.policy.strategy == RolloutStrategy.PATCH_BOUND_VOLUMES

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


def format_previous_options(options: tuple[str, ...]) -> str:
    """mountwarden.io/previous-mount-options: a JSON array, so that an option holding a comma (SELinux
    ``context="a,b"``) is kept whole."""
    return json.dumps(list(options), separators=(",", ":"))


def parse_previous_options(text: str) -> tuple[str, ...]:
    """The annotation as written now (a JSON array) or before (the options joined by commas: an upgrade keeps
    reading what older versions wrote)."""
    if text.startswith("["):
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = None
        if isinstance(parsed, list) and all(isinstance(option, str) for option in parsed):
            return tuple(option for option in parsed if option)
    return tuple(token for token in text.split(",") if token)


@dataclass(frozen=True, slots=True)
class Volume:
    """A PersistentVolume of the profile's lineage, or one it adopts."""

    name: str
    storage_class: str
    mount_options: tuple[str, ...]
    #: (namespace, name) of the claim it is bound to.
    claim: tuple[str, str] | None = None
    #: The class whose options mountwarden last patched in (mountwarden.io/applied-version).
    applied_version: str | None = None
    previous_options: tuple[str, ...] = ()
    #: The StorageProfile that adopted it (mountwarden.io/adopted-by).
    adopted_by: str | None = None
    #: metadata.resourceVersion as read: a patch decided on this view is refused (409) if the PV changed since.
    resource_version: str = ""

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
            previous_options=parse_previous_options(previous),
            adopted_by=annotations.get(ADOPTED_BY_ANNOTATION),
            resource_version=metadata.get("resourceVersion", ""),
        )


@dataclass(frozen=True, slots=True)
class Pod:
    """A pod as a rollout reads it (adapters.pods.rollout_pods_of_page decodes a pod list into these)."""

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
    #: Its labels: which PodDisruptionBudgets cover it.
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def live(self) -> bool:
        """Holding its mounts for the foreseeable future: not finished and not on its way out."""
        return not self.terminating and self.phase not in ("Succeeded", "Failed")


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
class DisruptionBudget:
    """A PodDisruptionBudget, as the Eviction API judges it (pkg/registry/core/pod/storage/eviction.go)."""

    namespace: str
    name: str
    #: Its label selector in wire form; None selects no pod, {} every pod of its namespace (policy/v1).
    selector: Mapping | None
    #: status.disruptionsAllowed: an eviction it covers is refused at 0.
    disruptions_allowed: int
    desired_healthy: int = 0
    current_healthy: int = 0
    #: The disruption controller has seen its current spec (status.observedGeneration): until then the
    #: Eviction API refuses every pod it covers.
    observed: bool = True

    def covers(self, pod: "Pod") -> bool:
        return self.namespace == pod.namespace and self.selector is not None and selector_matches(
            dict(self.selector), dict(pod.labels))

    @property
    def allows_eviction(self) -> bool:
        return self.observed and self.disruptions_allowed > 0

    def __str__(self) -> str:
        return f"PodDisruptionBudget {self.namespace}/{self.name}"

    @staticmethod
    def from_object(obj: Mapping) -> "DisruptionBudget":
        metadata = obj.get("metadata") or {}
        status = obj.get("status") or {}
        return DisruptionBudget(
            namespace=metadata.get("namespace", ""),
            name=metadata["name"],
            selector=(obj.get("spec") or {}).get("selector"),
            disruptions_allowed=int(status.get("disruptionsAllowed") or 0),
            desired_healthy=int(status.get("desiredHealthy") or 0),
            current_healthy=int(status.get("currentHealthy") or 0),
            observed=int(status.get("observedGeneration") or 0) >= int(metadata.get("generation") or 0),
        )


@dataclass(frozen=True)
class World:
    """What the cluster holds for one profile's rollout."""

    #: PVs of the profile's lineage.
    volumes: tuple[Volume, ...]
    #: The pods that mount a claim of ``volumes`` (the others of their namespaces are not kept).
    pods: tuple[Pod, ...] = ()
    workloads: tuple[Workload, ...] = ()
    #: The controller of each ReplicaSet and Job (None: nobody controls it).
    parents: Mapping[WorkloadRef, WorkloadRef | None] = field(default_factory=dict)
    autoscalers: tuple[Autoscaler, ...] = ()
    reports: Mapping[str, NodeReport] = field(default_factory=dict)
    #: PodDisruptionBudgets in the namespaces of the claims: an eviction they refuse is not asked for.
    budgets: tuple[DisruptionBudget, ...] = ()
    #: "namespace/name" of another pod, by UID, asked only to name who else holds a superblock (SuperblockShared).
    pod_name_of: Callable[[str], str | None] = field(default=lambda uid: None)

    def budgets_of(self, pod: Pod) -> list[DisruptionBudget]:
        return [budget for budget in self.budgets if budget.covers(pod)]

    def owner_of(self, pod: Pod) -> WorkloadRef | None:
        """The workload a pod belongs to: Deployment via its ReplicaSet, CronJob via its Job."""
        owner = pod.owner
        if owner is not None and owner.kind in ("ReplicaSet", "Job"):
            return self.parents.get(owner) or owner
        return owner
