"""The Grafana dashboard (charts/mountwarden/dashboards/mountwarden.json), read as a file: every expression of
every panel and variable names metrics the operator or the agent really exports, and nothing else.

(The ConfigMap that ships it is rendered by helm in tests/chart/test_chart.py.)
"""

import json
from pathlib import Path

import pytest
from tests.promql import exported_series, metric_names, selector_labels

DASHBOARD = Path(__file__).resolve().parents[2] / "charts" / "mountwarden" / "dashboards" / "mountwarden.json"


def dashboard_expressions() -> list[tuple[str, str]]:
    """(where, expression) for every panel target and every query variable."""
    dashboard = json.loads(DASHBOARD.read_text())
    found = [(f"panel {panel['title']!r}", target["expr"])
             for panel in dashboard["panels"] if panel["type"] != "row" for target in panel["targets"]]
    found += [(f"variable ${variable['name']}", variable["query"]["query"])
              for variable in dashboard["templating"]["list"] if variable["type"] == "query"]
    return found


@pytest.mark.parametrize(("where", "expression"), dashboard_expressions(), ids=[w for w, _ in dashboard_expressions()])
def test_every_dashboard_expression_names_only_metrics_the_code_exports(where, expression):
    names = metric_names(expression)
    assert names, f"{where}: `{expression}` selects no metric"
    unknown = names - exported_series()
    assert not unknown, f"{where}: `{expression}` reads {sorted(unknown)}, which neither the operator nor the agent exports"


def test_the_dashboard_shows_credits_compliance_and_nfs_rates():
    used = {name for _, expression in dashboard_expressions() for name in metric_names(expression)}
    assert {
        "mountwarden_credit_balance_bytes", "mountwarden_credit_slope_bytes_per_second",
        "mountwarden_credit_time_to_empty_seconds", "mountwarden_credit_permitted_bytes_per_second",
        "mountwarden_credit_metered_bytes_per_second", "mountwarden_profile_volumes", "mountwarden_profile_pods",
        "mountwarden_sqlite_databases", "mountwarden_nfs_operations_per_second", "mountwarden_nfs_rtt_milliseconds",
        "mountwarden_nfs_queue_milliseconds", "mountwarden_nfs_execute_milliseconds",
        "mountwarden_agent_scan_duration_seconds_bucket",
    } <= used


def test_every_panel_queries_the_chosen_data_source():
    dashboard = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in (p for p in dashboard["panels"] if p["type"] != "row"):
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"] and all(t["datasource"] == panel["datasource"] for t in panel["targets"])


@pytest.mark.parametrize(("expression", "names"), [
    ('mountwarden_credit_balance_bytes{profile=~"$profile"}', {"mountwarden_credit_balance_bytes"}),
    ("min by (profile, file_system_id) (mountwarden_credit_time_to_empty_seconds)",
     {"mountwarden_credit_time_to_empty_seconds"}),
    ("histogram_quantile(0.95, sum by (le, pod) (rate(mountwarden_agent_scan_duration_seconds_bucket[5m])))",
     {"mountwarden_agent_scan_duration_seconds_bucket"}),
    ("time() - mountwarden_agent_last_successful_write_timestamp_seconds > 0",
     {"mountwarden_agent_last_successful_write_timestamp_seconds"}),
    ("label_values(mountwarden_profile_volumes, profile)", {"mountwarden_profile_volumes"}),
    ('a / on (node) group_left (pod) b{x="up"} offset 5m and bool c', {"a", "b", "c"}),
    ('up{job="mountwarden"} == 0', {"up"}),  # a metric nobody here exports is still a metric
    ("sum(rate(x_total[5m])) without (instance)", {"x_total"}),
    ("vector(1)", set()),
])
def test_metric_names_reads_selectors_and_skips_functions_labels_keywords_and_durations(expression, names):
    assert metric_names(expression) == names


def test_selector_labels_reads_matchers_per_metric_and_grouping_labels():
    # The chart's alert test (tests/chart/test_chart.py) checks these labels exist: check the reader on its own.
    labels = selector_labels('max by (profile) (rate(mountwarden_x_total{state="Draining", node!=""}[5m])) and on '
                             '(profile) bogus_metric > 0.5 * sum without (node) (mountwarden_y{le=~"0.5"})')
    assert labels == {"mountwarden_x_total": {"state", "node"}, "mountwarden_y": {"le"}, "": {"profile", "node"}}
