"""A real local moto server (EFS, CloudWatch, ...) for tests that talk to AWS through boto3.

The fixtures live in tests/operator_fixtures.py; the seeding helpers here write
AWS/EFS metric series into moto the way CloudWatch would hold them.

- ``moto_server``: one ThreadedMotoServer per test session on 127.0.0.1 and a
  free port; its state is reset before each test that uses it.
- ``aws_env``: dummy credentials and region in the environment, with the
  shared config and credentials files pointed at empty files and the instance
  metadata service disabled, so that nothing of the host's AWS setup leaks in.
"""

import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import boto3
from tests.credit_scenarios import PERIOD as SCENARIO_PERIOD
from tests.credit_scenarios import Scenario

from mountwarden.core.credits import GIB, MIB, TIB, EfsMetric

REGION = "us-east-1"
PERIOD = 300
WINDOW = timedelta(hours=2)
POINTS = int(WINDOW.total_seconds() // PERIOD)


@dataclass(frozen=True)
class MotoServer:
    endpoint_url: str
    region: str = REGION

    def reset(self) -> None:
        """Forget every resource and metric (moto's own reset API)."""
        request = urllib.request.Request(f"{self.endpoint_url}/moto-api/reset", method="POST")
        with urllib.request.urlopen(request, timeout=10):
            pass


#: Host settings that would send boto3 elsewhere than moto.
LEAKY_AWS_VARIABLES = (
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_ROLE_ARN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
)


def dummy_aws_environment(scratch: Path) -> dict[str, str]:
    """Dummy credentials for moto, isolated from the host's ~/.aws and instance metadata."""
    empty = scratch / "aws-empty"
    empty.write_text("")
    return {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_REGION": REGION,
        "AWS_CONFIG_FILE": str(empty),
        "AWS_SHARED_CREDENTIALS_FILE": str(empty),
        "AWS_EC2_METADATA_DISABLED": "true",
    }


def aligned_now() -> datetime:
    return datetime.now(UTC).replace(second=0, microsecond=0)


def period_middles(now: datetime) -> list[datetime]:
    """One stamp in the middle of each 5-minute bucket of (now - WINDOW, now], oldest first.

    moto counts buckets from StartTime = now - WINDOW; the middle keeps each point in its bucket
    even when the CLI's own "now" is a few seconds later.
    """
    start = now - WINDOW
    return [start + timedelta(seconds=PERIOD * i + PERIOD / 2) for i in range(POINTS)]


def put_series(
    cloudwatch, fs_id: str, metric: str, values: list[float], now: datetime, **dimensions: str
) -> None:
    dims = [{"Name": "FileSystemId", "Value": fs_id}] + [
        {"Name": k, "Value": v} for k, v in dimensions.items()
    ]
    data = [
        {"MetricName": metric, "Dimensions": dims, "Timestamp": at, "Value": value}
        for at, value in zip(period_middles(now)[-len(values) :], values, strict=True)
    ]
    for start in range(0, len(data), 500):
        cloudwatch.put_metric_data(Namespace="AWS/EFS", MetricData=data[start : start + 500])


def boto(moto: MotoServer, service: str):
    return boto3.client(service, region_name=moto.region, endpoint_url=moto.endpoint_url)


def create_file_system(moto: MotoServer, token: str, **arguments) -> str:
    return boto(moto, "efs").create_file_system(CreationToken=token, **arguments)["FileSystemId"]


def create_mount_targets(moto: MotoServer, file_system_id: str, addresses: dict[str, str]) -> dict[str, str]:
    """A mount target in each zone (its suffix: "a") at the address given, each in a /24 subnet of its own, all
    in one /16 VPC: zone -> mount target ID."""
    ec2, efs = boto(moto, "ec2"), boto(moto, "efs")
    first = next(iter(addresses.values())).split(".")
    vpc = ec2.create_vpc(CidrBlock=f"{first[0]}.{first[1]}.0.0/16")["Vpc"]["VpcId"]
    targets = {}
    for suffix, address in addresses.items():
        zone = f"{moto.region}{suffix}"
        subnet = ec2.create_subnet(VpcId=vpc, CidrBlock=address.rsplit(".", 1)[0] + ".0/24",
                                   AvailabilityZone=zone)["Subnet"]["SubnetId"]
        targets[zone] = efs.create_mount_target(FileSystemId=file_system_id, SubnetId=subnet,
                                                IpAddress=address)["MountTargetId"]
    return targets


def seed(moto: MotoServer, now: datetime) -> dict[str, str]:
    """Three 20 GiB Bursting file systems: one draining, one in the trap, one healthy."""
    cloudwatch = boto(moto, "cloudwatch")
    ids = {name: create_file_system(moto, name) for name in ("draining", "trap", "healthy")}
    for fs_id in ids.values():
        put_series(cloudwatch, fs_id, "StorageBytes", [20 * GIB] * 4, now, StorageClass="Standard")
        # Total includes Infrequent Access: it must not be taken for the size that earns credits.
        put_series(cloudwatch, fs_id, "StorageBytes", [900 * GIB] * 4, now, StorageClass="Total")

    # Draining: metered 97 MiB/s against a 1 MiB/s baseline, so the balance falls 96 MiB/s to 1.2 TiB.
    fs = ids["draining"]
    falling = [1.2 * TIB + 96 * MIB * PERIOD * (POINTS - 1 - i) for i in range(POINTS)]
    put_series(cloudwatch, fs, "BurstCreditBalance", falling, now)
    put_series(cloudwatch, fs, "PermittedThroughput", [100 * MIB] * POINTS, now)
    put_series(cloudwatch, fs, "MeteredIOBytes", [97 * MIB * PERIOD] * POINTS, now)
    put_series(cloudwatch, fs, "DataWriteIOBytes", [0.53 * 97 * MIB * PERIOD] * POINTS, now)
    put_series(cloudwatch, fs, "DataReadIOBytes", [0.0] * POINTS, now)
    put_series(cloudwatch, fs, "MetadataIOBytes", [MIB] * POINTS, now)
    put_series(cloudwatch, fs, "PercentIOLimit", [12.0] * POINTS, now)

    # Trap: no credits, and metered at the 1 MiB/s permitted rate.
    fs = ids["trap"]
    put_series(cloudwatch, fs, "BurstCreditBalance", [0.0] * POINTS, now)
    put_series(cloudwatch, fs, "PermittedThroughput", [MIB] * POINTS, now)
    put_series(cloudwatch, fs, "MeteredIOBytes", [MIB * PERIOD] * POINTS, now)
    put_series(cloudwatch, fs, "MetadataIOBytes", [0.9 * MIB * PERIOD] * POINTS, now)

    # Healthy: a full bucket and a light load.
    fs = ids["healthy"]
    put_series(cloudwatch, fs, "BurstCreditBalance", [2.1 * TIB] * POINTS, now)
    put_series(cloudwatch, fs, "PermittedThroughput", [100 * MIB] * POINTS, now)
    put_series(cloudwatch, fs, "MeteredIOBytes", [0.1 * MIB * PERIOD] * POINTS, now)
    return ids


#: Metrics whose requests are counted (SampleCount): put as StatisticValues, so both Sum and SampleCount answer.
_COUNTED = {
    EfsMetric.DATA_READ_IO_BYTES: EfsMetric.DATA_READ_OPS,
    EfsMetric.DATA_WRITE_IO_BYTES: EfsMetric.DATA_WRITE_OPS,
    EfsMetric.METADATA_IO_BYTES: EfsMetric.METADATA_OPS,
}
_PLAIN = (EfsMetric.BURST_CREDIT_BALANCE, EfsMetric.PERMITTED_THROUGHPUT, EfsMetric.METERED_IO_BYTES,
          EfsMetric.PERCENT_IO_LIMIT)


def seed_scenario(moto: MotoServer, scenario: Scenario, now: datetime, **arguments) -> str:
    """A Bursting file system holding ``scenario``'s series, the newest period ending at ``now``.

    Each point is stamped in the middle of its period, so that it stays in its bucket whichever
    StartTime a query counts buckets from (the CLI's "now" is a few seconds later than this one).
    moto reports no size (SizeInBytes 0): the size is the StorageBytes (Standard) metric, as for
    the seed above. ``arguments`` go to CreateFileSystem (PerformanceMode="maxIO").
    """
    fs_id = create_file_system(moto, scenario.name, **arguments)
    cloudwatch = boto(moto, "cloudwatch")
    dimensions = [{"Name": "FileSystemId", "Value": fs_id}]
    data = []
    for metric in _PLAIN:
        for before_end, value in scenario.series[metric]:
            data.append({"MetricName": metric.value, "Dimensions": dimensions, "Value": value,
                         "Timestamp": now - timedelta(seconds=before_end - SCENARIO_PERIOD / 2)})
    for metric, counted in _COUNTED.items():
        for (before_end, total), (_, requests) in zip(scenario.series[metric], scenario.series[counted], strict=True):
            if requests <= 0:
                continue  # CloudWatch has no point for a period without requests
            size = total / requests
            data.append({"MetricName": metric.value, "Dimensions": dimensions,
                         "Timestamp": now - timedelta(seconds=before_end - SCENARIO_PERIOD / 2),
                         "StatisticValues": {"SampleCount": requests, "Sum": total, "Minimum": size, "Maximum": size}})
    for hours_before in range(0, scenario.hours, 6):
        data.append({"MetricName": "StorageBytes", "Value": scenario.size_gib * GIB,
                     "Dimensions": [*dimensions, {"Name": "StorageClass", "Value": "Standard"}],
                     "Timestamp": now - timedelta(hours=hours_before, minutes=30)})
    for start in range(0, len(data), 500):
        cloudwatch.put_metric_data(Namespace="AWS/EFS", MetricData=data[start : start + 500])
    return fs_id
