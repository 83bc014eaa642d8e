"""The state machine of a rollout, as tables: each workload's state and reason, and the rollout's phase.

Every tick judges each workload afresh from the world (its pod template, its own
rollout, its replicas' mounts in the node reports) and from its line of the last
status: the first row of ``WORKLOAD_TRANSITIONS`` whose condition holds gives
its state, reason and message, and the actions it needs. Then ``TURNS`` hands
the free maxConcurrentWorkloads slots to the workloads that wait for one, and
the first row of ``PHASES`` that holds gives the rollout's phase.

docs/reference/rollout.md is generated from these tables (`make docs`), so what
the docs say is what runs.
"""

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from functools import cached_property
from typing import NamedTuple

from mountwarden.core.rollout.actions import Action, RemountPod, RestartWorkload
from mountwarden.core.rollout.plan import Consumer, Plan, zero_message
from mountwarden.core.rollout.verify import Check, PodCheck, check_pods
from mountwarden.core.rollout.world import DisruptionBudget, Pod, Workload, parse_time, timestamp


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
#: The reason of a workload that waits for a PodDisruptionBudget to allow evicting a replica. It keeps its
#: slot: it is restarted already, and its next step is that eviction.
DISRUPTION_BUDGET = "DisruptionBudget"


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
    def waits_for_budget(self) -> bool:
        return self.state == State.WAITING and self.reason == DISRUPTION_BUDGET

    @property
    def busy(self) -> bool:
        """Holds a maxConcurrentWorkloads slot: restarting, verifying or waiting to evict, or in a rollout of its own."""
        workload = self.consumer.workload
        return self.state in IN_FLIGHT or self.waits_for_budget or (
            self.state == State.PENDING and workload is not None and not workload.rolled_out)

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


def restart(workload: Workload, storage_class: str, now: datetime) -> RestartWorkload:
    return RestartWorkload(workload.ref, workload.resource_version, storage_class, timestamp(now))


# -- one workload: what the conditions of WORKLOAD_TRANSITIONS are judged on -------------------------


@dataclass
class Situation:
    """One restartable workload this tick: the world's facts about it, each computed once when first asked."""

    consumer: Consumer
    plan: Plan
    #: Its line of the last status.rollout.workloads ({} when there is none for this target).
    before: Mapping
    now: datetime

    @property
    def workload(self) -> Workload:
        assert self.consumer.workload is not None
        return self.consumer.workload

    @property
    def storage_class(self) -> str:
        return self.plan.target.version.storage_class

    @property
    def restarted(self) -> bool:
        """Its pod template records a restart for the target (mountwarden.io/restarted-for)."""
        return self.workload.restarted_for == self.storage_class

    @property
    def restarted_at(self) -> str | None:
        return self.workload.restarted_at if self.restarted else None

    @property
    def remounts(self) -> int:
        return int(self.before.get("remounts") or 0)

    @property
    def was_done(self) -> bool:
        return self.before.get("state") == State.DONE

    @property
    def remounting(self) -> bool:
        return self.before.get("state") == State.RESTARTING and self.before.get("reason") == "Remounting"

    @cached_property
    def live(self) -> list[Pod]:
        return [pod for pod in self.consumer.pods if pod.live]

    @property
    def ready(self) -> int:
        return sum(pod.ready for pod in self.live)

    @cached_property
    def checks(self) -> list[PodCheck]:
        return check_pods(self.live, self.plan.target, self.plan.world)

    @property
    def blocking(self) -> PodCheck | None:
        return next((c for c in self.checks if c.check in (Check.ABSENT, Check.SHARED)), None)

    @property
    def stale(self) -> list[PodCheck]:
        return [c for c in self.checks if c.check == Check.STALE]

    @property
    def remounts_exhausted(self) -> bool:
        # Remounts that keep finding an old superblock mean something else holds it: stop evicting pods.
        return bool(self.stale) and self.remounts + 1 > 2 * self.workload.replicas

    @cached_property
    def to_evict(self) -> PodCheck | None:
        """The one stale replica evicted next: the oldest, which most likely made the old superblock."""
        far_future = self.now + timedelta(days=36500)
        return min(self.stale, key=lambda c: (c.pod.started_at or far_future, c.pod.name), default=None)

    @cached_property
    def refusing_budgets(self) -> list[DisruptionBudget]:
        """The budgets for which the Eviction API would refuse to evict ``to_evict`` now (none: it may go)."""
        if self.to_evict is None:
            return []
        budgets = self.plan.world.budgets_of(self.to_evict.pod)
        if len(budgets) > 1:
            return budgets  # the Eviction API refuses a pod that more than one budget covers
        return [budget for budget in budgets if not budget.allows_eviction]

    @property
    def pending(self) -> PodCheck | None:
        return next((c for c in self.checks if c.check == Check.PENDING), None)

    @cached_property
    def verifying_since(self) -> str:
        since = self.before.get("verifyingSince") if self.before.get("state") in (State.VERIFYING,
                                                                                  State.BLOCKED) else None
        return since or timestamp(self.now)

    @property
    def timed_out(self) -> bool:
        waited = self.now - (parse_time(self.verifying_since) or self.now)
        return waited >= timedelta(seconds=self.plan.target.policy.verify_timeout_seconds)


# -- what each row does ----------------------------------------------------------------------------


Outcome = tuple[Progress, list[Action]]


def _line(s: Situation, state: State, reason: str, message: str, **fields) -> Progress:
    return Progress(s.consumer, state, reason, message, restarted_at=s.restarted_at, remounts=s.remounts, **fields)


def _verifying(s: Situation, state: State, reason: str, message: str, pod: Pod | None = None) -> Progress:
    """A line of a restarted workload under verification; naming the replica (and node) the reason is about."""
    line = _line(s, state, reason, message, verifying_since=s.verifying_since)
    if pod is not None:
        line.pod, line.node = pod.name, pod.node
    if state == State.RESTARTING:
        line.verifying_since = None
    return line


def _still_done(s: Situation) -> Outcome:
    # Verified once for this target; replicas added since mount the patched PVs anyway.
    return _line(s, State.DONE, s.before.get("reason", "Verified"), s.before.get("message", ""),
                 done_at=s.before.get("doneAt")), []


def _at_zero(s: Situation) -> Outcome:
    autoscaler = s.consumer.autoscaler
    reason = "ScalingDisabled" if autoscaler and autoscaler.scaling_disabled else "ScaledToZero"
    # Recording the restart at zero moves no pod, and makes a later scale-up count as the workload's rollout.
    recorded = None if s.restarted else restart(s.workload, s.storage_class, s.now)
    line = _line(s, State.WAITING, reason, zero_message(s.consumer))
    if recorded is not None:
        line.restarted_at = recorded.at
    return line, [recorded] if recorded else []


def _own_rollout_first(s: Situation) -> Outcome:
    return Progress(s.consumer, State.PENDING, "RollingOut",
                    f"its own rollout runs ({s.workload.progress}): restarted once that is complete"), []


def _queued(s: Situation) -> Outcome:
    return Progress(s.consumer, State.PENDING, "Queued", "waits for its turn"), []


def _rolling_out(s: Situation) -> Outcome:
    remounting = s.remounting
    return _line(s, State.RESTARTING, "Remounting" if remounting else "RollingOut",
                 f"its rollout waits: {s.workload.progress}", pod=s.before.get("pod") if remounting else None,
                 node=s.before.get("node") if remounting else None), []


def _waiting_for_replicas(s: Situation) -> Outcome:
    return _verifying(s, State.VERIFYING, "WaitingForReplicas",
                      f"{s.ready} of {s.workload.replicas} replicas ready"), []


def _old_replicas_linger(s: Situation) -> Outcome:
    return _verifying(s, State.VERIFYING, "WaitingForReplicas",
                      f"{len(s.live)} replicas live, {s.workload.replicas} desired: the pods were read before an old "
                      "replica stopped"), []


def _blocked_by_mount(s: Situation) -> Outcome:
    found = s.blocking
    assert found is not None
    return _verifying(s, State.BLOCKED, found.reason, found.message, found.pod), []


def _remounts_exhausted(s: Situation) -> Outcome:
    first = s.stale[0]
    return _verifying(s, State.BLOCKED, "RemountsExhausted",
                      f"{first.message}; {s.remounts} remounts did not help: look for another consumer of the "
                      "export on that node. A replica replaced on the same node unmounts after its successor "
                      "mounts, so when nothing else holds it, move the workload's pods off the node (cordon and "
                      "drain it, or scale the workload to zero and back): the next mount after the last one gets "
                      "the new options", first.pod), []


def _budget_message(evicted: Pod, budgets: list[DisruptionBudget]) -> str:
    if len(budgets) > 1:
        names = ", ".join(str(budget) for budget in budgets)
        return (f"pod {evicted.namespace}/{evicted.name} is covered by {names}: the Eviction API refuses a pod that "
                "more than one budget covers. Keep one budget per pod; the eviction is asked again every tick")
    (budget,) = budgets
    why = ("its status does not reflect its current spec yet" if not budget.observed else
           f"it allows no disruption now ({budget.current_healthy} healthy, {budget.desired_healthy} needed)")
    return (f"{budget} refuses to let pod {evicted.namespace}/{evicted.name} be evicted: {why}. The pod keeps the "
            "old superblock until the budget allows it; the eviction is asked again every tick")


def _wait_for_budget(s: Situation) -> Outcome:
    evicted = s.to_evict
    assert evicted is not None
    return _line(s, State.WAITING, DISRUPTION_BUDGET, _budget_message(evicted.pod, s.refusing_budgets),
                 pod=evicted.pod.name, node=evicted.pod.node), []


def _remount(s: Situation) -> Outcome:
    # One replica at a time, through the Eviction API (PodDisruptionBudgets hold): the next one only once
    # its replacement is Ready, as row "fewer replicas ready than desired" waits for.
    evicted = s.to_evict
    assert evicted is not None
    others = len(s.stale) - 1
    message = evicted.message + ": evicting it to mount afresh" + (
        f" ({others} more replica(s) after its replacement is Ready)" if others else "")
    line = _verifying(s, State.RESTARTING, "Remounting", message, evicted.pod)
    line.remounts = s.remounts + 1
    return line, [RemountPod(evicted.pod.namespace, evicted.pod.name, evicted.pod.uid)]


def _verified(s: Situation) -> Outcome:
    return _line(s, State.DONE, "Verified", f"every replica mounts the options of {s.storage_class}",
                 done_at=timestamp(s.now)), []


def _verify_timed_out(s: Situation) -> Outcome:
    found = s.pending
    assert found is not None
    timeout = s.plan.target.policy.verify_timeout_seconds
    return _verifying(s, State.BLOCKED, found.reason, f"{found.message} (no verdict after {timeout}s)",
                      found.pod), []


def _still_verifying(s: Situation) -> Outcome:
    found = s.pending
    assert found is not None
    return _verifying(s, State.VERIFYING, found.reason, found.message, found.pod), []


# -- the tables ------------------------------------------------------------------------------------

REPORT_PENDING = ("ReportMissing", "ReportStale", "MountNotReported")


class Transition(NamedTuple):
    """A row: when ``condition`` holds (and no row above it does), the workload is ``state`` for one of ``reasons``."""

    state: State
    reasons: tuple[str, ...]
    when: str
    condition: Callable[[Situation], bool]
    outcome: Callable[[Situation], Outcome]


WORKLOAD_TRANSITIONS: tuple[Transition, ...] = (
    Transition(State.DONE, ("Verified",), "restarted for the target and verified at an earlier tick",
               lambda s: s.restarted and s.was_done, _still_done),
    Transition(State.WAITING, ("ScaledToZero", "ScalingDisabled"),
               "at zero replicas (its restart is recorded in the template, moving no pod)",
               lambda s: s.workload.replicas == 0, _at_zero),
    Transition(State.PENDING, ("RollingOut",), "not restarted yet, and a rollout of its own is running",
               lambda s: not s.restarted and not s.workload.rolled_out, _own_rollout_first),
    Transition(State.PENDING, ("Queued",), "not restarted yet: it waits for a turn (see the turns below)",
               lambda s: not s.restarted, _queued),
    Transition(State.RESTARTING, ("RollingOut", "Remounting"),
               "restarted, and its own rollout is not complete (Remounting while a replica evicted to remount "
               "is replaced)", lambda s: not s.workload.rolled_out, _rolling_out),
    Transition(State.VERIFYING, ("WaitingForReplicas",), "rolled out, but fewer replicas ready than desired",
               lambda s: s.ready < s.workload.replicas, _waiting_for_replicas),
    # The controller counts a replica gone once it is marked for deletion; a pod list read before that still
    # shows it live, with the old options: judging it would evict a pod already on its way out.
    Transition(State.VERIFYING, ("WaitingForReplicas",),
               "rolled out, but more replicas live than desired: an old replica had not stopped when the pods were "
               "read (judged again next tick)", lambda s: len(s.live) > s.workload.replicas, _old_replicas_linger),
    Transition(State.BLOCKED, ("OptionsAbsent", "SuperblockShared"),
               "a replica mounts neither the new options nor an old version's, or kept an old superblock that "
               "a pod outside the workload holds", lambda s: s.blocking is not None, _blocked_by_mount),
    Transition(State.BLOCKED, ("RemountsExhausted",),
               "a replica kept an old superblock, and remounts would exceed twice the replicas",
               lambda s: s.remounts_exhausted, _remounts_exhausted),
    Transition(State.WAITING, (DISRUPTION_BUDGET,),
               "a replica kept an old superblock nobody else holds, and a PodDisruptionBudget covering it allows no "
               "eviction now (or more than one covers it): asked again every tick, holding its slot",
               lambda s: bool(s.refusing_budgets), _wait_for_budget),
    Transition(State.RESTARTING, ("Remounting",),
               "a replica kept an old superblock nobody else holds: the oldest such replica is evicted (Eviction "
               "API) to mount afresh, one per tick; the next only once its replacement is Ready (the row \"fewer replicas "
               "ready than desired\" waits for it)",
               lambda s: bool(s.stale), _remount),
    Transition(State.DONE, ("Verified",), "every replica's node report shows the target's options",
               lambda s: s.pending is None, _verified),
    Transition(State.BLOCKED, REPORT_PENDING, "a replica has no verdict yet after verifyTimeoutSeconds",
               lambda s: s.timed_out, _verify_timed_out),
    Transition(State.VERIFYING, REPORT_PENDING, "a replica has no verdict yet (its node's report lags)",
               lambda s: True, _still_verifying),
)


def evaluate(consumer: Consumer, plan: Plan, before: Mapping, now: datetime) -> Outcome:
    """Where one workload stands, judged from the world; and what it needs next, short of being started."""
    situation = Situation(consumer, plan, before, now)
    row = next(row for row in WORKLOAD_TRANSITIONS if row.condition(situation))
    return row.outcome(situation)


class Turn(NamedTuple):
    """A row applied to every Pending workload that holds no slot (or, unapproved, to every workload)."""

    state: State
    reason: str
    when: str
    message: str


AWAITING_APPROVAL = Turn(State.PENDING, "AwaitingApproval",
                         "approval Manual and the profile's mountwarden.io/approve-rollout annotation does not name "
                         "the target version", "waits for approval")
PAUSED = Turn(State.PENDING, "Paused", "another workload is Blocked", "the rollout is paused by a blocked workload")
STARTED = Turn(State.RESTARTING, "RollingOut",
               "fewer workloads than maxConcurrentWorkloads are Restarting, Verifying, Waiting for a "
               "PodDisruptionBudget or Pending in a rollout of their own: its PVs are patched (guarded by the "
               "resourceVersion read), then it is restarted", "restart requested")
#: After every workload was judged, in this order.
TURNS = (PAUSED, STARTED)


def take_turns(progress: Sequence[Progress], plan: Plan, now: datetime) -> list[RestartWorkload]:
    """Pause the queue behind a Blocked workload, or restart the queued ones while slots are free."""
    target = plan.target
    paused = any(line.state == State.BLOCKED for line in progress)
    busy = sum(line.busy for line in progress)
    restarts = []
    for line in progress:
        if line.state != State.PENDING or line.busy:
            continue
        if paused:
            line.reason, line.message = PAUSED.reason, PAUSED.message
        elif busy < target.policy.max_concurrent_workloads:
            assert line.consumer.workload is not None
            restarts.append(restart(line.consumer.workload, target.version.storage_class, now))
            line.state, line.reason, line.message = STARTED.state, STARTED.reason, STARTED.message
            line.restarted_at = restarts[-1].at
            busy += 1
    return restarts


class PhaseRule(NamedTuple):
    phase: Phase
    when: str
    condition: Callable[[bool, Collection[Progress]], bool]


def _states(lines: Collection[Progress]) -> set[State]:
    return {line.state for line in lines}


#: strategy PatchBoundVolumes: the first row that holds, given whether the target is approved and the
#: workloads' lines.
PHASES: tuple[PhaseRule, ...] = (
    PhaseRule(Phase.AWAITING_APPROVAL, "approval Manual, and the target version is not approved yet",
              lambda approved, lines: not approved),
    PhaseRule(Phase.PAUSED, "a workload is Blocked", lambda approved, lines: State.BLOCKED in _states(lines)),
    PhaseRule(Phase.WAITING, "a workload waits for a PodDisruptionBudget to allow an eviction (the message names it)",
              lambda approved, lines: any(line.waits_for_budget for line in lines)),
    PhaseRule(Phase.PROGRESSING, "a workload is Pending, Restarting or Verifying",
              lambda approved, lines: bool(_states(lines) & {State.PENDING, State.RESTARTING, State.VERIFYING})),
    PhaseRule(Phase.WAITING, "only workloads at zero replicas are left",
              lambda approved, lines: State.WAITING in _states(lines)),
    PhaseRule(Phase.COMPLETE, "every workload is Done (or there is none)", lambda approved, lines: True),
)

#: strategy NewStorageClass: nothing is restarted.
MIGRATION_PHASES: tuple[tuple[Phase, str], ...] = (
    (Phase.AWAITING_MIGRATION, "volumes of the lineage are still on older classes (their consumers are listed)"),
    (Phase.COMPLETE, "every volume is on the target's class"),
)


def phase_of(approved: bool, progress: Sequence[Progress]) -> Phase:
    return next(rule.phase for rule in PHASES if rule.condition(approved, progress))
