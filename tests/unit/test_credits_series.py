"""GetMetricData answers (live or saved as JSON) mapped onto credit series."""

from datetime import UTC, datetime

import pytest

from mountwarden.core.credits import EfsMetric, Sample, make_samples, samples_from_metric_data
from mountwarden.core.credits.series import identify_result, parse_timestamp


@pytest.mark.parametrize(
    ("result", "identity"),
    [
        ({"Id": "q1", "Label": "fs-0123 BurstCreditBalance"}, ("fs-0123", EfsMetric.BURST_CREDIT_BALANCE)),
        ({"Id": "q1", "Label": "MeteredIOBytes"}, (None, EfsMetric.METERED_IO_BYTES)),
        ({"Id": "balance", "Label": "whatever you like"}, (None, EfsMetric.BURST_CREDIT_BALANCE)),
        ({"Id": "permitted_42"}, (None, EfsMetric.PERMITTED_THROUGHPUT)),
        ({"Id": "storage_0", "Label": ""}, (None, EfsMetric.STORAGE_BYTES)),
        ({"Id": "cpu", "Label": "CPUUtilization"}, None),
    ],
)
def test_results_are_recognised_by_label_then_id(result, identity):
    assert identify_result(result) == identity


def test_timestamps_in_every_form_become_aware_utc():
    expected = datetime(2026, 3, 1, 22, 25, tzinfo=UTC)
    assert parse_timestamp("2026-03-01T22:25:00Z") == expected
    assert parse_timestamp("2026-03-01T23:25:00+01:00") == expected
    assert parse_timestamp("2026-03-01T22:25:00") == expected
    assert parse_timestamp(expected.timestamp()) == expected
    assert parse_timestamp(datetime(2026, 3, 1, 22, 25)) == expected


def test_samples_are_sorted_oldest_first_without_non_finite_values():
    # GetMetricData answers newest first unless asked otherwise.
    found = make_samples(
        ["2026-03-01T22:30:00Z", "2026-03-01T22:25:00Z", "2026-03-01T22:20:00Z"], [3, "nan", 1]
    )
    assert [sample.value for sample in found] == [1, 3]
    assert found[0] == Sample(datetime(2026, 3, 1, 22, 20, tzinfo=UTC), 1)


def test_an_export_is_grouped_by_file_system_and_pages_are_merged():
    document = {
        "MetricDataResults": [
            {
                "Id": "balance_0",
                "Label": "fs-a BurstCreditBalance",
                "Timestamps": ["2026-03-01T22:25:00Z"],
                "Values": [5.0],
                "StatusCode": "PartialData",
            },
            {
                "Id": "balance_0",
                "Label": "fs-a BurstCreditBalance",
                "Timestamps": ["2026-03-01T22:20:00Z"],
                "Values": [6.0],
                "StatusCode": "Complete",
            },
            {
                "Id": "metered",
                "Label": "MeteredIOBytes",
                "Timestamps": ["2026-03-01T22:20:00Z"],
                "Values": [7.0],
            },
            {"Id": "m9", "Label": "NetworkIn", "Timestamps": ["2026-03-01T22:20:00Z"], "Values": [1.0]},
        ],
        "Messages": [],
    }
    grouped = samples_from_metric_data(document)
    assert set(grouped) == {"fs-a", None}
    assert [s.value for s in grouped["fs-a"][EfsMetric.BURST_CREDIT_BALANCE]] == [6.0, 5.0]
    assert [s.value for s in grouped[None][EfsMetric.METERED_IO_BYTES]] == [7.0]
