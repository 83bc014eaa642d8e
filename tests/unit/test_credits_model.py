"""The documented EFS credit arithmetic, reproduced number by number.

Units: KiB = 1024 B, MiB = 1024**2 B, GiB = 1024**3 B, TiB = 1024**4 B.
"""

import pytest

from mountwarden.core.credits import KIB, MIB, TIB, CreditBucket, OpsBudget, SingleClientCeiling


def test_a_20_gib_file_system_earns_the_1_mib_per_second_floor():
    # 50 KiB/s x 20 GiB = 1000 KiB/s, below the 1 MiB/s (1024 KiB/s) floor.
    bucket = CreditBucket(20)
    assert 50 * KIB * 20 == 1000 * KIB < MIB
    assert bucket.baseline_bytes_per_second == MIB
    assert bucket.burst_bytes_per_second == 100 * MIB  # 100 KiB/s x 20 = 2000 KiB/s < 100 MiB/s
    assert bucket.max_balance_bytes == pytest.approx(2.1 * TIB)


def test_a_full_bucket_drains_in_about_6_2_hours_at_99_mib_per_second_net():
    bucket = CreditBucket(20)
    # Bursting at 100 MiB/s while the 1 MiB/s baseline keeps refilling: net 99 MiB/s.
    # 2.1 TiB / 99 MiB/s = 2.1 * 1024**4 / (99 * 1024**2) s = 2.1 * 1024**2 / 99 s = 22242.52 s
    expected_seconds = 2.1 * 1024**2 / 99
    assert bucket.seconds_to_drain_full_at_burst == pytest.approx(expected_seconds, rel=1e-12)
    assert bucket.to_json()["hours_to_drain_full_at_burst"] == pytest.approx(6.17848, abs=1e-5)
    assert round(bucket.to_json()["hours_to_drain_full_at_burst"], 1) == 6.2


def test_an_empty_bucket_refills_in_about_25_days_at_idle():
    bucket = CreditBucket(20)
    # At idle the balance grows at the whole baseline: 2.1 TiB / 1 MiB/s = 2.1 * 1024**2 s = 2202009.6 s.
    assert bucket.seconds_to_refill_from_empty == pytest.approx(2.1 * 1024**2, rel=1e-12)
    assert bucket.to_json()["days_to_refill_from_empty"] == pytest.approx(25.4862, abs=1e-4)


def test_once_empty_1_mib_per_second_is_256_small_writes_and_768_small_reads():
    # 1 MiB/s / 4 KiB = 256 requests/s; a read is metered at a third, so 3 x 256 = 768.
    assert CreditBucket(20).ops_budget_when_empty == OpsBudget(writes_or_metadata=256, reads=768)


@pytest.mark.parametrize(
    ("size_gib", "baseline", "burst", "cap"),
    [
        (0, MIB, 100 * MIB, 2.1 * TIB),
        (100, 5000 * KIB, 100 * MIB, 2.1 * TIB),  # 50 KiB/s x 100 GiB
        (1024, 50 * MIB, 100 * MIB, 2.1 * TIB),  # 1 TiB: 50 MiB/s baseline, burst still 100 MiB/s
        (10 * 1024, 500 * MIB, 1000 * MIB, 21 * TIB),  # 10 TiB: 2.1 TiB per TiB of data
    ],
)
def test_baseline_burst_and_cap_follow_the_size(size_gib, baseline, burst, cap):
    bucket = CreditBucket(size_gib)
    assert bucket.baseline_bytes_per_second == pytest.approx(baseline)
    assert bucket.burst_bytes_per_second == pytest.approx(burst)
    assert bucket.max_balance_bytes == pytest.approx(cap)


def test_large_file_systems_burst_about_12_hours_on_a_full_bucket():
    # Above 1 TiB: 2.1 TiB per TiB / (100 - 50) KiB/s per GiB = 2.1 * 1024**2 / 50 s = 12.2 h, whatever the size.
    for size_gib in (2048, 8192, 65536):
        hours = CreditBucket(size_gib).seconds_to_drain_full_at_burst / 3600
        assert hours == pytest.approx(2.1 * 1024**2 / 50 / 3600)


def test_the_permitted_rate_falls_to_the_baseline_only_at_zero():
    bucket = CreditBucket(20)
    assert bucket.permitted_bytes_per_second(1) == 100 * MIB
    assert bucket.permitted_bytes_per_second(0) == MIB


def test_one_synchronous_client_is_bounded_by_its_round_trips():
    ceiling = SingleClientCeiling()
    assert ceiling.reads == pytest.approx(1000)  # 1 ms per read
    assert ceiling.writes == pytest.approx(370.37, abs=0.01)  # 2.7 ms per write


def test_a_negative_or_nan_size_is_refused():
    with pytest.raises(ValueError):
        CreditBucket(-1)
    with pytest.raises(ValueError):
        CreditBucket(float("nan"))


def test_model_json_has_the_contract_fields():
    assert CreditBucket(20).to_json() == {
        "size_gib": 20,
        "baseline_bytes_per_second": MIB,
        "burst_bytes_per_second": 100 * MIB,
        "max_balance_bytes": pytest.approx(2.1 * TIB),
        "hours_to_drain_full_at_burst": pytest.approx(2.1 * 1024**2 / 99 / 3600),
        "days_to_refill_from_empty": pytest.approx(2.1 * 1024**2 / 86400),
        "ops_budget_per_second": {"writes_or_metadata": 256, "reads": 768},
    }
