"""The chart's PrometheusRule (templates/alerts.yaml), rendered by the real helm and run by the real promtool.

Every alert reads metrics the operator or the agent exports, with labels they have, and links a runbook section
that exists; `promtool test rules` (from Debian's prometheus package: hack/promtool/build.sh) then fires each
one on synthetic series, with the labels and the summary that name the object, not before its `for:` has passed,
and fires none on a healthy cluster's series.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from tests.chart.test_chart import FULLNAME, NAMESPACE, ROOT, find
from tests.promql import agent_metric_labels, metric_names, operator_metric_labels, selector_labels

RUNBOOK = "https://docs.example.com/runbook.md"
PROFILE, NS, WORKLOAD, FS, NODE = "web-data", "shop", "Deployment/web", "fs-0123456789abcdef0", "node-a"
AGENT_POD, OPERATOR_POD = "mountwarden-agent-x7k2p", "mountwarden-operator-5c9d7-q8zrt"


def runbook_anchors() -> set[str]:
    """GitHub's anchors of docs/runbook.md's headings: lower case, punctuation dropped, spaces to hyphens."""
    headings = re.findall(r"^#+\s+(.+)$", (ROOT / "docs" / "runbook.md").read_text(), flags=re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in headings}


# -- the rules, rendered ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rule(render) -> dict:
    docs = render("--set", "metrics.prometheusRule.enabled=true", "--set", "metrics.prometheusRule.labels.release=prom",
                  "--set", f"metrics.prometheusRule.runbookUrl={RUNBOOK}")
    return find(docs, "PrometheusRule", FULLNAME)


@pytest.fixture(scope="module")
def alerts(rule) -> dict[str, dict]:
    return {r["alert"]: r for group in rule["spec"]["groups"] for r in group["rules"]}


def test_the_prometheus_rule_is_optional(render):
    assert not [d for d in render() if d["kind"] == "PrometheusRule"]


def test_the_alerts_read_metrics_the_code_exports_and_link_runbook_sections_that_exist(rule, alerts):
    from mountwarden.core.credits import CreditState
    from mountwarden.core.rollout import Phase

    assert rule["metadata"]["namespace"] == NAMESPACE and rule["metadata"]["labels"]["release"] == "prom"
    assert set(alerts) == set(CASES), "each alert needs its promtool case below, and each case its alert"
    exported, anchors = {**operator_metric_labels(), **agent_metric_labels()}, runbook_anchors()
    words = {"state": {s.value for s in CreditState}, "phase": {p.value for p in Phase}}
    for name, alert in alerts.items():
        metrics, labels = metric_names(alert["expr"]), selector_labels(alert["expr"])
        assert metrics and metrics <= set(exported), (name, metrics - set(exported))
        for metric, used in labels.items():
            known = set().union(*(exported[m] for m in metrics)) if metric == "" else set(exported[metric])
            assert used <= known, (name, metric, used - known)
        for label, values in words.items():
            for value in re.findall(rf'\b{label}=~?"([^"]*)"', alert["expr"]):
                assert set(value.split("|")) <= values, (name, label, value)
        url = alert["annotations"]["runbook_url"]
        assert url.startswith(f"{RUNBOOK}#") and url.split("#", 1)[1] in anchors, (name, url)
        assert alert["labels"]["severity"] in ("warning", "critical")


def test_every_finding_family_and_way_a_mount_breaks_has_its_alert(alerts):
    from mountwarden.core.findings import FAILURE_REASONS, HEALTH_REASONS, Reason

    reasons = {reason for alert in alerts.values()
               for values in re.findall(r'reason=~?"([^"]*)"', alert["expr"]) for reason in values.split("|")}
    pod_volume_findings = {Reason.OPTION_MISMATCH, Reason.UNDECLARED_OPTION, Reason.SUPERBLOCK_SHARED,
                           Reason.NCONNECT_IGNORED, Reason.SQLITE_ON_NFS, Reason.CROSS_AZ_MOUNT,
                           Reason.ROUND_TRIP_OPTIONS, Reason.SOFT_WRITABLE_MOUNT, Reason.LOCAL_LOCKS_ACROSS_NODES,
                           Reason.MISSING_NORESVPORT}
    expected = {str(r) for r in FAILURE_REASONS | HEALTH_REASONS | pod_volume_findings}
    assert expected | {"ReportMissing", "ReportStale", "DisruptionBudget"} <= reasons, expected - reasons


# -- promtool --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def promtool() -> Path:
    """promtool of $MOUNTWARDEN_PROMTOOL_DIR (make test), else fetched by hack/promtool/build.sh (cached)."""
    directory = os.environ.get("MOUNTWARDEN_PROMTOOL_DIR")
    if not directory:
        fetched = subprocess.run([str(ROOT / "hack" / "promtool" / "build.sh")], capture_output=True, text=True,
                                 timeout=900)
        assert fetched.returncode == 0 and fetched.stdout.strip(), (
            "promtool could not be fetched from Debian's prometheus package (hack/promtool/build.sh; "
            f"`make promtool` runs it): {fetched.stderr[-2000:]}")
        directory = fetched.stdout.strip().splitlines()[-1]
    path = Path(directory) / "promtool"
    assert path.is_file() and os.access(path, os.X_OK), (
        f"no executable promtool in {directory} ($MOUNTWARDEN_PROMTOOL_DIR): run `make promtool`")
    return path


@pytest.fixture(scope="module")
def rules_file(rule, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("rules") / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}, sort_keys=False))
    return path


def run_promtool(promtool: Path, rules_file: Path, tests: list[dict]) -> subprocess.CompletedProcess[str]:
    test_file = rules_file.parent / "tests.yaml"
    test_file.write_text(yaml.safe_dump({"rule_files": [rules_file.name], "evaluation_interval": "1m",
                                         "tests": tests}, sort_keys=False))
    return subprocess.run([str(promtool), "test", "rules", test_file.name], capture_output=True, text=True,
                          timeout=120, cwd=rules_file.parent)


def test_the_rules_are_valid_for_promtool(promtool, rules_file):
    checked = subprocess.run([str(promtool), "check", "rules", str(rules_file)], capture_output=True, text=True,
                             timeout=120)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert re.search(rf"SUCCESS: {len(CASES)} rules found", checked.stdout), checked.stdout


def selector(name: str, **labels: str) -> str:
    return name + "{" + ", ".join(f'{key}="{value}"' for key, value in labels.items()) + "}"


def finding(reason: str, severity: str = "warning", *, profile: str = PROFILE, source: str = "compliance") -> str:
    return selector("mountwarden_findings", profile=profile, source=source, namespace=NS, workload=WORKLOAD,
                    reason=reason, severity=severity)


def failure(reason: str, severity: str = "warning") -> str:
    return selector("mountwarden_mount_failures", node=NODE, reason=reason, severity=severity)


def credit_state(state: str) -> list[tuple[str, str]]:
    return [(selector("mountwarden_credit_state", profile=PROFILE, file_system_id=FS, state=s), "1" if s == state else "0")
            for s in ("Healthy", "Draining", "Empty", "Trap", "Unknown")]


@dataclass(frozen=True)
class Case:
    """Series (each held for two hours, one sample a minute) that fire an alert: the labels it gets (beside
    severity) and its summary, as Prometheus expands it."""

    series: list[tuple[str, str]]
    labels: dict[str, str]
    summary: str
    value: float = 1
    extra: dict[str, str] = field(default_factory=dict)


ON_WORKLOAD = {"profile": PROFILE, "namespace": NS, "workload": WORKLOAD}
FS_LABELS = {"profile": PROFILE, "file_system_id": FS}

CASES: dict[str, Case] = {
    "EfsBurstCreditsDraining": Case(
        [(selector("mountwarden_credit_time_to_empty_seconds", **FS_LABELS), "7200"), *credit_state("Draining")],
        FS_LABELS, f"EFS {FS} burst credits run out in 2h 0m 0s", 7200),
    "EfsBurstCreditTrap": Case(credit_state("Trap"), {**FS_LABELS, "state": "Trap"},
                               f"EFS {FS} is out of burst credits and throttled to its baseline"),
    "EfsBurstCreditsEmpty": Case(credit_state("Empty"), {**FS_LABELS, "state": "Empty"},
                                 f"EFS {FS} has no burst credits left"),
    "EfsPercentIOLimitHigh": Case([(selector("mountwarden_credit_percent_io_limit", **FS_LABELS), "95")], FS_LABELS,
                                  f"EFS {FS} is at 95% of its I/O limit", 95),
    "NfsServerNotResponding": Case([(failure("ServerNotResponding", "critical"), "2")], {"node": NODE},
                                   f"2 NFS server(s) do not answer node {NODE}", 2),
    "EfsTlsTunnelDown": Case([(failure("TLSTunnelDown", "critical"), "3")], {"node": NODE},
                             f"An EFS TLS tunnel is down on node {NODE}", 3),
    "NfsStaleFileHandle": Case([(failure("StaleFileHandle", "error"), "2")], {"node": NODE},
                               f"2 pod volume(s) on node {NODE} have a stale file handle", 2),
    "NfsPodStuckTerminating": Case(
        [(failure("StuckTerminating"), "1")], {"node": NODE},
        f"1 pod(s) on node {NODE} cannot finish terminating: their NFS volume is stuck"),
    "NfsMountHelperStuck": Case(
        [(failure("MountHelperStuck"), "1")], {"node": NODE},
        f"A mount helper is stuck on node {NODE}: later mounts of its server queue behind it"),
    "NfsOrphanedMount": Case([(failure("OrphanedMount"), "4")], {"node": NODE},
                             f"4 pod volume(s) on node {NODE} stay mounted with their pod gone", 4),
    # Both kinds of drift, summed per workload.
    "MountPolicyDrift": Case(
        [(finding("OptionMismatch", "error"), "2"), (finding("UndeclaredOption"), "1"),
         (selector("mountwarden_rollout_phase", profile=PROFILE, phase="Complete"), "1"),
         (selector("mountwarden_rollout_phase", profile=PROFILE, phase="Progressing"), "0")],
        ON_WORKLOAD, f"3 option(s) of {NS}/{WORKLOAD}'s NFS volumes differ from StorageProfile {PROFILE}", 3),
    "NfsSuperblockShared": Case([(finding("SuperblockShared"), "1")], ON_WORKLOAD,
                                f"{NS}/{WORKLOAD} runs with another mount's options: its NFS superblock is shared"),
    "NfsNconnectIgnored": Case([(finding("NconnectIgnored"), "1")], ON_WORKLOAD,
                               f"{NS}/{WORKLOAD} asked for nconnect and did not get it"),
    "NfsRoundTripOptions": Case(
        [(finding("RoundTripOptions", profile="mountwarden-baseline"), "1")], {**ON_WORKLOAD, "profile": "mountwarden-baseline"},
        f"{NS}/{WORKLOAD} mounts NFS with options that make every operation a round trip"),
    "NfsSoftWritableMount": Case(
        [(finding("SoftWritableMount", "error"), "1")], ON_WORKLOAD,
        f"{NS}/{WORKLOAD} writes to a soft NFS mount: a slow server loses its writes"),
    "NfsLocalLocksAcrossNodes": Case(
        [(finding("LocalLocksAcrossNodes", "error"), "2")], ON_WORKLOAD,
        f"{NS}/{WORKLOAD} locks files on each node alone while writers run on several", 2),
    "EfsMissingNoresvport": Case([(finding("MissingNoresvport"), "1")], ON_WORKLOAD,
                                 f"{NS}/{WORKLOAD} mounts EFS without noresvport"),
    "SQLiteOnNFS": Case([(finding("SQLiteOnNFS", "critical"), "1")], ON_WORKLOAD,
                        f"{NS}/{WORKLOAD} runs SQLite on an NFS volume"),
    "NfsStuckOnNFS": Case([(finding("StuckOnNFS"), "1")], ON_WORKLOAD,
                          f"{NS}/{WORKLOAD}'s processes are stuck waiting on NFS"),
    "NfsTransportUnhealthy": Case([(finding("TransportUnhealthy"), "1")], ON_WORKLOAD,
                                  f"{NS}/{WORKLOAD}'s NFS transport retransmits, times out or reconnects"),
    "NfsThroughputPlateau": Case([(finding("ThroughputPlateau"), "1")], ON_WORKLOAD,
                                 f"{NS}/{WORKLOAD} is held at one NFS connection's throughput"),
    "EfsCrossAZMount": Case([(finding("CrossAZMount", source="cross-az"), "1")], ON_WORKLOAD,
                            f"{NS}/{WORKLOAD} mounts EFS through a mount target in another zone"),
    "NodeReportMissing": Case(
        [(selector("mountwarden_unverified_volumes", profile=PROFILE, node=NODE, reason="ReportMissing"), "2"),
         (selector("mountwarden_unverified_volumes", profile="other", node=NODE, reason="ReportMissing"), "1")],
        {"node": NODE}, f"Node {NODE} has no mount report: 3 pod volume(s) there are unverified", 3),
    "NodeReportStale": Case(
        [(selector("mountwarden_unverified_volumes", profile=PROFILE, node=NODE, reason="ReportStale"), "2")],
        {"node": NODE}, f"Node {NODE}'s mount report stopped: 2 pod volume(s) there are unverified", 2),
    "RolloutWaitingOnDisruptionBudget": Case(
        [(selector("mountwarden_rollout_workloads_held", **ON_WORKLOAD, state="Waiting", reason="DisruptionBudget"),
          "1")], {**ON_WORKLOAD, "state": "Waiting", "reason": "DisruptionBudget"},
        f"The rollout of StorageProfile {PROFILE} waits on a PodDisruptionBudget to remount {NS}/{WORKLOAD}"),
    "RolloutPaused": Case([(selector("mountwarden_rollout_phase", profile=PROFILE, phase="Paused"), "1")],
                          {"profile": PROFILE, "phase": "Paused"},
                          f"The rollout of StorageProfile {PROFILE} is paused: a workload is blocked"),
    "MountwardenAgentSeriesCapped": Case(
        [(selector("mountwarden_agent_volumes_over_cap", namespace=NAMESPACE, pod=AGENT_POD), "12")],
        {"namespace": NAMESPACE, "pod": AGENT_POD},
        f"The agent on {AGENT_POD} leaves 12 pod volume(s) out of its per-volume metrics", 12),
    "MountwardenFindingsOverCap": Case(
        [(selector("mountwarden_findings_over_cap", namespace=NAMESPACE, pod=OPERATOR_POD), "7")],
        {"namespace": NAMESPACE, "pod": OPERATOR_POD},
        f"7 label set(s) of mountwarden_findings are not served by {OPERATOR_POD}", 7),
}


def expand(template: str, labels: dict[str, str], value: float) -> str:
    """A description's alert templates as Prometheus expands them: only $labels.x and $value are used there."""
    text = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], template)
    text = text.replace("{{ $value }}", f"{value:g}")
    assert "{{" not in text, f"a description uses a template this test does not expand: {template}"
    return text


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_alert_fires_naming_its_object_once_its_for_has_passed(name, alerts, promtool, rules_file):
    case, alert = CASES[name], alerts[name]
    labels = {**case.labels, "severity": alert["labels"]["severity"]}
    expected = {"summary": case.summary, "runbook_url": alert["annotations"]["runbook_url"],
                "description": expand(alert["annotations"]["description"], labels, case.value)}
    number, unit = re.fullmatch(r"(\d+)([mh])", alert["for"]).groups()
    minutes = int(number) * (60 if unit == "h" else 1)
    assert minutes > 1, f"{name}: for {alert['for']}: the case below would not see it pending"
    test = {
        "interval": "1m",
        "input_series": [{"series": series, "values": f"{value}x180"} for series, value in case.series],
        "alert_rule_test": [
            {"eval_time": "1m", "alertname": name, "exp_alerts": []},  # pending, not firing yet
            {"eval_time": f"{minutes + 5}m", "alertname": name,
             "exp_alerts": [{"exp_labels": labels, "exp_annotations": expected}]},
        ],
    }
    result = run_promtool(promtool, rules_file, [test])
    assert result.returncode == 0, f"{name}:\n{result.stdout}\n{result.stderr}"


# A healthy cluster, with the near misses: credits Healthy at a PercentIOLimit under 90, drift only while its
# rollout progresses, a volume not scheduled yet, volumes on a Fargate node (no agent can run there), a completed
# rollout, a rollout waiting on a workload at zero replicas, nothing over any cap.
HEALTHY = [
    (selector("mountwarden_credit_time_to_empty_seconds", **FS_LABELS), "86400"), *credit_state("Healthy"),
    (selector("mountwarden_credit_percent_io_limit", **FS_LABELS), "89"),
    (finding("OptionMismatch", "error", profile="rolling"), "4"),
    (selector("mountwarden_rollout_phase", profile="rolling", phase="Progressing"), "1"),
    (selector("mountwarden_rollout_phase", profile=PROFILE, phase="Complete"), "1"),
    (selector("mountwarden_rollout_phase", profile=PROFILE, phase="Paused"), "0"),
    (selector("mountwarden_rollout_workloads_held", profile="rolling", namespace=NS, workload=WORKLOAD,
              state="Waiting", reason="ScaledToZero"), "1"),
    (selector("mountwarden_unverified_volumes", profile=PROFILE, node="", reason="NotScheduled"), "1"),
    (selector("mountwarden_unverified_volumes", profile=PROFILE, node="fargate-ip-10-0-1-7", reason="NoAgent"), "2"),
    (selector("mountwarden_agent_volumes_over_cap", namespace=NAMESPACE, pod=AGENT_POD), "0"),
    (selector("mountwarden_findings_over_cap", namespace=NAMESPACE, pod=OPERATOR_POD), "0"),
]


def test_no_alert_fires_on_a_healthy_clusters_series(alerts, promtool, rules_file):
    test = {
        "interval": "1m",
        "input_series": [{"series": series, "values": f"{value}x180"} for series, value in HEALTHY],
        "alert_rule_test": [{"eval_time": "170m", "alertname": name, "exp_alerts": []} for name in sorted(alerts)],
    }
    result = run_promtool(promtool, rules_file, [test])
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    # The same series with one alert's cause added fire it: the healthy case is not silent by accident.
    test["input_series"].append({"series": finding("SQLiteOnNFS", "critical"), "values": "1x180"})
    fired = run_promtool(promtool, rules_file, [test])
    assert fired.returncode != 0 and "SQLiteOnNFS" in fired.stdout + fired.stderr, fired.stdout


def test_the_dashboard_shows_every_metric_an_alert_reads(alerts):
    from tests.unit.test_dashboard import dashboard_expressions

    shown = {name for _, expression in dashboard_expressions() for name in metric_names(expression)}
    read = {name for alert in alerts.values() for name in metric_names(alert["expr"])}
    assert read, "no alert reads a metric"
    assert read <= shown, f"alerts read {sorted(read - shown)}, which no panel of dashboards/mountwarden.json shows"
