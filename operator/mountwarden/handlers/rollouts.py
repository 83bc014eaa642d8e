"""Roll a profile's new version out to the volumes bound before it, at the pace of the events that move it.

One daemon per StorageProfile runs a tick whenever something happens that can move
its rollout on, and only then:

- the profile's target changes: a new version reconciled, an approval, a new rollout policy;
- a volume of its classes comes, goes or is patched (told by the PVs' watch, mountwarden.adapters.watches);
- a workload of its rollout changes (its own rollout progresses: replicas updated, ready), or its
  HorizontalPodAutoscaler does (one at zero replicas disables itself);
- a node report changes while the rollout verifies replicas (their mounts appear).

Wake-ups that arrive during a tick coalesce into one more tick. With no event at all a
tick still runs every ``rollout_interval`` seconds: a safety net (a missed watch event,
an API error), not the pace of the work.

A tick reads the world, lets the pure planner (mountwarden.core.rollout) pick the next
actions, performs them and writes status.rollout. No progress lives in memory, so an
operator restarted at any point carries on from the cluster; what the daemons remember
(which workloads each rollout follows) only routes wake-ups and is rebuilt by the first
tick.
"""

import asyncio
import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import kopf
import kubernetes
from pydantic import ValidationError

from mountwarden.adapters.kube import StorageClasses, TransientApiError, transient_errors
from mountwarden.adapters.watches import Entries, with_cluster_indexes
from mountwarden.adapters.workloads import ClusterWorkloads
from mountwarden.api.base import GROUP, VERSION
from mountwarden.api.storageprofile import PLURAL, ProfileStatus, StorageProfileSpec, adopter_of
from mountwarden.core.adoption import Adopter, CandidateVolume, Selection, class_fate, select
from mountwarden.core.options.normalize import normalize
from mountwarden.core.rollout import (
    APPROVE_ANNOTATION,
    DISRUPTION_BUDGET,
    PatchVolume,
    Phase,
    Plan,
    Policy,
    ReleaseVolume,
    Step,
    Target,
    Version,
    adopting,
    advance,
    build_plan,
    needs_world,
)
from mountwarden.core.rollout.status import adoption_status
from mountwarden.core.storageclass import ClassEntry
from mountwarden.handlers import findings, metrics
from mountwarden.handlers.config import OperatorConfig
from mountwarden.handlers.context import OperatorContext
from mountwarden.handlers.errors import Retries
from mountwarden.handlers.indexes import snapshot

PROFILE = (GROUP, VERSION, PLURAL)
WORKLOAD_RESOURCES = (("apps", "v1", "deployments"), ("apps", "v1", "statefulsets"), ("apps", "v1", "daemonsets"))
#: Phases in which replicas are being restarted or verified: node reports can move them on.
VERIFYING_PHASES = frozenset({Phase.PROGRESSING, Phase.PAUSED, Phase.WAITING})
#: Seconds between attempts to evict a replica that a PodDisruptionBudget refused, as `kubectl drain` retries
#: (its default): a budget allows again when a replica elsewhere becomes Ready, and no event here says so.
EVICTION_RETRY_SECONDS = 5.0

log = logging.getLogger(__name__)


class RolloutWakeups:
    """What wakes each profile's rollout daemon: one asyncio.Event per profile, and who to wake for what.

    Events are set on kopf's event loop (by the async handlers below); the routing
    tables are rewritten by ticks in worker threads, hence the lock.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = loop
        self._events: dict[str, asyncio.Event] = {}
        self._lock = threading.Lock()
        #: Each class of a profile's lineage -> the profile (from its last tick's target).
        self._classes: dict[str, str] = {}
        #: (kind, namespace, name) of a workload -> the profiles whose rollout lists it.
        self._workloads: dict[tuple[str, str, str], set[str]] = {}
        self._followed: dict[str, set[tuple[str, str, str]]] = {}
        #: Profiles whose rollout restarts or verifies replicas now.
        self._verifying: set[str] = set()
        #: The inputs of each profile's target, as last seen: its own status writes change nothing here.
        self._targets: dict[str, tuple] = {}
        #: Profiles with a replica a PodDisruptionBudget refused to let go: they try again soon.
        self._refused: set[str] = set()
        #: Profiles that adopt PVs by their labels (spec.adopt.volumeSelector): any PV's change may concern them.
        self._selecting: set[str] = set()
        # A tick routes events to its profile only once it has written what it read; an event that arrives
        # between its read and that write would be lost. So while any tick runs, every event is numbered
        # and remembered, and each tick, once done, wakes its profile again for what it missed.
        self._sequence = 0
        self._ticks: dict[str, int] = {}
        self._recent_workloads: dict[tuple[str, str, str], int] = {}
        self._recent_classes: dict[str, int] = {}
        self._recent_report = 0

    def event(self, profile: str) -> asyncio.Event:
        return self._events.setdefault(profile, asyncio.Event())

    def wake(self, profile: str) -> None:
        self.event(profile).set()

    def wake_for_classes_threadsafe(self, classes: Iterable[str]) -> None:
        """From another thread (a watch): wake the profiles whose lineage (or adopted classes) hold any of
        ``classes``, and those adopting PVs by their labels."""
        with self._lock:
            classes = set(classes)
            if self._ticks:
                self._sequence += 1
                self._recent_classes.update(dict.fromkeys(classes, self._sequence))
            profiles = {self._classes[cls] for cls in classes if cls in self._classes} | self._selecting
        if profiles and self._loop is not None:
            for profile in profiles:
                self._loop.call_soon_threadsafe(self.wake, profile)

    def lineage(self, profile: str, classes: Iterable[str], *, selecting: bool = False) -> None:
        """Route the PV changes of ``classes`` (its lineage and the classes it adopts) to ``profile``; with
        ``selecting``, those of every PV (it adopts PVs by their labels)."""
        with self._lock:
            for cls in [cls for cls, owner in self._classes.items() if owner == profile]:
                del self._classes[cls]
            self._classes.update(dict.fromkeys(classes, profile))
            (self._selecting.add if selecting else self._selecting.discard)(profile)

    def wake_for_workload(self, kind: str, namespace: str, name: str) -> None:
        with self._lock:
            if self._ticks:
                self._sequence += 1
                self._recent_workloads[(kind, namespace, name)] = self._sequence
            profiles = list(self._workloads.get((kind, namespace, name), ()))
        for profile in profiles:
            self.wake(profile)

    def wake_verifying(self) -> None:
        with self._lock:
            if self._ticks:
                self._sequence += 1
                self._recent_report = self._sequence
            profiles = list(self._verifying)
        for profile in profiles:
            self.wake(profile)

    def tick_starts(self, profile: str) -> None:
        """Before a tick reads the cluster: from now on, the events it may miss are remembered."""
        with self._lock:
            self._ticks[profile] = self._sequence

    def tick_ended(self, profile: str) -> None:
        """After the tick wrote its routes: wake the profile again if an event for them came while it ran."""
        with self._lock:
            started = self._ticks.pop(profile, self._sequence)
            missed = (
                any(self._recent_workloads.get(ref, 0) > started for ref in self._followed.get(profile, ()))
                or any(seen > started for cls, seen in self._recent_classes.items()
                       if self._classes.get(cls) == profile or profile in self._selecting)
                or (profile in self._verifying and self._recent_report > started)
            )
            if not self._ticks:
                self._recent_workloads.clear()
                self._recent_classes.clear()
            else:
                oldest = min(self._ticks.values())
                self._recent_workloads = {ref: seen for ref, seen in self._recent_workloads.items() if seen > oldest}
                self._recent_classes = {cls: seen for cls, seen in self._recent_classes.items() if seen > oldest}
        if missed:
            self.wake(profile)

    def target_changed(self, profile: str, inputs: tuple) -> bool:
        with self._lock:
            changed = self._targets.get(profile) != inputs
            self._targets[profile] = inputs
        return changed

    def follow(self, profile: str, status: Mapping | None, *, evictions_refused: bool = False) -> None:
        """Route the events of the workloads in ``status`` (status.rollout, as written) to ``profile``."""
        status = status or {}
        active = status.get("phase") not in (None, Phase.COMPLETE, Phase.AWAITING_MIGRATION)
        workloads = {(w["kind"], w["namespace"], w["name"]) for w in status.get("workloads") or []} if active else set()
        with self._lock:
            for ref in self._followed.get(profile, set()) - workloads:
                self._workloads.get(ref, set()).discard(profile)
                if not self._workloads.get(ref):
                    self._workloads.pop(ref, None)
            for ref in workloads:
                self._workloads.setdefault(ref, set()).add(profile)
            self._followed[profile] = workloads
            if active and status.get("phase") in VERIFYING_PHASES:
                self._verifying.add(profile)
            else:
                self._verifying.discard(profile)
            refused = active and any(w.get("reason") == DISRUPTION_BUDGET for w in status.get("workloads") or [])
            (self._refused.add if refused or evictions_refused else self._refused.discard)(profile)

    def next_tick_within(self, profile: str, safety_net: float) -> float:
        """Seconds the profile's daemon may sleep without an event: soon while a budget refuses an eviction."""
        with self._lock:
            return min(safety_net, EVICTION_RETRY_SECONDS) if profile in self._refused else safety_net

    def forget(self, profile: str) -> None:
        self.follow(profile, None)
        self.lineage(profile, (), selecting=False)
        with self._lock:
            self._targets.pop(profile, None)
            self._followed.pop(profile, None)
            self._refused.discard(profile)
        self._events.pop(profile, None)


def target_inputs(spec: Mapping, status: Mapping, meta: Mapping) -> tuple:
    """What the target of a rollout is made of: a change of any of these may start or move a rollout."""
    stored = ProfileStatus(status)
    return (meta.get("generation"), stored.observed_generation, stored.storage_class_name, stored.version,
            stored.effective_mount_options, len(stored.history), (meta.get("annotations") or {}).get(APPROVE_ANNOTATION),
            repr(spec.get("rollout")), repr(spec.get("adopt")))


def _target(name: str, spec: Mapping, status: Mapping, meta: Mapping) -> Target | None:
    """The version to roll out; None until the profile's current spec has been reconciled into a class."""
    stored = ProfileStatus(status)
    if not stored.storage_class_name or stored.observed_generation != meta.get("generation"):
        return None  # a new spec is on its way: its version will supersede this one
    try:
        rollout = StorageProfileSpec.model_validate(dict(spec)).rollout
    except ValidationError:
        return None  # reconcile_profile reports it
    lineage = tuple(
        Version(record["storageClassName"], int(record["version"]), tuple(record.get("mountOptions") or ()))
        for record in stored.history
    )
    current = Version(stored.storage_class_name, stored.version, stored.effective_mount_options)
    policy = Policy(str(rollout.strategy), str(rollout.approval), rollout.max_concurrent_workloads,
                    rollout.verify_timeout_seconds)
    return Target(name, current, lineage, policy, (meta.get("annotations") or {}).get(APPROVE_ANNOTATION))


def _adopter(name: str, body: Mapping) -> Adopter:
    """The profile's spec.adopt (adopting nothing when the spec is invalid: reconcile_profile reports it)."""
    try:
        spec = StorageProfileSpec.model_validate(dict(body.get("spec") or {}))
    except ValidationError:
        return Adopter(name)
    return adopter_of(name, spec, (body.get("metadata") or {}).get("creationTimestamp"), body.get("status"))


@dataclass(frozen=True)
class ClusterView:
    """What a tick knows besides its own profile, copied from the indexes on kopf's event loop."""

    #: The StorageClasses, by name.
    classes: Mapping[str, ClassEntry] = field(default_factory=dict)
    #: Every profile's spec.adopt, by profile: who was first where two adopt one thing.
    adopters: Mapping[str, Adopter] = field(default_factory=dict)
    #: PVs each profile adopted (mountwarden.io/adopted-by), by profile.
    adopted: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    network_drivers: tuple[str, ...] = ()
    #: "namespace/name" of a pod that may hold a mount, by UID (the operator's PodPlacements.name_of).
    pod_name_of: Callable[[str], str | None] | None = None


@dataclass
class Taken:
    """What spec.adopt takes from the PVs a tick lists, and the PVs the profile adopted and no longer names."""

    selection: Selection
    released: list[str] = field(default_factory=list)


class ProfileRollout:
    """One profile's ticks: decide from the world, act, record."""

    def __init__(self, name: str, client: kubernetes.client.ApiClient, wakeups: RolloutWakeups) -> None:
        self.name = name
        self.custom = kubernetes.client.CustomObjectsApi(client)
        self.cluster = ClusterWorkloads(client)
        self.classes = StorageClasses(client)
        self.wakeups = wakeups

    def tick(self, body: Mapping, volumes_by_class: kopf.Index, view: ClusterView | None = None) -> None:
        """One tick; ``body`` is kopf's live view of the profile, enough to tell whether the world is needed."""
        view = view or ClusterView()
        if not self._needs_world(body, volumes_by_class, view):
            self._settle(ProfileStatus(body.get("status")).rollout)
            return
        # The live view may not show this daemon's last status write yet: judge from the stored profile. A tick
        # woken by the watch events of its own PV patches may see the finished rollout only there, and judged from
        # the live view alone it read the whole cluster again.
        with transient_errors():
            fresh = self.custom.get_cluster_custom_object(*PROFILE, self.name)
        if not self._needs_world(fresh, volumes_by_class, view):
            self._settle(ProfileStatus(fresh.get("status")).rollout)
            return
        spec, status, meta = fresh.get("spec") or {}, fresh.get("status") or {}, fresh.get("metadata") or {}
        target = _target(self.name, spec, status, meta)
        previous = ProfileStatus(status).rollout
        if target is None:
            self._settle(previous)
            return
        adopter = _adopter(self.name, fresh)
        lineage = [version.storage_class for version in target.lineage]
        taken: list[Taken] = []
        also = (lambda pvs: self._take(pvs, adopter, lineage, view, taken)) if self._adopts(adopter, view) else None
        world = self.cluster.read(lineage, with_reports=target.restarts_workloads, also=also,
                                  pod_name_of=view.pod_name_of)
        if taken:
            target = adopting(target, taken[0].selection.volumes, world)
        plan = build_plan(target, world)
        step = advance(plan, previous, datetime.now(UTC))
        released = [ReleaseVolume(name) for name in (taken[0].released if taken else [])]
        refused = self.cluster.perform([*step.actions, *released])
        self._announce(fresh, step)
        for refusal in refused:  # a budget changed since the world was read: the next tick reads it
            kopf.warn(fresh, reason="EvictionRefused", message=str(refusal))
            log.info("StorageProfile %s: EvictionRefused: %s", self.name, refusal)
        written = {key: value for key, value in step.status.items() if value is not None}
        change: dict = {"rollout": step.status} if written != dict(previous or {}) else {}
        if taken:
            self._classes_fate(fresh, plan.target, taken[0].selection, view)
            adoption = (self._adoption(fresh, plan, taken[0].selection, written, step.actions) if adopter.adopts
                        else None)
            if adoption != ProfileStatus(status).adoption:
                change["adoption"] = adoption
        if change:
            with transient_errors():
                self.custom.patch_cluster_custom_object_status(*PROFILE, self.name, {"status": change})
        self._settle(written, evictions_refused=bool(refused))

    def _settle(self, rollout: Mapping | None, *, evictions_refused: bool = False) -> None:
        """The tick's outcome: the rollout gauges, and when to tick next."""
        metrics.record_rollout(self.name, rollout)
        self.wakeups.follow(self.name, rollout, evictions_refused=evictions_refused)

    def _take(self, pvs: Sequence[Mapping], adopter: Adopter, lineage: Sequence[str], view: ClusterView,
              taken: list[Taken]) -> tuple[str, ...]:
        """From the listed PVs: those spec.adopt takes, and those the profile adopted and no longer names."""
        candidates = [CandidateVolume.from_object(pv, view.network_drivers) for pv in pvs]
        others = [other for name, other in view.adopters.items() if name != self.name]
        selection = select(adopter, others, view.classes, candidates)
        released = [c.name for c in candidates if c.adopted_by == self.name and c.name not in selection.volumes
                    and c.storage_class not in lineage]
        taken.append(Taken(selection, released))
        for name in released:
            log.info("StorageProfile %s: PersistentVolume %s is no longer named in spec.adopt: released", self.name,
                     name)
        return selection.volumes

    def _adopts(self, adopter: Adopter, view: ClusterView) -> bool:
        """Whether it adopts anything, or holds classes or volumes it adopted (to release those it no longer names)."""
        return adopter.adopts or bool(view.adopted.get(self.name)) or any(
            cls.adopted_by == self.name for cls in view.classes.values())

    def _classes_fate(self, profile: Mapping, target: Target, selection: Selection, view: ClusterView) -> None:
        """Once approved, the adopted classes are annotated (and the default class moved); a class no longer named is
        released at once."""
        approved = target.approved and target.patches_volumes
        keep = selection.classes if approved else [name for name in selection.classes
                                                    if (cls := view.classes.get(name)) and cls.adopted_by == self.name]
        fate = class_fate(self.name, keep, view.classes, target.version.storage_class,
                          make_default=bool((profile.get("spec") or {}).get("default")))
        for patch in fate.patches:
            self.classes.patch(patch.name, patch.body())
            log.info("StorageProfile %s: StorageClass %s: %s", self.name, patch.name, dict(patch.annotations))

    def _adoption(self, profile: Mapping, plan: Plan, selection: Selection, rollout: Mapping,
                  actions: Sequence) -> dict:
        """status.adoption; each refusal not said before is an AdoptionRefused Event."""
        contract = normalize(list(plan.target.version.mount_options)).options
        adoption = adoption_status(plan, selection, contract, rollout, actions)
        before = {(r["field"], r["message"]) for r in (ProfileStatus(profile.get("status")).adoption or {}).get(
            "refused") or []}
        for refusal in selection.refusals:
            if (refusal.field, refusal.message) not in before:
                findings.warn(profile, refusal.finding(self.name))
                log.info("StorageProfile %s: AdoptionRefused: %s: %s", self.name, refusal.field, refusal.message)
        return adoption

    def _needs_world(self, body: Mapping, volumes_by_class: kopf.Index, view: ClusterView) -> bool:
        target = _target(self.name, body.get("spec") or {}, body.get("status") or {}, body.get("metadata") or {})
        if target is None:
            return False
        adopter = _adopter(self.name, body)
        self.wakeups.lineage(self.name, [*(version.storage_class for version in target.lineage),
                                         *adopter.storage_class_names],
                             selecting=adopter.volume_selector is not None)
        if self._adopts(adopter, view):
            return True  # what it adopts (or releases) is read from the PVs themselves, their labels included
        volumes = {version.storage_class: list(volumes_by_class.get(version.storage_class, []))
                   for version in target.lineage}
        older = [pv for cls, pvs in volumes.items() if cls != target.version.storage_class for pv in pvs]
        # The PV index is enough to tell that a finished plan has nothing new to do: no API call then.
        return needs_world((body.get("status") or {}).get("rollout"), target,
                           [pv for pvs in volumes.values() for pv in pvs], older)

    def _announce(self, profile: Mapping, step: Step) -> None:
        """One Event and one log line per decision: restarts, remounts, blocks, phase changes."""
        for event in step.events:
            (kopf.warn if event.warning else kopf.info)(profile, reason=event.reason, message=event.message)
            log.info("StorageProfile %s: %s: %s", self.name, event.reason, event.message)
        patched = [action.name for action in step.actions if isinstance(action, PatchVolume)]
        if patched:
            log.info("StorageProfile %s: patched the mountOptions of %d PersistentVolumes (%s%s)", self.name,
                     len(patched), ", ".join(patched[:3]), ", ..." if len(patched) > 3 else "")


async def _next_wakeup(wake: asyncio.Event, stopped: kopf.DaemonStopped, timeout: float) -> None:
    """Return when woken, when stopping, or after ``timeout`` (the safety net), whichever comes first."""
    async def until_stopped() -> None:
        await stopped.wait()

    waiters = {asyncio.ensure_future(wake.wait()), asyncio.ensure_future(until_stopped())}
    try:
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()


@with_cluster_indexes
async def drive_rollout(name: str, body: kopf.Body, memo: OperatorContext, stopped: kopf.DaemonStopped,
                        volumes_by_class: kopf.Index, volumes_by_adopter: kopf.Index, classes_by_name: kopf.Index,
                        adopters: kopf.Index, logger: logging.Logger, **_) -> None:
    """The profile's rollout daemon: a tick at start, then one per wake-up (or per safety-net interval)."""
    wakeups: RolloutWakeups = memo.rollout_wakeups
    rollout = ProfileRollout(name, memo.kube_client, wakeups)
    wake = wakeups.event(name)
    wake.set()  # the first tick runs at once: a rollout may have been under way when the operator started
    retries = Retries()
    try:
        while not stopped:
            await _next_wakeup(wake, stopped, wakeups.next_tick_within(name, memo.config.rollout_interval))
            if stopped:
                break
            wake.clear()
            wakeups.tick_starts(name)
            try:
                # In a worker thread, with kopf's context (Events posted from there reach its poster); kopf's
                # indexes are copied here, on its event loop. The pods' placements are the operator's own, locked:
                # the tick reads a name from them only when it names a superblock's holder.
                view = ClusterView(snapshot(classes_by_name), snapshot(adopters),
                                   {profile: tuple(volumes_by_adopter.get(profile, ())) for profile in
                                    list(volumes_by_adopter)}, memo.config.network_provisioners, memo.pods.name_of)
                await asyncio.to_thread(rollout.tick, body, volumes_by_class, view)
                retries = Retries()
            except TransientApiError as error:
                retries, delay = retries.after(error)
                if delay:
                    logger.warning(f"rollout tick failed ({error}); trying again in {delay:.0f} s")
                    await asyncio.sleep(delay)
                else:
                    logger.info(f"rollout tick refused ({error}): an object changed since the tick read it; "
                                f"reading again")
                wake.set()
            except Exception as error:  # a bug must not end the daemon: the next event or the safety net retries
                retries, delay = retries.after(error)
                logger.exception("rollout tick failed")
                await asyncio.sleep(delay)
            finally:
                wakeups.tick_ended(name)
    finally:
        wakeups.forget(name)


# -- what wakes the daemons -----------------------------------------------------------------------------


async def wake_on_target_change(name: str, spec: kopf.Spec, status: kopf.Status, meta: kopf.Meta, type: str,
                                memo: OperatorContext, **_) -> None:
    """A new version, an approval, a new policy; not this profile's own status.rollout writes."""
    if type != "DELETED" and memo.rollout_wakeups.target_changed(name, target_inputs(spec, status, meta)):
        memo.rollout_wakeups.wake(name)


def volume_changed(wakeups: RolloutWakeups):
    """A PV of a profile's lineage came, went or changed (told by the PVs' watch, in its thread)."""
    def listener(uid: str, before: Entries, after: Entries) -> None:
        wakeups.wake_for_classes_threadsafe({*before.get("volumes_by_class", {}), *after.get("volumes_by_class", {})})
    return listener


async def wake_on_workload_change(name: str, namespace: str, body: kopf.Body, memo: OperatorContext, **_) -> None:
    memo.rollout_wakeups.wake_for_workload(body.get("kind", ""), namespace, name)


async def wake_on_autoscaler_change(namespace: str, spec: kopf.Spec, memo: OperatorContext, **_) -> None:
    """An HPA disables itself at zero replicas: the rollout of its workload then says so."""
    target = spec.get("scaleTargetRef") or {}
    memo.rollout_wakeups.wake_for_workload(target.get("kind", ""), namespace, target.get("name", ""))


async def start_wakeups(memo: OperatorContext, **_) -> None:
    memo.rollout_wakeups = RolloutWakeups(asyncio.get_running_loop())
    memo.watches.volumes.listeners.append(volume_changed(memo.rollout_wakeups))


def register(registry: kopf.OperatorRegistry, config: OperatorConfig) -> None:
    kopf.on.startup(registry=registry)(start_wakeups)
    kopf.daemon(*PROFILE, registry=registry, cancellation_timeout=5.0)(drive_rollout)
    kopf.on.event(*PROFILE, registry=registry)(wake_on_target_change)
    for resource in WORKLOAD_RESOURCES:
        kopf.on.event(*resource, registry=registry)(wake_on_workload_change)
    kopf.on.event("autoscaling", "v2", "horizontalpodautoscalers", registry=registry)(wake_on_autoscaler_change)
