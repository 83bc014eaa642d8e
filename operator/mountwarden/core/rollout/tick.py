"""One tick of a rollout: the state machine judges every workload, and the new status.rollout records it."""

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

from mountwarden.core.rollout.actions import Action, PatchVolume, RestartWorkload, Step
from mountwarden.core.rollout.machine import (
    AWAITING_APPROVAL,
    MIGRATION_PHASES,
    Progress,
    State,
    evaluate,
    phase_of,
    take_turns,
)
from mountwarden.core.rollout.plan import Plan, freshness_records
from mountwarden.core.rollout.status import (
    MIGRATION_GUIDANCE,
    consumer_record,
    events_of,
    on_older_version,
    phase_message,
    rollout_status,
)
from mountwarden.core.rollout.world import Target, WorkloadRef

#: How many consumers status.rollout lists in each of its lists; their count says how many there are in all. etcd
#: refuses a write of more than 1.5 MiB (its --max-request-bytes default, https://etcd.io/docs/latest/dev-guide/limit/):
#: in bench/scale.py a record for each of 4,000 bare pods made a rollout's first status write fail (500, "etcdserver:
#: request is too large"), and the retry, its volumes patched by then, never wrote who lost freshness.
LISTED_CONSUMERS = 50


def listed(key: str, records: Sequence[dict]) -> dict:
    """status.rollout's ``key`` with its first LISTED_CONSUMERS records, and ``<key>Count`` with how many in all."""
    return {key: list(records[:LISTED_CONSUMERS]), f"{key}Count": len(records)}


def _previous_workloads(previous: Mapping | None, target: Target) -> dict[WorkloadRef, Mapping]:
    if not previous or previous.get("targetStorageClassName") != target.version.storage_class:
        return {}
    return {WorkloadRef(w["kind"], w["namespace"], w["name"]): w for w in previous.get("workloads") or []}


def advance(plan: Plan, previous: Mapping | None, now: datetime) -> Step:
    """One tick of the rollout: where every workload stands, what to do next, and the new status."""
    target = plan.target
    if not target.patches_volumes:
        return _migration_step(plan, previous, now)

    befores = _previous_workloads(previous, target)
    progress: list[Progress] = []
    actions: list[Action] = []
    if target.approved:
        needs: list[list[Action]] = []
        for consumer in plan.workloads:
            line, needed = evaluate(consumer, plan, befores.get(consumer.ref) or {}, now)
            progress.append(line)
            needs.append(list(needed))
        restarts = {restart.ref: restart for restart in take_turns(progress, plan, now)}
        actions = staged_actions(plan, progress, needs, restarts)
    else:
        progress = [Progress(c, AWAITING_APPROVAL.state, AWAITING_APPROVAL.reason, AWAITING_APPROVAL.message)
                    for c in plan.workloads]

    phase = phase_of(target.approved, progress)
    status = rollout_status(plan, previous, phase, phase_message(plan, phase, progress), now)
    status["volumesPatched"] = sum(not change.to_patch for change in plan.volumes) + sum(
        isinstance(action, PatchVolume) for action in actions)
    status["workloads"] = [line.to_wire() for line in progress]
    status.update(listed("consumersOnOlderVersions",
                         [consumer_record(c, plan) for c in plan.others if on_older_version(c, plan)]))
    status.update(listed("freshnessLoss", freshness_records(plan)))
    status["guidance"] = None
    return Step(tuple(actions), status, tuple(events_of(previous, status, actions)))


def _patch(plan: Plan, names: Iterable[str]) -> list[PatchVolume]:
    """The patches of those of ``names`` whose options are not the target's yet, each guarded by the
    resourceVersion it was read at."""
    target = plan.target
    wanted = set(names)
    return [PatchVolume(change.volume.name, target.version.mount_options, change.volume.mount_options,
                        target.version.storage_class,
                        adopted_by=target.profile if change.volume.name in target.adopted else None,
                        resource_version=change.volume.resource_version)
            for change in plan.volumes if change.to_patch and change.volume.name in wanted]


def has_had_its_turn(line: Progress) -> bool:
    """Restarted for the target (or its restart recorded at zero replicas): every state but Pending."""
    return line.state != State.PENDING


def finished(progress: Sequence[Progress]) -> bool:
    """Every workload Done, or at zero replicas with its restart recorded: nothing of theirs can still fail."""
    return all(line.state == State.DONE or (line.state == State.WAITING and not line.waits_for_budget)
               for line in progress)


def staged_actions(plan: Plan, progress: Sequence[Progress], needs: Sequence[Sequence[Action]],
                   restarts: Mapping) -> list[Action]:
    """The tick's actions, a workload's PVs patched just before its restart and never before its turn.

    A PV is patched in the tick in which the first workload mounting it has its turn, and, as every patch
    is guarded, again in each later tick until it holds the target's options (a PV added to a workload under
    way, an outside write). The PVs no restartable workload mounts (unused, or only a Job's, CronJob's or
    bare pod's) are patched once every workload is finished: a bad option then never reaches them while
    the rollout can still stop at a Blocked workload.
    """
    actions: list[Action] = []
    patched: set[str] = set()
    for line, needed in zip(progress, needs, strict=True):
        own = restarts.get(line.consumer.ref)
        if has_had_its_turn(line):
            names = [name for name in line.consumer.volumes if name not in patched]
            actions.extend(_patch(plan, names))
            patched.update(names)
        actions.extend(needed)
        if isinstance(own, RestartWorkload):
            actions.append(own)
    if finished(progress):
        mounted = {name for consumer in plan.workloads for name in consumer.volumes}
        actions.extend(_patch(plan, [change.volume.name for change in plan.volumes
                                     if change.volume.name not in mounted]))
    return actions


def _migration_step(plan: Plan, previous: Mapping | None, now: datetime) -> Step:
    """NewStorageClass: nothing is restarted; the consumers still on older versions are listed."""
    older = set(plan.covered_volumes)
    consumers = [c for c in plan.consumers if older.intersection(c.volumes)]
    (awaiting, _), (complete, _) = MIGRATION_PHASES
    phase = awaiting if older else complete
    if older:
        message = (f"{len(older)} volumes and {len(consumers)} consumers are on older versions; "
                   f"new PVCs get {plan.target.version.storage_class}")
    else:
        message = f"every volume is on {plan.target.version.storage_class}"
    status = rollout_status(plan, previous, phase, message, now)
    status["volumesPatched"] = 0
    status["workloads"] = []
    status.update(listed("consumersOnOlderVersions", [consumer_record(c, plan) for c in consumers]))
    status["guidance"] = MIGRATION_GUIDANCE.format(target=plan.target.version.storage_class) if older else None
    return Step((), status, tuple(events_of(previous, status, [])))
