"""Credit watch: forecast each profile's EFS burst credits from CloudWatch.

Every watched profile has a timer, but the metrics of all watched file systems
are fetched together, once per interval and region (a few GetMetricData calls
for hundreds of file systems); each timer then forecasts its own file system.
Failures (no credentials, AccessDenied, unknown file system, throttling) become
the condition's message and back the fetch off; they never crash the operator.
"""

import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import kopf

from mountwarden.adapters.aws import CreditWatchError, fetch_credit_series, make_clients
from mountwarden.api.base import GROUP, VERSION
from mountwarden.api.storageprofile import PLURAL
from mountwarden.core.credits import (
    CreditSeries,
    CreditState,
    CreditWatchProblem,
    ProblemReason,
    credit_condition,
    forecast_credits,
)
from mountwarden.core.policyreport import credit_findings
from mountwarden.core.presets import EFS_PROVISIONER
from mountwarden.handlers import findings, metrics
from mountwarden.handlers.errors import retry_transient

PROFILE = (GROUP, VERSION, PLURAL)
#: Seconds between credit checks (read once, when the handlers are registered).
CREDIT_INTERVAL_SECONDS = float(os.environ.get("MOUNTWARDEN_CREDIT_INTERVAL", "300"))
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


def watched_file_system(spec: dict) -> CreditWatchTarget | None:
    """The file system a profile's credit watch covers: creditWatch, else an EFS backend's fileSystemId."""
    watch = spec.get("creditWatch") or {}
    backend = spec.get("backend") or {}
    file_system_id = watch.get("fileSystemId")
    if not file_system_id and backend.get("provisioner") == EFS_PROVISIONER:
        file_system_id = (backend.get("parameters") or {}).get("fileSystemId")
    if not file_system_id:
        return None
    return CreditWatchTarget(file_system_id, watch.get("region") or "", timedelta(hours=watch.get("windowHours", 24)))


@kopf.index(*PROFILE)
async def credit_watch_targets(spec: kopf.Spec, **_) -> dict:
    target = watched_file_system(dict(spec))
    return {target.region: target} if target else {}


@dataclass
class _RegionCache:
    fetched_at: datetime | None = None
    results: dict[str, CreditSeries | CreditWatchProblem] = field(default_factory=dict)
    failures: int = 0
    retry_after: datetime | None = None


class CreditFetcher:
    """One batched fetch per region and interval, shared by every profile's timer."""

    def __init__(self, interval: timedelta, clients_for: Callable[[str], object] | None = None,
                 fetch: Callable[..., dict] = fetch_credit_series) -> None:
        self.interval = interval
        self._clients_for = clients_for or (lambda region: make_clients(region=region or None))
        self._fetch_series = fetch
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


def _credits_status(target: CreditWatchTarget, result: CreditSeries | CreditWatchProblem,
                    now: datetime) -> tuple[dict, dict]:
    """The status.credits object and the CreditsDraining condition for one result."""
    checked_at = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    if isinstance(result, CreditWatchProblem):
        status = {"fileSystemId": target.file_system_id, "state": CreditState.UNKNOWN.value,
                  "message": result.message, "checkedAt": checked_at}
        condition = {"status": "Unknown", "reason": CreditState.UNKNOWN.value,
                     "message": f"{result.reason}: {result.message}"}
        return status, condition
    forecast = forecast_credits(result, window=target.window, now=now)
    fields = forecast.to_json()
    condition_ = credit_condition(forecast)
    status = {
        "fileSystemId": target.file_system_id,
        "state": forecast.state.value,
        "throughputMode": fields["throughput_mode"],
        "sizeGib": fields["size_gib"],
        "balanceBytes": fields["balance_bytes"],
        "slopeBytesPerSecond": fields["slope_bytes_per_second"],
        "timeToEmptySeconds": fields["time_to_empty_seconds"],
        "permittedBytesPerSecond": fields["permitted_bytes_per_second"],
        "meteredBytesPerSecond": fields["metered_bytes_per_second"],
        "metadataShare": fields["metadata_share"],
        "opsBudgetPerSecond": (
            {"writesOrMetadata": fields["ops_budget_per_second"]["writes_or_metadata"],
             "reads": fields["ops_budget_per_second"]["reads"]}
            if fields["ops_budget_per_second"] else None
        ),
        "recommendation": fields["recommendation"],
        "message": condition_.message,
        "checkedAt": checked_at,
    }
    return {k: v for k, v in status.items() if v is not None}, {
        "status": condition_.status, "reason": condition_.reason, "message": condition_.message,
    }


@kopf.timer(*PROFILE, interval=CREDIT_INTERVAL_SECONDS, initial_delay=1.0,
            when=lambda spec, **_: watched_file_system(dict(spec)) is not None)
@retry_transient
def watch_credits(name: str, body: kopf.Body, spec: kopf.Spec, status: kopf.Status, meta: kopf.Meta,
                  patch: kopf.Patch, memo: kopf.Memo, credit_watch_targets: kopf.Index, **_) -> None:
    target = watched_file_system(dict(spec))
    if target is None:
        return
    now = datetime.now(UTC)
    targets = [t for store in credit_watch_targets.values() for t in store]
    result = memo.credit_fetcher.result(target, targets or [target], now)
    credits, condition = _credits_status(target, result, now)
    previous_state = (status.get("credits") or {}).get("state")
    patch.status["credits"] = credits
    memo.conditions.set(name, "CreditsDraining", condition["status"], condition["reason"], condition["message"],
                        meta.get("generation"))
    if credits["state"] != previous_state:
        post = kopf.warn if credits["state"] in ("Draining", "Empty", "Trap") else kopf.info
        post(body, reason=f"Credits{credits['state']}", message=f"{target.file_system_id}: {credits['message']}")
    metrics.record_credits(name, credits)
    findings.publish(memo, name, findings.CREDITS, credit_findings(name, credits))
