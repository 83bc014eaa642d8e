"""The chart's rendering fixtures (helm, its scratch environment, `render`), defined in test_chart.py, for every
module here (test_alerts.py renders the PrometheusRule with them)."""

from tests.chart.test_chart import helm, helm_env, render  # noqa: F401
