"""Which throughput mode to use, sized only by demand that was not held back, with what each would cost.

A throttled file system's metered throughput is censored data: it sits at the
permitted rate because that is all EFS allows, and says only that demand is at least
that. Provisioning "the peak" of a throttled series provisions the baseline the file
system already has, changes nothing, and locks the mode for 24 hours. So:

- Provisioned is sized only by :class:`Demand` seen while the balance was above zero
  (or, outside Bursting, by every period of the window), and the advice says which
  periods those were;
- with no such periods, the advice in the trap is Elastic, which needs no sizing, with
  its estimated monthly cost for the load observed (a lower bound: the demand held
  back will be served, and billed, too);
- when both can be priced, the cheaper one for the observed demand wins (AWS's own
  rule of thumb, Elastic for average-to-peak ratios of 5% or less, falls out of the
  prices); without Elastic's price, that ratio decides.

Prices and metering rules: :mod:`.pricing`.
"""

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from mountwarden.core.credits.bucket import CreditBucket, ThroughputMode
from mountwarden.core.credits.pricing import PRICES, ElasticUsage, provisioned_monthly_cost, round_cents
from mountwarden.core.credits.series import EfsMetric, Sample
from mountwarden.core.credits.state import CreditState
from mountwarden.core.credits.units import MIB, format_bytes, format_rate

#: Lock-in EFS imposes (Managing file system throughput, EFS User Guide).
LOCK_IN_NOTE = "after switching to Provisioned or raising the amount, EFS allows no decrease or switch back for 24 hours"
#: Fewer periods than this (15 minutes) are too few to size anything by.
MIN_DEMAND_PERIODS = 3


@dataclass(frozen=True)
class Demand:
    """The metered load of the periods that were not throttled: what the consumers asked for."""

    periods: int
    period_seconds: int
    start: datetime
    end: datetime
    average_bytes_per_second: float
    peak_bytes_per_second: float
    #: How the periods were chosen, in words.
    selection: str
    #: The peak reached the permitted rate then too: demand may have been higher still.
    peak_at_ceiling: bool = False

    def describe(self) -> str:
        minutes = self.period_seconds // 60
        span = f"{self.start:%Y-%m-%d %H:%M} to {self.end:%Y-%m-%d %H:%M} UTC"
        ceiling = "; the peak was at the permitted rate, so demand may be higher" if self.peak_at_ceiling else ""
        return (
            f"{self.periods} {minutes}-minute periods from {span} ({self.selection}): average "
            f"{format_rate(self.average_bytes_per_second)}, peak {format_rate(self.peak_bytes_per_second)}{ceiling}"
        )

    def to_json(self) -> dict[str, object]:
        return {
            "periods": self.periods,
            "period_seconds": self.period_seconds,
            "start": self.start.isoformat(),
            "end": self.end.isoformat(),
            "selection": self.selection,
            "average_bytes_per_second": self.average_bytes_per_second,
            "peak_bytes_per_second": self.peak_bytes_per_second,
            "peak_at_ceiling": self.peak_at_ceiling,
        }


@dataclass(frozen=True)
class Recommendation:
    mode: ThroughputMode
    reason: str
    provisioned_mibps: int | None = None
    elastic_monthly_cost_usd: float | None = None
    provisioned_monthly_cost_usd: float | None = None
    #: The demand that sized the advice; None when none could be seen.
    basis: Demand | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "mode": self.mode.value,
            "reason": self.reason,
            "provisioned_mibps": self.provisioned_mibps,
            "monthly_cost_usd": {
                "elastic": round_cents(self.elastic_monthly_cost_usd),
                "provisioned": round_cents(self.provisioned_monthly_cost_usd),
            },
            "basis": self.basis.to_json() if self.basis else None,
        }


def demand(
    samples: Mapping[EfsMetric, Sequence[Sample]],
    period_seconds: int,
    *,
    empty_below: float | None,
    ceiling_fraction: float,
) -> Demand | None:
    """The load of the periods whose balance was above ``empty_below`` (every period when None).

    A metered period is matched with the balance sample nearest to it (at most one
    period away); a period without one is left out when throttling matters.
    """
    metered = samples.get(EfsMetric.METERED_IO_BYTES, ())
    balance = samples.get(EfsMetric.BURST_CREDIT_BALANCE, ())
    permitted = samples.get(EfsMetric.PERMITTED_THROUGHPUT, ())
    if empty_below is None:
        kept = list(metered)
        selection = "every period of the window"
    else:
        kept = [s for s in metered if (level := _nearest(balance, s.at, period_seconds)) is not None
                and level > empty_below]
        selection = "balance above zero: not throttled"
    if len(kept) < MIN_DEMAND_PERIODS:
        return None
    rates = [s.value / period_seconds for s in kept]
    try:
        average, peak = _finite(math.fsum(rates) / len(rates)), _finite(max(rates))
    except OverflowError:
        return None
    if average is None or peak is None or peak <= 0:
        return None
    peak_sample = kept[rates.index(peak)]
    allowed = _nearest(permitted, peak_sample.at, period_seconds)
    return Demand(
        periods=len(kept),
        period_seconds=period_seconds,
        start=kept[0].at,
        end=kept[-1].at,
        average_bytes_per_second=average,
        peak_bytes_per_second=peak,
        selection=selection,
        peak_at_ceiling=allowed is not None and allowed > 0 and peak >= ceiling_fraction * allowed,
    )


def recommend_throughput_mode(
    mode: ThroughputMode | None,
    state: CreditState,
    bucket: CreditBucket,
    balance: float | None,
    average_metered: float | None,
    *,
    seen: Demand | None,
    elastic: ElasticUsage | None,
    censored: bool,
    spiky_average_to_peak: float,
) -> Recommendation:
    """Bursting while the balance holds; else Elastic or Provisioned, whichever the unthrottled demand
    makes cheaper. ``censored``: the load now is throttled (the trap)."""
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
    if seen is None:
        return _unsized(censored, elastic)
    return _cheaper(seen, bucket, elastic, censored, spiky_average_to_peak)


def _unsized(censored: bool, elastic: ElasticUsage | None) -> Recommendation:
    """No demand to size Provisioned by: Elastic, with what the observed load would cost."""
    cost = elastic.monthly_cost() if elastic else None
    priced = (
        f"; for the load observed ({elastic.describe()}) it costs at least ${cost:,.2f} a month at "
        f"{PRICES.region} prices{', more once the demand held back is served' if censored else ''}"
        if elastic and cost is not None
        else ""
    )
    if censored:
        reason = (
            "the balance is empty and the load is metered at the permitted rate, so demand is censored: it is "
            "at least the permitted rate, and how much more is unknown. No period of the window ran unthrottled, "
            "so no Provisioned amount can be sized (provisioning the throttled peak would provision the baseline, "
            "change nothing, and lock the mode for 24 hours). Elastic needs no sizing and has no credits to run "
            f"out{priced}"
        )
    else:
        reason = (
            "credits run short and there is no unthrottled load to size Provisioned throughput by; Elastic needs "
            f"no sizing and has no credits to run out{priced}"
        )
    return Recommendation(ThroughputMode.ELASTIC, reason, elastic_monthly_cost_usd=cost)


def _cheaper(
    seen: Demand, bucket: CreditBucket, elastic: ElasticUsage | None, censored: bool, spiky: float
) -> Recommendation:
    mibps = max(1, math.ceil(seen.peak_bytes_per_second / MIB))
    provisioned = provisioned_monthly_cost(mibps, bucket.baseline_bytes_per_second)
    elastic_cost = elastic.monthly_cost_at(seen.average_bytes_per_second) if elastic else None
    preamble = (
        "the balance is empty and the load now is metered at the permitted rate, so the throttled periods "
        "(censored: demand at least the permitted rate) were left out; sized by "
        if censored
        else "sized by "
    )
    basis = f"{preamble}{seen.describe()}"
    if elastic_cost is None:
        ratio = seen.average_bytes_per_second / seen.peak_bytes_per_second
        choose_elastic = ratio <= spiky
        comparison = (
            f"average {ratio:.0%} of the peak: Elastic suits loads at 5% or less, Provisioned steadier ones "
            "(no metered request mix to price Elastic by)"
        )
    else:
        choose_elastic = elastic_cost <= provisioned
        comparison = (
            f"Elastic about ${elastic_cost:,.2f} a month for that load, Provisioned {mibps} MiB/s (its peak, "
            f"rounded up) about ${provisioned:,.2f} a month, at {PRICES.region} prices"
        )
    if choose_elastic:
        reason = f"{basis}; {comparison}: Elastic charges for what is used and has no credits to run out"
        mode = ThroughputMode.ELASTIC
    else:
        reason = f"{basis}; {comparison}: provision about {mibps} MiB/s; {LOCK_IN_NOTE}"
        mode = ThroughputMode.PROVISIONED
    return Recommendation(
        mode,
        reason,
        provisioned_mibps=mibps,
        elastic_monthly_cost_usd=elastic_cost,
        provisioned_monthly_cost_usd=provisioned,
        basis=seen,
    )


def _nearest(samples: Sequence[Sample], at: datetime, tolerance_seconds: int) -> float | None:
    if not samples:
        return None
    index = bisect.bisect_left(samples, (at,))
    candidates = [samples[i] for i in (index - 1, index) if 0 <= i < len(samples)]
    best = min(candidates, key=lambda s: abs((s.at - at).total_seconds()))
    return best.value if abs((best.at - at).total_seconds()) <= tolerance_seconds else None


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


MAX_IO = "maxIO"


def for_performance_mode(recommendation: Recommendation, performance_mode: str | None) -> Recommendation:
    """Elastic advice for a Max I/O file system: Elastic cannot serve it, and its mode cannot change.

    "Max I/O mode is not supported for ... file systems that use Elastic throughput" (EFS User Guide,
    "Performance modes"); "The performance mode can't be changed after the file system has been
    created" (EFS API Reference, CreateFileSystem).
    """
    if performance_mode != MAX_IO or recommendation.mode is not ThroughputMode.ELASTIC:
        return recommendation
    why = ("; but this file system is in Max I/O performance mode, which Elastic throughput does not support "
           "(EFS User Guide, 'Performance modes'), and a performance mode cannot be changed after creation (EFS API "
           "Reference, CreateFileSystem)")
    if recommendation.provisioned_mibps is not None:
        return replace(recommendation, mode=ThroughputMode.PROVISIONED, reason=(
            f"{recommendation.reason}{why}: provision about {recommendation.provisioned_mibps} MiB/s here, or move "
            f"the data (DataSync) to a new General Purpose file system in Elastic mode; {LOCK_IN_NOTE}"))
    return replace(recommendation, reason=(
        f"{recommendation.reason}{why}: move the data (DataSync) to a new General Purpose file system in Elastic "
        "mode, which also has lower per-operation latency (AWS recommends General Purpose for every file system)"))
