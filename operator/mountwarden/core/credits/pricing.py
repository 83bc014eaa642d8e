"""What a switch of throughput mode would cost, from AWS's published metering rules and prices.

Metering (how many bytes a request is billed as):

- Bursting and Provisioned: every request counts as at least 4 KiB, reads count one
  third (EFS User Guide, "Amazon CloudWatch metrics for Amazon EFS", MeteredIOBytes:
  "read operations metered at one-third the rate of other operations",
  https://docs.aws.amazon.com/efs/latest/ug/efs-metrics.html).
- Elastic: "Data operations are metered in 1 KiB increments after the first 32 KiB",
  "Metadata operations are metered in 1 KiB increments after the first 4 KiB"; reads
  and writes are priced apart, with no one-third discount (AWS re:Post, "How do I
  estimate Elastic Throughput mode costs for Amazon EFS?",
  https://repost.aws/articles/ARLxw4PqmeQK6VVrpGL4-jzA). So a 4 KiB SQLite page write
  is billed as 32 KiB: eight times its size.
- The request counts come from the SampleCount statistic of DataReadIOBytes,
  DataWriteIOBytes and MetadataIOBytes (the same User Guide page).

Prices (:data:`PRICES`), US East (N. Virginia), read on 2026-12-01: Elastic reads
$0.03 and writes $0.06 per GB transferred; Provisioned $6.00 per MB/s-month, billed
only for what is provisioned above the baseline the Standard storage already earns
("the average throughput provisioned in excess of what your EFS Standard storage
allows"). Source: the Amazon EFS pricing page, https://aws.amazon.com/efs/pricing/,
as quoted by AWS re:Post (the Provisioned billing rule; eu-west-1's Elastic prices,
$0.03 and $0.07) and by third-party pricing guides dated 2026 for the us-east-1
figures. Other regions differ: the output says which region's prices it used. GB is
taken as 1024^3 bytes and MB/s as MiB/s, as EFS states its throughput limits.

Every estimate here is a lower bound where the inputs are totals: a minimum applies to
each request, and a total of bytes and a count of requests only bound the sum of
per-request maxima from below (``max(bytes, count x 32 KiB)``).
"""

import bisect
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from mountwarden.core.credits.bucket import READ_METERING_FACTOR, CreditBucket, ThroughputMode
from mountwarden.core.credits.metering import ELASTIC_DATA_MINIMUM_BYTES, RequestKind, metered_bytes
from mountwarden.core.credits.series import CreditSeries, EfsMetric, Sample
from mountwarden.core.credits.units import GIB, MIB, format_bytes

#: Hours in an average month (365 x 24 / 12): what a monthly figure is scaled to.
HOURS_PER_MONTH = 730
SECONDS_PER_MONTH = HOURS_PER_MONTH * 3600
ELASTIC_METADATA_MINIMUM_BYTES = metered_bytes(RequestKind.METADATA, 0)


@dataclass(frozen=True)
class ThroughputPrices:
    region: str
    elastic_read_per_gib: float
    elastic_write_per_gib: float
    provisioned_per_mibps_month: float
    read_on: str
    source: str

    def describe(self) -> str:
        return (
            f"{self.region} list prices read {self.read_on}: Elastic ${self.elastic_read_per_gib:.2f}/GB read, "
            f"${self.elastic_write_per_gib:.2f}/GB written; Provisioned ${self.provisioned_per_mibps_month:.2f} "
            f"per MB/s-month ({self.source})"
        )


PRICES = ThroughputPrices(
    region="us-east-1",
    elastic_read_per_gib=0.03,
    elastic_write_per_gib=0.06,
    provisioned_per_mibps_month=6.00,
    read_on="2026-12-01",
    source="https://aws.amazon.com/efs/pricing/",
)


@dataclass(frozen=True)
class ElasticUsage:
    """What a window of load would be billed in Elastic mode (lower bounds, see the module)."""

    read_bytes: float
    write_bytes: float
    metadata_bytes: float
    #: Seconds of history the bytes were counted over.
    seconds: float
    #: Request counts were known, so the 32 KiB and 4 KiB minimums were applied.
    minimums_applied: bool
    #: Bytes the same load was metered in Bursting mode (MeteredIOBytes) over the same seconds.
    metered_bytes: float | None = None

    @property
    def billed_bytes(self) -> float:
        return self.read_bytes + self.write_bytes + self.metadata_bytes

    def cost(self, prices: ThroughputPrices = PRICES) -> float:
        """Dollars for the window. Metadata is priced as writes: an upper bound for its share, as
        CloudWatch's MetadataIOBytes does not split metadata reads from metadata writes."""
        return (
            self.read_bytes / GIB * prices.elastic_read_per_gib
            + (self.write_bytes + self.metadata_bytes) / GIB * prices.elastic_write_per_gib
        )

    def monthly_cost(self, prices: ThroughputPrices = PRICES) -> float | None:
        return _finite(self.cost(prices) * SECONDS_PER_MONTH / self.seconds) if self.seconds > 0 else None

    def monthly_cost_at(self, metered_bytes_per_second: float, prices: ThroughputPrices = PRICES) -> float | None:
        """The monthly cost of a load of this mix metered at another rate (bytes/s, Bursting metering)."""
        if not self.metered_bytes or self.metered_bytes <= 0:
            return None
        per_metered_byte = self.cost(prices) / self.metered_bytes
        return _finite(per_metered_byte * metered_bytes_per_second * SECONDS_PER_MONTH)

    def describe(self) -> str:
        minimums = (
            "reads and writes at 32 KiB or more each, metadata at 4 KiB"
            if self.minimums_applied
            else "request counts unknown, so without the per-request minimums"
        )
        return (
            f"{format_bytes(self.read_bytes)} read, {format_bytes(self.write_bytes)} written, "
            f"{format_bytes(self.metadata_bytes)} of metadata over {self.seconds / 3600:.0f} h ({minimums})"
        )

    def to_json(self, prices: ThroughputPrices = PRICES) -> dict[str, object]:
        return {
            "billed_read_bytes": self.read_bytes,
            "billed_write_bytes": self.write_bytes,
            "billed_metadata_bytes": self.metadata_bytes,
            "window_seconds": self.seconds,
            "minimums_applied": self.minimums_applied,
            "monthly_cost_usd": round_cents(self.monthly_cost(prices)),
            "prices": prices.describe(),
        }


def elastic_usage(samples: Mapping[EfsMetric, Sequence[Sample]], period_seconds: int) -> ElasticUsage | None:
    """Elastic billing of the load in ``samples`` (clipped to the window), or None without data.

    Per hour of request counts: reads ``max(bytes, reads x 32 KiB)``, writes alike,
    metadata ``max(requests x 4 KiB, metered bytes that data does not explain)``.
    Without request counts: the data bytes, and the metered remainder as metadata;
    with no data series at all, every metered byte is taken as a written one.
    """
    metered = samples.get(EfsMetric.METERED_IO_BYTES, ())
    reads = samples.get(EfsMetric.DATA_READ_IO_BYTES, ())
    writes = samples.get(EfsMetric.DATA_WRITE_IO_BYTES, ())
    read_ops = samples.get(EfsMetric.DATA_READ_OPS, ())
    write_ops = samples.get(EfsMetric.DATA_WRITE_OPS, ())
    metadata_ops = samples.get(EfsMetric.METADATA_OPS, ())
    counted = [*metered, *reads, *writes]
    if not counted:
        return None
    stamps = [s.at for s in counted]
    seconds = (max(stamps) - min(stamps)).total_seconds() + period_seconds
    metered_total = _total(metered)
    read_total, write_total = _total(reads), _total(writes)
    if not (reads or writes):
        usage = ElasticUsage(0.0, metered_total, 0.0, seconds, False, metered_total if metered else None)
    else:
        minimums = bool(read_ops or write_ops or metadata_ops)
        # The metered bytes data does not explain are metadata, metered at 4 KiB or more already.
        metadata_metered = max(0.0, metered_total - write_total - READ_METERING_FACTOR * read_total)
        usage = ElasticUsage(
            read_bytes=_with_minimum(reads, read_ops, ELASTIC_DATA_MINIMUM_BYTES) if minimums else read_total,
            write_bytes=_with_minimum(writes, write_ops, ELASTIC_DATA_MINIMUM_BYTES) if minimums else write_total,
            metadata_bytes=max(metadata_metered, _total(metadata_ops) * ELASTIC_METADATA_MINIMUM_BYTES),
            seconds=seconds,
            minimums_applied=minimums,
            metered_bytes=metered_total if metered else None,
        )
    finite = all(math.isfinite(v) for v in (usage.billed_bytes, usage.seconds, usage.metered_bytes or 0.0))
    return usage if finite and usage.billed_bytes >= 0 else None


def throughput_bill(series: CreditSeries) -> tuple[ThroughputMode | None, float | None]:
    """The file system's throughput mode, and its provisioned throughput's monthly bill in Provisioned mode."""
    if series.throughput_mode is not ThroughputMode.PROVISIONED or not series.provisioned_bytes_per_second:
        return series.throughput_mode, None
    baseline = CreditBucket(series.size_gib).baseline_bytes_per_second if series.size_gib is not None else 0.0
    return series.throughput_mode, provisioned_monthly_cost(series.provisioned_bytes_per_second / MIB, baseline)


def provisioned_monthly_cost(
    mibps: float, baseline_bytes_per_second: float, prices: ThroughputPrices = PRICES
) -> float:
    """Dollars a month for ``mibps`` provisioned: only what exceeds the storage's own baseline is billed."""
    return max(0.0, mibps - baseline_bytes_per_second / MIB) * prices.provisioned_per_mibps_month


def _with_minimum(data: Iterable[Sample], counts: Sequence[Sample], minimum: float) -> float:
    """Sum over the count series' periods of ``max(bytes in the period, count x minimum)``.

    Each data sample falls into the newest count period that began at or before it;
    data before the first count period is summed as it is.
    """
    starts = [count.at for count in counts]
    in_period = [0.0] * len(starts)
    before_first = 0.0
    for sample in data:
        index = bisect.bisect_right(starts, sample.at) - 1
        if index < 0:
            before_first += sample.value
        else:
            in_period[index] += sample.value
    return before_first + sum(
        max(data_bytes, count.value * minimum) for data_bytes, count in zip(in_period, counts, strict=True)
    )


def _total(samples: Iterable[Sample]) -> float:
    """The sum of the values; infinite when it overflows (the caller drops a non-finite estimate)."""
    try:
        return math.fsum(s.value for s in samples)
    except OverflowError:
        return math.inf


def round_cents(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None
