"""Days of history: the nightly drain, the healthy daily cycle, the slow drain, a new drain, a cycle that runs dry.

The series come from tests/credit_scenarios.py, which runs EFS's documented token bucket
over what the consumers ask for, so the balance, permitted and metered series agree the
way CloudWatch's would. Each state is checked at every hour of the day: a forecast that
is right only at some phase of the daily cycle is wrong.
"""

import json
import math
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.credit_scenarios import (
    DAY,
    HOUR,
    QUIET,
    Ask,
    Scenario,
    credit_series,
    daily_job,
    healthy_cycle,
    nightly_drain,
    simulate,
    slow_drain,
)

from mountwarden.core.credits import (
    DEFAULT_HISTORY,
    GIB,
    KIB,
    MIB,
    TIB,
    CreditSeries,
    CreditState,
    DrainBasis,
    EfsMetric,
    Sample,
    condition_message,
    credit_condition,
    forecast_credits,
)
from mountwarden.core.credits.daily import net_change_per_day, replay_yesterday, steepest_slope_around

END = datetime(2026, 3, 1, 22, 25, tzinfo=UTC)
#: What the nightly job loses per day: 96 MiB/s net for 2 h, less 22 h of the 1 MiB/s baseline.
NIGHTLY_NET = -(96 * MIB * 2 * HOUR - MIB * 22 * HOUR)


def forecast(scenario, window=DEFAULT_HISTORY, **kwargs):
    return forecast_credits(credit_series(scenario, END), window=window, now=END, **kwargs)


def test_the_default_history_holds_two_whole_days():
    assert timedelta(hours=48) == DEFAULT_HISTORY


@pytest.mark.parametrize("hours_since_job", range(24))
def test_a_nightly_drain_the_day_does_not_refill_is_draining_at_every_hour(hours_since_job):
    result = forecast(nightly_drain(job_ends_before_end=hours_since_job * HOUR + 60))
    assert result.state is CreditState.DRAINING
    # About 598 GiB a day, whatever the hour: whole days are compared, not hours.
    assert result.net_change_per_day_bytes == pytest.approx(NIGHTLY_NET, rel=0.01)
    assert pytest.approx(-597.7, abs=0.1) == NIGHTLY_NET / GIB
    assert result.time_to_empty_basis in (DrainBasis.DAY_OVER_DAY, DrainBasis.SAME_TIME_YESTERDAY)
    at_net_rate = result.balance_bytes / (-result.net_change_per_day_bytes / DAY)
    assert 0 < result.time_to_empty_seconds <= at_net_rate * (1 + 1e-9)
    if result.time_to_empty_basis is DrainBasis.DAY_OVER_DAY:
        assert result.time_to_empty_seconds == pytest.approx(at_net_rate)
    assert credit_condition(result).status == "True"


def test_the_nightly_drain_reads_its_net_rate_in_the_message():
    result = forecast(nightly_drain(job_ends_before_end=6 * HOUR))
    assert result.time_to_empty_basis is DrainBasis.DAY_OVER_DAY
    message = condition_message(result)
    assert message.startswith("balance 294 GiB falling 599 GiB a day (the mean of the last 24 h against")
    assert "empty in 11.8 h" in message


def test_an_hour_or_a_day_of_history_cannot_see_the_nightly_drain():
    # Why the default history is 48 hours: the newest hour shows the day's slow refill, and
    # a day holds one job, so there is no day to compare with.
    scenario = nightly_drain(job_ends_before_end=6 * HOUR)
    for window in (timedelta(hours=1), timedelta(hours=24)):
        result = forecast(scenario, window=window)
        assert result.state is CreditState.HEALTHY
        assert result.net_change_per_day_bytes is None


@pytest.mark.parametrize("hours_since_job", range(24))
def test_a_daily_cycle_the_day_refills_is_healthy_at_every_hour(hours_since_job):
    result = forecast(healthy_cycle(job_ends_before_end=hours_since_job * HOUR + 60))
    assert result.state is CreditState.HEALTHY, condition_message(result)
    assert abs(result.net_change_per_day_bytes) < GIB
    assert result.time_to_empty_seconds is None and result.time_to_empty_basis is None


def test_the_healthy_cycle_is_healthy_while_its_job_runs():
    # An hour and a half into the job the balance falls 9 MiB/s: the same as at this time yesterday.
    result = forecast(healthy_cycle(job_ends_before_end=-0.5 * HOUR))
    assert result.slope_bytes_per_second == pytest.approx(-9 * MIB, rel=0.01)
    assert result.state is CreditState.HEALTHY
    assert "falling 9 MiB/s now; day over day" in condition_message(result)


def test_a_job_that_starts_later_each_night_is_still_the_daily_cycle():
    # The healthy job, 40 minutes later every night (data grows): today's drain did not run at exactly
    # this time yesterday, but within the hour of jitter allowed.
    def drifting(before_end):
        day = before_end // DAY
        return daily_job(-0.5 * HOUR - day * 40 * 60, 2, Ask(write_bytes=10 * MIB, metadata_ops=10), QUIET)(
            before_end)

    result = forecast(simulate(Scenario("drifting", 20, 72, 2.1 * TIB, drifting)))
    assert result.slope_bytes_per_second < -5 * MIB
    assert result.state is CreditState.HEALTHY


def test_a_slow_multi_day_drain_is_draining_at_its_net_rate():
    result = forecast(slow_drain())
    # 1.6 MiB/s asked against a 1 MiB/s baseline: 0.6 MiB/s, 50.6 GiB a day. (The newest day holds
    # 287 points, as CloudWatch's has no point for the period still running: its mean is 2.5 minutes
    # older, 0.17% of a day.)
    assert result.net_change_per_day_bytes == pytest.approx(-0.6 * MIB * DAY, rel=0.003)
    assert result.state is CreditState.DRAINING
    assert result.time_to_empty_basis is DrainBasis.DAY_OVER_DAY
    at_net_rate = result.balance_bytes / (-result.net_change_per_day_bytes / DAY)
    assert result.time_to_empty_seconds == pytest.approx(at_net_rate)
    assert result.time_to_empty_seconds == pytest.approx(result.balance_bytes / (0.6 * MIB), rel=0.003)
    assert result.time_to_empty_seconds / DAY == pytest.approx(27.4, abs=0.1)
    assert "falling 50.5 GiB a day" in condition_message(result)


def test_a_drain_that_is_new_today_alerts_at_once_at_its_slope():
    # Two quiet days, then 97 MiB/s for the last hour: yesterday had no such drain at this time.
    def new_job(before_end):
        return Ask(write_bytes=97 * MIB - 40 * KIB, metadata_ops=10) if before_end <= HOUR else QUIET

    result = forecast(simulate(Scenario("new", 20, 72, 2.1 * TIB, new_job)))
    assert result.state is CreditState.DRAINING
    assert result.time_to_empty_basis is DrainBasis.SLOPE
    assert result.slope_bytes_per_second == pytest.approx(-96 * MIB, rel=1e-3)
    assert result.time_to_empty_seconds == pytest.approx(result.balance_bytes / (96 * MIB), rel=1e-3)


def test_a_new_drain_too_slow_to_empty_within_a_day_waits_for_the_day_over_day_change():
    def slow_new(before_end):
        return Ask(write_bytes=1.5 * MIB) if before_end <= 2 * HOUR else QUIET

    result = forecast(simulate(Scenario("slow-new", 20, 72, 2.1 * TIB, slow_new)))
    assert result.slope_bytes_per_second < 0  # falling 0.5 MiB/s: 2 TiB would last 49 days
    assert result.state is CreditState.HEALTHY


def test_a_cycle_that_runs_dry_every_night_is_draining_before_tonight():
    # 77 GiB earned by day, drained by a 97 MiB/s job in about 14 minutes each night, then throttled:
    # no net change, but empty again tonight.
    scenario = simulate(Scenario("dry", 20, 72, 0.0, daily_job(10 * HOUR, 2, Ask(write_bytes=97 * MIB), QUIET)))
    result = forecast(scenario)
    assert abs(result.net_change_per_day_bytes) < 2 * GIB
    assert result.state is CreditState.DRAINING
    assert result.time_to_empty_basis is DrainBasis.SAME_TIME_YESTERDAY
    # Yesterday from this hour: 12 h to the job's start, then about 14 minutes into it.
    assert 12 * HOUR < result.time_to_empty_seconds < 12.5 * HOUR
    assert "yesterday, from this hour on" in condition_message(result)


# -- the daily views themselves ------------------------------------------------------------------------------


def hourly(values, end=END):
    return [Sample(end - timedelta(hours=len(values) - 1 - i), v) for i, v in enumerate(values)]


def test_the_net_change_compares_the_means_of_whole_days():
    balance = hourly([100.0] * 24 + [70.0] * 24)  # oldest day 100, newest 70
    assert net_change_per_day(balance, END, 3600) == pytest.approx(-30)


def test_three_days_or_more_are_fitted_robustly():
    # Daily means 100, 80, 60 and a one-hour outlier in the middle day: -20 a day.
    # The middle day's mean is 41,743: the pairwise slopes are 41,643, -20 and -41,683; the median is -20.
    values = [100.0] * 24 + [80.0] * 23 + [1e6] + [60.0] * 24
    assert net_change_per_day(hourly(values), END, 3600) == pytest.approx(-20)


def test_less_than_two_covered_days_has_no_net_change():
    assert net_change_per_day(hourly([1.0] * 24), END, 3600) is None  # one day
    # The older day holds 11 of its 24 hours: under half.
    assert net_change_per_day(hourly([1.0] * 35), END, 3600) is None
    assert net_change_per_day(hourly([1.0] * 36), END, 3600) == 0


def test_yesterdays_steepest_slope_is_found_within_the_jitter():
    # A one-hour drop of 3600 ending 40 minutes after this time yesterday.
    drop_end = END - timedelta(days=1) + timedelta(minutes=40)
    balance = [Sample(drop_end - timedelta(minutes=5 * i), 10_000.0 + 5 * i * 60) for i in range(13)]
    balance.sort()
    slope = steepest_slope_around(balance, END - timedelta(days=1), timedelta(hours=1), timedelta(hours=1))
    assert slope == pytest.approx(-1.0)
    # Without jitter only a window ending exactly then counts, and no sample is there.
    assert steepest_slope_around(balance, END - timedelta(days=1), timedelta(hours=1), timedelta(0)) is None


def test_replay_needs_yesterday_at_this_hour():
    assert replay_yesterday(hourly([5.0] * 10), END, 5.0, 0.0, 3600) is None
    balance = hourly([100.0] * 10 + [0.0] + [100.0] * 14)  # empty 14 hours after this time yesterday
    assert replay_yesterday(balance, END, 100.0, 0.0, 3600) == pytest.approx(10 * 3600)


finite = st.floats(allow_nan=False, allow_infinity=False)


@settings(max_examples=150, deadline=None)
@given(st.lists(finite, min_size=30, max_size=80), st.sampled_from([900, 3600]), st.floats(0, 1e15))
def test_whole_days_of_any_values_never_raise(values, period, size):
    samples = tuple(Sample(END - timedelta(seconds=period * (len(values) - 1 - i)), v) for i, v in enumerate(values))
    series = CreditSeries("fs-1", size_bytes=size, period_seconds=period,
                          samples={EfsMetric.BURST_CREDIT_BALANCE: samples, EfsMetric.METERED_IO_BYTES: samples})
    result = forecast_credits(series, window=timedelta(days=4))
    json.dumps(result.to_json(), allow_nan=False)
    assert result.time_to_empty_seconds is None or (math.isfinite(result.time_to_empty_seconds)
                                                    and result.time_to_empty_seconds >= 0)
