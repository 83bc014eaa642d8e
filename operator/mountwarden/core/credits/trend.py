"""A robust slope: Theil–Sen, the median of the slopes between every pair of points.

A least-squares fit follows one bad sample (a CloudWatch gap filled late, a
restart) as far as it goes; the median of pairwise slopes ignores up to ~29% of
outliers. Plain Python: the series are short (a trend window of 5-minute points).
"""

import math
import statistics
from collections.abc import Sequence

#: Pairs grow with the square of the points; a longer series is thinned evenly.
MAX_POINTS = 400


def theil_sen_slope(points: Sequence[tuple[float, float]]) -> float | None:
    """Median slope (dy/dx) over all pairs with distinct x; None without two such points."""
    finite = sorted((x, y) for x, y in points if math.isfinite(x) and math.isfinite(y))
    if len(finite) > MAX_POINTS:
        step = (len(finite) - 1) / (MAX_POINTS - 1)
        finite = [finite[round(i * step)] for i in range(MAX_POINTS)]
    slopes = []
    for i, (x1, y1) in enumerate(finite):
        for x2, y2 in finite[i + 1 :]:
            if x2 > x1:
                slope = (y2 - y1) / (x2 - x1)
                if math.isfinite(slope):
                    slopes.append(slope)
    return statistics.median(slopes) if slopes else None
