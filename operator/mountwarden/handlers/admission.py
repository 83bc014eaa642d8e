"""Admission webhooks: warnings, and denials where a profile says deny, on PVC creation and StorageProfile changes.

Thin: kopf indexes keep what admission needs in memory, the validating handlers
read them and let mountwarden.core.admission decide. No Kubernetes API call on
the request path.

The webhook must never stand in anyone's way because mountwarden itself is
broken: a failure inside a handler is logged and the request allowed, and
until the indexes are filled from the initial listings every request is
allowed silently (a half-filled index would report classes as ungoverned).
"""

import os
import threading
from collections.abc import Callable, Mapping

import kopf
from pydantic import ValidationError

from mountwarden.adapters.webhookconfig import (
    PROFILE_WEBHOOK,
    PVC_WEBHOOK,
    WebhookRegistrar,
    cluster_server,
    excluded_namespaces,
    local_server,
)
from mountwarden.api.base import GROUP, VERSION
from mountwarden.api.storageprofile import PLURAL, StorageProfileSpec, desired_class
from mountwarden.core.admission import (
    Claim,
    ClassEntry,
    ClusterView,
    ProfileChange,
    ProfileEntry,
    Review,
    enforcing_profiles,
    review_claim,
    review_profile,
)
from mountwarden.core.policy import SpecProblem
from mountwarden.core.storageclass import PROFILE_LABEL
from mountwarden.handlers.config import OperatorConfig, WebhookMode

PROFILE = (GROUP, VERSION, PLURAL)
STORAGE_CLASSES = ("storage.k8s.io", "v1", "storageclasses")
#: The one key of the default_classes index.
DEFAULT = "default"


def resolve_mode(mode: WebhookMode, *, kubeconfig: str | None, environ: Mapping[str, str] = os.environ) -> WebhookMode:
    """auto: cluster inside a pod (no --kubeconfig, and a service host, as login decides), local elsewhere."""
    if mode != WebhookMode.AUTO:
        return mode
    in_cluster = kubeconfig is None and environ.get("KUBERNETES_SERVICE_HOST")
    return WebhookMode.CLUSTER if in_cluster else WebhookMode.LOCAL


@kopf.on.startup()
def serve_admission(settings: kopf.OperatorSettings, memo: kopf.Memo, **_) -> None:
    """Give kopf its webhook server: one that registers itself (local), or one the chart points at (cluster)."""
    config: OperatorConfig = memo.config
    memo.admission_ready = threading.Event()
    memo.webhook_registrar = None
    if resolve_mode(config.webhook_mode, kubeconfig=config.kubeconfig) == WebhookMode.LOCAL:
        memo.webhook_registrar = WebhookRegistrar(memo.kube_client, excluded_namespaces(config.namespace))
        settings.admission.server = local_server(
            memo.webhook_registrar, host=config.webhook_host, port=config.webhook_port,
            cert_dir=config.webhook_cert_dir,
        )
    else:
        settings.admission.server = cluster_server(port=config.webhook_port, cert_dir=config.webhook_cert_dir)


# -- indexes ------------------------------------------------------------------------------------------
# Each returns {} (never None) when an object stops qualifying: kopf keeps an object's
# previous entries when its index function returns None.


def profile_entry(name: str, spec: StorageProfileSpec, status: Mapping) -> ProfileEntry:
    consumers = spec.consumers
    file_system_id = (spec.credit_watch.file_system_id if spec.credit_watch else None) or \
        spec.backend.parameters.get("fileSystemId")
    return ProfileEntry(
        name=name,
        provisioner=spec.backend.provisioner,
        namespace_selector=consumers.namespace_selector.to_wire() if consumers.namespace_selector else None,
        pvc_selector=consumers.pvc_selector.to_wire() if consumers.pvc_selector else None,
        enforcement=str(spec.enforcement),
        sqlite=str(spec.sqlite),
        cache_policy=str(spec.cache_policy) if spec.cache_policy else None,
        file_system_id=file_system_id,
        throughput_mode=(status.get("credits") or {}).get("throughputMode"),
        storage_class_name=status.get("storageClassName"),
    )


@kopf.index(*PROFILE)
def profiles_by_name(name: str, spec: kopf.Spec, status: kopf.Status, **_) -> dict:
    try:
        parsed = StorageProfileSpec.model_validate(dict(spec))
    except ValidationError:
        return {}  # an invalid profile governs nothing until it is fixed
    return {name: profile_entry(name, parsed, status)} if parsed.resolve().valid else {}


@kopf.index(*STORAGE_CLASSES)
def classes_by_name(name: str, body: kopf.Body, **_) -> dict:
    return {name: ClassEntry.from_object(body)}


@kopf.index(*STORAGE_CLASSES)
def classes_by_profile(body: kopf.Body, labels: kopf.Labels, **_) -> dict:
    return {labels[PROFILE_LABEL]: ClassEntry.from_object(body)} if PROFILE_LABEL in labels else {}


@kopf.index(*STORAGE_CLASSES)
def default_classes(body: kopf.Body, **_) -> dict:
    entry = ClassEntry.from_object(body)
    return {DEFAULT: entry} if entry.is_default else {}


@kopf.index("v1", "namespaces")
def namespace_labels(name: str, labels: kopf.Labels, **_) -> dict:
    return {name: dict(labels)}


@kopf.on.event("v1", "namespaces")
def indexes_filled(memo: kopf.Memo, **_) -> None:
    """kopf calls event handlers only once every index has its initial listing: from then on, answers are whole."""
    memo.admission_ready.set()


@kopf.on.event(*PROFILE)
def enforce_deny_profiles(memo: kopf.Memo, profiles_by_name: kopf.Index, **_) -> None:
    """Locally registered webhooks: keep one failurePolicy Fail webhook per deny profile."""
    if memo.webhook_registrar is not None:
        memo.webhook_registrar.enforce(enforcing_profiles(e for entries in profiles_by_name.values() for e in entries))


# -- validating handlers ------------------------------------------------------------------------------
# async: they run on kopf's event loop at once, never queued behind reconcilers in its thread pool.


# volumes_by_class is the PV index that mountwarden.handlers.profiles registers.
def _view(memo: kopf.Memo, profiles_by_name: kopf.Index, classes_by_name: kopf.Index, classes_by_profile: kopf.Index,
          default_classes: kopf.Index, namespace_labels: kopf.Index, volumes_by_class: kopf.Index) -> ClusterView:
    return ClusterView(
        profiles=profiles_by_name,
        classes=classes_by_name,
        classes_by_profile=classes_by_profile,
        default_classes=default_classes.get(DEFAULT, ()),
        namespace_labels=namespace_labels,
        volumes_by_class=volumes_by_class,
        extra_network_provisioners=memo.config.network_provisioners,
    )


def _review(memo: kopf.Memo, logger, decide: Callable[[], Review]) -> Review:
    if not memo.admission_ready.is_set():
        logger.debug("admission: the indexes are still filling; allowing without a review")
        return Review()
    try:
        return decide()
    except Exception:
        logger.exception("admission: the review failed; allowing the request (this is mountwarden's bug)")
        return Review()


def _answer(review: Review, warnings: list[str]) -> None:
    warnings.extend(review.warnings)
    if review.denial:
        raise kopf.AdmissionError(review.denial, code=403)


@kopf.on.validate("v1", "persistentvolumeclaims", operations=["CREATE"], id=PVC_WEBHOOK)
async def validate_pvc(body: kopf.Body, warnings: list[str], memo: kopf.Memo, logger,
                       profiles_by_name: kopf.Index, classes_by_name: kopf.Index, classes_by_profile: kopf.Index,
                       default_classes: kopf.Index, namespace_labels: kopf.Index, volumes_by_class: kopf.Index,
                       **_) -> None:
    view = _view(memo, profiles_by_name, classes_by_name, classes_by_profile, default_classes, namespace_labels,
                 volumes_by_class)
    _answer(_review(memo, logger, lambda: review_claim(Claim.from_object(body), view)), warnings)


def _schema_problems(error: ValidationError) -> list[SpecProblem]:
    return [SpecProblem(".".join(str(part) for part in ("spec", *item["loc"])), item["msg"]) for item in error.errors()]


def _last_version(status: Mapping) -> int:
    return max([int(status.get("version") or 0), *(int(h["version"]) for h in status.get("history") or [])])


def profile_change(name: str, body: Mapping, *, updating: bool) -> ProfileChange:
    """Read a StorageProfile from an admission request into what the review needs."""
    status = body.get("status") or {}
    try:
        spec = StorageProfileSpec.model_validate(dict(body.get("spec") or {}))
    except ValidationError as error:
        return ProfileChange(ProfileEntry(name, provisioner=""), errors=_schema_problems(error))
    policy = spec.resolve()
    return ProfileChange(
        profile_entry(name, spec, status),
        errors=policy.errors,
        warnings=policy.warnings,
        desired=desired_class(spec, policy) if policy.valid else None,
        default=spec.default,
        last_version=_last_version(status),
        updating=updating,
    )


@kopf.on.validate(*PROFILE, operations=["CREATE", "UPDATE"], id=PROFILE_WEBHOOK)
async def validate_profile(name: str, body: kopf.Body, old: kopf.Body | None, operation: str, warnings: list[str],
                           memo: kopf.Memo, logger, profiles_by_name: kopf.Index, classes_by_name: kopf.Index,
                           classes_by_profile: kopf.Index, default_classes: kopf.Index, namespace_labels: kopf.Index,
                           volumes_by_class: kopf.Index, **_) -> None:
    updating = operation == "UPDATE"
    # Finalizers, annotations, deletion: kopf and others must be able to change these on any profile,
    # even one admitted invalid while the webhook was down.
    if updating and old is not None and (old.get("spec") == body.get("spec") or body.meta.get("deletionTimestamp")):
        return
    view = _view(memo, profiles_by_name, classes_by_name, classes_by_profile, default_classes, namespace_labels,
                 volumes_by_class)
    _answer(_review(memo, logger, lambda: review_profile(profile_change(name, body, updating=updating), view)),
            warnings)
