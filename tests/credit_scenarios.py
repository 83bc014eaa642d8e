"""Credit scenarios for tests: days of AWS/EFS series made by running EFS's documented token bucket.

Each scenario states what its consumers *ask for* per 5-minute period (bytes written
and read and their request sizes, metadata requests); :func:`simulate` runs the
Bursting bucket over it the way EFS documents it (mountwarden.core.credits.bucket):
the balance earns the baseline and pays the metered bytes, the permitted rate is the
burst ceiling while credits remain and the baseline once they are gone, and a demand
above the permitted rate is throttled to it (every part of the load alike). What it
produces is what CloudWatch would hold: per period the lowest balance, the permitted
rate, metered bytes (reads at a third, every request at least 4 KiB), data and
metadata bytes with their request counts (SampleCount).

The same series feed the unit tests (as a CreditSeries) and the moto server (through
PutMetricData with StatisticValues, so that both Sum and SampleCount answer).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from mountwarden.core.credits import (
    GIB,
    KIB,
    MIB,
    TIB,
    CreditBucket,
    CreditSeries,
    EfsMetric,
    Sample,
    ThroughputMode,
)

PERIOD = 300
HOUR = 3600
DAY = 86400


@dataclass(frozen=True)
class Ask:
    """What the consumers ask for during one period, per second."""

    write_bytes: float = 0.0
    write_size: float = MIB
    read_bytes: float = 0.0
    read_size: float = MIB
    metadata_ops: float = 0.0

    def metered(self) -> float:
        """Bytes per second as EFS meters them: every request at least 4 KiB, reads at a third."""
        writes = self.write_bytes / self.write_size * max(self.write_size, 4 * KIB) if self.write_bytes else 0.0
        reads = self.read_bytes / self.read_size * max(self.read_size, 4 * KIB) if self.read_bytes else 0.0
        return writes + reads / 3 + self.metadata_ops * 4 * KIB


@dataclass
class Scenario:
    name: str
    size_gib: float
    hours: int
    start_balance: float
    #: What is asked at a moment, given as seconds before the end of the series.
    ask: Callable[[float], Ask]
    series: dict[EfsMetric, list[tuple[float, float]]] = field(default_factory=dict)

    @property
    def points(self) -> int:
        return self.hours * HOUR // PERIOD


def simulate(scenario: Scenario) -> Scenario:
    """Fill ``scenario.series``: per metric, (seconds before the end, value), oldest first."""
    bucket = CreditBucket(scenario.size_gib)
    baseline, burst, cap = bucket.baseline_bytes_per_second, bucket.burst_bytes_per_second, bucket.max_balance_bytes
    balance = scenario.start_balance
    series: dict[EfsMetric, list[tuple[float, float]]] = {metric: [] for metric in EfsMetric}
    for index in range(scenario.points):
        before_end = (scenario.points - index) * PERIOD  # the period starts this long before the end
        ask = scenario.ask(before_end)
        permitted = burst if balance > 0 else baseline
        asked = ask.metered()
        served = 1.0 if asked <= permitted else permitted / asked  # throttled: every part alike
        metered = asked * served
        after = min(cap, max(0.0, balance + (baseline - metered) * PERIOD))
        writes, reads = ask.write_bytes * served * PERIOD, ask.read_bytes * served * PERIOD
        metadata_ops = ask.metadata_ops * served * PERIOD
        row = {
            EfsMetric.BURST_CREDIT_BALANCE: min(balance, after),
            EfsMetric.PERMITTED_THROUGHPUT: permitted,
            EfsMetric.METERED_IO_BYTES: metered * PERIOD,
            EfsMetric.DATA_WRITE_IO_BYTES: writes,
            EfsMetric.DATA_WRITE_OPS: writes / ask.write_size,
            EfsMetric.DATA_READ_IO_BYTES: reads,
            EfsMetric.DATA_READ_OPS: reads / ask.read_size,
            EfsMetric.METADATA_IO_BYTES: metadata_ops * 200,  # a GETATTR's actual bytes, about
            EfsMetric.METADATA_OPS: metadata_ops,
            EfsMetric.PERCENT_IO_LIMIT: min(100.0, 100 * metadata_ops / PERIOD / 35_000),
        }
        for metric, value in row.items():
            series[metric].append((before_end, value))
        balance = after
    scenario.series = series
    return scenario


HOURLY = (EfsMetric.DATA_READ_OPS, EfsMetric.DATA_WRITE_OPS, EfsMetric.METADATA_OPS)


def credit_series(scenario: Scenario, end: datetime, file_system_id: str = "fs-0123456789abcdef0") -> CreditSeries:
    """The series as GetMetricData would answer it over (end - hours, end]: 5-minute points stamped at
    their period's start, request counts summed into hours counted from the window's start."""
    start = end - timedelta(hours=scenario.hours)
    samples: dict[EfsMetric, tuple[Sample, ...]] = {}
    for metric, points in scenario.series.items():
        stamped = [(end - timedelta(seconds=before_end), value) for before_end, value in points]
        if metric in HOURLY:
            hourly: dict[datetime, float] = {}
            for at, value in stamped:
                hour = start + timedelta(seconds=(at - start).total_seconds() // HOUR * HOUR)
                hourly[hour] = hourly.get(hour, 0.0) + value
            samples[metric] = tuple(Sample(at, value) for at, value in sorted(hourly.items()) if value > 0)
        else:
            samples[metric] = tuple(Sample(at, value) for at, value in stamped)
    return CreditSeries(
        file_system_id=file_system_id,
        throughput_mode=ThroughputMode.BURSTING,
        size_bytes=scenario.size_gib * GIB,
        period_seconds=PERIOD,
        samples=samples,
    )


def daily_job(job_ends_before_end: float, hours: float, during: Ask, otherwise: Ask) -> Callable[[float], Ask]:
    """A job of ``hours`` every day, the newest one ending ``job_ends_before_end`` seconds before the end."""

    def ask(before_end: float) -> Ask:
        # Seconds from the start of this period back to the newest job end at or before it.
        phase = (before_end - job_ends_before_end) % DAY
        return during if 0 < phase <= hours * HOUR else otherwise

    return ask


QUIET = Ask(metadata_ops=10)


def nightly_drain(job_ends_before_end: float = 6 * HOUR) -> Scenario:
    """20 GiB: a 2-hour nightly job asks 97 MiB/s (1 MiB writes); the baseline earns 1 MiB/s.

    Per day the job drains 96 MiB/s x 2 h = 675 GiB net while 22 hours earn 77 GiB:
    about 598 GiB a day lost, from a full 2.1 TiB bucket, over three days.
    """
    return simulate(Scenario(
        "nightly", 20, 72, 2.1 * TIB,
        daily_job(job_ends_before_end, 2, Ask(write_bytes=97 * MIB - 40 * KIB, metadata_ops=10), QUIET),
    ))


def healthy_cycle(job_ends_before_end: float = 6 * HOUR) -> Scenario:
    """20 GiB: a 2-hour nightly job asks 10 MiB/s; the 63 GiB it drains is back within 20 hours."""
    return simulate(Scenario(
        "healthy", 20, 72, 2.1 * TIB,
        daily_job(job_ends_before_end, 2, Ask(write_bytes=10 * MIB - 40 * KIB, metadata_ops=10), QUIET),
    ))


def slow_drain() -> Scenario:
    """20 GiB: a steady 1.6 MiB/s against a 1 MiB/s baseline: 0.6 MiB/s, about 50 GiB a day, from 1.5 TiB."""
    return simulate(Scenario("slow", 20, 72, 1.5 * TIB, lambda _: Ask(write_bytes=1.6 * MIB - 40 * KIB,
                                                                      metadata_ops=10)))


def trap() -> Scenario:
    """20 GiB, empty for two days: an importer asks for 3 MiB/s of 4 KiB SQLite page writes and 500
    metadata requests/s, and is throttled to the 1 MiB/s baseline. On Elastic each 4 KiB write is billed
    as 32 KiB."""
    return simulate(Scenario("trap", 20, 48, 0.0, lambda _: Ask(write_bytes=1 * MIB, write_size=4 * KIB,
                                                                 metadata_ops=500)))


def trap_after_steady_load() -> Scenario:
    """20 GiB: a steady 8 MiB/s of 1 MiB writes, unthrottled while a 590 GiB balance lasts (about a day),
    then throttled to the 1 MiB/s baseline: the unthrottled day justifies Provisioned at 9 MiB/s."""
    return simulate(Scenario("provision", 20, 48, 590 * GIB, lambda _: Ask(write_bytes=8 * MIB - 40 * KIB,
                                                                          metadata_ops=10)))
