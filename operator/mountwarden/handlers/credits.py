"""Credit watch: forecast each profile's EFS burst credits from CloudWatch.

Every watched profile has a timer, but the metrics of all watched file systems
are fetched together, once per interval and region (a few GetMetricData calls
for hundreds of file systems); each timer then forecasts its own file system.
Failures (no credentials, AccessDenied, unknown file system, throttling) become
the condition's message and back the fetch off; they never crash the operator.

Who drains the file system comes from the node reports, not from AWS: each timer
also estimates the metered bytes of every pod volume on its file system (every
profile watching it, not only its own) from the reports' per-operation counters,
and names the busiest in ``status.credits.consumers``.
"""

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

import kopf
from pydantic import ValidationError

from mountwarden.adapters.pods import PodPlacements
from mountwarden.adapters.watches import with_cluster_indexes
from mountwarden.api.base import GROUP, VERSION
from mountwarden.api.nodemountreport import node_reports
from mountwarden.api.storageprofile import PLURAL, CreditsStatus, StorageProfileSpec
from mountwarden.core.credits import (
    DEFAULT_HISTORY,
    CreditSeries,
    CreditState,
    CreditWatchError,
    CreditWatchProblem,
    ProblemReason,
    credit_condition,
    forecast_credits,
)
from mountwarden.core.credits.consumers import (
    ConsumerSummary,
    ReportedVolume,
    VolumeOwners,
    reported_volumes,
    summarize_consumers,
)
from mountwarden.core.credits.crossaz import CrossAzCheck, cross_az_mounts
from mountwarden.core.credits.pricing import throughput_bill
from mountwarden.core.node.report import of_own_pods
from mountwarden.core.policyreport import credit_findings
from mountwarden.handlers import findings, metrics
from mountwarden.handlers.config import OperatorConfig
from mountwarden.handlers.context import OperatorContext
from mountwarden.handlers.errors import retry_transient

PROFILE = (GROUP, VERSION, PLURAL)
MAX_BACKOFF = timedelta(hours=1)
#: Problems of the account or the API, not of one file system: they back the whole fetch off.
ACCOUNT_PROBLEMS = frozenset({
    ProblemReason.NO_CREDENTIALS, ProblemReason.ACCESS_DENIED, ProblemReason.THROTTLED, ProblemReason.UNAVAILABLE,
})


@dataclass(frozen=True)
class CreditWatchTarget:
    file_system_id: str
    region: str  # "" means the operator's default region (AWS_REGION)
    window: timedelta
    #: The profile that watches it (several profiles may watch one file system).
    profile: str | None = None


def watched_file_system(spec: Mapping) -> CreditWatchTarget | None:
    """The file system a profile's credit watch covers (StorageProfileSpec.watched_file_system); None for a spec
    that watches none, or is not valid."""
    try:
        profile = StorageProfileSpec.model_validate(dict(spec))
    except ValidationError:
        return None
    watched = profile.watched_file_system()
    if watched is None:
        return None
    hours = profile.credit_watch.window_hours if profile.credit_watch else None
    return CreditWatchTarget(*watched, timedelta(hours=hours) if hours else DEFAULT_HISTORY)


@dataclass
class _RegionCache:
    fetched_at: datetime | None = None
    results: dict[str, CreditSeries | CreditWatchProblem] = field(default_factory=dict)
    failures: int = 0
    retry_after: datetime | None = None


def _aws():
    """boto3 and botocore, once a profile watches credits: 26 MiB resident that an operator with no EFS profile
    (an NFS server's) never needs (python -c "import boto3", 2026-12-05)."""
    from mountwarden.adapters import aws

    return aws


class CreditFetcher:
    """One batched fetch per region and interval, shared by every profile's timer."""

    def __init__(self, interval: timedelta, clients_for: Callable[[str], object] | None = None,
                 fetch: Callable[..., dict] | None = None) -> None:
        self.interval = interval
        self._clients_for = clients_for or (lambda region: _aws().make_clients(region=region or None))
        self._fetch_series = fetch or (lambda *args: _aws().fetch_credit_series(*args))
        #: Fetches made, for tests and the log: one per region and interval when all is well.
        self.fetches = 0
        self._clients: dict[str, object] = {}
        self._cache: dict[str, _RegionCache] = {}
        self._lock = threading.Lock()

    def result(self, target: CreditWatchTarget, targets: Iterable[CreditWatchTarget],
               now: datetime) -> CreditSeries | CreditWatchProblem:
        with self._lock:
            cache = self._cache.setdefault(target.region, _RegionCache())
            new = target.file_system_id not in cache.results
            stale = cache.fetched_at is None or now - cache.fetched_at >= self.interval * 0.5
            backing_off = cache.retry_after is not None and now < cache.retry_after
            # A newly watched file system is fetched at once; the others wait out the backoff.
            if new or (stale and not backing_off):
                self._fetch(cache, target.region, targets, now)
            found = cache.results.get(target.file_system_id)
        if found is None:
            return CreditWatchProblem(target.file_system_id, ProblemReason.UNAVAILABLE,
                                      "no metrics yet: the credit watch is backing off after failures")
        return found

    def _fetch(self, cache: _RegionCache, region: str, targets: Iterable[CreditWatchTarget], now: datetime) -> None:
        wanted = [t for t in targets if t.region == region]
        ids = sorted({t.file_system_id for t in wanted})
        window = max(t.window for t in wanted)
        try:
            clients = self._clients.get(region) or self._clients.setdefault(region, self._clients_for(region))
            results = self._fetch_series(clients, ids, window, now)
            self.fetches += 1
        except CreditWatchError as error:  # no region at all: the same problem for everyone
            results = {fs_id: CreditWatchProblem(fs_id, error.problem.reason, error.problem.message) for fs_id in ids}
        cache.results, cache.fetched_at = results, now
        if results and all(isinstance(r, CreditWatchProblem) and r.reason in ACCOUNT_PROBLEMS
                           for r in results.values()):
            cache.failures += 1
            cache.retry_after = now + min(self.interval * 2 ** cache.failures, MAX_BACKOFF)
        else:
            cache.failures, cache.retry_after = 0, None


def _credits_status(target: CreditWatchTarget, result: CreditSeries | CreditWatchProblem, now: datetime,
                    consumers: ConsumerSummary | None, cross_az: CrossAzCheck | None = None) -> tuple[dict, dict]:
    """The status.credits object (its wire form) and the CreditsDraining condition for one result."""
    checked_at = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    mode, provisioned = (None, None) if isinstance(result, CreditWatchProblem) else throughput_bill(result)
    found = {"consumers": consumers.to_json(mode, provisioned)} if consumers and consumers.consumers else {}
    if cross_az is not None and (cross_az.judged or cross_az.notes):
        found["cross_az_mounts"] = cross_az.to_json()
    if isinstance(result, CreditWatchProblem):
        status = CreditsStatus.model_validate({"file_system_id": target.file_system_id,
                                               "state": CreditState.UNKNOWN.value, "message": result.message,
                                               "checked_at": checked_at, **found})
        condition = {"status": "Unknown", "reason": CreditState.UNKNOWN.value,
                     "message": f"{result.reason}: {result.message}"}
        return status.to_wire(), condition
    forecast = forecast_credits(result, window=target.window, now=now)
    condition_ = credit_condition(forecast)
    status = CreditsStatus.model_validate({**forecast.to_json(), "message": condition_.message,
                                           "checked_at": checked_at, **found})
    return status.to_wire(), {"status": condition_.status, "reason": condition_.reason, "message": condition_.message}


def consumers_on(file_system_id: str, targets: Iterable[CreditWatchTarget], reports_by_node: kopf.Index,
                 pods: PodPlacements, claims_by_volume: kopf.Index, classes_by_name: kopf.Index,
                 ) -> ConsumerSummary:
    """The pod volumes of every profile watching ``file_system_id``, from the node reports, busiest first."""
    volumes, owners = watched_volumes(targets, reports_by_node, pods, claims_by_volume, classes_by_name)
    return summarize_consumers(volumes, owners, file_system_id)


def cross_az_on(file_system_id: str, result: CreditSeries | CreditWatchProblem, nodes: kopf.Index,
                volumes: list[ReportedVolume], owners: VolumeOwners) -> CrossAzCheck | None:
    """The zone check of the file system's pod volumes (a note alone when its mount targets are unknown)."""
    if isinstance(result, CreditWatchProblem):
        return None
    if result.mount_targets is None:
        return CrossAzCheck((), 0, (f"no zone check: the mount targets could not be read "
                                    f"({result.mount_targets_problem or 'unknown'})",))
    zones = {node: facts.zone for node, store in nodes.items() for facts in store if facts.zone}
    return cross_az_mounts(volumes, owners, file_system_id, result.mount_targets, zones)


def watched_volumes(targets: Iterable[CreditWatchTarget], reports_by_node: kopf.Index, pods: PodPlacements,
                    claims_by_volume: kopf.Index, classes_by_name: kopf.Index,
                    ) -> tuple[list[ReportedVolume], VolumeOwners]:
    """Every pod volume of the node reports, and who owns each (pod, class, profile, watched file system)."""
    file_systems = {t.profile: t.file_system_id for t in targets if t.profile}

    def pod_of(uid: str) -> str | None:
        pod = pods.get(uid)
        return f"{pod.namespace}/{pod.name}" if pod else None

    def storage_class_of(volume: str) -> str | None:
        claim = _first(claims_by_volume, volume)
        return claim.get("storageClass") if claim else None

    def profile_of(storage_class: str) -> str | None:
        entry = _first(classes_by_name, storage_class)
        return entry.profile if entry else None

    owners = VolumeOwners(pod_of, storage_class_of, profile_of, file_systems.get)
    # A report is believed only about its own node's pods (core.nodereport.of_own_pods).
    volumes = [volume for report in node_reports(reports_by_node).values()
               for volume in reported_volumes(of_own_pods(report, pods.node_of)[0])]
    return volumes, owners


def _replacing(old: dict, new: dict) -> dict:
    """``new`` as a merge patch over ``old``: what ``new`` no longer has is set to None, so it is removed."""
    merged: dict = {key: None for key in old if key not in new}
    for key, value in new.items():
        stale = old.get(key)
        merged[key] = _replacing(stale, value) if isinstance(value, dict) and isinstance(stale, dict) else value
    return merged


def _first(index: kopf.Index, key):
    store = index.get(key)
    return next(iter(store), None) if store else None


@with_cluster_indexes
@retry_transient
def watch_credits(name: str, body: kopf.Body, spec: kopf.Spec, status: kopf.Status, meta: kopf.Meta,
                  patch: kopf.Patch, memo: OperatorContext, credit_watch_targets: kopf.Index, reports_by_node: kopf.Index,
                  claims_by_volume: kopf.Index, classes_by_name: kopf.Index, nodes: kopf.Index, **_) -> None:
    target = watched_file_system(dict(spec))
    if target is None:
        return
    target = replace(target, profile=name)
    now = datetime.now(UTC)
    targets = [t for store in credit_watch_targets.values() for t in store]
    result = memo.credit_fetcher.result(target, targets or [target], now)
    volumes, owners = watched_volumes([*targets, target], reports_by_node, memo.pods, claims_by_volume,
                                      classes_by_name)
    consumers = summarize_consumers(volumes, owners, target.file_system_id)
    cross_az = cross_az_on(target.file_system_id, result, nodes, volumes, owners)
    credits, condition = _credits_status(target, result, now, consumers, cross_az)
    previous = dict(status.get("credits") or {})
    previous_state = previous.get("state")
    patch.status["credits"] = _replacing(previous, credits)
    memo.conditions.set(name, "CreditsDraining", condition["status"], condition["reason"], condition["message"],
                        meta.get("generation"), writer="credits", current=status)
    found = credit_findings(name, credits)
    if credits["state"] != previous_state:
        if found:
            findings.warn(body, found[0])
        else:  # back to Healthy, or Unknown: said, but not a finding
            kopf.info(body, reason=f"Credits{credits['state']}", message=f"{target.file_system_id}: {credits['message']}")
    metrics.record_credits(name, credits)
    metrics.record_consumers(target.file_system_id, consumers)
    metrics.record_namespace_costs(target.file_system_id, (credits.get("consumers") or {}).get("namespaces") or [])
    findings.publish(memo, name, findings.CREDITS, found)
    # Each profile's timer speaks of its own volumes; the file system's other profiles speak of theirs.
    crossing = [mount.finding() for mount in (cross_az.mounts if cross_az else ()) if mount.profile == name]
    for finding in crossing:
        findings.post_once(memo.posted_findings, finding)
    findings.publish(memo, name, findings.CROSS_AZ, crossing)
    metrics.record_cross_az(target.file_system_id, cross_az)


def register(registry: kopf.OperatorRegistry, config: OperatorConfig) -> None:
    kopf.timer(*PROFILE, interval=config.credit_interval, initial_delay=1.0, registry=registry,
               when=lambda spec, **_: watched_file_system(dict(spec)) is not None)(watch_credits)
