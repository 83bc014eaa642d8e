"""The EFS burst-credit model and forecast: pure, no AWS imports.

- :mod:`.bucket`: baseline, burst ceiling, balance cap, drain and refill times,
  ops budget, for a file system size (:class:`CreditBucket`).
- :mod:`.metering`: how requests are metered (4 KiB minimum, reads at 1/3,
  Elastic's 32 KiB data minimum) and what a count of metadata requests costs.
- :mod:`.series`: the AWS/EFS metrics, their GetMetricData query ids, and
  :class:`CreditSeries`, one file system's samples over a window.
- :mod:`.trend`: the Theil–Sen slope.
- :mod:`.daily`: what whole days say: the day-over-day change, yesterday replayed.
- :mod:`.forecast`: :func:`forecast_credits` (state, time to empty and its basis).
- :mod:`.pricing`: AWS's metering rules and prices: what Elastic or Provisioned would cost.
- :mod:`.advice`: :func:`recommend_throughput_mode`, sized only by unthrottled demand.
- :mod:`.condition`: :func:`credit_condition` (the message a StorageProfile shows).
- :mod:`.consumers`: who drains a file system, from the node reports' per-op counters.
- :mod:`.problems`: :class:`CreditWatchProblem`, why a forecast could not be made.
"""

from mountwarden.core.credits.advice import Demand, Recommendation, recommend_throughput_mode
from mountwarden.core.credits.bucket import CreditBucket, OpsBudget, SingleClientCeiling, ThroughputMode
from mountwarden.core.credits.condition import CreditCondition, condition_message, credit_condition
from mountwarden.core.credits.forecast import DEFAULT_HISTORY, Forecast, ForecastSettings, forecast_credits
from mountwarden.core.credits.metering import MetadataLoad, RequestKind, metadata_load, metered_bytes
from mountwarden.core.credits.pricing import PRICES, ElasticUsage, ThroughputPrices, elastic_usage
from mountwarden.core.credits.problems import CreditWatchError, CreditWatchProblem, ProblemReason
from mountwarden.core.credits.series import (
    CREDIT_METRICS,
    PERIOD_SECONDS,
    STORAGE_QUERY,
    CreditSeries,
    EfsMetric,
    MetricQuery,
    Sample,
    make_samples,
    samples_from_metric_data,
)
from mountwarden.core.credits.state import CreditState, DrainBasis
from mountwarden.core.credits.trend import theil_sen_slope
from mountwarden.core.credits.units import GIB, KIB, MIB, TIB, format_bytes, format_duration, format_rate

__all__ = [
    "CREDIT_METRICS",
    "DEFAULT_HISTORY",
    "GIB",
    "KIB",
    "MIB",
    "PERIOD_SECONDS",
    "PRICES",
    "STORAGE_QUERY",
    "TIB",
    "CreditBucket",
    "CreditCondition",
    "CreditSeries",
    "CreditState",
    "CreditWatchError",
    "CreditWatchProblem",
    "Demand",
    "DrainBasis",
    "ElasticUsage",
    "EfsMetric",
    "Forecast",
    "ForecastSettings",
    "MetadataLoad",
    "MetricQuery",
    "OpsBudget",
    "ProblemReason",
    "Recommendation",
    "RequestKind",
    "Sample",
    "SingleClientCeiling",
    "ThroughputPrices",
    "ThroughputMode",
    "condition_message",
    "credit_condition",
    "elastic_usage",
    "forecast_credits",
    "format_bytes",
    "format_duration",
    "format_rate",
    "make_samples",
    "metadata_load",
    "metered_bytes",
    "recommend_throughput_mode",
    "samples_from_metric_data",
    "theil_sen_slope",
]
