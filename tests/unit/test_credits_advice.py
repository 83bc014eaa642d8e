"""The trap read right: censored demand, Elastic with its cost, Provisioned only from unthrottled demand."""

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from tests.credit_scenarios import PERIOD, credit_series, slow_drain, trap, trap_after_steady_load

from mountwarden.core.credits import (
    DEFAULT_HISTORY,
    GIB,
    KIB,
    MIB,
    PRICES,
    CreditSeries,
    CreditState,
    EfsMetric,
    Sample,
    ThroughputMode,
    elastic_usage,
    forecast_credits,
)
from mountwarden.core.credits.pricing import HOURS_PER_MONTH, provisioned_monthly_cost

END = datetime(2026, 3, 1, 22, 25, tzinfo=UTC)
HOUR_START = datetime(2026, 3, 1, 21, 0, tzinfo=UTC)


def forecast(scenario, window=DEFAULT_HISTORY):
    return forecast_credits(credit_series(scenario, END), window=window, now=END)


def at(minutes: int) -> datetime:
    return HOUR_START + timedelta(minutes=minutes)


def test_the_prices_name_their_region_date_and_source():
    assert (PRICES.region, PRICES.elastic_read_per_gib, PRICES.elastic_write_per_gib) == ("us-east-1", 0.03, 0.06)
    assert PRICES.provisioned_per_mibps_month == 6.00
    assert "aws.amazon.com/efs/pricing" in PRICES.describe() and PRICES.read_on in PRICES.describe()


def test_elastic_bills_each_read_and_write_at_32_kib_and_each_metadata_request_at_4_kib():
    # One hour: 1,000 writes of 4 KiB (a SQLite page each), 10 reads of 1 MiB, 100 metadata requests.
    samples = {
        EfsMetric.DATA_WRITE_IO_BYTES: (Sample(at(0), 600 * 4 * KIB), Sample(at(5), 400 * 4 * KIB)),
        EfsMetric.DATA_WRITE_OPS: (Sample(at(0), 1000),),
        EfsMetric.DATA_READ_IO_BYTES: (Sample(at(0), 10 * MIB),),
        EfsMetric.DATA_READ_OPS: (Sample(at(0), 10),),
        EfsMetric.METADATA_OPS: (Sample(at(0), 100),),
        EfsMetric.METERED_IO_BYTES: (Sample(at(0), 1000 * 4 * KIB + 10 * MIB / 3 + 100 * 4 * KIB),),
    }
    usage = elastic_usage(samples, PERIOD)
    assert usage.minimums_applied
    assert usage.write_bytes == 1000 * 32 * KIB  # 8 times the 4 MB written
    assert usage.read_bytes == 10 * MIB  # 1 MiB reads are above the minimum: billed as they are
    assert usage.metadata_bytes == pytest.approx(100 * 4 * KIB)
    assert usage.seconds == 5 * 60 + PERIOD
    window_cost = (10 * MIB * 0.03 + (32_000 * KIB + 400 * KIB) * 0.06) / GIB
    assert usage.cost() == pytest.approx(window_cost)
    assert usage.monthly_cost() == pytest.approx(window_cost * HOURS_PER_MONTH * 3600 / 600)


def test_the_minimum_is_applied_per_hour_of_counts():
    # Hour one: 100 writes of 1 MiB (above the minimum). Hour two: 1,000 writes of 4 KiB (below it).
    samples = {
        EfsMetric.DATA_WRITE_IO_BYTES: (Sample(at(0), 100 * MIB), Sample(at(60), 1000 * 4 * KIB)),
        EfsMetric.DATA_WRITE_OPS: (Sample(at(0), 100), Sample(at(60), 1000)),
    }
    usage = elastic_usage(samples, PERIOD)
    # Totals alone would give max(104 MB, 1,100 x 32 KiB) = 104 MB: the hours see the small writes.
    assert usage.write_bytes == 100 * MIB + 1000 * 32 * KIB


def test_without_request_counts_the_minimums_cannot_be_applied_and_it_says_so():
    samples = {
        EfsMetric.DATA_WRITE_IO_BYTES: (Sample(at(0), 4 * MIB),),
        EfsMetric.METERED_IO_BYTES: (Sample(at(0), 5 * MIB),),
    }
    usage = elastic_usage(samples, PERIOD)
    assert not usage.minimums_applied
    assert (usage.write_bytes, usage.metadata_bytes) == (4 * MIB, MIB)  # the metered remainder is metadata
    assert "without the per-request minimums" in usage.describe()
    assert elastic_usage({}, PERIOD) is None


def test_provisioned_is_billed_only_above_the_baseline_the_storage_earns():
    assert provisioned_monthly_cost(9, 1 * MIB) == pytest.approx(8 * 6.00)  # 20 GiB earns 1 MiB/s
    assert provisioned_monthly_cost(40, 50 * MIB) == 0  # 1 TiB earns 50 MiB/s already


def test_the_trap_is_advised_elastic_with_its_monthly_cost_for_the_observed_bytes():
    scenario = trap()
    # A window a little longer than the scenario's 48 hours, so that every hour of request counts is in it.
    result = forecast(scenario, window=timedelta(hours=49))
    assert result.state is CreditState.TRAP
    advice = result.recommendation
    assert advice.mode is ThroughputMode.ELASTIC
    assert advice.provisioned_mibps is None and advice.basis is None
    # The observed load, as Elastic would bill it: each 4 KiB write at 32 KiB, each metadata request at 4 KiB.
    series = scenario.series
    written = sum(value for _, value in series[EfsMetric.DATA_WRITE_OPS]) * 32 * KIB
    metadata = sum(value for _, value in series[EfsMetric.METADATA_OPS]) * 4 * KIB
    expected = (written + metadata) / GIB * 0.06 * HOURS_PER_MONTH / 48
    assert advice.elastic_monthly_cost_usd == pytest.approx(expected, rel=1e-9)
    # Throttled to the 1 MiB/s baseline: 0.34 MiB/s of 4 KiB writes (billed 2.71 MiB/s) and 0.66 MiB/s
    # of metadata, where Bursting meters 1 MiB/s in all.
    assert written / (48 * 3600) / MIB == pytest.approx(8 * 1 / (1 + 500 * 4 * KIB / MIB))
    assert advice.elastic_monthly_cost_usd == pytest.approx(518.98, abs=0.01)
    assert "demand is censored" in advice.reason and "at least $518.98 a month" in advice.reason
    assert "lock the mode for 24 hours" in advice.reason
    assert result.elastic.minimums_applied
    assert result.to_json()["recommendation"]["monthly_cost_usd"] == {"elastic": 518.98, "provisioned": None}


def test_at_the_default_window_the_trap_is_priced_from_what_the_window_holds():
    # GetMetricData's first hour of counts is stamped at the window's start, which the window leaves
    # out: that hour's bytes count without their minimums, so the estimate stays a lower bound.
    advice = forecast(trap()).recommendation
    assert advice.mode is ThroughputMode.ELASTIC
    assert 500 < advice.elastic_monthly_cost_usd < 518.98


def test_a_trap_after_an_unthrottled_day_is_advised_provisioned_from_that_day_and_says_so():
    result = forecast(trap_after_steady_load())
    assert result.state is CreditState.TRAP
    advice = result.recommendation
    assert advice.mode is ThroughputMode.PROVISIONED
    basis = advice.basis
    # 590 GiB lasted 590 GiB / 7 MiB/s = 86,308 s: the scenario's first 287 periods were unthrottled, and
    # the window (now - 48 h, now] holds all but the first of them.
    assert basis.periods == 286 and basis.selection == "balance above zero: not throttled"
    assert basis.start == END - DEFAULT_HISTORY + timedelta(seconds=PERIOD)
    assert basis.end == basis.start + timedelta(seconds=PERIOD * 285)
    assert basis.average_bytes_per_second == pytest.approx(8 * MIB)
    assert advice.provisioned_mibps == 8
    assert advice.provisioned_monthly_cost_usd == pytest.approx(7 * 6.00)  # 8 MiB/s less the 1 MiB/s baseline
    assert advice.elastic_monthly_cost_usd > advice.provisioned_monthly_cost_usd
    assert "throttled periods (censored: demand at least the permitted rate) were left out" in advice.reason
    assert "286 5-minute periods from 2026-02-27 22:30 to 2026-02-28 22:15 UTC" in advice.reason
    assert "provision about 8 MiB/s" in advice.reason and "24 hours" in advice.reason


def test_a_draining_steady_load_compares_both_prices():
    advice = forecast(slow_drain()).recommendation
    # 1.6 MiB/s of 1 MiB writes: Provisioned 2 MiB/s is $6 a month; Elastic bills every byte written.
    assert advice.mode is ThroughputMode.PROVISIONED and advice.provisioned_mibps == 2
    assert advice.provisioned_monthly_cost_usd == pytest.approx(6.00)
    expected_elastic = 1.6 * MIB * 3600 * HOURS_PER_MONTH / GIB * 0.06
    assert advice.elastic_monthly_cost_usd == pytest.approx(expected_elastic, rel=0.01)


def test_a_spiky_unthrottled_load_is_cheaper_on_elastic():
    advice = forecast_credits(spiky_series()).recommendation
    assert advice.mode is ThroughputMode.ELASTIC
    assert advice.provisioned_mibps == 100 and advice.provisioned_monthly_cost_usd == pytest.approx(99 * 6.00)
    assert advice.elastic_monthly_cost_usd < advice.provisioned_monthly_cost_usd


def spiky_series(**fields) -> CreditSeries:
    """24 hours of 0.1 MiB/s with one 5-minute burst of 100 MiB/s, credits to spare but falling."""
    points = 288
    metered = [(100 if i == 100 else 0.1) * MIB * PERIOD for i in range(points)]
    stamps = [END - timedelta(seconds=PERIOD * (points - i)) for i in range(points)]
    return CreditSeries("fs-1", ThroughputMode.BURSTING, 20 * GIB, period_seconds=PERIOD, samples={
        EfsMetric.BURST_CREDIT_BALANCE: tuple(Sample(t, 1e12 - 200 * MIB * i) for i, t in enumerate(stamps)),
        EfsMetric.METERED_IO_BYTES: tuple(Sample(t, v) for t, v in zip(stamps, metered, strict=True)),
        EfsMetric.DATA_WRITE_IO_BYTES: tuple(Sample(t, v) for t, v in zip(stamps, metered, strict=True)),
    }, **fields)


def test_on_max_io_sized_elastic_advice_becomes_provisioned():
    # Elastic would be cheaper, but "Max I/O mode is not supported for ... file systems that use Elastic".
    advice = forecast_credits(spiky_series(performance_mode="maxIO")).recommendation
    assert advice.mode is ThroughputMode.PROVISIONED and advice.provisioned_mibps == 100
    assert "Max I/O performance mode, which Elastic throughput does not support" in advice.reason
    assert "provision about 100 MiB/s here, or move the data (DataSync)" in advice.reason
    assert forecast_credits(spiky_series(performance_mode="generalPurpose")).recommendation.mode is (
        ThroughputMode.ELASTIC)


def test_on_max_io_unsized_elastic_advice_says_to_move_to_general_purpose():
    trapped = replace(credit_series(trap(), END), performance_mode="maxIO")
    unsized = forecast_credits(trapped, window=DEFAULT_HISTORY, now=END).recommendation
    assert unsized.mode is ThroughputMode.ELASTIC
    assert "(EFS User Guide, 'Performance modes')" in unsized.reason
    assert "move the data (DataSync) to a new General Purpose file system in Elastic mode" in unsized.reason
    general = forecast_credits(credit_series(trap(), END), window=DEFAULT_HISTORY, now=END).recommendation
    assert "Max I/O" not in general.reason
