"""The credit watch through boto3 against a real local moto server, and the CLI on top of it.

What moto 5.x does and does not do (tried, not assumed):
- EFS: CreateFileSystem/DescribeFileSystems work (pages of 10 without MaxItems), SizeInBytes is
  always 0 (so the size comes from the StorageBytes metric), there is no UpdateFileSystem, and an
  unknown id answers FileSystemNotFound (404).
- CloudWatch GetMetricData aggregates PutMetricData points into Period buckets counted from
  StartTime, honours Minimum/Average/Sum and the StorageClass dimension, omits empty buckets and
  answers many queries at once, but enforces neither the 500-query limit nor MaxDatapoints and never
  pages (no NextToken); it never throttles or denies. Paging, throttling and AccessDenied are
  therefore played with botocore's Stubber, and bounded retries with a before-send hook.
"""

import json
import os
import socket
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from botocore.stub import ANY, Stubber
from tests.credit_scenarios import (
    HOUR,
    healthy_cycle,
    nightly_drain,
    slow_drain,
    trap,
    trap_after_steady_load,
)
from tests.integration.moto_server import (
    POINTS,
    WINDOW,
    MotoServer,
    aligned_now,
    boto,
    create_file_system,
    seed,
    seed_scenario,
)

from mountwarden.adapters.aws import (
    AwsClients,
    FileSystemFacts,
    batch_queries,
    describe_file_systems,
    fetch_credit_series,
    make_clients,
    plan_metric_queries,
)
from mountwarden.core.credits import (
    GIB,
    MIB,
    TIB,
    CreditSeries,
    CreditState,
    CreditWatchProblem,
    EfsMetric,
    ProblemReason,
    ThroughputMode,
    forecast_credits,
)

pytestmark = pytest.mark.aws

MOUNTWARDEN = str(Path(sys.executable).with_name("mountwarden"))


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [MOUNTWARDEN, "credits", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env or dict(os.environ),
    )


# -- the adapter on moto ---------------------------------------------------------------------------------


def test_one_batched_fetch_forecasts_draining_trap_and_healthy(moto_server):
    now = aligned_now()
    ids = seed(moto_server, now)
    clients = make_clients(region=moto_server.region, endpoint_url=moto_server.endpoint_url)

    found = fetch_credit_series(clients, list(ids.values()), WINDOW, now)

    assert clients.calls.get_metric_data == 1
    assert clients.calls.describe_file_systems == 1
    draining = found[ids["draining"]]
    assert isinstance(draining, CreditSeries)
    assert draining.throughput_mode is ThroughputMode.BURSTING
    assert draining.size_gib == pytest.approx(20)  # from StorageBytes (Standard), as moto's size is 0
    assert len(draining.of(EfsMetric.BURST_CREDIT_BALANCE)) == POINTS
    assert EfsMetric.STORAGE_BYTES not in draining.samples

    result = forecast_credits(draining, window=WINDOW, now=now)
    assert result.state is CreditState.DRAINING
    assert result.balance_bytes == pytest.approx(1.2 * TIB)
    assert result.slope_bytes_per_second == pytest.approx(-96 * MIB)
    assert result.time_to_empty_seconds == pytest.approx(1.2 * 1024**2 / 96)
    assert result.metered_bytes_per_second == pytest.approx(97 * MIB)
    assert result.permitted_bytes_per_second == pytest.approx(100 * MIB)
    assert result.metadata_share == pytest.approx(0.47)
    assert result.percent_io_limit == pytest.approx(12)

    trap = forecast_credits(found[ids["trap"]], window=WINDOW, now=now)
    assert trap.state is CreditState.TRAP
    assert trap.ops_budget_per_second.writes_or_metadata == pytest.approx(256)
    assert trap.metadata_share == pytest.approx(0.9)

    healthy = forecast_credits(found[ids["healthy"]], window=WINDOW, now=now)
    assert healthy.state is CreditState.HEALTHY
    assert healthy.recommendation.mode is ThroughputMode.BURSTING


def test_provisioned_facts_and_an_unknown_file_system(moto_server):
    provisioned = create_file_system(
        moto_server, "prov", ThroughputMode="provisioned", ProvisionedThroughputInMibps=10
    )
    clients = make_clients(region=moto_server.region, endpoint_url=moto_server.endpoint_url)

    facts = describe_file_systems(clients, [provisioned])[provisioned]
    assert facts == FileSystemFacts(provisioned, ThroughputMode.PROVISIONED, None, 10 * MIB, "generalPurpose")

    missing = fetch_credit_series(clients, [provisioned, "fs-00000000"], WINDOW, aligned_now())
    problem = missing["fs-00000000"]
    assert isinstance(problem, CreditWatchProblem)
    assert problem.reason is ProblemReason.FILE_SYSTEM_NOT_FOUND
    assert "fs-00000000" in problem.message and "us-east-1" in problem.message
    assert forecast_credits(missing[provisioned]).state is CreditState.UNKNOWN  # no metrics yet
    alone = describe_file_systems(clients, ["fs-00000000"])["fs-00000000"]
    assert alone.reason is ProblemReason.FILE_SYSTEM_NOT_FOUND


def test_100_file_systems_cost_a_handful_of_get_metric_data_calls(moto_server):
    efs = boto(moto_server, "efs")
    ids = [efs.create_file_system(CreationToken=f"fs{n}")["FileSystemId"] for n in range(100)]
    clients = make_clients(region=moto_server.region, endpoint_url=moto_server.endpoint_url)
    sent, queries_per_call = [], []
    # Counted by botocore itself: every HTTP request sent, and the queries in each call.
    clients.cloudwatch.meta.events.register(
        "before-send.cloudwatch.GetMetricData", lambda request, **_: sent.append(request.url)
    )
    clients.cloudwatch.meta.events.register(
        "provide-client-params.cloudwatch.GetMetricData",
        lambda params, **_: queries_per_call.append(len(params["MetricDataQueries"])),
    )

    found = fetch_credit_series(clients, ids, timedelta(hours=24), aligned_now())

    assert len(found) == 100 and all(isinstance(value, CreditSeries) for value in found.values())
    # 11 queries each: 7 at 5-minute points (288 a day), 3 request counts and moto's StorageBytes fallback
    # (moto reports no size) at hourly points (24): 2,112 points each. 1,100 queries, 500 a call at most
    # (500 queries hold 96,480 points, under the 100,800 of an answer): 3 calls.
    assert len(sent) == 3 == clients.calls.get_metric_data
    assert queries_per_call == [500, 500, 100]
    assert clients.calls.describe_file_systems == 1  # one page of 100 when listing
    # With sizes known, as real EFS reports them, over the default two days: 10 queries and 7 x 576 +
    # 3 x 48 = 4,176 points each, 24 file systems (and one query more) to an answer: 5 calls that never page.
    sized = [FileSystemFacts(fs_id, ThroughputMode.BURSTING, 20 * GIB, None) for fs_id in ids]
    batches = batch_queries(plan_metric_queries(sized), timedelta(hours=48))
    assert [len(batch) for batch in batches] == [241, 241, 241, 241, 36]


# -- what moto cannot do: paging, throttling, denial -------------------------------------------------------


def stubbed(moto: MotoServer) -> AwsClients:
    return make_clients(region=moto.region, endpoint_url=moto.endpoint_url)


def metric_result(query_id: str, label: str, stamps: list[datetime], values: list[float]) -> dict:
    return {"Id": query_id, "Label": label, "Timestamps": stamps, "Values": values, "StatusCode": "Complete"}


def test_pages_of_one_batch_are_followed_and_merged(moto_server):
    fs_id = create_file_system(moto_server, "paged")
    clients = stubbed(moto_server)
    now = aligned_now()
    first, second = now - timedelta(minutes=10), now - timedelta(minutes=5)
    label = f"{fs_id} BurstCreditBalance"
    with Stubber(clients.cloudwatch) as stub:
        stub.add_response(
            "get_metric_data",
            {
                "MetricDataResults": [metric_result("balance_0", label, [second], [2.0 * TIB])],
                "NextToken": "page-2",
            },
        )
        stub.add_response(
            "get_metric_data",
            {"MetricDataResults": [metric_result("balance_0", label, [first], [2.1 * TIB])]},
            {
                "MetricDataQueries": ANY,
                "StartTime": ANY,
                "EndTime": ANY,
                "ScanBy": ANY,
                "NextToken": "page-2",
            },
        )
        found = fetch_credit_series(clients, [fs_id], WINDOW, now)[fs_id]
        stub.assert_no_pending_responses()
    assert clients.calls.get_metric_data == 2
    assert [sample.value for sample in found.of(EfsMetric.BURST_CREDIT_BALANCE)] == [2.1 * TIB, 2.0 * TIB]


def test_throttling_becomes_a_throttled_problem_for_each_file_system(moto_server):
    # 70 file systems x 8 queries = 560: two batches, but the first one's throttling ends the interval.
    ids = [create_file_system(moto_server, f"t{n}") for n in range(70)]
    clients = stubbed(moto_server)
    with Stubber(clients.cloudwatch) as stub:
        stub.add_client_error("get_metric_data", "Throttling", "Rate exceeded", http_status_code=400)
        found = fetch_credit_series(clients, ids, WINDOW, aligned_now())
    assert clients.calls.get_metric_data == 1
    assert {value.reason for value in found.values()} == {ProblemReason.THROTTLED}
    assert [value.file_system_id for value in found.values()] == ids
    assert "next interval" in found[ids[0]].message


def test_access_denied_names_the_iam_actions(moto_server):
    fs_id = create_file_system(moto_server, "denied")
    clients = stubbed(moto_server)
    with Stubber(clients.cloudwatch) as stub:
        stub.add_client_error("get_metric_data", "AccessDenied", "not authorized", http_status_code=403)
        problem = fetch_credit_series(clients, [fs_id], WINDOW, aligned_now())[fs_id]
    assert problem.reason is ProblemReason.ACCESS_DENIED
    assert "cloudwatch:GetMetricData" in problem.message
    assert "elasticfilesystem:DescribeFileSystems" in problem.message
    assert "IRSA" in problem.message


def test_a_role_that_may_not_list_file_systems_describes_each(moto_server):
    clients = stubbed(moto_server)
    description = {
        "OwnerId": "123456789012", "CreationToken": "t", "FileSystemId": "fs-1", "CreationTime": datetime.now(UTC),
        "LifeCycleState": "available", "NumberOfMountTargets": 0, "PerformanceMode": "generalPurpose",
        "ThroughputMode": "elastic", "Tags": [],
        "SizeInBytes": {"Value": 30 * GIB, "ValueInStandard": 20 * GIB},
    }  # fmt: skip
    with Stubber(clients.efs) as stub:
        stub.add_client_error("describe_file_systems", "AccessDeniedException", "list denied", 403)
        stub.add_response("describe_file_systems", {"FileSystems": [description]}, {"FileSystemId": "fs-1"})
        stub.add_client_error("describe_file_systems", "AccessDeniedException", "denied", 403, None,
                              {"FileSystemId": "fs-2"})  # fmt: skip
        found = describe_file_systems(clients, ["fs-1", "fs-2"])
    assert found["fs-1"] == FileSystemFacts("fs-1", ThroughputMode.ELASTIC, 20 * GIB, None, "generalPurpose")
    assert found["fs-2"].reason is ProblemReason.ACCESS_DENIED
    assert clients.calls.describe_file_systems == 3


def test_throttling_is_retried_a_bounded_number_of_times(moto_server):
    fs_id = create_file_system(moto_server, "throttled")
    clients = make_clients(region=moto_server.region, endpoint_url=moto_server.endpoint_url, max_attempts=3)
    attempts = []

    def throttle(request, **_):
        attempts.append(request.url)
        return AWSResponse(
            request.url, 429, {"x-amzn-errortype": "ThrottlingException", "Content-Type": "application/json"},
            _Raw(b'{"ErrorCode": "ThrottlingException", "Message": "Rate exceeded"}'),
        )  # fmt: skip

    clients.efs.meta.events.register("before-send.efs.DescribeFileSystems", throttle)
    problem = describe_file_systems(clients, [fs_id])[fs_id]
    assert len(attempts) == 3
    assert problem.reason is ProblemReason.THROTTLED
    assert "after 3 attempts" in problem.message


class _Raw:
    """The body of a made-up HTTP response."""

    def __init__(self, body: bytes) -> None:
        self.body = body

    def stream(self, **_):
        yield self.body


def test_no_credentials_is_a_problem_not_a_crash(moto_server, monkeypatch):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name)
    clients = make_clients(region=moto_server.region, endpoint_url=moto_server.endpoint_url,
                           session=boto3.session.Session())  # fmt: skip
    found = fetch_credit_series(clients, ["fs-1", "fs-2"], WINDOW, aligned_now())
    assert {value.reason for value in found.values()} == {ProblemReason.NO_CREDENTIALS}
    assert "IRSA" in found["fs-1"].message


def test_an_unreachable_endpoint_is_unavailable_after_bounded_retries(aws_env):
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    clients = make_clients(region="us-east-1", endpoint_url=closed, max_attempts=2)
    found = fetch_credit_series(clients, ["fs-1", "fs-2"], WINDOW, aligned_now())
    assert {value.reason for value in found.values()} == {ProblemReason.UNAVAILABLE}
    assert "endpoint URL" in found["fs-1"].message


# -- the CLI on moto ------------------------------------------------------------------------------------------


def test_cli_forecast_json_and_exit_codes(moto_server):
    ids = seed(moto_server, aligned_now())
    common = (
        "--region",
        moto_server.region,
        "--endpoint-url",
        moto_server.endpoint_url,
        "--window",
        "2h",
        "--json",
    )

    draining = cli("forecast", "--file-system-id", ids["draining"], *common)
    assert draining.returncode == 1, draining.stderr
    document = json.loads(draining.stdout)
    assert document["file_system_id"] == ids["draining"]
    assert document["throughput_mode"] == "bursting"
    assert document["size_gib"] == pytest.approx(20)
    assert document["state"] == "Draining"
    assert document["balance_bytes"] == pytest.approx(1.2 * TIB)
    assert document["slope_bytes_per_second"] == pytest.approx(-96 * MIB)
    assert document["time_to_empty_seconds"] == pytest.approx(1.2 * 1024**2 / 96)
    assert document["metadata_share"] == pytest.approx(0.47)
    assert document["recommendation"]["mode"] == "provisioned"

    trap = cli("forecast", "--file-system-id", ids["trap"], *common)
    assert trap.returncode == 1
    assert json.loads(trap.stdout)["state"] == "Trap"
    assert json.loads(trap.stdout)["ops_budget_per_second"] == {"writes_or_metadata": 256, "reads": 768}

    healthy = cli("forecast", "--file-system-id", ids["healthy"], *common)
    assert healthy.returncode == 0
    assert json.loads(healthy.stdout)["state"] == "Healthy"

    words = cli("forecast", "--file-system-id", ids["draining"], *common[:-1])
    assert words.returncode == 1
    assert "falling 96 MiB/s: empty in 3.6 h" in " ".join(words.stdout.split())


def test_cli_problems_exit_2_with_the_remedy(moto_server):
    common = ("--region", moto_server.region, "--endpoint-url", moto_server.endpoint_url)
    missing = cli("forecast", "--file-system-id", "fs-00000000", *common, "--json")
    assert missing.returncode == 2
    assert json.loads(missing.stdout)["problem"]["reason"] == "FileSystemNotFound"
    assert "FileSystemNotFound" in missing.stderr

    no_credentials = {k: v for k, v in os.environ.items() if not k.startswith("AWS_ACCESS") and k not in (
        "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")}  # fmt: skip
    denied = cli("forecast", "--file-system-id", "fs-1", *common, env=no_credentials)
    assert denied.returncode == 2
    assert "NoCredentials" in denied.stderr and "IRSA" in " ".join(denied.stderr.split())

    no_region = {k: v for k, v in os.environ.items() if k not in ("AWS_REGION", "AWS_DEFAULT_REGION")}
    nowhere = cli(
        "forecast", "--file-system-id", "fs-1", "--endpoint-url", moto_server.endpoint_url, env=no_region
    )
    assert nowhere.returncode == 2
    assert "--region" in nowhere.stderr


def test_cli_watch_serves_several_file_systems_per_round(moto_server):
    ids = seed(moto_server, aligned_now())
    watched = cli(
        "watch", "--file-system-id", ids["healthy"], "--file-system-id", ids["trap"],
        "--region", moto_server.region, "--endpoint-url", moto_server.endpoint_url,
        "--window", "2h", "--interval", "1s", "--count", "2", "--json",
    )  # fmt: skip
    assert watched.returncode == 1, watched.stderr
    rounds = [json.loads(line) for line in watched.stdout.splitlines()]
    assert len(rounds) == 2
    assert [fs["state"] for fs in rounds[-1]["file_systems"]] == ["Healthy", "Trap"]

    table = cli(
        "watch", "--file-system-id", ids["healthy"], "--file-system-id", "fs-00000000",
        "--region", moto_server.region, "--endpoint-url", moto_server.endpoint_url, "--count", "1",
        env=dict(os.environ, COLUMNS="300"),
    )  # fmt: skip
    assert table.returncode == 2
    assert ids["healthy"] in table.stdout and "FileSystemNotFound" in table.stdout


# -- the scenarios of a day's cycle, through the CLI at its default window (48 h) ------------------------------


def forecast_json(moto: MotoServer, file_system_id: str, *extra: str) -> tuple[int, dict]:
    done = cli("forecast", "--file-system-id", file_system_id, "--region", moto.region,
               "--endpoint-url", moto.endpoint_url, "--json", *extra)
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, json.loads(done.stdout)


def test_cli_reads_a_nightly_drain_as_draining_and_a_healthy_cycle_as_healthy(moto_server):
    now = aligned_now()
    # Both jobs ended 6 hours ago: now the balance rises at the baseline, as in the middle of a day.
    nightly = seed_scenario(moto_server, nightly_drain(job_ends_before_end=6 * HOUR), now)
    healthy = seed_scenario(moto_server, healthy_cycle(job_ends_before_end=6 * HOUR), now)

    code, document = forecast_json(moto_server, nightly)
    assert code == 1
    assert document["state"] == "Draining"
    assert document["slope_bytes_per_second"] > 0  # the newest hour rises: only days see the drain
    assert document["net_change_per_day_bytes"] / GIB == pytest.approx(-597.7, rel=0.01)
    assert document["time_to_empty_basis"] == "day-over-day"
    at_net_rate = document["balance_bytes"] / (-document["net_change_per_day_bytes"] / 86400)
    assert document["time_to_empty_seconds"] == pytest.approx(at_net_rate)
    assert document["history_seconds"] == pytest.approx(48 * 3600, abs=600)

    code, document = forecast_json(moto_server, healthy)
    assert code == 0
    assert document["state"] == "Healthy"
    assert abs(document["net_change_per_day_bytes"]) < GIB
    assert document["time_to_empty_seconds"] is None

    # A day of history holds one job and no day to compare it with: the drain is invisible.
    code, document = forecast_json(moto_server, nightly, "--window", "24h")
    assert (code, document["state"], document["net_change_per_day_bytes"]) == (0, "Healthy", None)


def test_cli_reads_a_slow_multi_day_drain_at_its_net_rate(moto_server):
    slow = seed_scenario(moto_server, slow_drain(), aligned_now())
    code, document = forecast_json(moto_server, slow)
    assert (code, document["state"], document["time_to_empty_basis"]) == (1, "Draining", "day-over-day")
    assert document["net_change_per_day_bytes"] == pytest.approx(-0.6 * MIB * 86400, rel=0.005)
    assert document["time_to_empty_seconds"] / 86400 == pytest.approx(27.4, abs=0.2)


def test_cli_advises_elastic_with_its_cost_in_the_trap(moto_server):
    importer = seed_scenario(moto_server, trap(), aligned_now())
    code, document = forecast_json(moto_server, importer)
    assert (code, document["state"]) == (1, "Trap")
    advice = document["recommendation"]
    assert advice["mode"] == "elastic"
    assert advice["basis"] is None and advice["provisioned_mibps"] is None
    assert "demand is censored" in advice["reason"]
    # 4 KiB SQLite page writes are billed at 32 KiB each: counted through SampleCount, hour by hour.
    estimate = document["elastic_estimate"]
    assert estimate["minimums_applied"] is True
    assert 500 < advice["monthly_cost_usd"]["elastic"] == estimate["monthly_cost_usd"] < 520
    assert estimate["billed_write_bytes"] > 7.5 * 47 / 48 * trap_written_bytes()
    assert "us-east-1" in estimate["prices"] and "aws.amazon.com/efs/pricing" in estimate["prices"]


def test_cli_advice_fits_a_max_io_file_system(moto_server):
    # DescribeFileSystems says Max I/O: Elastic cannot serve it and the mode cannot change.
    importer = seed_scenario(moto_server, trap(), aligned_now(), PerformanceMode="maxIO")
    code, document = forecast_json(moto_server, importer)
    assert (code, document["state"], document["performance_mode"]) == (1, "Trap", "maxIO")
    advice = document["recommendation"]
    assert advice["mode"] == "elastic"  # nothing to size Provisioned by: a new General Purpose file system
    assert "Max I/O performance mode, which Elastic throughput does not support" in advice["reason"]
    assert "new General Purpose file system in Elastic mode" in advice["reason"]


def trap_written_bytes() -> float:
    return sum(value for _, value in trap().series[EfsMetric.DATA_WRITE_IO_BYTES])


def test_cli_sizes_provisioned_only_by_the_unthrottled_day_and_names_it(moto_server):
    now = aligned_now()
    steady = seed_scenario(moto_server, trap_after_steady_load(), now)
    code, document = forecast_json(moto_server, steady)
    assert (code, document["state"]) == (1, "Trap")
    advice = document["recommendation"]
    assert advice["mode"] == "provisioned" and advice["provisioned_mibps"] == 8
    assert advice["monthly_cost_usd"]["provisioned"] == 42.0
    assert advice["monthly_cost_usd"]["elastic"] > 1000
    basis = advice["basis"]
    assert basis["selection"] == "balance above zero: not throttled"
    assert basis["periods"] == pytest.approx(286, abs=2)
    assert basis["average_bytes_per_second"] == pytest.approx(8 * MIB)
    assert datetime.fromisoformat(basis["end"]) < now - timedelta(hours=23)  # the first day, not the throttled one
    assert "throttled periods (censored" in advice["reason"] and "provision about 8 MiB/s" in advice["reason"]
