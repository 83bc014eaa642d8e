"""Roll a profile's new version out to the volumes bound before it: a level-triggered timer.

Each tick reads the world, lets the pure planner (mountwarden.core.rollout) pick
the next actions, performs them and writes status.rollout. No progress lives in
memory, so an operator restarted at any point carries on from the cluster.
"""

from datetime import UTC, datetime

import kopf
from pydantic import ValidationError

from mountwarden.adapters.workloads import ClusterWorkloads
from mountwarden.api.base import GROUP, VERSION
from mountwarden.api.storageprofile import PLURAL, StorageProfileSpec
from mountwarden.core.rollout import (
    APPROVE_ANNOTATION,
    Policy,
    Target,
    Version,
    advance,
    build_plan,
    needs_world,
)
from mountwarden.handlers.config import OperatorConfig
from mountwarden.handlers.errors import retry_transient

PROFILE = (GROUP, VERSION, PLURAL)


def _target(name: str, spec: kopf.Spec, status: kopf.Status, meta: kopf.Meta) -> Target | None:
    """The version to roll out; None until the profile's current spec has been reconciled into a class."""
    if not status.get("storageClassName") or status.get("observedGeneration") != meta.get("generation"):
        return None  # a new spec is on its way: its version will supersede this one
    try:
        rollout = StorageProfileSpec.model_validate(dict(spec)).rollout
    except ValidationError:
        return None  # reconcile_profile reports it
    lineage = tuple(
        Version(record["storageClassName"], int(record["version"]), tuple(record.get("mountOptions") or ()))
        for record in status.get("history") or []
    )
    current = Version(status["storageClassName"], int(status["version"]),
                      tuple(status.get("effectiveMountOptions") or ()))
    policy = Policy(str(rollout.strategy), str(rollout.approval), rollout.max_concurrent_workloads,
                    rollout.verify_timeout_seconds)
    return Target(name, current, lineage, policy, (meta.get("annotations") or {}).get(APPROVE_ANNOTATION))


@retry_transient
def roll_out(
    name: str, body: kopf.Body, spec: kopf.Spec, status: kopf.Status, meta: kopf.Meta, patch: kopf.Patch,
    memo: kopf.Memo, volumes_by_class: kopf.Index, **_,
) -> None:
    target = _target(name, spec, status, meta)
    if target is None:
        return
    lineage = [version.storage_class for version in target.lineage]
    volumes = {cls: list(volumes_by_class.get(cls, [])) for cls in lineage}
    older = [pv for cls, pvs in volumes.items() if cls != target.version.storage_class for pv in pvs]
    previous = status.get("rollout")
    # The PV index is enough to tell that a finished plan has nothing new to do: no API call then.
    if not needs_world(previous, target, [pv for pvs in volumes.values() for pv in pvs], older):
        return
    cluster = ClusterWorkloads(memo.kube_client)
    world = cluster.read(lineage, with_reports=target.restarts_workloads)
    step = advance(build_plan(target, world), previous, datetime.now(UTC))
    refused = cluster.perform(step.actions)
    for event in step.events:
        (kopf.warn if event.warning else kopf.info)(body, reason=event.reason, message=event.message)
    for refusal in refused:  # a budget changed since the world was read: the next tick reads it
        kopf.warn(body, reason="EvictionRefused", message=str(refusal))
    written = {key: value for key, value in step.status.items() if value is not None}
    if written != dict(previous or {}):
        patch.status["rollout"] = step.status


def register(registry: kopf.OperatorRegistry, config: OperatorConfig) -> None:
    kopf.timer(*PROFILE, interval=config.rollout_interval, registry=registry)(roll_out)
