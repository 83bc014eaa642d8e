"""Binary units, and how the credit model writes bytes, rates and durations for people.

Amazon EFS states its limits in binary units: KiB = 1024 bytes, MiB = 1024**2,
GiB = 1024**3, TiB = 1024**4. "2.1 TiB" of credits is 2.1 * 1024**4 bytes.
"""

import math

KIB = 1024
MIB = 1024**2
GIB = 1024**3
TIB = 1024**4

_BYTE_UNITS = ((TIB, "TiB"), (GIB, "GiB"), (MIB, "MiB"), (KIB, "KiB"))


def format_bytes(count: float) -> str:
    """``1.2 TiB``, ``16.2 GiB``, ``471 KiB``, ``512 B``: one decimal below 100, none above."""
    if not math.isfinite(count):
        return str(count)
    size = abs(count)
    for unit, name in _BYTE_UNITS:
        if size >= unit:
            return f"{_number(count / unit)} {name}"
    return f"{_number(count)} B"


def format_rate(bytes_per_second: float) -> str:
    """``96 MiB/s``."""
    return f"{format_bytes(bytes_per_second)}/s"


def format_duration(seconds: float) -> str:
    """``45 s``, ``12 min``, ``3.6 h``, ``25 days``."""
    if not math.isfinite(seconds):
        return str(seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{_number(seconds / 3600)} h"
    return f"{_number(seconds / 86400)} days"


def _number(value: float) -> str:
    rounded = f"{value:.1f}" if abs(value) < 100 else f"{value:.0f}"
    return rounded.removesuffix(".0")
