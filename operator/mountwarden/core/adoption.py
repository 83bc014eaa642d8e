"""Adoption: a StorageProfile taking over the StorageClasses and PersistentVolumes that were there before it.

``spec.adopt`` names classes (``storageClassNames``: their bound volumes) and PersistentVolumes
(``volumeSelector``, by their labels). The profile first only observes them: ``status.adoption`` lists
every volume it would take and how its mountOptions differ from the contract, ``status.rollout`` the
plan (the PVs patched, the workloads restarted in order). Then, as its rollout policy allows (Manual:
the approval annotation), they go through the rollout's PatchBoundVolumes machinery like the profile's
own volumes: each PV's mountOptions patched (and annotated ``mountwarden.io/adopted-by``), each workload
restarted, every replica verified on its node. Claims keep their names; nothing is deleted, recreated
or copied. From then on the profile governs them (compliance, Events, rollouts of later versions).

An adopted class is kept and annotated ``mountwarden.io/adopted-by: <profile>`` and
``mountwarden.io/superseded-by: <the profile's current class>``: admission then tells whoever creates a
claim of it to use the profile's class (SupersededClass), and a volume its provisioner still makes is
adopted at the next approval. With ``spec.default: true`` its default-class annotation moves to the
profile's class. Nothing of this happens before approval.

Refused, each naming the field and the reason (``Refusal``):

- a class another profile governs (its own lineage) or adopts (the profile created first keeps it);
- a class whose provisioner differs from ``spec.backend.provisioner``;
- a PersistentVolume that is not on network storage;
- a PersistentVolume another profile adopts too (the profile created first keeps it; one already adopted
  stays with its profile);
- any adoption while ``spec.rollout.strategy`` is NewStorageClass: adopting a bound volume is patching it.
"""

import hashlib
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from mountwarden.core.findings import Finding, Reason, Severity, Subject
from mountwarden.core.networkstorage import PROVISIONED_BY, NetworkVolume
from mountwarden.core.options.compare import check, values_said
from mountwarden.core.options.normalize import normalize
from mountwarden.core.options.table import OptionValue
from mountwarden.core.selectors import selector_matches
from mountwarden.core.storageclass import (
    ADOPTED_BY_ANNOTATION,
    DEFAULT_CLASS_ANNOTATION,
    SUPERSEDED_BY_ANNOTATION,
    ClassEntry,
    ClassPatch,
)

PROFILE_API_VERSION = "mountwarden.io/v1alpha1"
#: What the annotation naming the approved plan holds while it adopts volumes: <version>-adopt-<digest>.
ADOPT_KEY = "adopt"
#: How many refusals status.adoption lists (the message counts them all).
LISTED_REFUSALS = 20


class RefusalReason(StrEnum):
    CLASS_GOVERNED = "ClassGoverned"
    CLASS_ADOPTED = "ClassAdopted"
    PROVISIONER_DIFFERS = "ProvisionerDiffers"
    NOT_NETWORK_STORAGE = "NotNetworkStorage"
    VOLUME_GOVERNED = "VolumeGoverned"
    VOLUME_ADOPTED = "VolumeAdopted"
    NEW_STORAGE_CLASS = "StrategyNewStorageClass"


class AdoptionPhase(StrEnum):
    """Where a profile's adoption stands (status.adoption.phase)."""

    NOTHING_TO_ADOPT = "NothingToAdopt"
    REFUSED = "Refused"
    AWAITING_APPROVAL = "AwaitingApproval"
    ADOPTING = "Adopting"
    ADOPTED = "Adopted"


#: What to do about a refusal, in the runbook's words (docs/runbook.md, AdoptionRefused).
REFUSAL_REMEDY = ("Remove the class or volume from spec.adopt (or narrow spec.adopt.volumeSelector), or resolve the "
                  "conflict the message names; the rest of the adoption goes ahead without it.")


@dataclass(frozen=True, slots=True)
class Adopter:
    """A profile's spec.adopt, with what its refusals are judged by."""

    profile: str
    storage_class_names: tuple[str, ...] = ()
    #: spec.adopt.volumeSelector in its wire form (matchLabels, matchExpressions); None selects nothing.
    volume_selector: Mapping | None = None
    provisioner: str = ""
    #: spec.rollout.strategy is PatchBoundVolumes.
    patches_volumes: bool = True
    #: metadata.creationTimestamp: of two profiles that adopt one thing, the first keeps it.
    created_at: str = ""
    #: The PVs its last status.adoption lists as taken (what the inventory shows as adoption pending or done).
    listed: frozenset[str] = frozenset()

    @property
    def adopts(self) -> bool:
        return bool(self.storage_class_names) or self.volume_selector is not None

    def before(self, other: "Adopter") -> bool:
        return (self.created_at, self.profile) < (other.created_at, other.profile)

    def field_selecting(self, storage_class: str, labels: Mapping[str, str]) -> str | None:
        """The spec field that selects a volume of ``storage_class`` with ``labels``, or None."""
        if storage_class and storage_class in self.storage_class_names:
            return f"spec.adopt.storageClassNames[{self.storage_class_names.index(storage_class)}]"
        if self.volume_selector is not None and selector_matches(dict(self.volume_selector), dict(labels)):
            return "spec.adopt.volumeSelector"
        return None


@dataclass(frozen=True, slots=True)
class Refusal:
    field: str
    reason: RefusalReason
    message: str

    def to_wire(self) -> dict:
        return {"field": self.field, "reason": str(self.reason), "message": self.message}

    def finding(self, profile: str) -> Finding:
        return Finding(Reason.ADOPTION_REFUSED, Severity.ERROR, f"{self.field}: {self.message}", REFUSAL_REMEDY,
                       subject=Subject("StorageProfile", profile, api_version=PROFILE_API_VERSION),
                       profile=profile, evidence={"field": self.field, "refusal": str(self.reason)})


@dataclass(frozen=True, slots=True)
class CandidateVolume:
    """A PersistentVolume as adoption reads it (its wire form), network storage or not."""

    name: str
    storage_class: str
    labels: Mapping[str, str]
    network: NetworkVolume | None
    #: Who made it: pv.kubernetes.io/provisioned-by, else its CSI driver; None for an in-tree volume made by hand.
    provisioner: str | None
    adopted_by: str | None

    @staticmethod
    def from_object(pv: Mapping, network_drivers: Collection[str] = ()) -> "CandidateVolume":
        metadata = pv.get("metadata") or {}
        spec = pv.get("spec") or {}
        annotations = metadata.get("annotations") or {}
        return CandidateVolume(
            name=metadata["name"], storage_class=spec.get("storageClassName") or "",
            labels=dict(metadata.get("labels") or {}),
            network=NetworkVolume.from_object(pv, network_drivers),
            provisioner=annotations.get(PROVISIONED_BY) or (spec.get("csi") or {}).get("driver"),
            adopted_by=annotations.get(ADOPTED_BY_ANNOTATION),
        )


@dataclass(frozen=True)
class Selection:
    """What a profile's spec.adopt takes, and what it refuses."""

    adopter: Adopter
    #: The PVs it takes (all of them, adopted already or not), by name.
    volumes: tuple[str, ...] = ()
    #: The classes it takes, in spec order.
    classes: tuple[str, ...] = ()
    refusals: tuple[Refusal, ...] = ()


def _first_other(adopter: Adopter, others: Iterable[Adopter], storage_class: str,
                 labels: Mapping[str, str]) -> tuple[Adopter, str] | None:
    """The profile created before ``adopter`` that also selects the volume, and its field."""
    for other in sorted(others, key=lambda o: (o.created_at, o.profile)):
        if other.profile == adopter.profile or not other.adopts or not other.before(adopter):
            continue
        found = other.field_selecting(storage_class, labels)
        if found is not None:
            return other, found
    return None


def select(adopter: Adopter, others: Iterable[Adopter], classes: Mapping[str, ClassEntry],
           volumes: Sequence[CandidateVolume]) -> Selection:
    """The classes and PVs ``adopter`` takes, and every refusal, each naming its field."""
    if not adopter.adopts:
        return Selection(adopter)
    if not adopter.patches_volumes:
        return Selection(adopter, refusals=(Refusal(
            "spec.rollout.strategy", RefusalReason.NEW_STORAGE_CLASS,
            "adopting bound volumes means patching their mountOptions (no data is copied), which strategy "
            "NewStorageClass never does: set spec.rollout.strategy: PatchBoundVolumes (approval stays "
            "spec.rollout.approval)."),))
    others = list(others)
    refusals: list[Refusal] = []
    taken_classes: list[str] = []
    refused_classes: set[str] = set()
    for index, name in enumerate(adopter.storage_class_names):
        where = f"spec.adopt.storageClassNames[{index}]"
        refusal = _refuse_class(adopter, others, classes.get(name), name, where)
        if refusal is None:
            taken_classes.append(name)
        elif refusal is not False:
            refusals.append(refusal)
            refused_classes.add(name)
        else:
            refused_classes.add(name)  # the profile's own class: nothing to adopt, nothing to say
    taken: list[str] = []
    for volume in sorted(volumes, key=lambda v: v.name):
        where = adopter.field_selecting(volume.storage_class, volume.labels)
        if where is None or volume.storage_class in refused_classes:
            continue
        refusal = _refuse_volume(adopter, others, classes.get(volume.storage_class), volume, where)
        if refusal is None:
            taken.append(volume.name)
        elif refusal is not False:
            refusals.append(refusal)
    return Selection(adopter, tuple(taken), tuple(taken_classes), tuple(refusals))


def _refuse_class(adopter: Adopter, others: Sequence[Adopter], cls: ClassEntry | None, name: str,
                  where: str) -> "Refusal | None | bool":
    """Why the class cannot be adopted (a Refusal), False for the profile's own class, None when it can."""
    if cls is not None and cls.profile == adopter.profile:
        return False
    if cls is not None and cls.profile:
        return Refusal(where, RefusalReason.CLASS_GOVERNED,
                       f"StorageClass {name} is a version of StorageProfile {cls.profile}, which governs its "
                       "volumes: change that profile, or move its consumers to this one's class.")
    if cls is not None and cls.adopted_by and cls.adopted_by != adopter.profile:
        return Refusal(where, RefusalReason.CLASS_ADOPTED,
                       f"StorageClass {name} is adopted by StorageProfile {cls.adopted_by} already.")
    first = next((o for o in others if o.profile != adopter.profile and name in o.storage_class_names
                  and o.before(adopter)), None)
    if first is not None:
        return Refusal(where, RefusalReason.CLASS_ADOPTED,
                       f"StorageProfile {first.profile}, created first, adopts StorageClass {name} too: a class has "
                       "one contract.")
    if cls is not None and cls.provisioner != adopter.provisioner:
        return Refusal(where, RefusalReason.PROVISIONER_DIFFERS,
                       f"StorageClass {name} is provisioned by {cls.provisioner}, this profile's backend by "
                       f"{adopter.provisioner} (spec.backend.provisioner): its volumes would get options meant for "
                       f"another backend. Adopt it with a profile whose provisioner is {cls.provisioner}.")
    return None


def _refuse_volume(adopter: Adopter, others: Sequence[Adopter], cls: ClassEntry | None, volume: CandidateVolume,
                   where: str) -> "Refusal | None | bool":
    pv = f"PersistentVolume {volume.name}"
    if cls is not None and cls.profile == adopter.profile:
        return False  # already the profile's own
    if cls is not None and cls.profile:
        return Refusal(where, RefusalReason.VOLUME_GOVERNED,
                       f"{pv} is of StorageClass {cls.name}, a version of StorageProfile {cls.profile}, which "
                       "governs it.")
    if volume.adopted_by and volume.adopted_by != adopter.profile:
        return Refusal(where, RefusalReason.VOLUME_ADOPTED,
                       f"{pv} is adopted by StorageProfile {volume.adopted_by} already (mountwarden.io/adopted-by).")
    first = _first_other(adopter, others, volume.storage_class, volume.labels)
    if first is not None and volume.adopted_by != adopter.profile:
        other, other_field = first
        return Refusal(where, RefusalReason.VOLUME_ADOPTED,
                       f"{pv} is adopted by StorageProfile {other.profile} too ({other_field}), which was created "
                       "first: a volume has one contract.")
    if volume.network is None:
        return Refusal(where, RefusalReason.NOT_NETWORK_STORAGE,
                       f"{pv} is not on network storage (neither an nfs source nor a CSI driver that mounts NFS): "
                       "a mount contract has nothing to say about it.")
    provisioner = cls.provisioner if cls is not None else volume.provisioner
    if provisioner and provisioner != adopter.provisioner:
        return Refusal(where, RefusalReason.PROVISIONER_DIFFERS,
                       f"{pv} was made by {provisioner}, this profile's backend is {adopter.provisioner} "
                       "(spec.backend.provisioner): it would get options meant for another backend.")
    return None


# -- the approval of a plan that adopts ------------------------------------------------------------


def approval_key(version: int, pending: Collection[str]) -> str:
    """What the approval annotation must say: the version, and while volumes wait to be adopted, which ones.

    An approval given before a volume joined the adoption does not cover it: the digest changes.
    """
    if not pending:
        return str(version)
    digest = hashlib.sha256("\n".join(sorted(pending)).encode()).hexdigest()[:8]
    return f"{version}-{ADOPT_KEY}-{digest}"


def approves(given: str | None, version: int, pending: Collection[str]) -> bool:
    """Whether the annotation's value approves the plan to ``version`` that adopts ``pending``.

    Once the approved adoption has patched its volumes none is pending, and the approval it was given under
    (``<version>-adopt-<digest>``) still holds for the rest of that rollout.
    """
    if given is None:
        return False
    return given == approval_key(version, pending) or (not pending and given.startswith(f"{version}-{ADOPT_KEY}-"))


# -- what status.adoption shows ---------------------------------------------------------------------


def differences(mount_options: Sequence[str], contract: Mapping[str, OptionValue]) -> list[dict]:
    """How a PV's mountOptions differ from the contract, option by option ({option, contract, volume})."""
    asked = normalize(list(mount_options), observed=True).options
    found = []
    for finding in check(contract, asked).findings:
        if finding.severity is Severity.INFO or finding.option is None:
            continue
        wanted, has = values_said(finding)
        found.append({"option": finding.option, "contract": wanted, "volume": has})
    return found


@dataclass(frozen=True)
class ClassFate:
    """What becomes of the classes an approved adoption takes (and of those it no longer takes)."""

    patches: tuple[ClassPatch, ...] = field(default_factory=tuple)


def class_fate(profile: str, taken: Iterable[str], classes: Mapping[str, ClassEntry], current_class: str,
               *, make_default: bool) -> ClassFate:
    """Annotate each adopted class for new claims (and move the default-class annotation with spec.default);
    take the annotations back from classes the profile adopted and no longer names."""
    patches = []
    taken = list(taken)
    for name in taken:
        cls = classes.get(name)
        if cls is None:
            continue
        annotations: dict[str, str | None] = {}
        if cls.adopted_by != profile:
            annotations[ADOPTED_BY_ANNOTATION] = profile
        if cls.superseded_by != current_class:
            annotations[SUPERSEDED_BY_ANNOTATION] = current_class
        if make_default and cls.is_default:
            annotations[DEFAULT_CLASS_ANNOTATION] = None
        if annotations:
            patches.append(ClassPatch(name, annotations))
    for cls in classes.values():
        if cls.adopted_by == profile and cls.name not in taken and not cls.profile:
            patches.append(ClassPatch(cls.name, {ADOPTED_BY_ANNOTATION: None, SUPERSEDED_BY_ANNOTATION: None}))
    return ClassFate(tuple(patches))
