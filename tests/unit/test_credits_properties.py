"""Property tests: the forecast never raises, and never emits NaN or infinity, on any finite series."""

import json
import math
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from mountwarden.core.credits import (
    GIB,
    CreditSeries,
    EfsMetric,
    ForecastSettings,
    Sample,
    ThroughputMode,
    credit_condition,
    forecast_credits,
    theil_sen_slope,
)

ORIGIN = datetime(2026, 1, 1, tzinfo=UTC)
finite = st.floats(allow_nan=False, allow_infinity=False)
samples = st.lists(
    st.builds(
        lambda offset, value: Sample(ORIGIN + timedelta(seconds=offset), value),
        st.integers(min_value=0, max_value=10**8),
        finite,
    ),
    max_size=40,
)
credit_series = st.builds(
    CreditSeries,
    file_system_id=st.just("fs-0123456789abcdef0"),
    throughput_mode=st.none() | st.sampled_from(ThroughputMode),
    size_bytes=st.none() | st.floats(min_value=0, max_value=1e9 * GIB),
    provisioned_bytes_per_second=st.none() | st.floats(min_value=0, max_value=1e12),
    period_seconds=st.sampled_from([60, 300, 3600]),
    samples=st.dictionaries(st.sampled_from(EfsMetric), samples.map(lambda found: tuple(sorted(found)))),
)


@settings(max_examples=300, deadline=None)
@given(
    credit_series,
    st.none() | st.timedeltas(min_value=timedelta(seconds=1)),
    st.none() | st.integers(min_value=-(10**8), max_value=2 * 10**8),
    st.timedeltas(min_value=timedelta(seconds=1)),
)
def test_the_forecast_never_raises_on_finite_series(series, window, now_offset, trend_window):
    now = None if now_offset is None else ORIGIN + timedelta(seconds=now_offset)
    result = forecast_credits(
        series, window=window, now=now, settings=ForecastSettings(trend_window=trend_window)
    )
    json.dumps(result.to_json(), allow_nan=False)  # a JSON document scripts can parse
    condition = credit_condition(result)
    assert condition.reason == result.state.value
    assert isinstance(condition.message, str) and condition.message
    if result.time_to_empty_seconds is not None:
        assert result.time_to_empty_seconds >= 0
    if result.metadata_share is not None:
        assert 0 <= result.metadata_share <= 1


@given(st.lists(st.tuples(finite, finite), max_size=60))
def test_the_slope_is_finite_or_none(points):
    slope = theil_sen_slope(points)
    assert slope is None or math.isfinite(slope)


@given(
    st.floats(min_value=-1e6, max_value=1e6),
    st.floats(min_value=-1e12, max_value=1e12),
    st.lists(st.integers(min_value=0, max_value=10**6), min_size=2, max_size=30, unique=True),
)
def test_the_slope_of_an_exact_line_is_its_slope(slope, intercept, xs):
    fitted = theil_sen_slope([(x, intercept + slope * x) for x in xs])
    assert math.isclose(fitted, slope, rel_tol=1e-6, abs_tol=1e-3)
