"""One tick of a rollout: the state machine judges every workload, and the new status.rollout records it."""

from collections.abc import Mapping
from datetime import datetime

from mountwarden.core.rollout.actions import Action, PatchVolume, Step
from mountwarden.core.rollout.machine import (
    AWAITING_APPROVAL,
    MIGRATION_PHASES,
    Progress,
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
        # PVs first: a pod started from here on mounts the new options, whichever restart brings it.
        actions.extend(
            PatchVolume(change.volume.name, target.version.mount_options, change.volume.mount_options,
                        target.version.storage_class,
                        adopted_by=target.profile if change.volume.name in target.adopted else None)
            for change in plan.volumes if change.to_patch
        )
        for consumer in plan.workloads:
            line, needed = evaluate(consumer, plan, befores.get(consumer.ref) or {}, now)
            progress.append(line)
            actions.extend(needed)
        actions.extend(take_turns(progress, plan, now))
    else:
        progress = [Progress(c, AWAITING_APPROVAL.state, AWAITING_APPROVAL.reason, AWAITING_APPROVAL.message)
                    for c in plan.workloads]

    phase = phase_of(target.approved, progress)
    status = rollout_status(plan, previous, phase, phase_message(plan, phase, progress), now)
    status["volumesPatched"] = sum(not change.to_patch for change in plan.volumes) + sum(
        isinstance(action, PatchVolume) for action in actions)
    status["workloads"] = [line.to_wire() for line in progress]
    status["consumersOnOlderVersions"] = [consumer_record(c, plan) for c in plan.others if on_older_version(c, plan)]
    status["freshnessLoss"] = freshness_records(plan)
    status["guidance"] = None
    return Step(tuple(actions), status, tuple(events_of(previous, status, actions)))


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
    status["consumersOnOlderVersions"] = [consumer_record(c, plan) for c in consumers]
    status["guidance"] = MIGRATION_GUIDANCE.format(target=plan.target.version.storage_class) if older else None
    return Step((), status, tuple(events_of(previous, status, [])))
