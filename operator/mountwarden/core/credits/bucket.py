"""The EFS burst-credit bucket for a file system of a given size, as AWS documents it.

For S GiB in the Standard storage class, in Bursting throughput mode:

- baseline ``b = max(50 KiB/s * S, 1 MiB/s)``: the rate credits are earned and the
  rate the file system falls to once the balance is zero;
- burst ceiling ``p = max(100 KiB/s * S, 100 MiB/s)``: the permitted rate while the
  balance is above zero;
- the balance moves at ``b - m`` (``m`` = metered throughput), capped at 2.1 TiB
  below 1 TiB of data and at 2.1 TiB per TiB above.

Rates are bytes per second, balances are bytes, sizes are GiB (units in
:mod:`mountwarden.core.credits.units`).
"""

from dataclasses import dataclass
from enum import StrEnum

from mountwarden.core.credits.units import KIB, MIB, TIB

BASELINE_PER_GIB = 50 * KIB
MIN_BASELINE = 1 * MIB
BURST_PER_GIB = 100 * KIB
MIN_BURST = 100 * MIB
BALANCE_CAP_PER_TIB_OF_DATA = 2.1 * TIB
GIB_PER_TIB = 1024

#: Every NFS request is metered as at least this many bytes (see metering).
SMALL_REQUEST_BYTES = 4 * KIB
#: Reads are metered at one third of the rate of writes and metadata.
READ_METERING_FACTOR = 1 / 3

#: Best-case round trips of one synchronous client, which waits for each reply
#: before it sends the next request: no credit balance makes it faster than this.
READ_ROUND_TRIP_SECONDS = 0.001
WRITE_ROUND_TRIP_SECONDS = 0.0027


class ThroughputMode(StrEnum):
    """EFS throughput modes, spelled as DescribeFileSystems spells them."""

    BURSTING = "bursting"
    PROVISIONED = "provisioned"
    ELASTIC = "elastic"


@dataclass(frozen=True)
class OpsBudget:
    """Small (4 KiB-metered) requests per second that a permitted throughput allows."""

    writes_or_metadata: float
    reads: float

    @classmethod
    def for_throughput(cls, permitted_bytes_per_second: float) -> "OpsBudget":
        writes = permitted_bytes_per_second / SMALL_REQUEST_BYTES
        return cls(writes_or_metadata=writes, reads=writes / READ_METERING_FACTOR)

    def to_json(self) -> dict[str, float]:
        return {"writes_or_metadata": self.writes_or_metadata, "reads": self.reads}


@dataclass(frozen=True)
class SingleClientCeiling:
    """Requests per second one synchronous client can issue, bounded by round trips."""

    reads: float = 1 / READ_ROUND_TRIP_SECONDS
    writes: float = 1 / WRITE_ROUND_TRIP_SECONDS


@dataclass(frozen=True)
class CreditBucket:
    """The bucket of a Bursting file system holding ``size_gib`` GiB of Standard data."""

    size_gib: float

    def __post_init__(self) -> None:
        if not self.size_gib >= 0:  # also rejects NaN
            raise ValueError(f"size_gib must be zero or more, not {self.size_gib!r}")

    @property
    def baseline_bytes_per_second(self) -> float:
        return max(BASELINE_PER_GIB * self.size_gib, MIN_BASELINE)

    @property
    def burst_bytes_per_second(self) -> float:
        return max(BURST_PER_GIB * self.size_gib, MIN_BURST)

    @property
    def max_balance_bytes(self) -> float:
        return BALANCE_CAP_PER_TIB_OF_DATA * max(1.0, self.size_gib / GIB_PER_TIB)

    @property
    def seconds_to_drain_full_at_burst(self) -> float:
        # While bursting the baseline keeps earning, so the net drain is p - b.
        return self.max_balance_bytes / (self.burst_bytes_per_second - self.baseline_bytes_per_second)

    @property
    def seconds_to_refill_from_empty(self) -> float:
        # At idle (m = 0) the balance grows at the full baseline.
        return self.max_balance_bytes / self.baseline_bytes_per_second

    @property
    def ops_budget_when_empty(self) -> OpsBudget:
        return OpsBudget.for_throughput(self.baseline_bytes_per_second)

    def permitted_bytes_per_second(self, balance_bytes: float | None) -> float:
        """The ceiling EFS applies in Bursting mode: the burst while credits remain."""
        if balance_bytes is not None and balance_bytes > 0:
            return self.burst_bytes_per_second
        return self.baseline_bytes_per_second

    def to_json(self) -> dict[str, object]:
        """The fields of ``mountwarden credits model --json``."""
        return {
            "size_gib": self.size_gib,
            "baseline_bytes_per_second": self.baseline_bytes_per_second,
            "burst_bytes_per_second": self.burst_bytes_per_second,
            "max_balance_bytes": self.max_balance_bytes,
            "hours_to_drain_full_at_burst": self.seconds_to_drain_full_at_burst / 3600,
            "days_to_refill_from_empty": self.seconds_to_refill_from_empty / 86400,
            "ops_budget_per_second": self.ops_budget_when_empty.to_json(),
        }
