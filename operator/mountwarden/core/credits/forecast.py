"""From a credit series to a forecast: balance, slope, day-over-day change, state, time to empty, advice.

States (``Forecast.state``), judged for Bursting mode (and when the mode is unknown):

- ``Healthy``: the balance is not falling day over day, nor by a drain that is new
  today. Provisioned and Elastic file systems are not limited by credits, so they are
  Healthy whenever there is data;
- ``Draining``: the balance will run out. ``time_to_empty_seconds`` says when and
  ``time_to_empty_basis`` what it was projected from (:class:`DrainBasis`);
- ``Empty``: the balance is below what the baseline earns in one period, so any
  burst is throttled, but the load still fits under the permitted rate;
- ``Trap``: empty *and* metered at the permitted rate (at least 90% of it):
  every request now waits for credits the baseline earns;
- ``Unknown``: no data to judge from.

How Draining is judged, from two views of the balance (a drop is "real" when it is
faster than 1% of the baseline rate):

1. The slope fitted (Theil–Sen) over the trend window, the newest hour by default:
   what is happening now.
2. Whole days (:mod:`.daily`), when the window holds two of them (48 hours, the
   default history): the day-over-day net change, and yesterday replayed from this hour.

With whole days: a drop now that also ran at this time yesterday is the daily cycle;
one that did not, and would empty the bucket within a day at its slope, is new and
Draining at once (basis ``slope``). Otherwise the daily view decides: Draining when
yesterday, replayed from today's balance, runs empty within 24 hours (basis ``same
time yesterday``) or when the day-over-day change is negative (basis
``day-over-day``, time to empty at that net rate), the sooner of the two. So a
nightly job that drains 600 GiB a day more than the day refills is Draining at every
hour of the day, and a job the day refills is Healthy even while it runs.

With less than two days: Draining when the slope falls (basis ``slope``), as before.

``time_to_empty_seconds`` is 0 for Empty and Trap and None when not draining.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from mountwarden.core.credits.advice import (
    Recommendation,
    demand,
    for_performance_mode,
    recommend_throughput_mode,
)
from mountwarden.core.credits.bucket import READ_METERING_FACTOR, CreditBucket, OpsBudget, ThroughputMode
from mountwarden.core.credits.daily import (
    DAY,
    SECONDS_PER_DAY,
    net_change_per_day,
    replay_yesterday,
    steepest_slope_around,
)
from mountwarden.core.credits.pricing import ElasticUsage, elastic_usage
from mountwarden.core.credits.series import CreditSeries, EfsMetric, Sample
from mountwarden.core.credits.state import CreditState, DrainBasis
from mountwarden.core.credits.trend import theil_sen_slope

#: A slope smaller than this fraction of the baseline rate is noise, not a trend.
FLAT_SLOPE_FRACTION_OF_BASELINE = 0.01
#: The history a forecast reads by default: two whole days, for the day-over-day change.
DEFAULT_HISTORY = timedelta(hours=48)


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
    #: An average at or below this fraction of the peak is a spiky load: Elastic (when it cannot be priced).
    spiky_average_to_peak: float = 0.05
    #: A drain now counts as yesterday's cycle if it ran within this long of the same time yesterday
    #: (cron jitter, jobs that start a little later as data grows).
    daily_jitter: timedelta = timedelta(hours=1)
    #: A drain now that yesterday did not have alerts at once only if it would empty the bucket this soon;
    #: a slower one shows in the day-over-day change by tomorrow.
    new_drain_horizon: timedelta = DAY


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
    #: Mean balance of the newest 24 hours minus that of the 24 hours before (bytes); None under two days.
    net_change_per_day_bytes: float | None = None
    time_to_empty_basis: DrainBasis | None = None
    #: What the window's load would be billed in Elastic mode.
    elastic: ElasticUsage | None = None
    #: Seconds of history the forecast had (from its oldest sample to "now").
    history_seconds: float | None = None
    #: generalPurpose or maxIO (DescribeFileSystems); None when unknown.
    performance_mode: str | None = None

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
            "performance_mode": self.performance_mode,
            "size_gib": self.size_gib,
            "balance_bytes": self.balance_bytes,
            "slope_bytes_per_second": self.slope_bytes_per_second,
            "net_change_per_day_bytes": self.net_change_per_day_bytes,
            "time_to_empty_seconds": self.time_to_empty_seconds,
            "time_to_empty_basis": self.time_to_empty_basis.value if self.time_to_empty_basis else None,
            "state": self.state.value,
            "history_seconds": self.history_seconds,
            "permitted_bytes_per_second": self.permitted_bytes_per_second,
            "metered_bytes_per_second": self.metered_bytes_per_second,
            "percent_io_limit": self.percent_io_limit,
            "metadata_share": self.metadata_share,
            "ops_budget_per_second": self.ops_budget_per_second.to_json()
            if self.ops_budget_per_second
            else None,
            "elastic_estimate": self.elastic.to_json() if self.elastic else None,
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
    samples, end = _clip(series, window, now)
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

    empty_below = baseline * period
    daily = (
        _DailyView.of(balance_samples, end, balance, empty_below, period, settings)
        if end is not None and balance is not None
        else _DailyView()
    )
    state, time_to_empty, basis = _judge(
        series.throughput_mode, samples, bucket, empty_below, balance, slope, metered, permitted, daily, settings
    )
    elastic = elastic_usage(samples, period)
    bursting = series.throughput_mode in (None, ThroughputMode.BURSTING)
    seen = demand(
        samples,
        period,
        empty_below=empty_below if bursting else None,
        ceiling_fraction=settings.trap_fraction_of_permitted,
    )
    average = _load_average(samples, period)
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
        recommendation=for_performance_mode(recommend_throughput_mode(
            series.throughput_mode,
            state,
            bucket,
            balance,
            average,
            seen=seen,
            elastic=elastic,
            censored=state is CreditState.TRAP,
            spiky_average_to_peak=settings.spiky_average_to_peak,
        ), series.performance_mode),
        performance_mode=series.performance_mode,
        observed_at=observed_at,
        baseline_bytes_per_second=baseline,
        percent_io_limit=_mean_of_newest(samples[EfsMetric.PERCENT_IO_LIMIT], settings.recent_window),
        net_change_per_day_bytes=daily.net_change_per_day,
        time_to_empty_basis=basis,
        elastic=elastic,
        history_seconds=_history_seconds(samples, end, period),
    )


@dataclass(frozen=True)
class _DailyView:
    """What whole days say (all None with less than two days of history)."""

    net_change_per_day: float | None = None
    #: The steepest slope around this time yesterday (bytes/s).
    yesterday_slope: float | None = None
    #: Seconds to empty if today repeats yesterday from this hour.
    replayed_seconds_to_empty: float | None = None

    @classmethod
    def of(
        cls,
        balance: Sequence[Sample],
        now: datetime,
        level: float,
        empty_below: float,
        period: int,
        settings: ForecastSettings,
    ) -> "_DailyView":
        net = net_change_per_day(balance, now, period)
        if net is None:
            return cls()
        yesterday = _before(now, DAY)
        return cls(
            net_change_per_day=net,
            yesterday_slope=steepest_slope_around(balance, yesterday, settings.trend_window, settings.daily_jitter),
            replayed_seconds_to_empty=replay_yesterday(balance, now, level, empty_below, period),
        )


def _judge(
    mode: ThroughputMode | None,
    samples: dict[EfsMetric, tuple[Sample, ...]],
    bucket: CreditBucket,
    empty_below: float,
    balance: float | None,
    slope: float | None,
    metered: float | None,
    permitted: float | None,
    daily: _DailyView,
    settings: ForecastSettings,
) -> tuple[CreditState, float | None, DrainBasis | None]:
    if mode in (ThroughputMode.PROVISIONED, ThroughputMode.ELASTIC):
        return (CreditState.HEALTHY if any(samples.values()) else CreditState.UNKNOWN), None, None
    if balance is None:
        return CreditState.UNKNOWN, None, None
    if balance <= empty_below:
        at_ceiling = (
            metered is not None
            and permitted is not None
            and (metered >= settings.trap_fraction_of_permitted * permitted)
        )
        return (CreditState.TRAP if at_ceiling else CreditState.EMPTY), 0.0, None
    flat = settings.flat_slope_fraction_of_baseline * bucket.baseline_bytes_per_second
    falling_now = slope is not None and slope < -flat
    at_slope = _finite(balance / -slope) if falling_now and slope else None
    if daily.net_change_per_day is None:
        return (CreditState.DRAINING, at_slope, DrainBasis.SLOPE) if falling_now else (CreditState.HEALTHY, None, None)
    recurring = (
        falling_now
        and slope is not None
        and daily.yesterday_slope is not None
        and daily.yesterday_slope <= 0.5 * slope
    )
    new_drain = falling_now and not recurring and at_slope is not None
    if new_drain and at_slope <= settings.new_drain_horizon.total_seconds():
        return CreditState.DRAINING, at_slope, DrainBasis.SLOPE
    projections: list[tuple[float, DrainBasis]] = []
    if daily.replayed_seconds_to_empty is not None:
        projections.append((daily.replayed_seconds_to_empty, DrainBasis.SAME_TIME_YESTERDAY))
    if daily.net_change_per_day < -flat * SECONDS_PER_DAY:
        at_net = _finite(balance / (-daily.net_change_per_day / SECONDS_PER_DAY))
        if at_net is not None:
            projections.append((at_net, DrainBasis.DAY_OVER_DAY))
    if projections:
        seconds, basis = min(projections, key=lambda projection: projection[0])
        return CreditState.DRAINING, seconds, basis
    return CreditState.HEALTHY, None, None


def _clip(
    series: CreditSeries, window: timedelta | None, now: datetime | None
) -> tuple[dict[EfsMetric, tuple[Sample, ...]], datetime | None]:
    """Finite samples in ``(now - window, now]``, and that ``now`` (by default the newest sample of all)."""
    if now is not None and now.tzinfo is None:
        now = now.replace(tzinfo=UTC)
    kept = {
        metric: [s for s in series.of(metric) if math.isfinite(s.value) and (now is None or s.at <= now)]
        for metric in EfsMetric
    }
    newest = [samples[-1].at for samples in kept.values() if samples]
    end = now or (max(newest) if newest else None)
    if window is not None and end is not None:
        start = _before(end, window)
        kept = {metric: [s for s in samples if s.at > start] for metric, samples in kept.items()}
    return {metric: tuple(samples) for metric, samples in kept.items()}, end


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


def _load_average(samples: dict[EfsMetric, tuple[Sample, ...]], period: int) -> float | None:
    """The average metered rate over the window; periods without data count as idle."""
    metered = samples[EfsMetric.METERED_IO_BYTES]
    if not metered:
        return None
    stamps = [s.at for series in samples.values() for s in series]
    span = (max(stamps) - min(stamps)).total_seconds() + period
    return _finite(sum(s.value for s in metered) / span)


def _history_seconds(samples: dict[EfsMetric, tuple[Sample, ...]], end: datetime | None, period: int) -> float | None:
    stamps = [series[0].at for series in samples.values() if series]
    if end is None or not stamps:
        return None
    return _finite((end - min(stamps)).total_seconds() + period)


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None
