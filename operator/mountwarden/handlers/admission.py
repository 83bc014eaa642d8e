"""Admission webhooks: warnings, and denials where a profile says deny, on PVC creation and StorageProfile changes;
and the node agent's writes of NodeMountReports, each limited to its own node's report.

Thin: kopf indexes keep what admission needs in memory, the validating handlers
read them and let mountwarden.core.admission decide. No Kubernetes API call on
the request path.

When mountwarden cannot give a whole answer (a failure inside a review, or the
indexes not yet filled from the initial listings, which would report classes as
ungoverned) the review fails, and the server answers with an HTTP error
(mountwarden.adapters.webhookconfig.failures_as_http_errors): the API server
then applies the calling webhook's failurePolicy. Warnings fail open (their
webhooks are Ignore); a claim a deny profile governs fails closed in a cluster,
where its webhook is Fail.

With several replicas (kopf peering), only the active one has live indexes: a
paused replica watches nothing. With an active label, each replica labels its own
pod while it is the active one and its indexes are filled, and unlabels it
otherwise; the webhook Service selects the label, so it routes to that one alone.
"""

import logging
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import kopf
from pydantic import ValidationError

from mountwarden.adapters.watches import with_cluster_indexes
from mountwarden.adapters.webhookconfig import (
    PROFILE_WEBHOOK,
    PVC_WEBHOOK,
    REPORT_WEBHOOK,
    ActivePodLabel,
    WebhookRegistrar,
    cluster_server,
    excluded_namespaces,
    keep_webhooks,
    local_server,
)
from mountwarden.api.base import GROUP, VERSION
from mountwarden.api.nodemountreport import PLURAL as REPORTS
from mountwarden.api.nodemountreport import report_write
from mountwarden.api.storageprofile import PLURAL, ProfileStatus, StorageProfileSpec, desired_class
from mountwarden.core.admission import (
    Claim,
    ClusterView,
    ProfileChange,
    ProfileEntry,
    Review,
    enforcing_profiles,
    review_claim,
    review_profile,
    review_report_write,
)
from mountwarden.core.policy import SpecProblem
from mountwarden.handlers.config import OperatorConfig, WebhookMode
from mountwarden.handlers.context import OperatorContext
from mountwarden.handlers.indexes import DEFAULT, profile_entry

log = logging.getLogger(__name__)

PROFILE = (GROUP, VERSION, PLURAL)
NODE_REPORTS = (GROUP, VERSION, REPORTS)


def resolve_mode(mode: WebhookMode, *, kubeconfig: str | None, environ: Mapping[str, str] = os.environ) -> WebhookMode:
    """auto: cluster inside a pod (no --kubeconfig, and a service host, as login decides), local elsewhere."""
    if mode != WebhookMode.AUTO:
        return mode
    in_cluster = kubeconfig is None and environ.get("KUBERNETES_SERVICE_HOST")
    return WebhookMode.CLUSTER if in_cluster else WebhookMode.LOCAL


#: Seconds between checks of whether this replica is the active one (each reads the peering object).
ACTIVE_CHECK_SECONDS = 3.0


@dataclass
class AdmissionState:
    """What the admission handlers keep (mountwarden.handlers.context.OperatorContext.admission)."""

    #: Set once kopf's indexes have their initial listings: from then on, answers are whole.
    ready: threading.Event = field(default_factory=threading.Event)
    #: Whether this replica is the active peer (always, standalone).
    replica_active: Callable[[], bool] = lambda: True
    #: Writes the webhook configurations (locally every webhook; in a cluster the deny profiles'); None: none.
    registrar: WebhookRegistrar | None = None
    pvc_reviews: "PvcReviews | None" = None
    #: The loop that keeps the active label on this replica's pod, and what stops it.
    active_label_stop: threading.Event | None = None
    active_label_thread: threading.Thread | None = None
    #: The loop that undoes outside edits of the webhook configuration and retries failed writes.
    repair_stop: threading.Event = field(default_factory=threading.Event)
    repair_thread: threading.Thread | None = None

    def can_answer(self) -> bool:
        """Whether this replica may receive admission requests: the active peer, with its indexes filled."""
        return self.ready.is_set() and self.replica_active()


def keep_active_label(admission: AdmissionState, label: ActivePodLabel, stop: threading.Event,
                      logger: logging.Logger, interval: float = ACTIVE_CHECK_SECONDS) -> None:
    """Until ``stop``: label the pod while this replica can answer; on becoming active, rewrite the deny webhooks."""
    while True:
        try:
            active = admission.can_answer()
            if label.set(active) and active and admission.registrar is not None:
                admission.registrar.refresh()
        except Exception:  # the API is unreachable for a moment: try again at the next tick
            logger.exception("could not update the active label of this replica's pod")
        if stop.wait(interval):
            break
    try:
        label.set(False)  # leaving: the Service stops routing here before the process is gone
    except Exception:
        logger.exception("could not remove the active label of this replica's pod")


class PvcReviews:
    """The PVC webhook's answers, from the indexes, without kopf's generic admission path around them.

    Profiled (bench/webhook.py --cpu-profile): of the event loop's time per PVC review, kopf's
    generic path (a memo, a cause with its kwargs, handler selection, progress state, a patch
    deep-copied for a JSON patch that is always empty, a log record) took half, the review
    itself a twentieth. The PVC webhook is on every PVC create in the cluster, so it is
    answered here, with the response kopf's path builds (kopf._core.engines.admission.build_response):
    the same warnings, the same 403 denial. kopf's path still answers whatever is not a plain PVC
    create, anything before kopf's indexes are filled (``indexes``, captured by indexes_filled),
    a review that fails (ReviewUnavailable: kopf's path answers it with an HTTP error, for the
    webhook's failurePolicy to decide), every other webhook, and any request this path cannot
    read (so that its errors stay kopf's).
    """

    def __init__(self, context: OperatorContext) -> None:
        self.context = context
        self.indexes: dict | None = None

    def answer(self, request: Mapping) -> dict | None:
        """The AdmissionReview response, as kopf would build it; None leaves the request to kopf."""
        try:
            return self._answer(request)
        except ReviewUnavailable:  # logged by _review; kopf's path answers with the error
            return None
        except Exception:  # a request kopf must judge (or a bug here): kopf's path, and its answer, as before
            log.exception("admission: the PVC fast path could not answer; kopf's path answers")
            return None

    def _answer(self, request: Mapping) -> dict | None:
        if self.indexes is None or not isinstance(request, Mapping):
            return None
        payload = request.get("request")
        if not isinstance(payload, Mapping) or not _is_plain_pvc_create(payload):
            return None
        claim = payload["object"]
        view = _view(self.context, **self.indexes)
        review = _review(self.context, log, lambda: review_claim(Claim.from_object(claim), view))
        response: dict = {"uid": payload.get("uid", ""), "allowed": not review.denial}
        if review.warnings:
            response["warnings"] = [str(warning) for warning in review.warnings]
        if review.denial:
            response["status"] = {"message": review.denial, "code": 403}
            log.info(f"admission: denied: {review.denial}")  # kopf's path logged each denial (as an error)
        return {"apiVersion": request.get("apiVersion", "admission.k8s.io/v1"),
                "kind": request.get("kind", "AdmissionReview"), "response": response}


def _is_plain_pvc_create(payload: Mapping) -> bool:
    """A request validate_pvc alone would answer in kopf: a PVC CREATE, on no subresource, whole."""
    resource = payload.get("resource") or {}
    return (resource.get("group") == "" and resource.get("version") == "v1"
            and resource.get("resource") == "persistentvolumeclaims"
            and payload.get("operation") == "CREATE" and not payload.get("subResource")
            and payload.get("userInfo") is not None and isinstance(payload.get("object"), Mapping))


#: The kopf indexes a PVC review reads (and volumes_by_class, which is mountwarden.adapters.watches').
PVC_VIEW_INDEXES = ("profiles_by_name", "classes_by_name", "classes_by_profile", "default_classes", "namespace_labels",
                    "profiles_by_consumer")


class AnsweringPvcsFirst:
    """A kopf webhook server whose PVC requests PvcReviews answers before kopf's path does.

    An async context manager when the server it wraps is one (kopf's are): kopf then closes the
    server on exit, as it would close it unwrapped (a local server withdraws its registration).
    """

    def __init__(self, server, reviews: PvcReviews) -> None:
        self.server = server
        self.reviews = reviews

    async def __aenter__(self) -> "AnsweringPvcsFirst":
        if hasattr(self.server, "__aenter__"):
            await self.server.__aenter__()
        return self

    async def __aexit__(self, *exc_info) -> None:
        if hasattr(self.server, "__aexit__"):
            await self.server.__aexit__(*exc_info)

    def __call__(self, fn):
        async def serve(request, *, webhook=None, **kwargs):
            if webhook == PVC_WEBHOOK:
                answer = self.reviews.answer(request)
                if answer is not None:
                    return answer
            return await fn(request, webhook=webhook, **kwargs)

        return self.server(serve)


def serve_admission(settings: kopf.OperatorSettings, memo: OperatorContext, logger: logging.Logger, **_) -> None:
    """Give kopf its webhook server: one that registers itself (local), or one the chart points at (cluster)."""
    config = memo.config
    admission = memo.admission = AdmissionState()
    admission.replica_active = memo.replica_active
    excluded = excluded_namespaces(config.namespace, config.exempt_namespaces)
    if resolve_mode(config.webhook_mode, kubeconfig=config.kubeconfig) == WebhookMode.LOCAL:
        admission.registrar = WebhookRegistrar(memo.kube_client, excluded, agent_username=config.agent_username)
        server = local_server(admission.registrar, host=config.webhook_host, port=config.webhook_port,
                              cert_dir=config.webhook_cert_dir)
    elif config.enforce_configuration and config.webhook_service_ref:
        admission.registrar = WebhookRegistrar(
            memo.kube_client, excluded,
            enforcement_configuration=config.enforce_configuration, is_active=admission.replica_active,
            report=lambda changed: report_enforcement(memo, changed),
        )
        server = cluster_server(port=config.webhook_port, cert_dir=config.webhook_cert_dir,
                                registrar=admission.registrar, service=config.webhook_service_ref)
    else:
        logger.info("no --enforce-configuration and --webhook-service: deny profiles are enforced only while "
                    "the operator answers (the chart's webhooks are failurePolicy Ignore)")
        server = cluster_server(port=config.webhook_port, cert_dir=config.webhook_cert_dir)
    admission.pvc_reviews = PvcReviews(memo)
    settings.admission.server = AnsweringPvcsFirst(server, admission.pvc_reviews)
    if admission.registrar is not None:
        admission.repair_thread = threading.Thread(
            target=keep_webhooks, args=(admission.registrar, admission.repair_stop, config.webhook_repair_interval),
            name="webhook-repair", daemon=True)
        admission.repair_thread.start()
    if config.active_label:
        pod, namespace = os.environ.get("POD_NAME"), config.namespace
        if not pod or not namespace:
            raise kopf.PermanentError("an active label needs the pod's own name and namespace: set POD_NAME and "
                                      "POD_NAMESPACE from the downward API")
        label = ActivePodLabel(memo.kube_client, namespace=namespace, pod=pod, key=config.active_label)
        admission.active_label_stop = threading.Event()
        admission.active_label_thread = threading.Thread(
            target=keep_active_label, args=(admission, label, admission.active_label_stop, logger),
            name="active-label", daemon=True)
        admission.active_label_thread.start()


#: The condition on a deny profile that says whether its failurePolicy Fail webhook is in the configuration.
ENFORCED = "Enforced"


def report_enforcement(memo: OperatorContext, changed: Mapping[str, tuple[bool, str]]) -> None:
    """Each deny profile whose webhook was written or refused says so in its Enforced condition."""
    for name, (enforced, message) in changed.items():
        memo.conditions.set(name, ENFORCED, "True" if enforced else "False",
                            "WebhookWritten" if enforced else "WebhookRefused", message, None, writer="enforce",
                            current=None)


def stop_active_label(memo: OperatorContext, **_) -> None:
    admission = memo.admission
    if admission is not None:
        admission.repair_stop.set()
    if admission is not None and admission.active_label_stop is not None:
        admission.active_label_stop.set()
        admission.active_label_thread.join(timeout=15)


# -- keeping up with the indexes (mountwarden.handlers.indexes) ---------------------------------------


def indexes_filled(memo: OperatorContext, **kwargs) -> None:
    """kopf calls event handlers only once every index has its initial listing: from then on, answers are whole."""
    admission = memo.admission
    if admission.pvc_reviews.indexes is None:
        admission.pvc_reviews.indexes = {  # live views: kept once
            **{name: kwargs[name] for name in PVC_VIEW_INDEXES},
            "volumes_by_class": memo.watches.indexes["volumes_by_class"]}
    admission.ready.set()


def enforce_deny_profiles(memo: OperatorContext, profiles_by_name: kopf.Index, **_) -> None:
    """In a cluster, keep one failurePolicy Fail webhook per deny profile in the chart's enforce configuration.

    Locally the registrar renders none (every local webhook is Ignore): this only keeps it informed.
    """
    registrar = memo.admission.registrar
    if registrar is not None:
        registrar.enforce(enforcing_profiles(e for entries in profiles_by_name.values() for e in entries))


# -- validating handlers ------------------------------------------------------------------------------
# async: they run on kopf's event loop at once, never queued behind reconcilers in its thread pool.


def _view(memo: OperatorContext, profiles_by_name: kopf.Index, classes_by_name: kopf.Index, classes_by_profile: kopf.Index,
          default_classes: kopf.Index, namespace_labels: kopf.Index, volumes_by_class: kopf.Index,
          profiles_by_consumer: kopf.Index | None = None) -> ClusterView:
    return ClusterView(
        profiles=profiles_by_name,
        classes=classes_by_name,
        classes_by_profile=classes_by_profile,
        default_classes=default_classes.get(DEFAULT, ()),
        namespace_labels=namespace_labels,
        volumes_by_class=volumes_by_class,
        extra_network_provisioners=memo.config.network_provisioners,
        profiles_by_consumer=profiles_by_consumer,
    )


class ReviewUnavailable(Exception):
    """No whole answer now: the request's fate is the calling webhook's failurePolicy (an HTTP error is answered)."""


def _review(memo: OperatorContext, logger, decide: Callable[[], Review]) -> Review:
    if not memo.admission.ready.is_set():
        raise ReviewUnavailable("mountwarden's indexes are still filling from the initial listings")
    try:
        return decide()
    except Exception as error:
        logger.exception("admission: the review failed (this is mountwarden's bug); answering with an error so "
                         "that the webhook's failurePolicy applies")
        raise ReviewUnavailable(f"mountwarden could not review the request: {error!r}") from error


def _answer(review: Review, warnings: list[str]) -> None:
    warnings.extend(review.warnings)
    if review.denial:
        raise kopf.AdmissionError(review.denial, code=403)


@with_cluster_indexes
async def validate_pvc(body: kopf.Body, warnings: list[str], memo: OperatorContext, logger,
                       profiles_by_name: kopf.Index, classes_by_name: kopf.Index, classes_by_profile: kopf.Index,
                       default_classes: kopf.Index, namespace_labels: kopf.Index, volumes_by_class: kopf.Index,
                       profiles_by_consumer: kopf.Index, **_) -> None:
    view = _view(memo, profiles_by_name, classes_by_name, classes_by_profile, default_classes, namespace_labels,
                 volumes_by_class, profiles_by_consumer)
    _answer(_review(memo, logger, lambda: review_claim(Claim.from_object(body), view)), warnings)


def _schema_problems(error: ValidationError) -> list[SpecProblem]:
    return [SpecProblem(".".join(str(part) for part in ("spec", *item["loc"])), item["msg"]) for item in error.errors()]


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
        last_version=ProfileStatus(status).last_version,
        updating=updating,
        current_options=ProfileStatus(status).effective_mount_options,
    )


@with_cluster_indexes
async def validate_profile(name: str, body: kopf.Body, old: kopf.Body | None, operation: str, warnings: list[str],
                           memo: OperatorContext, logger, profiles_by_name: kopf.Index, classes_by_name: kopf.Index,
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


async def validate_report(body: kopf.Body, userinfo: Mapping, warnings: list[str], memo: OperatorContext,
                          **_) -> None:
    """The agent writes only its own node's report. No index is read: this answer is whole from the start.

    A failure here is an HTTP error like any other; the webhook is failurePolicy Fail in a cluster (a
    security check), so the write is refused there, as when the API server cannot reach the webhook.
    """
    _answer(review_report_write(report_write(body, userinfo), memo.config.agent_username), warnings)


def register(registry: kopf.OperatorRegistry, config: OperatorConfig) -> None:
    """The webhooks and what keeps them whole: registered unless --webhook-mode off."""
    if config.webhook_mode == WebhookMode.OFF:
        return
    kopf.on.startup(registry=registry)(serve_admission)
    kopf.on.cleanup(registry=registry)(stop_active_label)
    kopf.on.event("v1", "namespaces", registry=registry)(indexes_filled)
    kopf.on.event(*PROFILE, registry=registry)(enforce_deny_profiles)
    kopf.on.validate("v1", "persistentvolumeclaims", operations=["CREATE"], id=PVC_WEBHOOK,
                     registry=registry)(validate_pvc)
    kopf.on.validate(*PROFILE, operations=["CREATE", "UPDATE"], id=PROFILE_WEBHOOK, registry=registry)(
        validate_profile)
    kopf.on.validate(*NODE_REPORTS, operations=["CREATE", "UPDATE"], id=REPORT_WEBHOOK, registry=registry)(
        validate_report)
