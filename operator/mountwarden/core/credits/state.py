"""The states a credit forecast can be in, and what a time to empty was projected from."""

from enum import StrEnum


class CreditState(StrEnum):
    HEALTHY = "Healthy"
    DRAINING = "Draining"
    EMPTY = "Empty"
    TRAP = "Trap"
    UNKNOWN = "Unknown"


class DrainBasis(StrEnum):
    """What ``time_to_empty_seconds`` was projected from (see :mod:`.daily`)."""

    #: The slope fitted over the trend window: a drain that is new today.
    SLOPE = "slope"
    #: The mean balance of the last 24 hours against the 24 hours before, and so on.
    DAY_OVER_DAY = "day-over-day"
    #: Yesterday from this hour on, replayed from today's balance: it ran empty, or fell further than today holds.
    SAME_TIME_YESTERDAY = "same time yesterday"
