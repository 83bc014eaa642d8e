"""A forecast in one line for people: the ``CreditsDraining`` condition a StorageProfile shows."""

from dataclasses import dataclass
from datetime import timedelta

from mountwarden.core.credits.bucket import ThroughputMode
from mountwarden.core.credits.forecast import FLAT_SLOPE_FRACTION_OF_BASELINE, Forecast
from mountwarden.core.credits.state import CreditState, DrainBasis
from mountwarden.core.credits.units import format_bytes, format_duration, format_rate

#: PercentIOLimit at or above this is worth a line of its own (and an alert, see the chart).
IO_LIMIT_WARNING_PERCENT = 90


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
    if forecast.percent_io_limit is not None and forecast.percent_io_limit >= IO_LIMIT_WARNING_PERCENT:
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
        return f"{_drain(forecast, balance)}: empty in {_when(forecast)}"
    budget = forecast.ops_budget_per_second
    small_ops = (
        f"{budget.writes_or_metadata:.0f} small writes or metadata ops/s" if budget else "the baseline"
    )
    if state is CreditState.TRAP:
        return (
            f"balance empty ({balance}) and metered {metered} at the permitted {permitted}: "
            f"throttled to {small_ops}; demand is at least that, how much more is unknown"
        )
    if state is CreditState.EMPTY:
        return (
            f"balance empty ({balance}): any burst above {permitted} is throttled ({small_ops}); "
            f"metered {metered}"
        )
    slope = forecast.slope_bytes_per_second
    flat = forecast.baseline_bytes_per_second * FLAT_SLOPE_FRACTION_OF_BASELINE
    trend = f"rising {format_rate(slope)}" if slope is not None and slope > flat else "steady"
    net = forecast.net_change_per_day_bytes
    if net is not None:
        if slope is not None and slope < -flat:
            trend = f"falling {format_rate(-slope)} now"
        trend += f"; day over day {_signed_bytes(net)}: the day refills what it drains"
    return f"balance {balance} {trend}"


def _drain(forecast: Forecast, balance: str) -> str:
    basis = forecast.time_to_empty_basis
    net = forecast.net_change_per_day_bytes
    if basis is DrainBasis.DAY_OVER_DAY and net is not None:
        return (
            f"balance {balance} falling {format_bytes(-net)} a day (the mean of the last 24 h against the "
            "24 h before)"
        )
    if basis is DrainBasis.SAME_TIME_YESTERDAY:
        return (
            f"balance {balance}: yesterday, from this hour on, the balance fell further than today's holds "
            "(or ran empty)"
        )
    return f"balance {balance} falling {format_rate(-(forecast.slope_bytes_per_second or 0))}"


def _when(forecast: Forecast) -> str:
    when = format_duration(forecast.time_to_empty_seconds or 0)
    deadline = _deadline(forecast)
    return f"{when} ({deadline})" if deadline else when


def _deadline(forecast: Forecast) -> str | None:
    empty_at = forecast.empty_at
    if empty_at is None or forecast.observed_at is None:
        return None
    within_a_day = empty_at - forecast.observed_at < timedelta(hours=24)
    return "before " + empty_at.strftime("%H:%M UTC" if within_a_day else "%Y-%m-%d %H:%M UTC")


def _signed_bytes(count: float) -> str:
    return ("+" if count >= 0 else "-") + format_bytes(abs(count))


def _rate_or_unknown(rate: float | None) -> str:
    return "unknown" if rate is None else format_rate(rate)
