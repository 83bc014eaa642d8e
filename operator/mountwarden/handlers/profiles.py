"""StorageProfile -> versioned StorageClasses (`<profile>-v<N>`).

Thin: read the profile, let the core decide, write the classes and the status.
"""

import logging
from collections.abc import Iterable
from datetime import UTC, datetime

import kopf
from pydantic import ValidationError

from mountwarden.adapters.kube import StorageClasses
from mountwarden.adapters.watches import with_cluster_indexes
from mountwarden.api.base import GROUP, VERSION
from mountwarden.api.storageprofile import NAME_RULE, PLURAL, ProfileStatus, StorageProfileSpec, desired_class
from mountwarden.core.selectors import label_value_problem
from mountwarden.core.storageclass import (
    PROFILE_LABEL,
    ClassPlan,
    ExistingClass,
    plan_classes,
    plan_release,
    version_history,
)
from mountwarden.handlers.config import OperatorConfig
from mountwarden.handlers.context import OperatorContext
from mountwarden.handlers.errors import retry_transient

PROFILE = (GROUP, VERSION, PLURAL)
#: The field manager of the Ready condition and of the class fields applied with it (mountwarden-profiles).
WRITER = "profiles"
#: The status fields applied with Ready=True: an invalid spec applies them again as they are, since a
#: field the writer leaves out of an apply is removed, and the last good class must stay in use.
CLASS_FIELDS = ("storageClassName", "version", "optionsHash", "effectiveMountOptions", "history")
log = logging.getLogger(__name__)


def _holders(class_name: str, volumes: kopf.Index, claims: kopf.Index) -> list[str]:
    return sorted([*volumes.get(class_name, []), *(f"pvc/{claim}" for claim in claims.get(class_name, []))])


def _lineage(classes: StorageClasses, profile: str, volumes: kopf.Index, claims: kopf.Index) -> list[ExistingClass]:
    found = (
        ExistingClass.from_object(obj, _holders(obj["metadata"]["name"], volumes, claims))
        for obj in classes.list(f"{PROFILE_LABEL}={profile}")
    )
    return [cls for cls in found if cls is not None]


def _apply(classes: StorageClasses, plan: ClassPlan) -> None:
    # Create first, delete last: a crash in between leaves extra classes, never a missing one.
    if plan.create is not None:
        classes.create(plan.create)
    for change in plan.patches:
        classes.patch(change.name, change.body())
    for name in plan.delete:
        classes.delete(name)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _validation_message(error: ValidationError) -> str:
    problems = []
    for item in error.errors():
        location = ".".join(str(part) for part in ("spec", *item["loc"]))
        problems.append(f"{location}: {item['msg']}")
    return "; ".join(problems)


def _refuse(name: str, body: kopf.Body, status: kopf.Status, memo: OperatorContext, generation: int | None,
            message: str) -> None:
    """An invalid spec never touches a StorageClass: say why on the profile and in an Event."""
    kept = {key: status[key] for key in CLASS_FIELDS if status.get(key) is not None}
    memo.conditions.set(name, "Ready", "False", "InvalidSpec", message, generation, writer=WRITER, current=status,
                        also={**kept, "observedGeneration": generation})
    kopf.warn(body, reason="InvalidSpec", message=message)


@with_cluster_indexes
@retry_transient
def reconcile_profile(
    name: str, body: kopf.Body, spec: kopf.Spec, status: kopf.Status, meta: kopf.Meta, patch: kopf.Patch,
    memo: OperatorContext, volumes_by_class: kopf.Index, unbound_claims_by_class: kopf.Index, logger, **_,
) -> None:
    generation = meta.get("generation")
    if label_value_problem(name) is not None:  # admitted before the CRD's rule existed: refuse, never write
        _refuse(name, body, status, memo, generation, f"metadata.name: {NAME_RULE['message']}")
        return
    try:
        profile = StorageProfileSpec.model_validate(dict(spec))
    except ValidationError as error:
        _refuse(name, body, status, memo, generation, _validation_message(error))
        return
    policy = profile.resolve()
    if not policy.valid:
        _refuse(name, body, status, memo, generation, "; ".join(str(problem) for problem in policy.errors))
        return
    for warning in policy.warnings:
        kopf.warn(body, reason="OptionWarning", message=str(warning))

    desired = desired_class(profile, policy)
    classes: StorageClasses = memo.storage_classes
    existing = _lineage(classes, name, volumes_by_class, unbound_claims_by_class)
    plan = plan_classes(name, desired, existing, make_default=profile.default, last_version=ProfileStatus(status).last_version)
    _apply(classes, plan)
    if plan.create is not None:
        message = f"created StorageClass {plan.current_name}: {','.join(desired.mount_options)}"
        kopf.info(body, reason="VersionCreated", message=message)
        log.info("StorageProfile %s: %s", name, message)
    for deleted in plan.delete:
        logger.info(f"deleted unused StorageClass {deleted}")

    history = version_history(existing, plan, desired, now=_now())
    kept = [record for record in history if record.get("supersededBy")]
    message = f"StorageClass {plan.current_name} carries the effective options"
    if kept:
        message += "; superseded versions kept by volumes: " + ", ".join(
            f"{record['storageClassName']} ({len(record['heldBy'])})" for record in kept
        )
    if policy.warnings:
        message += f"; {len(policy.warnings)} warning(s) in status.warnings, the first: {policy.warnings[0]}"
    memo.conditions.set(name, "Ready", "True", "Reconciled", message, generation, writer=WRITER, current=status, also={
        "storageClassName": plan.current_name,
        "version": plan.current_version,
        "optionsHash": plan.content_hash,
        "effectiveMountOptions": list(desired.mount_options),
        "warnings": [str(warning) for warning in policy.warnings],
        "history": history,
        "observedGeneration": generation,
    })


@with_cluster_indexes
@retry_transient
def release_profile(
    name: str, memo: OperatorContext, volumes_by_class: kopf.Index, unbound_claims_by_class: kopf.Index, logger, **_
) -> None:
    """Remove the profile's unused classes; keep the ones volumes still use, labelled orphaned."""
    if label_value_problem(name) is not None:
        return  # no class was ever made for a name that cannot be a label (and none can be listed by it)
    classes: StorageClasses = memo.storage_classes
    plan = plan_release(_lineage(classes, name, volumes_by_class, unbound_claims_by_class))
    _apply(classes, plan)
    for change in plan.patches:
        logger.info(f"kept StorageClass {change.name}: volumes still use it (labelled orphaned)")


def _history_holders_changed(history: Iterable[dict], volumes: kopf.Index, claims: kopf.Index) -> bool:
    return any(record.get("heldBy", []) != _holders(record["storageClassName"], volumes, claims) for record in history)


@with_cluster_indexes
@retry_transient
def collect_unused_versions(
    name: str, status: kopf.Status, patch: kopf.Patch, memo: OperatorContext,
    volumes_by_class: kopf.Index, unbound_claims_by_class: kopf.Index, **_,
) -> None:
    """Delete superseded classes once their last volume is gone; keep status.history's holders true.

    Works from the in-memory indexes and touches the API only when something changed.
    """
    history = list(status.get("history") or [])
    if not history or not _history_holders_changed(history, volumes_by_class, unbound_claims_by_class):
        return
    classes: StorageClasses = memo.storage_classes
    remaining = []
    for cls in _lineage(classes, name, volumes_by_class, unbound_claims_by_class):
        superseded = cls.superseded_by is not None and cls.name != status.get("storageClassName")
        if superseded and not cls.held_by:
            classes.delete(cls.name)
            continue
        remaining.append(cls)
    by_name = {cls.name: cls for cls in remaining}
    patch.status["history"] = [
        {**record, "heldBy": list(by_name[record["storageClassName"]].held_by)}
        for record in history
        if record["storageClassName"] in by_name
    ]


def register(registry: kopf.OperatorRegistry, config: OperatorConfig) -> None:
    for on in (kopf.on.resume, kopf.on.create, kopf.on.update):
        on(*PROFILE, registry=registry)(reconcile_profile)
    kopf.on.delete(*PROFILE, registry=registry)(release_profile)
    kopf.timer(*PROFILE, interval=config.collect_interval, initial_delay=config.collect_interval,
               registry=registry)(collect_unused_versions)
