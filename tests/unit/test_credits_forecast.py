"""The forecast on synthetic CloudWatch-like series: slope, states, time to empty, advice, messages."""

import random
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta

import pytest

from mountwarden.core.credits import (
    GIB,
    MIB,
    TIB,
    CreditSeries,
    CreditState,
    EfsMetric,
    ForecastSettings,
    Sample,
    ThroughputMode,
    condition_message,
    credit_condition,
    forecast_credits,
    theil_sen_slope,
)

BURSTING, PROVISIONED, ELASTIC = ThroughputMode.BURSTING, ThroughputMode.PROVISIONED, ThroughputMode.ELASTIC
PERIOD = 300
#: The newest sample of every synthetic series.
END = datetime(2026, 3, 1, 22, 25, tzinfo=UTC)


def along(points: int, value: Callable[[int, float], float], end: datetime = END) -> list[Sample]:
    """``points`` samples 5 minutes apart ending at ``end``; ``value(index, seconds since the first)``."""
    first = end - timedelta(seconds=PERIOD * (points - 1))
    return [Sample(first + timedelta(seconds=i * PERIOD), value(i, i * PERIOD)) for i in range(points)]


def constant(points: int, value: float) -> list[Sample]:
    return along(points, lambda i, t: value)


def series(
    *,
    size_gib: float | None = 20,
    mode: ThroughputMode | None = BURSTING,
    provisioned_bytes_per_second: float | None = None,
    **metrics: Sequence[Sample],
) -> CreditSeries:
    """Metric keywords: balance, permitted, metered, metadata, read, write, iolimit."""
    names = {
        "balance": EfsMetric.BURST_CREDIT_BALANCE,
        "permitted": EfsMetric.PERMITTED_THROUGHPUT,
        "metered": EfsMetric.METERED_IO_BYTES,
        "metadata": EfsMetric.METADATA_IO_BYTES,
        "read": EfsMetric.DATA_READ_IO_BYTES,
        "write": EfsMetric.DATA_WRITE_IO_BYTES,
        "iolimit": EfsMetric.PERCENT_IO_LIMIT,
    }
    return CreditSeries(
        file_system_id="fs-0123456789abcdef0",
        throughput_mode=mode,
        size_bytes=None if size_gib is None else size_gib * GIB,
        provisioned_bytes_per_second=provisioned_bytes_per_second,
        period_seconds=PERIOD,
        samples={names[name]: tuple(samples) for name, samples in metrics.items()},
    )


def draining_series(**changes: Sequence[Sample]) -> CreditSeries:
    """20 GiB, metered 97 MiB/s against a 1 MiB/s baseline: the balance falls 96 MiB/s to 1.2 TiB."""
    start = 1.2 * TIB + 96 * MIB * 12 * PERIOD
    metered = 97 * MIB * PERIOD  # bytes per 5-minute period
    metrics = {
        "balance": along(13, lambda i, t: start - 96 * MIB * t),
        "permitted": constant(13, 100 * MIB),
        "metered": constant(13, metered),
        # 53% of the metered bytes are data writes; the rest (47%) is metadata's 4 KiB minimums.
        "write": constant(13, 0.53 * metered),
        "read": constant(13, 0),
        "metadata": constant(13, 0.01 * metered),
    }
    return series(**(metrics | changes))


# -- the slope ---------------------------------------------------------------------------------------------


def test_theil_sen_recovers_an_exact_line_and_needs_two_distinct_times():
    assert theil_sen_slope([(0, 10), (1, 8), (2, 6), (3, 4)]) == pytest.approx(-2)
    assert theil_sen_slope([(5, 1)]) is None
    assert theil_sen_slope([(5, 1), (5, 9)]) is None


def test_theil_sen_ignores_outliers_that_pull_least_squares_away():
    points = [(x, 100 - 2 * x) for x in range(20)]
    points[3] = (3, 10_000)
    points[15] = (15, -10_000)
    points[17] = (17, 0)
    assert theil_sen_slope(points) == pytest.approx(-2, rel=0.05)
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    least_squares = sum((x - mean_x) * (y - mean_y) for x, y in points) / sum(
        (x - mean_x) ** 2 for x, _ in points
    )
    assert abs(least_squares + 2) > 50  # the fit this estimator is chosen over


def test_theil_sen_thins_long_series_and_still_finds_the_slope():
    assert theil_sen_slope([(x, 3.0 * x) for x in range(5000)]) == pytest.approx(3.0)


def test_a_draining_balance_is_draining_with_its_time_to_empty():
    result = forecast_credits(draining_series())
    assert result.state is CreditState.DRAINING
    assert result.slope_bytes_per_second == pytest.approx(-96 * MIB)
    assert result.balance_bytes == pytest.approx(1.2 * TIB)
    # 1.2 TiB / 96 MiB/s = 1.2 * 1024**2 / 96 s = 13107.2 s = 3.64 h
    assert result.time_to_empty_seconds == pytest.approx(1.2 * 1024**2 / 96)
    assert result.empty_at == END + timedelta(seconds=13107.2)
    assert result.metered_bytes_per_second == pytest.approx(97 * MIB)
    assert result.permitted_bytes_per_second == pytest.approx(100 * MIB)
    assert result.metadata_share == pytest.approx(0.47)


def test_noise_does_not_hide_the_drain():
    noise = random.Random(7)
    start = 1.2 * TIB + 96 * MIB * 3600
    noisy = along(13, lambda i, t: start - 96 * MIB * t + noise.gauss(0, 4 * GIB))
    result = forecast_credits(draining_series(balance=noisy))
    assert result.state is CreditState.DRAINING
    assert result.slope_bytes_per_second == pytest.approx(-96 * MIB, rel=0.1)


def test_gaps_in_the_series_do_not_bend_the_slope():
    start = 1.2 * TIB + 96 * MIB * 3600
    full = along(13, lambda i, t: start - 96 * MIB * t)
    with_gaps = [sample for i, sample in enumerate(full) if i not in (1, 2, 5, 6, 7, 10)]
    result = forecast_credits(draining_series(balance=with_gaps))
    assert result.slope_bytes_per_second == pytest.approx(-96 * MIB)
    assert result.time_to_empty_seconds == pytest.approx(1.2 * 1024**2 / 96)


def test_outliers_in_the_balance_do_not_bend_the_slope():
    start = 1.2 * TIB + 96 * MIB * 3600
    spiky = along(13, lambda i, t: {4: 2.1 * TIB, 8: 10 * GIB}.get(i, start - 96 * MIB * t))
    result = forecast_credits(draining_series(balance=spiky))
    assert result.state is CreditState.DRAINING
    assert result.slope_bytes_per_second == pytest.approx(-96 * MIB, rel=0.05)


def test_noise_around_a_full_bucket_is_healthy_not_draining():
    noise = random.Random(3)
    flat = along(13, lambda i, t: 2.1 * TIB - abs(noise.gauss(0, 50 * MIB)))
    result = forecast_credits(series(balance=flat, metered=constant(13, 0.2 * MIB * PERIOD)))
    assert result.state is CreditState.HEALTHY
    assert result.time_to_empty_seconds is None


def test_the_slope_follows_the_trend_window_not_the_whole_day():
    # 23 hours at a full bucket, then an hour of bursting: the newest hour decides.
    def balance(i, t):
        return 2.1 * TIB if i < 276 else 2.1 * TIB - 96 * MIB * (t - 276 * PERIOD)

    day = series(balance=along(289, balance), metered=constant(289, 0.5 * MIB * PERIOD))
    assert forecast_credits(day).state is CreditState.DRAINING
    over_the_day = forecast_credits(day, settings=ForecastSettings(trend_window=timedelta(hours=24)))
    assert over_the_day.state is CreditState.HEALTHY


def test_the_window_keeps_only_samples_newer_than_now_minus_window():
    old_drop = along(13, lambda i, t: 2 * TIB - 96 * MIB * t, end=END - timedelta(hours=3))
    result = forecast_credits(
        series(balance=old_drop + constant(13, 1.9 * TIB)), window=timedelta(hours=1, minutes=1), now=END
    )
    assert result.state is CreditState.HEALTHY
    assert result.slope_bytes_per_second == pytest.approx(0)


# -- empty and the trap --------------------------------------------------------------------------------------


def trap_series(metered_mib_per_second: float) -> CreditSeries:
    return series(
        balance=constant(13, 0),
        permitted=constant(13, 1 * MIB),
        metered=constant(13, metered_mib_per_second * MIB * PERIOD),
        write=constant(13, 0.5 * metered_mib_per_second * MIB * PERIOD),
        metadata=constant(13, 1000),
    )


def test_empty_and_metered_at_the_permitted_rate_is_the_trap():
    result = forecast_credits(trap_series(1.0))
    assert result.state is CreditState.TRAP
    assert result.time_to_empty_seconds == 0
    assert result.ops_budget_per_second.writes_or_metadata == pytest.approx(256)
    assert result.headroom_bytes_per_second == pytest.approx(0)


def test_a_trap_is_found_through_noise_in_the_metered_bytes():
    noise = random.Random(11)
    noisy = along(13, lambda i, t: MIB * PERIOD * (0.97 + noise.uniform(-0.03, 0.03)))
    result = forecast_credits(series(balance=constant(13, 0), permitted=constant(13, MIB), metered=noisy))
    assert result.state is CreditState.TRAP


def test_empty_but_under_the_permitted_rate_is_empty_not_the_trap():
    result = forecast_credits(trap_series(0.2))
    assert result.state is CreditState.EMPTY
    assert result.headroom_bytes_per_second == pytest.approx(0.8 * MIB)


def test_without_permitted_throughput_the_modelled_baseline_decides_the_trap():
    at_baseline = series(balance=constant(13, 0), metered=constant(13, MIB * PERIOD))
    result = forecast_credits(at_baseline)
    assert result.permitted_bytes_per_second == MIB
    assert result.state is CreditState.TRAP


def test_a_balance_below_one_period_of_baseline_counts_as_empty():
    # 1 MiB/s x 300 s = 300 MiB: less than the baseline earns in one period.
    nearly = series(balance=constant(13, 299 * MIB), metered=constant(13, 0))
    assert forecast_credits(nearly).state is CreditState.EMPTY
    enough = series(balance=constant(13, 301 * MIB), metered=constant(13, 0))
    assert forecast_credits(enough).state is CreditState.HEALTHY


# -- other modes and missing data ---------------------------------------------------------------------------


def test_no_balance_is_unknown():
    result = forecast_credits(series())
    assert result.state is CreditState.UNKNOWN
    assert result.balance_bytes is None
    assert result.recommendation.mode is BURSTING
    assert "nothing to judge" in result.recommendation.reason


def test_provisioned_and_elastic_are_not_limited_by_credits():
    provisioned = series(
        mode=PROVISIONED,
        provisioned_bytes_per_second=10 * MIB,
        balance=constant(13, 0),
        metered=constant(13, 8 * MIB * PERIOD),
    )
    result = forecast_credits(provisioned)
    assert result.state is CreditState.HEALTHY
    # The documented rule: a size whose baseline beats the provisioned amount gets the baseline.
    assert result.permitted_bytes_per_second == 10 * MIB
    big = series(
        mode=PROVISIONED, size_gib=1024, provisioned_bytes_per_second=10 * MIB, metered=constant(3, 0)
    )
    assert forecast_credits(big).permitted_bytes_per_second == 50 * MIB
    elastic = forecast_credits(series(mode=ELASTIC, metered=constant(13, MIB * PERIOD)))
    assert elastic.state is CreditState.HEALTHY
    assert elastic.permitted_bytes_per_second is None
    assert forecast_credits(series(mode=ELASTIC)).state is CreditState.UNKNOWN


def test_an_unknown_size_assumes_the_smallest_bucket():
    result = forecast_credits(
        series(size_gib=None, balance=constant(13, 0), metered=constant(13, MIB * PERIOD))
    )
    assert result.size_gib is None
    assert result.permitted_bytes_per_second == MIB
    assert result.state is CreditState.TRAP


def test_elastic_metadata_share_counts_reads_in_full():
    metered = constant(13, 100)
    data = {"metered": metered, "read": constant(13, 60), "write": constant(13, 0)}
    assert forecast_credits(series(mode=ELASTIC, **data)).metadata_share == pytest.approx(0.4)
    assert forecast_credits(series(mode=BURSTING, **data)).metadata_share == pytest.approx(0.8)


# -- recommendations -----------------------------------------------------------------------------------------


def test_a_healthy_balance_keeps_bursting():
    result = forecast_credits(series(balance=constant(13, 2 * TIB), metered=constant(13, 0.3 * MIB * PERIOD)))
    assert result.recommendation.mode is BURSTING
    assert "not falling" in result.recommendation.reason


def test_a_spiky_load_in_the_trap_is_advised_elastic_with_its_cost():
    # One 5-minute burst of 100 MiB/s in 24 hours of 0.5 MiB/s, then the last 15 minutes at the
    # 1 MiB/s baseline (the trap), the balance at zero throughout: no period ran unthrottled.
    def metered(i, t):
        return (100 if i == 100 else 0.5) * MIB * PERIOD if i < 285 else MIB * PERIOD

    spiky = series(balance=constant(288, 0), permitted=constant(288, MIB), metered=along(288, metered))
    result = forecast_credits(spiky)
    assert result.state is CreditState.TRAP
    assert result.recommendation.mode is ELASTIC
    assert "demand is censored" in result.recommendation.reason
    # No data series: every metered byte is priced as a written one, $0.06/GB, over a 730-hour month.
    total = (100 + 284 * 0.5 + 3) * MIB * PERIOD
    assert result.recommendation.elastic_monthly_cost_usd == pytest.approx(total / GIB * 0.06 * 730 / 24)
    assert result.recommendation.provisioned_mibps is None and result.recommendation.basis is None


def test_a_throttled_steady_load_is_never_sized_by_its_throttled_peak():
    # Empty all day and metered at the 1 MiB/s baseline: provisioning that "peak" would change nothing.
    steady = series(
        balance=constant(288, 0),
        permitted=constant(288, MIB),
        metered=along(288, lambda i, t: (0.9 + 0.1 * (i % 2)) * MIB * PERIOD),
    )
    result = forecast_credits(steady)
    assert result.state is CreditState.TRAP
    assert result.recommendation.mode is ELASTIC
    assert "provisioning the throttled peak would provision the baseline" in result.recommendation.reason
    assert "at least $" in result.recommendation.reason


def test_a_draining_steady_load_is_advised_provisioned():
    result = forecast_credits(draining_series())
    assert result.recommendation.mode is PROVISIONED
    assert "provision about 97 MiB/s" in result.recommendation.reason


def test_provisioned_throughput_under_the_baseline_is_advised_bursting():
    big_and_quiet = series(
        mode=PROVISIONED,
        size_gib=1024,
        provisioned_bytes_per_second=100 * MIB,
        metered=constant(13, MIB * PERIOD),
    )
    recommendation = forecast_credits(big_and_quiet).recommendation
    assert recommendation.mode is BURSTING
    assert "fits in the 50 MiB/s baseline" in recommendation.reason


# -- the condition a profile shows ---------------------------------------------------------------------------


def test_the_draining_message_says_when_the_bucket_is_empty():
    result = forecast_credits(draining_series())
    # 22:25 + 13107 s (3 h 38 min 27 s) = 02:03:27 the next day.
    assert condition_message(result) == (
        "balance 1.2 TiB falling 96 MiB/s: empty in 3.6 h (before 02:03 UTC); metadata is 47% of metered bytes"
    )
    condition = credit_condition(result)
    assert (condition.type, condition.status, condition.reason) == ("CreditsDraining", "True", "Draining")


def test_a_deadline_beyond_a_day_carries_its_date():
    # 2 TiB - 1 h x 2 MiB/s left, falling 2 MiB/s: 1048576 s - 3600 s = 12 days 2 h 16 min after 22:25.
    slow = draining_series(balance=along(13, lambda i, t: 2 * TIB - 2 * MIB * t))
    assert "empty in 12.1 days (before 2026-03-14 00:41 UTC)" in condition_message(forecast_credits(slow))


def test_the_trap_message_names_the_small_operation_budget():
    message = condition_message(forecast_credits(trap_series(1.0)))
    assert message.startswith("balance empty (0 B) and metered 1 MiB/s at the permitted 1 MiB/s")
    assert "throttled to 256 small writes or metadata ops/s" in message


def test_other_messages():
    healthy = forecast_credits(
        series(balance=along(13, lambda i, t: TIB + 5 * MIB * t), iolimit=constant(3, 95))
    )
    assert condition_message(healthy) == (
        "balance 1 TiB rising 5 MiB/s; I/O is at 95% of the General Purpose limit"
    )
    assert credit_condition(healthy).status == "False"
    unknown = credit_condition(forecast_credits(series()))
    assert (unknown.status, unknown.reason) == ("Unknown", "Unknown")
    assert "check the file system id and the region" in unknown.message
    assert condition_message(forecast_credits(trap_series(0.2))).startswith("balance empty (0 B): any burst")
    provisioned = series(
        mode=PROVISIONED, provisioned_bytes_per_second=10 * MIB, metered=constant(3, MIB * PERIOD)
    )
    assert condition_message(forecast_credits(provisioned)).startswith(
        "provisioned mode, not limited by credits: metered 1 MiB/s of 10 MiB/s permitted"
    )


def test_forecast_json_has_the_contract_fields():
    document = forecast_credits(draining_series()).to_json()
    assert list(document) == [
        "file_system_id",
        "throughput_mode",
        "performance_mode",
        "size_gib",
        "balance_bytes",
        "slope_bytes_per_second",
        "net_change_per_day_bytes",
        "time_to_empty_seconds",
        "time_to_empty_basis",
        "state",
        "history_seconds",
        "permitted_bytes_per_second",
        "metered_bytes_per_second",
        "percent_io_limit",
        "metadata_share",
        "ops_budget_per_second",
        "elastic_estimate",
        "recommendation",
    ]
    assert document["state"] == "Draining"
    assert document["throughput_mode"] == "bursting"
    assert document["size_gib"] == 20
    assert document["ops_budget_per_second"] == {"writes_or_metadata": 25600, "reads": 76800}
    assert document["time_to_empty_basis"] == "slope"  # an hour of history: no whole days to compare
    assert document["net_change_per_day_bytes"] is None
    assert set(document["recommendation"]) == {"mode", "reason", "provisioned_mibps", "monthly_cost_usd", "basis"}
    assert set(document["elastic_estimate"]) == {
        "billed_read_bytes", "billed_write_bytes", "billed_metadata_bytes", "window_seconds", "minimums_applied",
        "monthly_cost_usd", "prices",
    }
