"""How EFS meters requests against the permitted throughput.

- Bursting and Provisioned: every request counts as at least 4 KiB; reads count
  one third of their bytes (so a 4 KiB read costs 4/3 KiB).
- Elastic: metadata requests count as at least 4 KiB and data requests (reads
  and writes) as at least 32 KiB. Elastic has no credit bucket and limits reads
  and writes separately, so reads get no one-third discount here.
"""

from dataclasses import dataclass
from enum import StrEnum

from mountwarden.core.credits.bucket import READ_METERING_FACTOR, SMALL_REQUEST_BYTES, ThroughputMode
from mountwarden.core.credits.units import KIB

ELASTIC_DATA_MINIMUM_BYTES = 32 * KIB


class RequestKind(StrEnum):
    READ = "read"
    WRITE = "write"
    METADATA = "metadata"


def metered_bytes(
    kind: RequestKind,
    request_bytes: float = 0,
    mode: ThroughputMode = ThroughputMode.BURSTING,
) -> float:
    """Bytes one request of ``request_bytes`` payload is metered as."""
    if mode is ThroughputMode.ELASTIC:
        minimum = SMALL_REQUEST_BYTES if kind is RequestKind.METADATA else ELASTIC_DATA_MINIMUM_BYTES
        return max(request_bytes, minimum)
    counted = max(request_bytes, SMALL_REQUEST_BYTES)
    return counted * READ_METERING_FACTOR if kind is RequestKind.READ else counted


@dataclass(frozen=True)
class MetadataLoad:
    """What a count of metadata requests over a window costs a Bursting file system."""

    metered_metadata_bytes: float
    metered_metadata_bytes_per_second: float
    #: The metered rate as a fraction of the baseline: 1.0 uses all of it.
    baseline_share: float

    def to_json(self) -> dict[str, float]:
        return {
            "metered_metadata_bytes": self.metered_metadata_bytes,
            "metered_metadata_bytes_per_second": self.metered_metadata_bytes_per_second,
            "baseline_share": self.baseline_share,
        }


def metadata_load(ops: float, window_seconds: float, baseline_bytes_per_second: float) -> MetadataLoad:
    """Meter ``ops`` metadata requests (GETATTR, LOOKUP, ACCESS, ...) spread over a window."""
    if not window_seconds > 0:
        raise ValueError(f"window_seconds must be above zero, not {window_seconds!r}")
    total = ops * metered_bytes(RequestKind.METADATA)
    rate = total / window_seconds
    return MetadataLoad(
        metered_metadata_bytes=total,
        metered_metadata_bytes_per_second=rate,
        baseline_share=rate / baseline_bytes_per_second,
    )
