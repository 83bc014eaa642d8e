"""Every index of the operator, in one place: what each holds, keyed by what, and who reads it.

kopf hands an index to a handler by the index's name, as a keyword argument: a
handler that declares ``contracts: kopf.Index`` gets the one below. Every handler
and the admission webhook answer from these, never from an API call on their path.

The indexes of pods, PersistentVolumes and claims, which a large cluster has by the
ten thousand, are not kopf's: kopf keeps far more per object than they hold (see
mountwarden.adapters.watches). Their reducers are below, the watches that feed
them are started before kopf starts (so that, as with kopf's, no handler runs
before they are whole), and mountwarden.adapters.watches.with_cluster_indexes hands
them to a handler under their names as kopf hands its own.

Each function returns ``{}`` (never None) when an object stops qualifying: kopf
keeps an object's previous entries when its index function returns None.

(*) kept by mountwarden.adapters.watches, not by kopf (``memo.pods`` reads the pods' two).

| index | key -> value | read by |
|---|---|---|
| contracts | profile -> its resolved Contract | reports (compliance, Events) |
| profiles_by_name | profile -> ProfileEntry | admission |
| profiles_by_consumer | a label its consumers must have (consumer_keys) -> ProfileEntry | admission (PVCs) |
| rollouts_under_way | profile -> rollout phase, while not Complete | reports (Events) |
| adopters | profile -> its spec.adopt as an Adopter (and the PVs its status.adoption lists) | rollouts (refusals), inventory |
| credit_watch_targets | region -> CreditWatchTarget (with its profile) | credits |
| classes_by_name | class -> ClassEntry (with its profile) | admission, reports (Events), credits |
| classes_by_profile | profile -> ClassEntry of each class of its lineage | admission, reports (compliance) |
| default_classes | "default" -> ClassEntry of each default class | admission |
| volumes_by_class (*) | class -> PV name | profiles, rollouts, admission, reports (compliance) |
| claims_by_volume (*) | PV -> its claim, class, mountOptions (and adoptedBy) | reports, credits, inventory |
| network_volumes (*) | PV -> its NetworkVolume (source, server, file system), for PVs on network storage | inventory |
| volumes_by_adopter (*) | profile -> PV name of each volume it adopted (mountwarden.io/adopted-by) | reports (compliance), rollouts |
| unbound_claims_by_class (*) | class -> namespace/name of each unbound claim | profiles |
| pods_by_uid (*) | pod UID -> its PodPlacement (namespace, name, node, claims) | reports (Events; a report speaks only of its node's pods), credits |
| pods_by_claim (*) | (namespace, claim) -> PodPlacement of each pod mounting it | reports (compliance) |
| namespace_labels | namespace -> its labels | admission |
| reports_by_node | node -> its report as written (a LazyNodeReport: read the first time a reader asks) | reports, credits, inventory |
| nodes | node -> its NodeFacts (zone label; why no agent can run there) | credits (CrossAZMount), reports (a missing report explained) |
"""

import asyncio
import functools
from collections.abc import Collection, Mapping
from dataclasses import replace

import kopf
from pydantic import ValidationError

from mountwarden.adapters.pods import POD_INDEXES, pod_entries, pod_page_entries
from mountwarden.adapters.watches import CoreWatches, Entries
from mountwarden.api.base import GROUP, VERSION
from mountwarden.api.nodemountreport import PLURAL as REPORTS
from mountwarden.api.nodemountreport import LazyNodeReport
from mountwarden.api.storageprofile import PLURAL as PROFILES
from mountwarden.api.storageprofile import ProfileStatus, StorageProfileSpec, adopter_of, contract_of
from mountwarden.core.admission import ProfileEntry, consumer_keys
from mountwarden.core.networkstorage import NetworkVolume
from mountwarden.core.node.kinds import NodeFacts
from mountwarden.core.policy import ResolvedPolicy
from mountwarden.core.storageclass import ADOPTED_BY_ANNOTATION, PROFILE_LABEL, ClassEntry
from mountwarden.handlers.collector import freeze_what_lives, thaw_everything
from mountwarden.handlers.config import OperatorConfig, WebhookMode
from mountwarden.handlers.context import OperatorContext
from mountwarden.handlers.credits import watched_file_system
from mountwarden.handlers.native_heap import give_back_free_memory

PROFILE = (GROUP, VERSION, PROFILES)
STORAGE_CLASSES = ("storage.k8s.io", "v1", "storageclasses")
#: The one key of the default_classes index.
DEFAULT = "default"


def one(index: kopf.Index, key):
    """The entry under ``key`` of an index that holds one per key (by object name), or None."""
    store = index.get(key)
    return next(iter(store), None) if store else None


def snapshot(index: kopf.Index) -> dict:
    """An index of one entry per key as a plain dict, read on kopf's event loop: a worker thread must not iterate
    kopf's indexes while kopf changes them."""
    return {key: entry for key in list(index) if (entry := one(index, key)) is not None}


# -- StorageProfiles ------------------------------------------------------------------------------


def _valid(spec: kopf.Spec) -> tuple[StorageProfileSpec, ResolvedPolicy] | None:
    """A profile and its resolved options; None when invalid: it governs nothing until it is fixed."""
    try:
        profile = StorageProfileSpec.model_validate(dict(spec))
    except ValidationError:
        return None
    policy = profile.resolve()
    return (profile, policy) if policy.valid else None


async def contracts(name: str, spec: kopf.Spec, status: kopf.Status, **_) -> dict:
    """Each valid profile's resolved contract."""
    valid = _valid(spec)
    if valid is None:
        return {}
    profile, policy = valid
    return {name: contract_of(profile, policy, status)}


def profile_entry(name: str, spec: StorageProfileSpec, status) -> ProfileEntry:
    consumers = spec.consumers
    watched = spec.watched_file_system()
    return ProfileEntry(
        name=name,
        provisioner=spec.backend.provisioner,
        namespace_selector=consumers.namespace_selector.to_wire() if consumers.namespace_selector else None,
        pvc_selector=consumers.pvc_selector.to_wire() if consumers.pvc_selector else None,
        enforcement=str(spec.enforcement),
        sqlite=str(spec.sqlite),
        cache_policy=str(spec.cache_policy) if spec.cache_policy else None,
        file_system_id=watched[0] if watched else None,
        throughput_mode=ProfileStatus(status).throughput_mode,
        storage_class_name=ProfileStatus(status).storage_class_name,
        effective_options=spec.resolve().options,
    )


def profiles_by_name(name: str, spec: kopf.Spec, status: kopf.Status, **_) -> dict:
    """Each valid profile as admission needs it: its consumers, its rules, its current class."""
    valid = _valid(spec)
    return {name: profile_entry(name, valid[0], status)} if valid is not None else {}


def profiles_by_consumer(name: str, spec: kopf.Spec, status: kopf.Status, **_) -> dict:
    """Each valid profile under a label every PVC it governs has: a PVC review tries those, not all profiles."""
    valid = _valid(spec)
    if valid is None:
        return {}
    entry = profile_entry(name, valid[0], status)
    return {key: entry for key in consumer_keys(entry)}


async def rollouts_under_way(name: str, status: kopf.Status, **_) -> dict:
    """Profiles whose rollout is not complete: their consumers mix old and new options on purpose."""
    phase = ProfileStatus(status).rollout_phase
    return {name: phase} if phase and phase != "Complete" else {}


async def adopters(name: str, spec: kopf.Spec, status: kopf.Status, meta: kopf.Meta, **_) -> dict:
    """Each valid profile's spec.adopt: what it takes over, who was first where two name the same, and which PVs
    its status lists as taken."""
    valid = _valid(spec)
    if valid is None:
        return {}
    adopter = adopter_of(name, valid[0], meta.get("creationTimestamp"), status)
    return {name: adopter} if adopter.adopts else {}


async def credit_watch_targets(name: str, spec: kopf.Spec, **_) -> dict:
    target = watched_file_system(dict(spec))
    return {target.region: replace(target, profile=name)} if target else {}


# -- StorageClasses -------------------------------------------------------------------------------


def classes_by_name(name: str, body: kopf.Body, **_) -> dict:
    return {name: ClassEntry.from_object(body)}


def classes_by_profile(body: kopf.Body, labels: kopf.Labels, **_) -> dict:
    """A profile's lineage: every class labelled with it, so that its volumes are found without a scan of PVs."""
    return {labels[PROFILE_LABEL]: ClassEntry.from_object(body)} if PROFILE_LABEL in labels else {}


def default_classes(body: kopf.Body, **_) -> dict:
    entry = ClassEntry.from_object(body)
    return {DEFAULT: entry} if entry.is_default else {}


# -- PersistentVolumes and claims (reduced by mountwarden.adapters.watches) ------------------------

VOLUME_INDEXES = ("volumes_by_class", "claims_by_volume", "network_volumes", "volumes_by_adopter")
CLAIM_INDEXES = ("unbound_claims_by_class",)


def volume_entries(pv: Mapping, network_drivers: Collection[str] = ()) -> Entries:
    """A PV under its class (and its adopter), its claim and class under its name, and, on network storage, what
    it is (``network_drivers``: CSI drivers that mount NFS beyond the known ones)."""
    metadata = pv["metadata"]
    name = metadata["name"]
    spec = pv.get("spec") or {}
    storage_class = spec.get("storageClassName")
    claim = spec.get("claimRef") or {}
    adopted_by = (metadata.get("annotations") or {}).get(ADOPTED_BY_ANNOTATION)
    entries: Entries = {}
    if storage_class:
        entries["volumes_by_class"] = {storage_class: name}
    if claim.get("name"):
        entry = {"claim": (claim.get("namespace"), claim["name"]), "storageClass": storage_class,
                 "mountOptions": tuple(spec.get("mountOptions") or ())}
        entries["claims_by_volume"] = {name: {**entry, "adoptedBy": adopted_by} if adopted_by else entry}
    if adopted_by:
        entries["volumes_by_adopter"] = {adopted_by: name}
    network = NetworkVolume.from_object(pv, network_drivers)
    if network is not None:
        entries["network_volumes"] = {name: network}
    return entries


def claim_entries(pvc: Mapping) -> Entries:
    """Claims still waiting for a volume keep their class alive too: deleting it would strand them."""
    metadata = pvc["metadata"]
    storage_class = (pvc.get("spec") or {}).get("storageClassName")
    if not storage_class or (pvc.get("status") or {}).get("phase") == "Bound":
        return {}
    return {"unbound_claims_by_class": {storage_class: f"{metadata.get('namespace')}/{metadata['name']}"}}


def cluster_watches(client, network_drivers: Collection[str] = ()) -> CoreWatches:
    volumes = functools.partial(volume_entries, network_drivers=tuple(network_drivers))
    return CoreWatches(client, pods=(pod_entries, POD_INDEXES, pod_page_entries), volumes=(volumes, VOLUME_INDEXES),
                       claims=(claim_entries, CLAIM_INDEXES))


#: Seconds to wait for the first lists of pods, PVs and claims before kopf's start-up retries.
SYNC_TIMEOUT = 120.0


async def follow_cluster(memo: OperatorContext, logger, **_) -> None:
    """Start the watches of pods, PVs and claims, and let kopf start only once their first lists are in."""
    memo.watches.start()
    if not await asyncio.to_thread(memo.watches.wait_synced, SYNC_TIMEOUT):
        raise kopf.TemporaryError("still listing pods, PersistentVolumes and claims", delay=1)
    logger.info(f"following {len(memo.watches.pods)} pods, {len(memo.watches.volumes)} PersistentVolumes and "
                f"{len(memo.watches.claims)} unbound claims")
    # What the first lists filed lives as long as the operator (about 500,000 objects at 20,000 pods), and each
    # full garbage collection walked all of it while every thread, the webhook's too, waited: 354 to 823 ms at
    # 5,000 PVs and 20,000 pods (bench/results/scale_webhook_profile.txt: 340 to 840 ms, run D).
    freeze_what_lives()
    # The lists' pages and their decoded JSON are freed by now, but glibc keeps the pages for reuse.
    give_back_free_memory()


def stop_following_cluster(memo: OperatorContext, **_) -> None:
    memo.watches.stop()
    thaw_everything()


# -- namespaces, nodes, node reports --------------------------------------------------------------------


def namespace_labels(name: str, labels: kopf.Labels, **_) -> dict:
    return {name: dict(labels)}


def nodes(name: str, labels: kopf.Labels, memo: OperatorContext, **_) -> dict:
    facts = NodeFacts.of(labels, control_plane_excluded=not memo.config.agent_on_control_plane)
    return {name: facts} if facts != NodeFacts() else {}


async def reports_by_node(name: str, spec: kopf.Spec, **_) -> dict:
    """Each node's report, kept as written until a reader asks (LazyNodeReport)."""
    return {name: LazyNodeReport(name, dict(spec))}


def register(registry: kopf.OperatorRegistry, config: OperatorConfig) -> None:
    """Register the indexes; those only admission reads, only when it is served."""
    for function in (contracts, rollouts_under_way, credit_watch_targets, adopters):
        kopf.index(*PROFILE, registry=registry)(function)
    for function in (classes_by_name, classes_by_profile):
        kopf.index(*STORAGE_CLASSES, registry=registry)(function)
    kopf.on.startup(registry=registry)(follow_cluster)
    kopf.on.cleanup(registry=registry)(stop_following_cluster)
    kopf.index(GROUP, VERSION, REPORTS, registry=registry)(reports_by_node)
    kopf.index("v1", "nodes", registry=registry)(nodes)
    if config.webhook_mode != WebhookMode.OFF:
        kopf.index(*PROFILE, registry=registry)(profiles_by_name)
        kopf.index(*PROFILE, registry=registry)(profiles_by_consumer)
        kopf.index(*STORAGE_CLASSES, registry=registry)(default_classes)
        kopf.index("v1", "namespaces", registry=registry)(namespace_labels)
