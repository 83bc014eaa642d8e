"""Metering rules: 4 KiB minimum, reads at a third, Elastic's 32 KiB data minimum."""

import pytest

from mountwarden.core.credits import GIB, KIB, MIB, CreditBucket, RequestKind, ThroughputMode, metadata_load
from mountwarden.core.credits import metered_bytes as metered

BURSTING, PROVISIONED, ELASTIC = ThroughputMode.BURSTING, ThroughputMode.PROVISIONED, ThroughputMode.ELASTIC


@pytest.mark.parametrize("mode", [BURSTING, PROVISIONED])
def test_every_request_counts_at_least_4_kib(mode):
    assert metered(RequestKind.METADATA, 0, mode) == 4 * KIB
    assert metered(RequestKind.WRITE, 100, mode) == 4 * KIB
    assert metered(RequestKind.WRITE, 64 * KIB, mode) == 64 * KIB


@pytest.mark.parametrize("mode", [BURSTING, PROVISIONED])
def test_reads_count_one_third_after_the_4_kib_minimum(mode):
    assert metered(RequestKind.READ, 512, mode) == pytest.approx(4 * KIB / 3)
    assert metered(RequestKind.READ, 48 * KIB, mode) == pytest.approx(16 * KIB)


def test_elastic_meters_data_at_32_kib_and_metadata_at_4_kib():
    assert metered(RequestKind.METADATA, 0, ELASTIC) == 4 * KIB
    assert metered(RequestKind.WRITE, 4 * KIB, ELASTIC) == 32 * KIB
    assert metered(RequestKind.READ, 8 * KIB, ELASTIC) == 32 * KIB
    assert metered(RequestKind.READ, 1 * MIB, ELASTIC) == 1 * MIB


def test_4_24_million_metadata_requests_in_10_hours_take_46_percent_of_a_20_gib_baseline():
    load = metadata_load(4.24e6, 36_000, CreditBucket(20).baseline_bytes_per_second)
    # 4,240,000 x 4096 B = 17,367,040,000 B = 16.17 GiB ...
    assert load.metered_metadata_bytes == 4_240_000 * 4096 == 17_367_040_000
    assert load.metered_metadata_bytes / GIB == pytest.approx(16.174, abs=1e-3)
    # ... over 36,000 s = 482,417.8 B/s = 0.460 MiB/s, 46% of the 1 MiB/s baseline.
    assert load.metered_metadata_bytes_per_second == pytest.approx(482_417.78, abs=0.01)
    assert load.metered_metadata_bytes_per_second / MIB == pytest.approx(0.4601, abs=1e-4)
    assert load.baseline_share == pytest.approx(0.4601, abs=1e-4)


def test_a_metadata_window_must_be_positive():
    with pytest.raises(ValueError):
        metadata_load(10, 0, MIB)
