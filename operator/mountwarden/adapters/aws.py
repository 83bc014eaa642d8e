"""EFS and CloudWatch through boto3: one batched fetch per interval for every watched file system.

The operator's credit timer calls :func:`fetch_credit_series` once per interval
with all the file system ids its profiles name, and hands each resulting
:class:`~mountwarden.core.credits.CreditSeries` to
:func:`~mountwarden.core.credits.forecast_credits`. Per interval that costs:

- DescribeFileSystems: one call for one id; one call per 100 file systems in the
  account and region (listing them all) for several ids, or one per id when the
  role may only describe its own file systems;
- GetMetricData: ``ceil(queries / batch)`` calls, where a batch is 500 queries or
  fewer, so that one answer never exceeds CloudWatch's 100,800 datapoints and pages. Queries are 10 per file
  system (see :data:`~mountwarden.core.credits.CREDIT_METRICS`: 7 at 5-minute points, 3 request counts at
  hourly points), plus StorageBytes (hourly) for those whose DescribeFileSystems size is missing: over the
  default 48-hour window, 100 file systems cost 5 calls (4,176 points each).

Failures become :class:`~mountwarden.core.credits.CreditWatchProblem` values per
file system, never exceptions: botocore retries throttling a bounded number of
times (adaptive mode), then the next interval tries again.
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, NoRegionError

from mountwarden.core.credits import (
    CREDIT_METRICS,
    DEFAULT_HISTORY,
    MIB,
    PERIOD_SECONDS,
    STORAGE_QUERY,
    CreditSeries,
    CreditWatchError,
    CreditWatchProblem,
    EfsMetric,
    MetricQuery,
    Sample,
    ThroughputMode,
    make_samples,
    problems,
)
from mountwarden.core.credits.series import MountTarget

#: CloudWatch's limits for one GetMetricData request: queries, and datapoints in one answer.
MAX_QUERIES_PER_CALL = 500
MAX_DATAPOINTS_PER_CALL = 100_800
#: Total attempts (the first one included) before a throttled call gives up until the next interval.
DEFAULT_MAX_ATTEMPTS = 4
#: What the forecast needs: two whole days, for the day-over-day change.
DEFAULT_WINDOW = DEFAULT_HISTORY

_ACCESS_DENIED_CODES = {"AccessDenied", "AccessDeniedException", "UnauthorizedOperation"}
_REJECTED_CREDENTIAL_CODES = {
    "UnrecognizedClientException",
    "InvalidClientTokenId",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "ExpiredToken",
    "ExpiredTokenException",
}
_THROTTLING_CODES = {
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestLimitExceeded",
    "TooManyRequestsException",
}


@dataclass
class CallCounter:
    """API calls made through one :class:`AwsClients`: pages and failed calls included, retries not."""

    describe_file_systems: int = 0
    get_metric_data: int = 0

    def watch(self, efs: Any, cloudwatch: Any) -> None:
        """Count through botocore's own events, so every call is counted however it ends."""
        efs.meta.events.register("provide-client-params.efs.DescribeFileSystems", self._count_describe)
        cloudwatch.meta.events.register(
            "provide-client-params.cloudwatch.GetMetricData", self._count_get_metric_data
        )

    def _count_describe(self, **_: Any) -> None:
        self.describe_file_systems += 1

    def _count_get_metric_data(self, **_: Any) -> None:
        self.get_metric_data += 1


@dataclass(frozen=True)
class AwsClients:
    efs: Any
    cloudwatch: Any
    region: str | None
    calls: CallCounter = field(default_factory=CallCounter)


def make_clients(
    *,
    region: str | None = None,
    endpoint_url: str | None = None,
    session: boto3.session.Session | None = None,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
) -> AwsClients:
    """EFS and CloudWatch clients with bounded, adaptive retries and short timeouts.

    Adaptive mode backs off *and* rate-limits the client after throttling, so a
    timer serving many profiles slows down instead of storming the API.
    """
    session = session or boto3.session.Session()
    config = Config(
        retries={"mode": "adaptive", "total_max_attempts": max_attempts},
        connect_timeout=5,
        read_timeout=20,
    )
    try:
        efs = session.client("efs", region_name=region, endpoint_url=endpoint_url, config=config)
        cloudwatch = session.client(
            "cloudwatch", region_name=region, endpoint_url=endpoint_url, config=config
        )
    except NoRegionError as error:
        raise CreditWatchError(problems.no_region()) from error
    clients = AwsClients(efs, cloudwatch, efs.meta.region_name)
    clients.calls.watch(efs, cloudwatch)
    return clients


@dataclass(frozen=True)
class FileSystemFacts:
    """What DescribeFileSystems says of one file system."""

    file_system_id: str
    throughput_mode: ThroughputMode | None
    #: Standard-class bytes; None when EFS reports none (or 0, as moto always does).
    size_bytes: float | None
    provisioned_bytes_per_second: float | None
    #: generalPurpose or maxIO (fixed when the file system is created).
    performance_mode: str | None = None

    @classmethod
    def from_description(cls, description: dict[str, Any]) -> "FileSystemFacts":
        size = description.get("SizeInBytes") or {}
        standard = size.get("ValueInStandard", size.get("Value")) or None
        mode = description.get("ThroughputMode")
        provisioned = description.get("ProvisionedThroughputInMibps")
        return cls(
            file_system_id=description["FileSystemId"],
            throughput_mode=_throughput_mode(mode),
            size_bytes=float(standard) if standard else None,
            provisioned_bytes_per_second=provisioned * MIB if provisioned else None,
            performance_mode=description.get("PerformanceMode"),
        )


def _throughput_mode(value: str | None) -> ThroughputMode | None:
    try:
        return ThroughputMode(value)
    except ValueError:  # a mode newer than this code: judge it like an unknown one
        return None


def describe_file_systems(
    clients: AwsClients, file_system_ids: Sequence[str]
) -> dict[str, FileSystemFacts | CreditWatchProblem]:
    """Facts for each id, or the problem that kept them from us."""
    wanted = list(dict.fromkeys(file_system_ids))
    if len(wanted) > 1:
        try:
            listed = _list_all_file_systems(clients)
        except ClientError as error:
            if _error_code(error) not in _ACCESS_DENIED_CODES:
                return {fs_id: _problem(error, fs_id, "DescribeFileSystems", clients) for fs_id in wanted}
            # A role scoped to its own file systems may describe each but not list all.
        except BotoCoreError as error:
            return {fs_id: _problem(error, fs_id, "DescribeFileSystems", clients) for fs_id in wanted}
        else:
            return {
                fs_id: listed.get(fs_id) or problems.file_system_not_found(fs_id, clients.region)
                for fs_id in wanted
            }
    return {fs_id: _describe_one(clients, fs_id) for fs_id in wanted}


def _list_all_file_systems(clients: AwsClients) -> dict[str, FileSystemFacts]:
    listed = {}
    for page in clients.efs.get_paginator("describe_file_systems").paginate(
        PaginationConfig={"PageSize": 100}
    ):
        for description in page.get("FileSystems", ()):
            facts = FileSystemFacts.from_description(description)
            listed[facts.file_system_id] = facts
    return listed


def _describe_one(clients: AwsClients, file_system_id: str) -> FileSystemFacts | CreditWatchProblem:
    try:
        answer = clients.efs.describe_file_systems(FileSystemId=file_system_id)
    except (ClientError, BotoCoreError) as error:
        return _problem(error, file_system_id, "DescribeFileSystems", clients)
    found = answer.get("FileSystems") or ()
    if not found:
        return problems.file_system_not_found(file_system_id, clients.region)
    return FileSystemFacts.from_description(found[0])


@dataclass(frozen=True)
class PlannedQuery:
    """One GetMetricData query and the file system and metric it answers for."""

    file_system_id: str
    metric: EfsMetric
    request: dict[str, Any]


def plan_metric_queries(
    facts: Iterable[FileSystemFacts], period_seconds: int = PERIOD_SECONDS
) -> list[PlannedQuery]:
    """The GetMetricData queries for these file systems: Id ``<prefix>_<n>``, Label ``<fs id> <metric>``."""
    planned = []
    for number, fs in enumerate(facts):
        wanted = list(CREDIT_METRICS) + ([STORAGE_QUERY] if fs.size_bytes is None else [])
        for query in wanted:
            planned.append(
                PlannedQuery(fs.file_system_id, query.metric, _request(fs, query, number, period_seconds))
            )
    return planned


def _request(fs: FileSystemFacts, query: MetricQuery, number: int, period_seconds: int) -> dict[str, Any]:
    dimensions = [{"Name": "FileSystemId", "Value": fs.file_system_id}]
    if query.metric is EfsMetric.STORAGE_BYTES:
        dimensions.append({"Name": "StorageClass", "Value": "Standard"})
    return {
        "Id": f"{query.id_prefix}_{number}",
        "Label": f"{fs.file_system_id} {query.metric.value}",
        "MetricStat": {
            "Metric": {"Namespace": "AWS/EFS", "MetricName": query.metric.cloudwatch_name, "Dimensions": dimensions},
            "Period": query.period_seconds or period_seconds,
            "Stat": query.statistic,
        },
        "ReturnData": True,
    }


def batch_queries(planned: Sequence[PlannedQuery], window: timedelta) -> list[list[PlannedQuery]]:
    """Group queries into calls of at most 500 queries whose datapoints fit one answer.

    A 24 h window at 300 s has 288 points per query: 350 queries fill one answer of
    100,800 points exactly, so 700 queries take 2 calls where batches of 500 would
    take 3 (the first 500 paged in two, then 200).
    """
    batches: list[list[PlannedQuery]] = [[]]
    points_in_batch = 0
    for query in planned:
        points = max(1, -(-int(window.total_seconds()) // query.request["MetricStat"]["Period"]))
        if batches[-1] and (len(batches[-1]) == MAX_QUERIES_PER_CALL
                            or points_in_batch + points > MAX_DATAPOINTS_PER_CALL):
            batches.append([])
            points_in_batch = 0
        batches[-1].append(query)
        points_in_batch += points
    return [batch for batch in batches if batch]


def fetch_credit_series(
    clients: AwsClients,
    file_system_ids: Sequence[str],
    window: timedelta = DEFAULT_WINDOW,
    now: datetime | None = None,
    period_seconds: int = PERIOD_SECONDS,
) -> dict[str, CreditSeries | CreditWatchProblem]:
    """Every file system's credit series over ``(now - window, now]``, in as few calls as CloudWatch allows.

    The operator's timer calls this once per interval for all profiles.
    """
    now = now or datetime.now(UTC)
    outcome: dict[str, CreditSeries | CreditWatchProblem] = {}
    facts: list[FileSystemFacts] = []
    for fs_id, found in describe_file_systems(clients, file_system_ids).items():
        if isinstance(found, CreditWatchProblem):
            outcome[fs_id] = found
        else:
            facts.append(found)

    samples: dict[str, dict[EfsMetric, tuple[Sample, ...]]] = {fs.file_system_id: {} for fs in facts}
    planned = plan_metric_queries(facts, period_seconds)
    for batch in batch_queries(planned, window):
        try:
            results = _get_metric_data(clients, [query.request for query in batch], now - window, now)
        except (ClientError, BotoCoreError) as error:
            # Credentials, permissions, throttling and the endpoint fail every batch alike:
            # stop here rather than spend the remaining calls of this interval.
            for query in planned[planned.index(batch[0]):]:
                outcome.setdefault(
                    query.file_system_id, _problem(error, query.file_system_id, "GetMetricData", clients)
                )
            break
        for query in batch:
            samples[query.file_system_id][query.metric] = results.get(query.request["Id"], ())

    for fs in facts:
        if fs.file_system_id in outcome:
            continue
        found = samples[fs.file_system_id]
        storage = found.pop(EfsMetric.STORAGE_BYTES, ())
        size = fs.size_bytes or (storage[-1].value if storage and storage[-1].value > 0 else None)
        targets, targets_problem = describe_mount_targets(clients, fs.file_system_id)
        outcome[fs.file_system_id] = CreditSeries(
            mount_targets=targets,
            mount_targets_problem=targets_problem,
            file_system_id=fs.file_system_id,
            throughput_mode=fs.throughput_mode,
            size_bytes=size,
            provisioned_bytes_per_second=fs.provisioned_bytes_per_second,
            period_seconds=period_seconds,
            samples=found,
            region=clients.region,
            performance_mode=fs.performance_mode,
        )
    return {fs_id: outcome[fs_id] for fs_id in dict.fromkeys(file_system_ids)}


def describe_mount_targets(clients: AwsClients, file_system_id: str) -> tuple[tuple[MountTarget, ...] | None, str | None]:
    """A file system's mount targets, or None and why (the credit watch goes on without them)."""
    try:
        pages = clients.efs.get_paginator("describe_mount_targets").paginate(FileSystemId=file_system_id)
        found = [target for page in pages for target in page.get("MountTargets", ())]
    except (ClientError, BotoCoreError) as error:
        return None, _problem(error, file_system_id, "DescribeMountTargets", clients).message
    return tuple(MountTarget(t["MountTargetId"], t.get("IpAddress", ""), t.get("AvailabilityZoneName", ""),
                             t.get("AvailabilityZoneId", ""))
                 for t in found if t.get("LifeCycleState", "available") == "available"), None


def _get_metric_data(
    clients: AwsClients, queries: list[dict[str, Any]], start: datetime, end: datetime
) -> dict[str, tuple[Sample, ...]]:
    """One batch of queries, following NextToken; samples by query Id, oldest first."""
    collected: dict[str, tuple[Sample, ...]] = {}
    arguments: dict[str, Any] = {
        "MetricDataQueries": queries,
        "StartTime": start,
        "EndTime": end,
        "ScanBy": "TimestampAscending",
    }
    while True:
        answer = clients.cloudwatch.get_metric_data(**arguments)
        for result in answer.get("MetricDataResults", ()):
            page = make_samples(result.get("Timestamps", ()), result.get("Values", ()))
            collected[result["Id"]] = tuple(sorted(collected.get(result["Id"], ()) + page))
        token = answer.get("NextToken")
        if not token:
            return collected
        arguments["NextToken"] = token


def _error_code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def _problem(
    error: Exception, file_system_id: str | None, action: str, clients: AwsClients
) -> CreditWatchProblem:
    """Name what went wrong in the words of its remedy."""
    if isinstance(error, NoCredentialsError):
        return problems.no_credentials(file_system_id)
    if not isinstance(error, ClientError):
        return problems.unavailable(file_system_id, f"{action}: {error}")
    code = _error_code(error)
    if code in _ACCESS_DENIED_CODES:
        return problems.access_denied(file_system_id, action, code)
    if code in _REJECTED_CREDENTIAL_CODES:
        return problems.no_credentials(file_system_id, f"{code}: the credentials were rejected")
    if code == "FileSystemNotFound" and file_system_id:
        return problems.file_system_not_found(file_system_id, clients.region)
    if code in _THROTTLING_CODES:
        attempts = error.response.get("ResponseMetadata", {}).get("RetryAttempts", 0) + 1
        return problems.throttled(file_system_id, action, attempts)
    return problems.unavailable(file_system_id, f"{action}: {code or error}")
