"""`mountwarden credits model|forecast` without AWS: the model, and forecasts from saved GetMetricData files."""

import json
from datetime import UTC, datetime, timedelta

import pytest
from tests.credit_scenarios import HOUR, credit_series, nightly_drain
from typer.testing import CliRunner

from mountwarden.cli import app
from mountwarden.cli.credits import parse_duration
from mountwarden.core.credits import CREDIT_METRICS, MIB, TIB

runner = CliRunner()
END = datetime(2026, 3, 1, 22, 25, tzinfo=UTC)


def run(*args: str):
    return runner.invoke(app, ["credits", *args])


def test_model_json_for_20_gib():
    result = run("model", "--size-gib", "20", "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["baseline_bytes_per_second"] == MIB
    assert document["burst_bytes_per_second"] == 100 * MIB
    assert document["max_balance_bytes"] == pytest.approx(2.1 * TIB)
    assert document["hours_to_drain_full_at_burst"] == pytest.approx(6.178, abs=1e-3)
    assert document["days_to_refill_from_empty"] == pytest.approx(25.486, abs=1e-3)
    assert document["ops_budget_per_second"] == {"writes_or_metadata": 256, "reads": 768}
    assert "metered_metadata_bytes" not in document


def test_model_json_with_metadata_ops():
    result = run(
        "model", "--size-gib", "20", "--metadata-ops", "4240000", "--window-seconds", "36000", "--json"
    )
    document = json.loads(result.stdout)
    assert document["metered_metadata_bytes"] == 17_367_040_000
    assert document["metered_metadata_bytes_per_second"] == pytest.approx(482_417.78, abs=0.01)
    assert document["baseline_share"] == pytest.approx(0.4601, abs=1e-4)


def test_model_in_words():
    result = run("model", "--size-gib", "20", "--metadata-ops", "4240000", "--window-seconds", "36000")
    assert result.exit_code == 0
    for words in (
        "1 MiB/s",
        "100 MiB/s",
        "2.1 TiB",
        "6.2 h",
        "25.5 days",
        "256/s",
        "768/s",
        "16.2 GiB",
        "46%",
    ):
        assert words in result.stdout


def test_metadata_ops_need_their_window():
    result = run("model", "--size-gib", "20", "--metadata-ops", "100")
    assert result.exit_code == 2
    assert "--window-seconds" in result.stderr


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("24h", 86400), ("90m", 5400), ("1h30m", 5400), ("300", 300), ("2d", 172800), ("0.5h", 1800)],
)
def test_durations(text, seconds):
    assert parse_duration(text) == timedelta(seconds=seconds)


def test_a_bad_window_is_a_usage_error(tmp_path):
    result = run("forecast", "--file-system-id", "fs-1", "--window", "soon")
    assert result.exit_code == 2


def export(balances: list[float], metered_per_second: float, *, label_prefix: str = "fs-0123 ") -> dict:
    stamps = [
        (END - timedelta(minutes=5 * (len(balances) - 1 - i))).isoformat() for i in range(len(balances))
    ]
    results = [
        {
            "Id": "balance",
            "Label": f"{label_prefix}BurstCreditBalance",
            "Timestamps": list(stamps),
            "Values": balances,
        },
        {
            "Id": "metered",
            "Label": f"{label_prefix}MeteredIOBytes",
            "Timestamps": list(stamps),
            "Values": [metered_per_second * 300] * len(balances),
        },
    ]
    # Newest first, as GetMetricData answers by default.
    for result in results:
        result["Timestamps"].reverse()
        result["Values"].reverse()
    return {"MetricDataResults": results, "Messages": []}


def forecast_file(tmp_path, document: dict, *args: str):
    path = tmp_path / "series.json"
    path.write_text(json.dumps(document))
    return run("forecast", "--from-file", str(path), *args)


def test_an_offline_draining_forecast_exits_1(tmp_path):
    balances = [1.2 * TIB + 96 * MIB * 300 * (12 - i) for i in range(13)]
    result = forecast_file(tmp_path, export(balances, 97 * MIB), "--size-gib", "20", "--json")
    assert result.exit_code == 1, result.output
    document = json.loads(result.stdout)
    assert document["file_system_id"] == "fs-0123"
    assert document["throughput_mode"] == "bursting"
    assert document["state"] == "Draining"
    assert document["slope_bytes_per_second"] == pytest.approx(-96 * MIB)
    assert document["time_to_empty_seconds"] == pytest.approx(1.2 * 1024**2 / 96)
    assert document["recommendation"]["mode"] == "provisioned"


def test_an_offline_healthy_forecast_exits_0_and_reads_bare_ids(tmp_path):
    result = forecast_file(tmp_path, export([2 * TIB] * 13, 0.1 * MIB, label_prefix="x"), "--size-gib", "20")
    assert result.exit_code == 0, result.output
    assert "Healthy" in result.stdout
    assert "balance 2 TiB steady" in result.stdout


def test_a_file_with_several_file_systems_needs_one_named(tmp_path):
    document = export([2 * TIB] * 3, 0)
    document["MetricDataResults"] += export([0] * 3, MIB, label_prefix="fs-other ")["MetricDataResults"]
    assert forecast_file(tmp_path, document).exit_code == 2
    trapped = forecast_file(tmp_path, document, "--file-system-id", "fs-other", "--json")
    assert trapped.exit_code == 1
    assert json.loads(trapped.stdout)["state"] == "Trap"


def test_a_file_that_is_not_an_export_is_a_usage_error(tmp_path):
    path = tmp_path / "series.json"
    path.write_text("[1, 2, 3]")
    result = run("forecast", "--from-file", str(path))
    assert result.exit_code == 2
    assert "GetMetricData" in result.stderr


def export_of(series) -> dict:
    """A CreditSeries as a saved GetMetricData answer, request counts under their Ids (readops, ...)."""
    prefixes = {query.metric: query.id_prefix for query in CREDIT_METRICS}
    return {"MetricDataResults": [
        {"Id": f"{prefixes[metric]}_0", "Label": "",
         "Timestamps": [s.at.isoformat() for s in samples], "Values": [s.value for s in samples]}
        for metric, samples in series.samples.items() if samples and metric in prefixes
    ]}


def test_a_saved_nightly_drain_is_read_day_over_day_in_words(tmp_path):
    series = credit_series(nightly_drain(job_ends_before_end=6 * HOUR), END)
    result = forecast_file(tmp_path, export_of(series), "--size-gib", "20")
    assert result.exit_code == 1, result.output
    words = " ".join(result.stdout.replace("│", " ").split())  # the panel's wrapped lines, rejoined
    assert "Draining" in words
    assert "-601 GiB a day (mean of the last 24 h against the 24 h before)" in words
    assert "(from the day-over-day)" in words
    assert "Elastic would bill" in words and "32 KiB or more each" in words
    assert "provision about 97 MiB/s" in words


def test_the_json_of_a_saved_forecast_has_no_consumers_unless_asked(tmp_path):
    series = credit_series(nightly_drain(), END)
    result = forecast_file(tmp_path, export_of(series), "--size-gib", "20", "--json")
    document = json.loads(result.stdout)
    assert document["consumers"] is None
    assert document["time_to_empty_basis"] == "day-over-day"
    assert document["elastic_estimate"]["minimums_applied"] is True


def test_consumers_without_a_reachable_cluster_is_a_problem_named(tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    series = credit_series(nightly_drain(), END)
    result = forecast_file(tmp_path, export_of(series), "--size-gib", "20", "--consumers",
                           "--kubeconfig", str(kubeconfig))
    assert result.exit_code == 2
    assert "--consumers could not read the cluster" in " ".join(result.stderr.split())
