"""The AWS/EFS metric series the forecast reads, and how GetMetricData results map onto them.

One query per (file system, metric) at a 300 s period, namespace ``AWS/EFS``,
dimension ``FileSystemId``:

=====================  ==========  ===============  ===================================
metric                 statistic   query Id prefix  meaning per period
=====================  ==========  ===============  ===================================
BurstCreditBalance     Minimum     ``balance``      lowest balance, bytes
PermittedThroughput    Average     ``permitted``    permitted rate, bytes/s
MeteredIOBytes         Sum         ``metered``      metered bytes (reads at 1/3)
MetadataIOBytes        Sum         ``metadata``     metadata bytes
DataReadIOBytes        Sum         ``read``         bytes read
DataWriteIOBytes       Sum         ``write``        bytes written
PercentIOLimit         Average     ``iolimit``      % of the General Purpose I/O limit
DataReadIOBytes        SampleCount ``readops``      read requests (hourly)
DataWriteIOBytes       SampleCount ``writeops``     write requests (hourly)
MetadataIOBytes        SampleCount ``metadataops``  metadata requests (hourly)
StorageBytes           Average     ``storage``      Standard-class bytes (size fallback,
                                                    dimension StorageClass=Standard too)
=====================  ==========  ===============  ===================================

The SampleCount statistic of the three IOBytes metrics counts requests (EFS User Guide,
"Amazon CloudWatch metrics for Amazon EFS"); the counts are what Elastic's per-request
minimums apply to (:mod:`.pricing`). They change the advice, not the state, so hourly
points are enough: 48 per query over two days instead of 576.

A result is recognised by its ``Label`` (the metric name, optionally preceded by
the file system id and a space: ``fs-0123 BurstCreditBalance``) or else by its
``Id`` (one of the prefixes above, optionally followed by ``_`` and anything:
``balance``, ``balance_17``).
"""

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, NamedTuple

from mountwarden.core.credits.bucket import ThroughputMode
from mountwarden.core.credits.units import GIB

#: Seconds per CloudWatch period; EFS publishes 1-minute data, summed to 5 minutes.
PERIOD_SECONDS = 300


#: Seconds per point of the request counts (SampleCount), and of the StorageBytes fallback.
HOURLY_PERIOD_SECONDS = 3600


class EfsMetric(StrEnum):
    """A series the forecast reads: an AWS/EFS metric, or a request count (a metric's SampleCount)."""

    BURST_CREDIT_BALANCE = "BurstCreditBalance"
    PERMITTED_THROUGHPUT = "PermittedThroughput"
    METERED_IO_BYTES = "MeteredIOBytes"
    METADATA_IO_BYTES = "MetadataIOBytes"
    DATA_READ_IO_BYTES = "DataReadIOBytes"
    DATA_WRITE_IO_BYTES = "DataWriteIOBytes"
    PERCENT_IO_LIMIT = "PercentIOLimit"
    STORAGE_BYTES = "StorageBytes"
    DATA_READ_OPS = "DataReadOps"
    DATA_WRITE_OPS = "DataWriteOps"
    METADATA_OPS = "MetadataOps"

    @property
    def cloudwatch_name(self) -> str:
        """The AWS/EFS MetricName this series is read from."""
        return _COUNTED.get(self, self).value


#: Request counts and the metric whose SampleCount they are.
_COUNTED = {
    EfsMetric.DATA_READ_OPS: EfsMetric.DATA_READ_IO_BYTES,
    EfsMetric.DATA_WRITE_OPS: EfsMetric.DATA_WRITE_IO_BYTES,
    EfsMetric.METADATA_OPS: EfsMetric.METADATA_IO_BYTES,
}


@dataclass(frozen=True)
class MetricQuery:
    """How one metric is asked of CloudWatch."""

    metric: EfsMetric
    statistic: str
    id_prefix: str
    #: None: the forecast's period (PERIOD_SECONDS).
    period_seconds: int | None = None


#: The metrics fetched for every file system, every interval.
CREDIT_METRICS: tuple[MetricQuery, ...] = (
    MetricQuery(EfsMetric.BURST_CREDIT_BALANCE, "Minimum", "balance"),
    MetricQuery(EfsMetric.PERMITTED_THROUGHPUT, "Average", "permitted"),
    MetricQuery(EfsMetric.METERED_IO_BYTES, "Sum", "metered"),
    MetricQuery(EfsMetric.METADATA_IO_BYTES, "Sum", "metadata"),
    MetricQuery(EfsMetric.DATA_READ_IO_BYTES, "Sum", "read"),
    MetricQuery(EfsMetric.DATA_WRITE_IO_BYTES, "Sum", "write"),
    MetricQuery(EfsMetric.PERCENT_IO_LIMIT, "Average", "iolimit"),
    MetricQuery(EfsMetric.DATA_READ_OPS, "SampleCount", "readops", HOURLY_PERIOD_SECONDS),
    MetricQuery(EfsMetric.DATA_WRITE_OPS, "SampleCount", "writeops", HOURLY_PERIOD_SECONDS),
    MetricQuery(EfsMetric.METADATA_OPS, "SampleCount", "metadataops", HOURLY_PERIOD_SECONDS),
)
#: Asked only for file systems whose DescribeFileSystems size is missing (or 0).
#: Size changes slowly: hourly points keep the fallback from costing a call of its own.
STORAGE_QUERY = MetricQuery(EfsMetric.STORAGE_BYTES, "Average", "storage", HOURLY_PERIOD_SECONDS)

_BY_PREFIX = {query.id_prefix: query.metric for query in (*CREDIT_METRICS, STORAGE_QUERY)}
_METRIC_NAMES = {metric.value for metric in EfsMetric}


class Sample(NamedTuple):
    at: datetime
    value: float


@dataclass(frozen=True)
class MountTarget:
    """One of a file system's mount targets (DescribeMountTargets): the address clients talk to, in one zone."""

    mount_target_id: str
    ip_address: str
    zone: str  # AvailabilityZoneName, as the nodes' topology.kubernetes.io/zone label names it
    zone_id: str = ""


@dataclass(frozen=True)
class CreditSeries:
    """What is known of one file system over a window: its facts and its metric samples."""

    file_system_id: str
    throughput_mode: ThroughputMode | None = None
    #: Bytes in the Standard class (the size that earns credits); None when unknown.
    size_bytes: float | None = None
    provisioned_bytes_per_second: float | None = None
    period_seconds: int = PERIOD_SECONDS
    samples: Mapping[EfsMetric, tuple[Sample, ...]] = field(default_factory=dict)
    #: The AWS region it lives in, when known (prices are given per region).
    region: str | None = None
    #: DescribeFileSystems' PerformanceMode: generalPurpose or maxIO; None when unknown.
    performance_mode: str | None = None
    #: Its mount targets; None when they could not be read (mount_targets_problem says why).
    mount_targets: tuple[MountTarget, ...] | None = None
    mount_targets_problem: str | None = None

    @property
    def size_gib(self) -> float | None:
        return None if self.size_bytes is None else self.size_bytes / GIB

    def of(self, metric: EfsMetric) -> tuple[Sample, ...]:
        """The samples of one metric, oldest first, finite values only."""
        return self.samples.get(metric, ())


def make_samples(timestamps: Iterable[Any], values: Iterable[Any]) -> tuple[Sample, ...]:
    """Pair timestamps with values, drop non-finite values, sort oldest first.

    GetMetricData returns newest first by default; exports carry ISO 8601 strings.
    """
    samples = []
    for stamp, value in zip(timestamps, values, strict=False):
        number = float(value)
        if math.isfinite(number):
            samples.append(Sample(parse_timestamp(stamp), number))
    return tuple(sorted(samples))


def parse_timestamp(stamp: datetime | str | float) -> datetime:
    """A datetime, an ISO 8601 string (``Z`` allowed) or epoch seconds, as aware UTC."""
    if isinstance(stamp, datetime):
        moment = stamp
    elif isinstance(stamp, str):
        moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    else:
        moment = datetime.fromtimestamp(float(stamp), UTC)
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def identify_result(result: Mapping[str, Any]) -> tuple[str | None, EfsMetric] | None:
    """(file system id or None, metric) for one MetricDataResults entry, or None if foreign."""
    label = str(result.get("Label") or "").split()
    if label and label[-1] in _METRIC_NAMES:
        file_system_id = label[0] if len(label) > 1 else None
        return file_system_id, EfsMetric(label[-1])
    prefix = str(result.get("Id") or "").split("_", 1)[0]
    if prefix in _BY_PREFIX:
        return None, _BY_PREFIX[prefix]
    return None


def samples_from_metric_data(
    document: Mapping[str, Any],
) -> dict[str | None, dict[EfsMetric, tuple[Sample, ...]]]:
    """Group a GetMetricData response (or its JSON export) by file system id, then metric.

    Results without a file system id in their Label are grouped under None.
    Several results for the same (file system, metric), as pages of one query
    are, are merged.
    """
    grouped: dict[str | None, dict[EfsMetric, tuple[Sample, ...]]] = {}
    for result in document.get("MetricDataResults") or ():
        identity = identify_result(result)
        if identity is None:
            continue
        file_system_id, metric = identity
        samples = make_samples(result.get("Timestamps") or (), result.get("Values") or ())
        metrics = grouped.setdefault(file_system_id, {})
        metrics[metric] = tuple(sorted(metrics.get(metric, ()) + samples))
    return grouped
