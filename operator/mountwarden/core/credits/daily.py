"""What whole days of history say that an hour cannot: the day-over-day change, and yesterday replayed.

A nightly job that drains more than the rest of the day refills looks, through any
one hour, like a steep drain (during the job) or a gentle rise (the other 22 hours),
and a slope fitted over a day treats the job's two hours as outliers. Days compared
with days see it: a 20 GiB file system whose 2-hour job drains 696 GiB while the day
refills 77 GiB loses about 620 GiB a day, at whatever hour one looks.

- :func:`net_change_per_day`: the mean balance of the newest 24 hours minus the mean of
  the 24 hours before (with more whole days, the Theil–Sen slope of the daily means).
  Means of whole days are phase-free: the job falls inside each day whenever it runs,
  so a job that starts ten minutes later tonight changes nothing.
- :func:`steepest_slope_around`: how fast the balance fell at this time yesterday
  (within ``jitter`` either side). A drain seen now that also ran yesterday is the
  daily cycle, judged by the day-over-day change; one that did not is new.
- :func:`replay_yesterday`: yesterday from this hour, replayed from today's balance:
  if yesterday fell by more than today holds, or ran empty, within the next 24 hours,
  today will too (a cycle that runs dry every night, with no net change).
"""

import math
import statistics
from collections.abc import Sequence
from datetime import datetime, timedelta

from mountwarden.core.credits.series import Sample
from mountwarden.core.credits.trend import theil_sen_slope

DAY = timedelta(days=1)
SECONDS_PER_DAY = DAY.total_seconds()
#: A day needs at least this share of its periods to count: CloudWatch drops points.
MIN_DAY_COVERAGE = 0.5
#: At most this many sub-windows are fitted when looking for yesterday's steepest drain.
MAX_SUBWINDOWS = 25


def net_change_per_day(balance: Sequence[Sample], now: datetime, period_seconds: int) -> float | None:
    """Bytes per day the balance gains (negative: loses), from whole days ending at ``now``.

    None with fewer than two whole days: the two newest days must each hold at least
    half of their periods; older days count while they do too.
    """
    expected = SECONDS_PER_DAY / max(period_seconds, 1)
    means: list[float] = []
    for day in range(_days_spanned(balance, now) + 1):
        end = _minus(now, DAY * day)
        start = _minus(end, DAY)
        if end is None or start is None:
            break
        values = [s.value for s in balance if start < s.at <= end]
        if len(values) < MIN_DAY_COVERAGE * expected:
            break
        mean = _mean(values)
        if mean is None:
            return None
        means.append(mean)
    if len(means) < 2:
        return None
    if len(means) == 2:
        return _finite(means[0] - means[1])
    # Oldest day first, one x per day: the slope is bytes per day.
    return theil_sen_slope([(-day, mean) for day, mean in enumerate(means)])


def steepest_slope_around(
    balance: Sequence[Sample], moment: datetime, trend_window: timedelta, jitter: timedelta
) -> float | None:
    """The most negative slope (bytes/s) fitted over ``trend_window`` ending within ``jitter`` of ``moment``."""
    earliest_end, latest_end = _minus(moment, jitter), _minus(moment, -jitter)
    if earliest_end is None or latest_end is None:
        return None
    ends = [s.at for s in balance if earliest_end < s.at <= latest_end]
    if len(ends) > MAX_SUBWINDOWS:
        step = (len(ends) - 1) / (MAX_SUBWINDOWS - 1)
        ends = [ends[round(i * step)] for i in range(MAX_SUBWINDOWS)]
    slopes = []
    for window_end in ends:
        window_start = _minus(window_end, trend_window)
        points = [
            ((s.at - window_end).total_seconds(), s.value)
            for s in balance
            if (window_start is None or window_start < s.at) and s.at <= window_end
        ]
        slope = theil_sen_slope(points)
        if slope is not None:
            slopes.append(slope)
    return min(slopes) if slopes else None


def replay_yesterday(
    balance: Sequence[Sample], now: datetime, balance_now: float, empty_below: float, period_seconds: int
) -> float | None:
    """Seconds until empty if today repeats yesterday from this hour on; None if yesterday would not empty it.

    Yesterday at this hour is the sample nearest ``now - 24 h`` (at most two periods
    away). A later sample of yesterday's at or below ``empty_below`` counts as empty
    whatever today's balance: demand beyond an empty bucket was throttled, so how
    far it would have fallen is unknown.
    """
    yesterday = _minus(now, DAY)
    if yesterday is None:
        return None
    tolerance = 2 * max(period_seconds, 1)
    near = [s for s in balance if abs((s.at - yesterday).total_seconds()) <= tolerance]
    if not near:
        return None
    start = min(near, key=lambda s: abs((s.at - yesterday).total_seconds()))
    for sample in balance:
        if not start.at < sample.at <= now:
            continue
        if sample.value <= empty_below or start.value - sample.value >= balance_now:
            return _finite((sample.at - start.at).total_seconds())
    return None


def _days_spanned(balance: Sequence[Sample], now: datetime) -> int:
    if not balance:
        return 0
    span = (now - balance[0].at).total_seconds()
    return max(0, min(int(span // SECONDS_PER_DAY), 366))


def _mean(values: list[float]) -> float | None:
    try:
        return _finite(statistics.fmean(values))
    except (OverflowError, statistics.StatisticsError):
        return None


def _minus(moment: datetime, span: timedelta) -> datetime | None:
    try:
        return moment - span
    except OverflowError:
        return None


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None
