"""From a credit series to a forecast: balance, slope, time to empty, state, advice.

States (``Forecast.state``), judged for Bursting mode (and when the mode is unknown):

- ``Healthy``: the balance is not falling. Provisioned and Elastic file systems
  are not limited by credits, so they are Healthy whenever there is data;
- ``Draining``: the balance falls by more than 1% of the baseline rate
  (``b - m < -0.01 b``); ``time_to_empty_seconds`` says when it reaches zero;
- ``Empty``: the balance is below what the baseline earns in one period, so any
  burst is throttled, but the load still fits under the permitted rate;
- ``Trap``: empty *and* metered at the permitted rate (at least 90% of it):
  every request now waits for credits the baseline earns;
- ``Unknown``: no data to judge from.

``time_to_empty_seconds`` is 0 for Empty and Trap and None when not draining.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from mountwarden.core.credits.bucket import READ_METERING_FACTOR, CreditBucket, OpsBudget, ThroughputMode
from mountwarden.core.credits.series import CreditSeries, EfsMetric, Sample
from mountwarden.core.credits.trend import theil_sen_slope
from mountwarden.core.credits.units import MIB, format_bytes, format_duration, format_rate

#: A slope smaller than this fraction of the baseline rate is noise, not a trend.
FLAT_SLOPE_FRACTION_OF_BASELINE = 0.01


class CreditState(StrEnum):
    HEALTHY = "Healthy"
    DRAINING = "Draining"
    EMPTY = "Empty"
    TRAP = "Trap"
    UNKNOWN = "Unknown"


@dataclass(frozen=True)
class ForecastSettings:
    #: The slope is fitted over the newest part of the window only: a bucket that
    #: started draining an hour ago must alert now, not after a day of history.
    trend_window: timedelta = timedelta(hours=1)
    #: "Now" for the metered and permitted rates: the newest 15 minutes.
    recent_window: timedelta = timedelta(minutes=15)
    flat_slope_fraction_of_baseline: float = FLAT_SLOPE_FRACTION_OF_BASELINE
    #: Metered at this fraction of the permitted rate counts as "at the ceiling".
    trap_fraction_of_permitted: float = 0.9
    #: An average at or below this fraction of the peak is a spiky load: Elastic.
    spiky_average_to_peak: float = 0.05


@dataclass(frozen=True)
class Recommendation:
    mode: ThroughputMode
    reason: str

    def to_json(self) -> dict[str, str]:
        return {"mode": self.mode.value, "reason": self.reason}


@dataclass(frozen=True)
class Forecast:
    file_system_id: str
    throughput_mode: ThroughputMode | None
    size_gib: float | None
    balance_bytes: float | None
    slope_bytes_per_second: float | None
    time_to_empty_seconds: float | None
    state: CreditState
    permitted_bytes_per_second: float | None
    metered_bytes_per_second: float | None
    #: Share of metered bytes that data reads and writes do not explain (0..1).
    metadata_share: float | None
    ops_budget_per_second: OpsBudget | None
    recommendation: Recommendation
    #: When the newest balance sample was taken: the time the forecast speaks of.
    observed_at: datetime | None
    baseline_bytes_per_second: float
    percent_io_limit: float | None

    @property
    def headroom_bytes_per_second(self) -> float | None:
        """Permitted minus metered: how much more load fits before throttling."""
        if self.permitted_bytes_per_second is None or self.metered_bytes_per_second is None:
            return None
        return self.permitted_bytes_per_second - self.metered_bytes_per_second

    @property
    def empty_at(self) -> datetime | None:
        if self.observed_at is None or self.time_to_empty_seconds is None:
            return None
        try:
            return self.observed_at + timedelta(seconds=self.time_to_empty_seconds)
        except OverflowError:
            return None

    def to_json(self) -> dict[str, object]:
        """The fields of ``mountwarden credits forecast --json``."""
        return {
            "file_system_id": self.file_system_id,
            "throughput_mode": self.throughput_mode.value if self.throughput_mode else None,
            "size_gib": self.size_gib,
            "balance_bytes": self.balance_bytes,
            "slope_bytes_per_second": self.slope_bytes_per_second,
            "time_to_empty_seconds": self.time_to_empty_seconds,
            "state": self.state.value,
            "permitted_bytes_per_second": self.permitted_bytes_per_second,
            "metered_bytes_per_second": self.metered_bytes_per_second,
            "metadata_share": self.metadata_share,
            "ops_budget_per_second": self.ops_budget_per_second.to_json()
            if self.ops_budget_per_second
            else None,
            "recommendation": self.recommendation.to_json(),
        }


def forecast_credits(
    series: CreditSeries,
    *,
    window: timedelta | None = None,
    now: datetime | None = None,
    settings: ForecastSettings | None = None,
) -> Forecast:
    """Forecast one file system's credits from its series; never raises on finite data.

    ``now`` (UTC when naive) defaults to the newest sample; ``window`` (default:
    all samples) keeps only samples in ``(now - window, now]``.
    """
    settings = settings or ForecastSettings()
    samples = _clip(series, window, now)
    period = max(series.period_seconds, 1)
    bucket = CreditBucket(series.size_gib if series.size_gib is not None and series.size_gib >= 0 else 0.0)
    baseline = bucket.baseline_bytes_per_second

    balance_samples = samples[EfsMetric.BURST_CREDIT_BALANCE]
    balance = balance_samples[-1].value if balance_samples else None
    observed_at = balance_samples[-1].at if balance_samples else None
    slope = _slope(_newest(balance_samples, settings.trend_window))

    metered_rates = [Sample(s.at, s.value / period) for s in samples[EfsMetric.METERED_IO_BYTES]]
    metered = _mean_of_newest(metered_rates, settings.recent_window)
    permitted = _mean_of_newest(samples[EfsMetric.PERMITTED_THROUGHPUT], settings.recent_window)
    if permitted is None:
        permitted = _modelled_permitted(series, bucket, balance)

    state, time_to_empty = _judge(
        series.throughput_mode, samples, bucket, period, balance, slope, metered, permitted, settings
    )
    load = _load_shape(samples, period)
    return Forecast(
        file_system_id=series.file_system_id,
        throughput_mode=series.throughput_mode,
        size_gib=series.size_gib,
        balance_bytes=balance,
        slope_bytes_per_second=slope,
        time_to_empty_seconds=time_to_empty,
        state=state,
        permitted_bytes_per_second=permitted,
        metered_bytes_per_second=metered,
        metadata_share=_metadata_share(series.throughput_mode, samples),
        ops_budget_per_second=OpsBudget.for_throughput(permitted) if permitted is not None else None,
        recommendation=recommend_throughput_mode(
            series.throughput_mode, state, bucket, balance, *load, settings=settings
        ),
        observed_at=observed_at,
        baseline_bytes_per_second=baseline,
        percent_io_limit=_mean_of_newest(samples[EfsMetric.PERCENT_IO_LIMIT], settings.recent_window),
    )


def _judge(
    mode: ThroughputMode | None,
    samples: dict[EfsMetric, tuple[Sample, ...]],
    bucket: CreditBucket,
    period: int,
    balance: float | None,
    slope: float | None,
    metered: float | None,
    permitted: float | None,
    settings: ForecastSettings,
) -> tuple[CreditState, float | None]:
    baseline = bucket.baseline_bytes_per_second
    if mode in (ThroughputMode.PROVISIONED, ThroughputMode.ELASTIC):
        return (CreditState.HEALTHY if any(samples.values()) else CreditState.UNKNOWN), None
    if balance is None:
        return CreditState.UNKNOWN, None
    if balance <= baseline * period:
        at_ceiling = (
            metered is not None
            and permitted is not None
            and (metered >= settings.trap_fraction_of_permitted * permitted)
        )
        return (CreditState.TRAP if at_ceiling else CreditState.EMPTY), 0.0
    if slope is not None and slope < -settings.flat_slope_fraction_of_baseline * baseline:
        return CreditState.DRAINING, _finite(balance / -slope)
    return CreditState.HEALTHY, None


def recommend_throughput_mode(
    mode: ThroughputMode | None,
    state: CreditState,
    bucket: CreditBucket,
    balance: float | None,
    average_metered: float | None,
    peak_metered: float | None,
    *,
    settings: ForecastSettings | None = None,
) -> Recommendation:
    """Bursting while the balance holds; Elastic for spiky load; Provisioned for steady load."""
    settings = settings or ForecastSettings()
    baseline = bucket.baseline_bytes_per_second
    current = mode or ThroughputMode.BURSTING
    if mode in (None, ThroughputMode.BURSTING):
        if state is CreditState.UNKNOWN:
            return Recommendation(current, "no BurstCreditBalance data in the window: nothing to judge yet")
        if state is CreditState.HEALTHY:
            return Recommendation(
                ThroughputMode.BURSTING,
                f"the balance ({format_bytes(balance or 0)}) is not falling: the "
                f"{format_rate(baseline)} baseline keeps up with the load",
            )
    elif average_metered is None:
        return Recommendation(current, "no MeteredIOBytes data in the window: nothing to judge yet")
    elif average_metered <= baseline:
        return Recommendation(
            ThroughputMode.BURSTING,
            f"the average metered load ({format_rate(average_metered)}) fits in the "
            f"{format_rate(baseline)} baseline that Bursting earns for this size, at no throughput charge",
        )
    if average_metered is None or not peak_metered:
        return Recommendation(
            ThroughputMode.ELASTIC,
            "credits run short and there is no metered load to size Provisioned throughput by; "
            "Elastic needs no sizing and has no credits to run out",
        )
    ratio = average_metered / peak_metered
    if ratio <= settings.spiky_average_to_peak:
        return Recommendation(
            ThroughputMode.ELASTIC,
            f"the load is spiky: its average ({format_rate(average_metered)}) is {ratio:.0%} of its peak "
            f"({format_rate(peak_metered)}); Elastic charges for what is used and has no credits to run out",
        )
    provision_mibps = max(1, math.ceil(peak_metered / MIB))
    return Recommendation(
        ThroughputMode.PROVISIONED,
        f"the load is steady (average {format_rate(average_metered)} is {ratio:.0%} of the peak "
        f"{format_rate(peak_metered)}) and above the {format_rate(baseline)} baseline: provision about "
        f"{provision_mibps} MiB/s (the peak, rounded up); after switching to Provisioned or changing the "
        "amount, EFS allows no decrease or switch back for 24 hours",
    )


@dataclass(frozen=True)
class CreditCondition:
    """A Kubernetes-style condition for a StorageProfile's status."""

    type: str
    status: str
    reason: str
    message: str


def credit_condition(forecast: Forecast) -> CreditCondition:
    """``CreditsDraining``: False when Healthy, Unknown when Unknown, else True; the state is the reason."""
    status = {CreditState.HEALTHY: "False", CreditState.UNKNOWN: "Unknown"}.get(forecast.state, "True")
    return CreditCondition("CreditsDraining", status, forecast.state.value, condition_message(forecast))


def condition_message(forecast: Forecast) -> str:
    """One line for people, e.g. ``balance 1.2 TiB falling 96 MiB/s: empty in 3.6 h (before 02:00 UTC);
    metadata is 47% of metered bytes``."""
    parts = [_state_sentence(forecast)]
    if forecast.metadata_share is not None and forecast.state is not CreditState.UNKNOWN:
        parts.append(f"metadata is {forecast.metadata_share:.0%} of metered bytes")
    if forecast.percent_io_limit is not None and forecast.percent_io_limit >= 90:
        parts.append(f"I/O is at {forecast.percent_io_limit:.0f}% of the General Purpose limit")
    return "; ".join(parts)


def _state_sentence(forecast: Forecast) -> str:
    balance = format_bytes(forecast.balance_bytes or 0)
    metered = _rate_or_unknown(forecast.metered_bytes_per_second)
    permitted = _rate_or_unknown(forecast.permitted_bytes_per_second)
    state = forecast.state
    if state is CreditState.UNKNOWN:
        return (
            f"no credit data for {forecast.file_system_id} in the window: check the file system id "
            "and the region, and that CloudWatch has data for it yet"
        )
    if forecast.throughput_mode in (ThroughputMode.PROVISIONED, ThroughputMode.ELASTIC):
        return (
            f"{forecast.throughput_mode.value} mode, not limited by credits: metered {metered} "
            f"of {permitted} permitted"
        )
    if state is CreditState.DRAINING:
        falling = format_rate(-(forecast.slope_bytes_per_second or 0))
        when = _deadline(forecast)
        return (
            f"balance {balance} falling {falling}: empty in "
            + format_duration(forecast.time_to_empty_seconds or 0)
            + (f" ({when})" if when else "")
        )
    budget = forecast.ops_budget_per_second
    small_ops = (
        f"{budget.writes_or_metadata:.0f} small writes or metadata ops/s" if budget else "the baseline"
    )
    if state is CreditState.TRAP:
        return (
            f"balance empty ({balance}) and metered {metered} at the permitted {permitted}: "
            f"throttled to {small_ops}"
        )
    if state is CreditState.EMPTY:
        return (
            f"balance empty ({balance}): any burst above {permitted} is throttled ({small_ops}); "
            f"metered {metered}"
        )
    slope = forecast.slope_bytes_per_second
    flat = forecast.baseline_bytes_per_second * FLAT_SLOPE_FRACTION_OF_BASELINE
    trend = f"rising {format_rate(slope)}" if slope is not None and slope > flat else "steady"
    return f"balance {balance} {trend}"


def _deadline(forecast: Forecast) -> str | None:
    empty_at = forecast.empty_at
    if empty_at is None or forecast.observed_at is None:
        return None
    within_a_day = empty_at - forecast.observed_at < timedelta(hours=24)
    return "before " + empty_at.strftime("%H:%M UTC" if within_a_day else "%Y-%m-%d %H:%M UTC")


def _rate_or_unknown(rate: float | None) -> str:
    return "unknown" if rate is None else format_rate(rate)


def _clip(
    series: CreditSeries, window: timedelta | None, now: datetime | None
) -> dict[EfsMetric, tuple[Sample, ...]]:
    """Finite samples in ``(now - window, now]``, where ``now`` defaults to the newest of all."""
    if now is not None and now.tzinfo is None:
        now = now.replace(tzinfo=UTC)
    kept = {
        metric: [s for s in series.of(metric) if math.isfinite(s.value) and (now is None or s.at <= now)]
        for metric in EfsMetric
    }
    newest = [samples[-1].at for samples in kept.values() if samples]
    if window is not None and newest:
        start = _before(now or max(newest), window)
        kept = {metric: [s for s in samples if s.at > start] for metric, samples in kept.items()}
    return {metric: tuple(samples) for metric, samples in kept.items()}


def _newest(samples: Sequence[Sample], span: timedelta) -> list[Sample]:
    """The samples in ``(newest - span, newest]``: a 15-minute span holds three 5-minute periods."""
    if not samples:
        return []
    start = _before(samples[-1].at, span)
    return [s for s in samples if s.at > start]


def _before(moment: datetime, span: timedelta) -> datetime:
    try:
        return moment - span
    except OverflowError:  # a span longer than the calendar keeps everything
        return datetime.min.replace(tzinfo=UTC)


def _mean_of_newest(samples: Sequence[Sample], span: timedelta) -> float | None:
    values = [s.value for s in _newest(samples, span)]
    return _finite(sum(values) / len(values)) if values else None


def _slope(samples: Sequence[Sample]) -> float | None:
    if not samples:
        return None
    start = samples[0].at
    return theil_sen_slope([((s.at - start).total_seconds(), s.value) for s in samples])


def _modelled_permitted(series: CreditSeries, bucket: CreditBucket, balance: float | None) -> float | None:
    """The permitted rate the documented rules give, when PermittedThroughput is missing."""
    if series.throughput_mode is ThroughputMode.ELASTIC:
        return None  # Elastic limits are per Region and per account, not a function of size
    if series.throughput_mode is ThroughputMode.PROVISIONED and series.provisioned_bytes_per_second:
        # A size whose baseline beats the provisioned amount gets the baseline.
        return max(series.provisioned_bytes_per_second, bucket.baseline_bytes_per_second)
    return bucket.permitted_bytes_per_second(balance) if balance is not None else None


def _metadata_share(
    mode: ThroughputMode | None, samples: dict[EfsMetric, tuple[Sample, ...]]
) -> float | None:
    """Metered bytes that data does not explain, as a share of all metered bytes.

    MetadataIOBytes counts actual bytes, but each metadata request is metered as
    at least 4 KiB, so the metered metadata is what remains of MeteredIOBytes
    after data writes and (one third of, outside Elastic) data reads.
    """
    metered = _finite(sum(s.value for s in samples[EfsMetric.METERED_IO_BYTES]))
    if not metered or metered <= 0:
        return None
    reads = samples[EfsMetric.DATA_READ_IO_BYTES]
    writes = samples[EfsMetric.DATA_WRITE_IO_BYTES]
    if not (reads or writes or samples[EfsMetric.METADATA_IO_BYTES]):
        return None
    metadata = sum(s.value for s in samples[EfsMetric.METADATA_IO_BYTES])
    if reads or writes:
        read_factor = 1.0 if mode is ThroughputMode.ELASTIC else READ_METERING_FACTOR
        data = sum(s.value for s in writes) + read_factor * sum(s.value for s in reads)
        metadata = max(metadata, metered - data)
    share = _finite(metadata / metered)
    return None if share is None else min(1.0, max(0.0, share))


def _load_shape(
    samples: dict[EfsMetric, tuple[Sample, ...]], period: int
) -> tuple[float | None, float | None]:
    """(average, peak) metered rate over the window; periods without data count as idle."""
    metered = samples[EfsMetric.METERED_IO_BYTES]
    if not metered:
        return None, None
    stamps = [s.at for series in samples.values() for s in series]
    span = (max(stamps) - min(stamps)).total_seconds() + period
    average = _finite(sum(s.value for s in metered) / span)
    peak = _finite(max(s.value for s in metered) / period)
    return average, peak


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None
