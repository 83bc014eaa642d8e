"""Admission decisions: what to tell, or refuse, whoever creates a PVC or changes a StorageProfile.

Pure: the inputs are plain data read from the operator's in-memory indexes, the
output is a :class:`Review` of one-line findings, each naming the object and the
fix. A finding is a warning unless a profile with ``enforcement: deny`` turns it
into a denial; only the consumer-mismatch and SQLite findings can be denials.

Decisions made here, and why:

- Who a profile governs. Both selectors of ``spec.consumers`` must match, an
  absent selector matches everything, as in Kubernetes. A profile that declares
  neither selector governs no PVC by selection: it only offers its classes to
  whoever picks them. Otherwise every profile written without consumers would
  claim every PVC in the cluster, and two of them would contradict each other.
- Network storage. Exact provisioner names known to mount NFS (EFS, the NFS CSI
  driver, FSx for OpenZFS, Filestore), plus any provisioner with an ``nfs`` word
  in its name (``kubernetes.io/nfs``, ``example.com/nfs``,
  ``k8s-sigs.io/nfs-subdir-external-provisioner``: external NFS provisioners are
  named by whoever deploys them), plus a list the operator is given. Drivers that
  mount NFS only with some parameters (Azure Files, Trident) belong on that list.
- The default class. The API server's DefaultStorageClass plugin fills in
  ``storageClassName`` before validating webhooks run, so a PVC that asks for the
  default class by name is treated as one that asked for no class.
- Overlapping consumers, detected conservatively: two profiles overlap when, for
  the namespace selector and for the PVC selector alike, the requirements of one
  are a subset of the other's (an absent selector has none). A PVC that matches
  the narrower then matches both. Selectors that only intersect (``team: a``
  against ``env: prod``) are not reported: no false alarms, some misses.
"""

import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from mountwarden.core.credits.bucket import ThroughputMode
from mountwarden.core.findings import Finding, Reason, Severity
from mountwarden.core.options.effects import EFS_METERING, Cost, cost_phrase, credit_costs, freshness_lost
from mountwarden.core.options.normalize import normalize
from mountwarden.core.options.presets import CHEAPER_PRESETS, EFS_PROVISIONER, PRESETS, CachePolicy, is_efs
from mountwarden.core.options.table import OptionValue
from mountwarden.core.policy import SpecProblem
from mountwarden.core.selectors import selector_matches
from mountwarden.core.storageclass import ClassEntry, DesiredClass, ExistingClass, plan_classes
from mountwarden.core.vocabulary import Enforcement, SqlitePolicy

#: The label or annotation a PVC carries to say what it holds.
CONTENTS_KEY = "mountwarden.io/contents"
SQLITE_CONTENTS = "sqlite"


#: Provisioners whose volumes are NFS mounts, whatever their parameters.
NETWORK_PROVISIONERS = frozenset({
    EFS_PROVISIONER,
    "nfs.csi.k8s.io",
    "fsx.openzfs.csi.aws.com",
    "filestore.csi.storage.gke.io",
})
_NAME_WORDS = re.compile(r"[./_-]")


def is_network_provisioner(provisioner: str, extra: Collection[str] = ()) -> bool:
    if provisioner in NETWORK_PROVISIONERS or provisioner in extra:
        return True
    return "nfs" in _NAME_WORDS.split(provisioner.lower())


@dataclass(frozen=True, slots=True)
class ProfileEntry:
    """What admission needs of one valid StorageProfile: its consumers, its rules, its current class."""

    name: str
    provisioner: str
    namespace_selector: Mapping | None = None
    pvc_selector: Mapping | None = None
    enforcement: Enforcement = Enforcement.WARN
    sqlite: SqlitePolicy = SqlitePolicy.WARN
    cache_policy: str | None = None
    file_system_id: str | None = None
    #: status.credits.throughputMode, once the credit watch has filled it; None means unknown.
    throughput_mode: str | None = None
    #: status.storageClassName: the version new PVCs should ask for.
    storage_class_name: str | None = None
    #: The resolved options new volumes are mounted with (preset, overrides, EFS baseline); None: unknown.
    effective_options: Mapping[str, OptionValue] | None = None

    @property
    def declares_consumers(self) -> bool:
        return self.namespace_selector is not None or self.pvc_selector is not None

    @property
    def denies(self) -> bool:
        return self.enforcement == Enforcement.DENY

    def governs(self, namespace_labels: Mapping[str, str], pvc_labels: Mapping[str, str]) -> bool:
        return (
            self.declares_consumers
            and selector_matches(self.namespace_selector, namespace_labels)
            and selector_matches(self.pvc_selector, pvc_labels)
        )


#: Where a profile is filed for PVC reviews (see consumer_keys): ("pvc"|"namespace", label, value), or ANY.
ConsumerKey = tuple[str, ...]
ANY_CONSUMER: ConsumerKey = ("any",)


def consumer_keys(profile: ProfileEntry) -> list[ConsumerKey]:
    """Keys of which every PVC the profile governs has one among its lookup_keys: a review looks at few profiles.

    A label its PVC selector requires (one of matchLabels, or each value of an In expression),
    else one its namespace selector requires; a profile that requires no label value is filed
    under ANY_CONSUMER, and one that declares no consumers is filed nowhere (it governs no PVC).
    """
    if not profile.declares_consumers:
        return []
    for scope, selector in (("pvc", profile.pvc_selector), ("namespace", profile.namespace_selector)):
        if not selector:
            continue
        required = selector.get("matchLabels") or {}
        if required:
            label = min(required)
            return [(scope, label, required[label])]
        for requirement in selector.get("matchExpressions") or []:
            if requirement.get("operator") == "In" and requirement.get("values"):
                return [(scope, requirement["key"], value) for value in requirement["values"]]
    return [ANY_CONSUMER]


def lookup_keys(namespace_labels: Mapping[str, str], pvc_labels: Mapping[str, str]) -> list[ConsumerKey]:
    return [ANY_CONSUMER, *(("pvc", label, value) for label, value in pvc_labels.items()),
            *(("namespace", label, value) for label, value in namespace_labels.items())]


@dataclass(frozen=True, slots=True)
class Claim:
    """A PersistentVolumeClaim being created."""

    namespace: str
    name: str
    #: None: no storageClassName at all; "": explicitly no class (a pre-provisioned volume).
    storage_class_name: str | None
    labels: Mapping[str, str]
    annotations: Mapping[str, str]

    @staticmethod
    def from_object(obj: Mapping) -> "Claim":
        metadata = obj.get("metadata") or {}
        # With generateName the API server has named the object before admission; keep a fallback anyway.
        name = metadata.get("name") or f"{metadata.get('generateName', '')}*"
        return Claim(
            namespace=metadata.get("namespace", ""),
            name=name,
            storage_class_name=(obj.get("spec") or {}).get("storageClassName"),
            labels=metadata.get("labels") or {},
            annotations=metadata.get("annotations") or {},
        )

    @property
    def holds_sqlite(self) -> bool:
        return SQLITE_CONTENTS in (self.labels.get(CONTENTS_KEY), self.annotations.get(CONTENTS_KEY))


@dataclass(frozen=True, slots=True)
class ClusterView:
    """What admission knows of the cluster, in the shape of kopf's indexes: key -> entries filed under it."""

    profiles: Mapping[str, Collection[ProfileEntry]]
    classes: Mapping[str, Collection[ClassEntry]]
    classes_by_profile: Mapping[str, Collection[ClassEntry]]
    default_classes: Collection[ClassEntry]
    namespace_labels: Mapping[str, Collection[Mapping[str, str]]]
    #: PersistentVolume names by the class they name (bound volumes keep their options until remounted).
    volumes_by_class: Mapping[str, Collection[str]]
    extra_network_provisioners: Collection[str] = ()
    #: The profiles filed under their consumer_keys; None: look at every profile.
    profiles_by_consumer: Mapping[ConsumerKey, Collection[ProfileEntry]] | None = None

    def profile(self, name: str | None) -> ProfileEntry | None:
        return next(iter(self.profiles.get(name, ())), None) if name else None

    def all_profiles(self) -> Iterable[ProfileEntry]:
        for entries in self.profiles.values():
            yield from entries

    def governing(self, namespace_labels: Mapping[str, str], pvc_labels: Mapping[str, str]) -> list[ProfileEntry]:
        """The profiles that govern a PVC with these labels, by name; only those filed under its labels are tried."""
        if self.profiles_by_consumer is None:
            candidates: Iterable[ProfileEntry] = self.all_profiles()
        else:
            candidates = {p.name: p for key in lookup_keys(namespace_labels, pvc_labels)
                          for p in self.profiles_by_consumer.get(key, ())}.values()
        return sorted((p for p in candidates if p.governs(namespace_labels, pvc_labels)), key=lambda p: p.name)

    def storage_class(self, name: str | None) -> ClassEntry | None:
        return next(iter(self.classes.get(name, ())), None) if name else None

    def default_class(self) -> ClassEntry | None:
        """The class a PVC without storageClassName gets: with several defaults, the newest, as Kubernetes does."""
        return max(self.default_classes, key=lambda c: (c.created_at, c.name), default=None)

    def labels_of_namespace(self, namespace: str) -> Mapping[str, str]:
        return next(iter(self.namespace_labels.get(namespace, ())), {})

    def owner(self, cls: ClassEntry | None) -> ProfileEntry | None:
        """The profile that governs a class (its lineage's, or the one that adopted it); None for a class of no (or
        of a deleted) profile."""
        return self.profile(cls.governed_by) if cls is not None and cls.governed_by else None

    def is_network(self, cls: ClassEntry) -> bool:
        return is_network_provisioner(cls.provisioner, self.extra_network_provisioners)


def _said(reason: Reason, message: str, *, deny: bool = False) -> Finding:
    """An admission finding: an error refuses the request (a profile with enforcement deny), a warning is shown."""
    return Finding(reason, Severity.ERROR if deny else Severity.WARNING, message)


@dataclass(frozen=True, slots=True)
class Review:
    findings: tuple[Finding, ...] = ()

    @property
    def warnings(self) -> list[str]:
        return [f.message for f in self.findings if f.severity is not Severity.ERROR]

    @property
    def denial(self) -> str | None:
        """The message of the refusal, when some profile denies; None allows the request."""
        return "; ".join(f.message for f in self.findings if f.severity is Severity.ERROR) or None


# -- PersistentVolumeClaims -------------------------------------------------------------------------


def _describe_class(name: str | None, owner: ProfileEntry | None) -> str:
    if not name:
        return "no StorageClass"
    return f"StorageClass {name} of StorageProfile {owner.name}" if owner else f"StorageClass {name}"


def _use(profile: ProfileEntry) -> str:
    if profile.storage_class_name:
        return f"use storageClassName {profile.storage_class_name}"
    return f"use the class in StorageProfile {profile.name}'s status once it is Ready"


def review_claim(claim: Claim, view: ClusterView) -> Review:
    default = view.default_class()
    asked = claim.storage_class_name
    if asked is None and default is not None:
        asked = default.name  # what the PV controller will give it
    cls = view.storage_class(asked)
    owner = view.owner(cls)
    pvc = f"PVC {claim.namespace}/{claim.name}"
    findings: list[Finding] = []

    if cls is not None and cls.superseded_by:
        findings.append(_said(
            Reason.SUPERSEDED_CLASS,
            f"StorageClass {cls.name} is superseded by {cls.superseded_by} (StorageProfile {cls.governed_by})"
        ))

    namespace_labels = view.labels_of_namespace(claim.namespace)
    consumer_of = view.governing(namespace_labels, claim.labels)
    # A PVC that several profiles govern may pick any of them: the overlap is the profiles' problem.
    # The current class counts even before its StorageClass reaches the index (it was just created).
    picked_one = any((owner is not None and p.name == owner.name) or (asked and p.storage_class_name == asked)
                     for p in consumer_of)
    mismatched = [] if picked_one else consumer_of
    for profile in mismatched:
        findings.append(_said(
            Reason.PROFILE_MISMATCH,
            f"{pvc} is a consumer of StorageProfile {profile.name} but asks for "
            f"{_describe_class(asked, owner)}: {_use(profile)}",
            deny=profile.denies,
        ))

    if cls is not None and owner is None and view.is_network(cls):
        findings.append(_said(
            Reason.UNGOVERNED_NETWORK_CLASS,
            f"StorageClass {cls.name} is NFS ({cls.provisioner}) but no StorageProfile governs it: "
            "use a StorageProfile's class, or create a profile for it"
        ))

    allowed_sqlite = owner is not None and owner.sqlite == SqlitePolicy.ALLOW
    if claim.holds_sqlite and cls is not None and view.is_network(cls) and not allowed_sqlite:
        findings.append(_said(
            Reason.SQLITE_CLAIM_ON_NFS,
            f"{pvc} holds SQLite but StorageClass {cls.name} is NFS: WAL is impossible and every lock "
            "is a network round trip; use a local volume",
            deny=owner is not None and owner.sqlite == SqlitePolicy.FORBID and owner.denies,
        ))

    costly = _costly_on_bursting_efs(owner) if owner is not None else []
    if owner is not None and costly:
        where = f"EFS {owner.file_system_id}" if owner.file_system_id else "EFS"
        costs = Cost.NONE
        for _, cost in costly:
            costs |= cost
        findings.append(_said(
            Reason.STRICT_ON_BURSTING,
            f"StorageProfile {owner.name}: on Bursting {where} its effective options "
            f"{', '.join(option for option, _ in costly)} make "
            f"{cost_phrase(costs)}, each {EFS_METERING} and paid from the burst credits meant for data "
            f"(sync,actimeo=0,lookupcache=none made the incident's import take 8 hours); {CHEAPER_PRESETS}, or "
            "Elastic throughput"
        ))

    # Asking for the default by name counts as asking for no class: the API server usually filled it in.
    if not consumer_of and default is not None and asked == default.name:
        default_owner = view.owner(default)
        if default_owner is not None and default_owner.declares_consumers:
            findings.append(_said(
                Reason.UNGOVERNED_DEFAULT,
                f"{pvc} gets the default StorageClass {default.name}, but StorageProfile {default_owner.name} "
                "does not govern it: set spec.storageClassName"
            ))
    return Review(tuple(findings))


def _costly_on_bursting_efs(profile: ProfileEntry) -> list[tuple[str, Cost]]:
    """What makes a profile pay a round trip per stat or write, when it pays it from Bursting EFS credits."""
    if not is_efs(profile.provisioner) or (profile.throughput_mode or "").lower() != ThroughputMode.BURSTING:
        return []
    if profile.effective_options is not None:
        return credit_costs(profile.effective_options)
    if profile.cache_policy == CachePolicy.STRICT:  # its options unknown (an older index entry): the preset's
        return credit_costs(normalize(PRESETS[CachePolicy.STRICT].options).options)
    return []


# -- StorageProfiles --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProfileChange:
    """A StorageProfile as the request would leave it."""

    entry: ProfileEntry
    #: Problems that make the spec invalid (schema and options), located by field path.
    errors: Sequence[SpecProblem] = ()
    warnings: Sequence[SpecProblem] = ()
    #: The StorageClass content the spec asks for; None when the spec is invalid.
    desired: DesiredClass | None = None
    default: bool = False
    #: The highest version the profile ever had (status.version and status.history).
    last_version: int = 0
    #: An UPDATE of an existing profile (a CREATE makes version 1, which replaces nothing).
    updating: bool = False
    #: The options the profile's current version mounts with (status.effectiveMountOptions), before the change.
    current_options: Sequence[str] = ()


def review_profile(change: ProfileChange, view: ClusterView) -> Review:
    name = change.entry.name
    if change.errors:
        return Review((_said(
            Reason.INVALID_SPEC,
            f"StorageProfile {name} is invalid: " + "; ".join(str(problem) for problem in change.errors), deny=True
        ),))
    findings = [_said(Reason.OPTION_WARNING, f"StorageProfile {name}: {problem}") for problem in change.warnings]
    for other in sorted(view.all_profiles(), key=lambda p: p.name):
        if other.name != name and consumers_overlap(change.entry, other):
            findings.append(_said(
                Reason.OVERLAPPING_CONSUMERS,
                f"StorageProfile {name}: spec.consumers overlaps those of StorageProfile {other.name}: "
                "a PVC matching both gets two contracts; narrow one of the selectors"
            ))
    version_note = _version_change(change, view)
    if version_note:
        findings.append(_said(Reason.NEW_VERSION, version_note))
    return Review(tuple(findings))


def _version_change(change: ProfileChange, view: ClusterView) -> str | None:
    name = change.entry.name
    lineage = list(view.classes_by_profile.get(name, ()))
    if not change.updating or change.desired is None or not lineage:
        return None
    existing = [
        ExistingClass(name=c.name, version=c.version or 0, content_hash=c.content_hash) for c in lineage
    ]
    plan = plan_classes(name, change.desired, existing, make_default=change.default, last_version=change.last_version)
    if plan.create is None and plan.current_name == change.entry.storage_class_name:
        return None
    kept = sum(len(view.volumes_by_class.get(c.name, ())) for c in lineage if c.name != plan.current_name)
    if plan.create is not None:
        what = f"this change makes a new StorageClass {plan.current_name}"
    else:
        what = f"this change makes StorageClass {plan.current_name} current again"
    if kept == 1:
        volumes = "1 bound PersistentVolume keeps its old mount options until remounted"
    else:
        volumes = f"{kept} bound PersistentVolumes keep their old mount options until remounted"
    lost = (freshness_lost(normalize(list(change.current_options)).options, normalize(change.desired.mount_options).options)
            if change.current_options else None)
    staler = (f"; their consumers lose freshness once remounted: {lost}. Find who relies on it before approving "
              f"(mountwarden plan {name} names them)" if lost and kept else "")
    return f"StorageProfile {name}: {what}; {volumes}{staler}"


def _requirements(selector: Mapping | None) -> frozenset[tuple[str, str, tuple[str, ...]]]:
    """A selector as a set of requirements; matchLabels k: v is the requirement k In (v)."""
    if selector is None:
        return frozenset()
    requirements = {(key, "In", (value,)) for key, value in (selector.get("matchLabels") or {}).items()}
    for expression in selector.get("matchExpressions") or []:
        requirements.add((expression["key"], expression["operator"], tuple(sorted(expression.get("values") or ()))))
    return frozenset(requirements)


def _nested(a: Mapping | None, b: Mapping | None) -> bool:
    """Whether one selector's requirements contain the other's: then whatever matches the narrower matches both."""
    first, second = _requirements(a), _requirements(b)
    return first <= second or second <= first


def consumers_overlap(a: ProfileEntry, b: ProfileEntry) -> bool:
    return (
        a.declares_consumers
        and b.declares_consumers
        and _nested(a.namespace_selector, b.namespace_selector)
        and _nested(a.pvc_selector, b.pvc_selector)
    )


def enforcing_profiles(profiles: Iterable[ProfileEntry]) -> list[ProfileEntry]:
    """Profiles whose consumers the API server must not let through unchecked (failurePolicy Fail), by name."""
    return sorted((p for p in profiles if p.denies and p.declares_consumers), key=lambda p: p.name)


# -- NodeMountReports -------------------------------------------------------------------------------
# RBAC cannot say "only your own node's report": the agent's role grants create and update on every
# NodeMountReport. The API server knows which node a pod's token belongs to, and tells validating
# webhooks in the request's userInfo.extra (ServiceAccountTokenPodNodeInfo: beta and on by default
# since Kubernetes 1.30, GA in 1.32), so the webhook completes RBAC there.

#: The userInfo.extra key holding the node that a pod-bound service account token's pod runs on.
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"


def service_account_username(reference: str) -> str:
    """``namespace:name`` as the username the API server gives that service account's tokens."""
    namespace, separator, name = reference.partition(":")
    if not separator or not namespace or not name or ":" in name:
        raise ValueError(f"expected a service account as NAMESPACE:NAME, got {reference!r}")
    return f"{SERVICE_ACCOUNT_PREFIX}{namespace}:{name}"


@dataclass(frozen=True, slots=True)
class ReportWrite:
    """A NodeMountReport being created or updated, and who asks."""

    name: str
    #: spec.nodeName; None when the object has none.
    node_name: str | None
    username: str
    #: userInfo.extra as the API server sends it: each key maps to a list of values.
    extra: Mapping[str, Sequence[str]]


def review_report_write(write: ReportWrite, agent_username: str | None) -> Review:
    """The agent may write only the report of the node its token is bound to; anyone else is not judged here."""
    if agent_username is None or write.username != agent_username:
        return Review()  # administrators and the operator: RBAC decides
    agent = f"the node agent ({agent_username})"
    nodes = [node for node in write.extra.get(NODE_NAME_EXTRA) or () if node]
    if len(nodes) != 1:
        return Review((_said(
            Reason.FOREIGN_REPORT_WRITE,
            f"{agent} may write only the NodeMountReport of its own node, but its token names "
            f"{'no node' if not nodes else 'several nodes'} ({NODE_NAME_EXTRA}): run the agent in a pod with its "
            "projected service account token, on Kubernetes 1.30 or later", deny=True),))
    (node,) = nodes
    if write.name != node:
        return Review((_said(
            Reason.FOREIGN_REPORT_WRITE,
            f"{agent} runs on node {node} and may write only NodeMountReport {node}, not {write.name or '(unnamed)'}",
            deny=True),))
    if write.node_name is not None and write.node_name != node:
        return Review((_said(
            Reason.FOREIGN_REPORT_WRITE,
            f"{agent} runs on node {node}: NodeMountReport {node} must describe it, but its spec.nodeName is "
            f"{write.node_name}", deny=True),))
    return Review()
