"""status.rollout, written: the phase's message, the workloads still on older versions, the Events of a change.

Also the other way round: ``needs_world`` reads the last status to tell whether
a tick must read the cluster at all.
"""

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

from mountwarden.core.adoption import LISTED_REFUSALS, AdoptionPhase, Selection, differences
from mountwarden.core.options.table import OptionValue
from mountwarden.core.rollout.actions import Action, Event, PatchVolume, RemountPod, RestartWorkload
from mountwarden.core.rollout.machine import DISRUPTION_BUDGET, IN_FLIGHT, Phase, Progress, State
from mountwarden.core.rollout.plan import Consumer, Plan
from mountwarden.core.rollout.verify import Check, check_pods
from mountwarden.core.rollout.world import Target, timestamp
from mountwarden.core.vocabulary import RolloutApproval

MIGRATION_GUIDANCE = (
    "Volumes that exist keep their options; new PVCs get {target}. To move a consumer: create a PVC of class "
    "{target}, stop the writers, copy the data, point the workload at the new claim, then delete the old claim. "
    "Copy SQLite databases with `sqlite3 db '.backup new.db'` or `VACUUM INTO 'new.db'`, never with cp of a live "
    "file."
)


def on_older_version(consumer: Consumer, plan: Plan) -> bool:
    """A Job's or bare pod's replica still mounts older options (mountwarden never restarts them)."""
    if not plan.target.restarts_workloads:
        return True
    return any(c.check != Check.OK for c in check_pods(consumer.pods, plan.target, plan.world))


def consumer_record(consumer: Consumer, plan: Plan) -> dict:
    storage_classes = sorted({change.volume.storage_class for change in plan.volumes
                              if change.volume.name in consumer.volumes})
    return {
        "kind": consumer.ref.kind, "namespace": consumer.ref.namespace, "name": consumer.ref.name,
        "volumes": list(consumer.volumes), "storageClassNames": storage_classes,
        "note": consumer.note(plan.target),
    }


def phase_message(plan: Plan, phase: Phase, progress: Sequence[Progress]) -> str:
    target = plan.target
    total = len(progress)
    done = sum(line.state == State.DONE for line in progress)
    if phase == Phase.AWAITING_APPROVAL:
        patches = sum(change.to_patch for change in plan.volumes)
        adopting = sum(change.adopting for change in plan.volumes)
        adopted = f" ({adopting} of them to adopt)" if adopting else ""
        return (f"{patches} volumes to patch{adopted} and {total} workloads to restart: approve with `kubectl "
                f"annotate storageprofile {target.profile} {target.approve_annotation}={target.approval_key} "
                "--overwrite`")
    if phase == Phase.PAUSED:
        blocked = next(line for line in progress if line.state == State.BLOCKED)
        return f"paused at {blocked.consumer.ref}: {blocked.reason}: {blocked.message}"
    if phase == Phase.PROGRESSING:
        current = [str(line.consumer.ref) for line in progress if line.state in IN_FLIGHT]
        return f"{done} of {total} workloads done; in progress: {', '.join(current) or 'none'}"
    if phase == Phase.WAITING and any(line.waits_for_budget for line in progress):
        line = next(line for line in progress if line.waits_for_budget)
        return f"{done} of {total} workloads done; waiting at {line.consumer.ref}: {line.message}"
    if phase == Phase.WAITING:
        waiting = [str(line.consumer.ref) for line in progress if line.state == State.WAITING]
        return (f"{done} of {total} workloads done; {', '.join(waiting)} at zero replicas: a deliberate scale-up "
                "is needed before they can be verified")
    return f"{done} workloads restarted and verified with the options of {target.version.storage_class}"


def rollout_status(plan: Plan, previous: Mapping | None, phase: Phase, message: str, now: datetime) -> dict:
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


def adoption_status(plan: Plan, selection: Selection, contract: Mapping[str, OptionValue], rollout: Mapping,
                    actions: Sequence[Action] = ()) -> dict:
    """status.adoption: every volume spec.adopt takes, how it differs from the contract, and where it stands.

    ``rollout`` is this tick's status.rollout (its phase says whether the adopted volumes' workloads are
    verified); a volume patched by this very tick (one of ``actions``) counts as adopted. A volume waits for the
    turn of its workload: it is Pending until then.
    """
    target = plan.target
    taken = set(selection.volumes)
    changes = [change for change in plan.volumes if change.volume.name in taken]
    patched_now = {action.name for action in actions if isinstance(action, PatchVolume) and action.adopted_by}

    def adopted(change) -> bool:
        return change.volume.adopted_by == target.profile or change.volume.name in patched_now

    volumes = [{
        "name": change.volume.name, "storageClassName": change.volume.storage_class,
        "claim": "/".join(change.volume.claim) if change.volume.claim else None,
        "mountOptions": list(change.volume.mount_options),
        "state": "Adopted" if adopted(change) else "Pending", "action": change.action,
        "differences": differences(change.volume.mount_options, contract),
    } for change in changes]
    workloads = [str(consumer.ref) for consumer in plan.workloads if taken.intersection(consumer.volumes)]
    refused = list(selection.refusals)
    pending = [change for change in changes if not adopted(change)]
    if not changes:
        phase = AdoptionPhase.REFUSED if refused else AdoptionPhase.NOTHING_TO_ADOPT
    elif not target.approved:
        phase = AdoptionPhase.AWAITING_APPROVAL
    elif pending or rollout.get("phase") != Phase.COMPLETE:
        phase = AdoptionPhase.ADOPTING
    else:
        phase = AdoptionPhase.ADOPTED
    differing = sum(bool(volume["differences"]) for volume in volumes)
    refusals = f"; {len(refused)} refused (status.adoption.refused)" if refused else ""
    if phase == AdoptionPhase.AWAITING_APPROVAL:
        message = (f"{len(volumes)} volumes to adopt ({differing} with options other than the contract's), "
                   f"{len(workloads)} workloads to restart in the order of status.adoption.workloads{refusals}: "
                   f"approve with `kubectl annotate storageprofile {target.profile} "
                   f"{target.approve_annotation}={target.approval_key} --overwrite`")
    elif phase == AdoptionPhase.ADOPTING:
        message = (f"{len(volumes) - len(pending)} of {len(volumes)} volumes adopted; the rollout restarts and "
                   f"verifies their workloads (status.rollout: {rollout.get('message', '')}){refusals}")
    elif phase == AdoptionPhase.ADOPTED:
        message = (f"{len(volumes)} volumes adopted, their workloads verified with the options of "
                   f"{target.version.storage_class}{refusals}")
    elif phase == AdoptionPhase.REFUSED:
        message = f"nothing adopted: {refused[0].field}: {refused[0].message}" + (
            f" ({len(refused) - 1} more in status.adoption.refused)" if len(refused) > 1 else "")
    else:
        message = "spec.adopt selects no PersistentVolume on network storage now"
    return {"phase": str(phase), "message": message,
            "approvalKey": target.approval_key if target.policy.approval == RolloutApproval.MANUAL else None,
            "storageClassNames": list(selection.classes), "volumes": volumes, "workloads": workloads,
            "refused": [refusal.to_wire() for refusal in refused[:LISTED_REFUSALS]]}


def _stuck(line: Mapping) -> bool:
    """Blocked, or waiting for a PodDisruptionBudget: a Warning Event says so once."""
    return line.get("state") == State.BLOCKED or (line.get("state") == State.WAITING
                                                 and line.get("reason") == DISRUPTION_BUDGET)


def events_of(previous: Mapping | None, status: Mapping, actions: Sequence[Action]) -> list[Event]:
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
                                f"evicting pod {action.namespace}/{action.name} so that it mounts afresh"))
    blocked_before = {
        (w["kind"], w["namespace"], w["name"], w.get("reason"))
        for w in (previous.get("workloads") or [] if same_target else []) if _stuck(w)
    }
    for line in status["workloads"]:
        key = (line["kind"], line["namespace"], line["name"], line["reason"])
        if _stuck(line) and key not in blocked_before:
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
