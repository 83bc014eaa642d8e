"""Findings into policy reports (the pure part): one result per finding, in the report of the subject's namespace,
the same results under wgpolicyk8s.io/v1alpha2 and openreports.io/v1alpha1, which groups --report-format and the
served CRDs choose, and what to write and delete as findings come and go."""

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from mountwarden.core.compliance import Consumer, Verdict, VolumeState
from mountwarden.core.findings import Finding, Reason, Severity, Subject
from mountwarden.core.node.report import SqliteUse
from mountwarden.core.policyreport import (
    OPENREPORTS,
    REPORT_APIS,
    WGPOLICYK8S,
    PolicyReportBook,
    ReportFormat,
    choose_report_apis,
    compliance_findings,
    credit_findings,
    report_body,
    report_of,
)

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
GRACE = timedelta(minutes=10)
HACK = Path(__file__).resolve().parents[2] / "hack"
#: The upstream CRDs of each group, as the tests install them (hack/*-crds): file stem -> (kind, scope).
CRDS = {WGPOLICYK8S: (HACK / "policyreport-crds", "kubernetes-sigs/wg-policy-prototypes"),
        OPENREPORTS: (HACK / "openreports-crds", "openreports/reports-api")}


def crd(api, cluster_wide: bool) -> dict:
    directory, _ = CRDS[api]
    return yaml.safe_load((directory / f"{api.group}_{api.cluster_plural if cluster_wide else api.plural}.yaml")
                          .read_text())


def consumer(pod="importer-0", namespace="data", volume="pv-1", node="node-a"):
    return Consumer(f"uid-{pod}", namespace, pod, node, volume)


def drift(reason=Reason.OPTION_MISMATCH, severity=Severity.ERROR, option="acregmax"):
    return Finding(reason, severity, f"{option} is 60, the profile declares 3", "Remount the volume.", option=option)


def drifted(pod="importer-0", namespace="data", *findings, sqlite=()):
    """A drifted verdict as assess makes it: the SQLite databases in use among its findings too."""
    return Verdict(consumer(pod, namespace), VolumeState.DRIFTED, "OptionMismatch", "",
                   (*findings, *(use.finding() for use in sqlite)), tuple(sqlite))


def test_every_warning_or_error_of_a_volume_is_one_finding_on_its_pod():
    verdict = drifted("importer-0", "data", drift(), drift(Reason.SUPERBLOCK_SHARED, Severity.WARNING),
                      drift(severity=Severity.INFO, option="rsize"))
    findings = compliance_findings("importer-scratch", [verdict])
    assert [(f.reason, f.severity) for f in findings] == [("OptionMismatch", "error"), ("SuperblockShared", "warning")]
    assert findings[0].subject == Subject("Pod", "importer-0", "data", "uid-importer-0")
    assert findings[0].evidence == {"node": "node-a", "volume": "pv-1", "option": "acregmax"}
    assert findings[0].message == "pv-1 on node-a: acregmax is 60, the profile declares 3 Remount the volume."
    assert all(f.profile == "importer-scratch" and report_of(f) == "data" for f in findings)


def test_sqlite_on_nfs_is_a_finding_and_a_compliant_volume_without_it_is_none():
    use = SqliteUse("uid-db", "pv-1", Severity.CRITICAL, "wal", "/data/app.db", "WAL needs shared memory")
    with_db = Verdict(consumer("db"), VolumeState.COMPLIANT, "Compliant", "", (use.finding(),), (use,))
    clean = Verdict(consumer("web"), VolumeState.COMPLIANT, "Compliant", "")
    (finding,) = compliance_findings("scratch", [with_db, clean])
    assert (finding.reason, finding.severity, finding.subject.name) == ("SQLiteOnNFS", "critical", "db")
    assert finding.evidence == {"node": "node-a", "volume": "pv-1", "mode": "wal", "path": "/data/app.db"}


@pytest.mark.parametrize(("state", "severity"), [("Draining", "warning"), ("Empty", "error"), ("Trap", "error")])
def test_draining_credits_are_a_finding_on_the_cluster_scoped_profile(state, severity):
    (finding,) = credit_findings("importer-scratch", {"state": state, "fileSystemId": "fs-1", "message": "empty in 3 h"})
    assert (finding.reason, finding.severity, report_of(finding)) == (f"Credits{state}", severity, None)
    assert finding.subject.reference() == {"apiVersion": "mountwarden.io/v1alpha1", "kind": "StorageProfile",
                                           "name": "importer-scratch"}
    assert finding.message == "fs-1: empty in 3 h"


@pytest.mark.parametrize("state", ["Healthy", "Unknown", None])
def test_healthy_or_unknown_credits_are_no_finding(state):
    assert credit_findings("p", {"state": state, "fileSystemId": "fs-1"}) == []


def test_a_report_holds_one_result_per_finding_with_policy_rule_severity_and_subject():
    findings = compliance_findings("importer-scratch", [drifted("b", "data", drift()),
                                                        drifted("a", "data", drift(Reason.NCONNECT_IGNORED,
                                                                                   Severity.WARNING, "nconnect"))])
    body = report_body("data", findings, {f.identity: T0 for f in findings})
    assert (body["apiVersion"], body["kind"]) == ("wgpolicyk8s.io/v1alpha2", "PolicyReport")
    assert body["metadata"] == {"name": "mountwarden", "namespace": "data",
                                "labels": {"app.kubernetes.io/managed-by": "mountwarden"}}
    assert [(r["policy"], r["rule"], r["result"], r["severity"], r["resources"][0]["name"]) for r in body["results"]] == [
        ("importer-scratch", "NconnectIgnored", "warn", "medium", "a"),
        ("importer-scratch", "OptionMismatch", "fail", "high", "b"),
    ]
    assert body["summary"] == {"pass": 0, "fail": 1, "warn": 1, "error": 0, "skip": 0}
    assert body["results"][0]["timestamp"] == {"seconds": int(T0.timestamp()), "nanos": 0}
    cluster = report_body(None, credit_findings("p", {"state": "Empty", "fileSystemId": "fs-1"}),
                          {f.identity: T0 for f in credit_findings("p", {"state": "Empty", "fileSystemId": "fs-1"})})
    assert cluster["kind"] == "ClusterPolicyReport" and "namespace" not in cluster["metadata"]


#: Result fields a group's upstream schema lacks, so that its API server prunes them: the namespaced v1alpha2
#: PolicyReport was generated before results had a source (its ClusterPolicyReport, and OpenReports, have one).
PRUNED = {(WGPOLICYK8S, "data"): {"source"}}


@pytest.mark.parametrize("api", REPORT_APIS, ids=lambda api: api.format)
def test_reports_use_only_fields_and_values_the_upstream_schema_allows(api):
    findings = [*compliance_findings("p", [drifted("a", "data", drift(), sqlite=[
        SqliteUse("uid-a", "pv-1", Severity.CRITICAL, "wal", None, "WAL")])]),
        *credit_findings("p", {"state": "Draining", "fileSystemId": "fs-1", "message": "m"})]
    for key in ("data", None):
        schema = crd(api, cluster_wide=key is None)
        (version,) = schema["spec"]["versions"]
        properties = version["schema"]["openAPIV3Schema"]["properties"]
        result_schema = properties["results"]["items"]["properties"]
        body = report_body(key, [f for f in findings if report_of(f) == key], {f.identity: T0 for f in findings}, api)
        assert body["results"], "a report of no result proves nothing"
        assert (body["apiVersion"], body["kind"]) == (f"{schema['spec']['group']}/{version['name']}",
                                                      schema["spec"]["names"]["kind"])
        assert set(body) - {"apiVersion", "kind", "metadata"} <= set(properties)
        for result in body["results"]:
            assert set(result) - set(result_schema) == PRUNED.get((api, key), set())
            assert result["result"] in result_schema["result"]["enum"]
            assert result["severity"] in result_schema["severity"]["enum"]
            assert all(isinstance(value, str) for value in result["properties"].values())


def test_both_groups_hold_the_same_results_under_their_own_kinds():
    findings = [*compliance_findings("p", [drifted("a", "data", drift())]),
                *credit_findings("p", {"state": "Empty", "fileSystemId": "fs-1"})]
    first_seen = {f.identity: T0 for f in findings}
    for key, kinds in (("data", ("PolicyReport", "Report")), (None, ("ClusterPolicyReport", "ClusterReport"))):
        mine = [f for f in findings if report_of(f) == key]
        old, new = report_body(key, mine, first_seen, WGPOLICYK8S), report_body(key, mine, first_seen, OPENREPORTS)
        assert (old["kind"], new["kind"]) == kinds
        assert (old["apiVersion"], new["apiVersion"]) == ("wgpolicyk8s.io/v1alpha2", "openreports.io/v1alpha1")
        assert old["results"] and new["results"] == old["results"]
        assert new["summary"] == old["summary"] and new["metadata"] == old["metadata"]


def test_a_book_plans_its_own_groups_reports():
    book = PolicyReportBook(T0, GRACE, api=OPENREPORTS)
    book.record("p", "credits", credit_findings("p", {"state": "Trap", "fileSystemId": "fs-1"}), T0)
    (body,) = book.plan(T0).writes.values()
    assert (body["apiVersion"], body["kind"]) == ("openreports.io/v1alpha1", "ClusterReport")


@pytest.mark.parametrize(("report_format", "served", "chosen", "missing", "why"), [
    # auto: whatever is served, both where both are; neither served: off, naming both.
    ("auto", [WGPOLICYK8S, OPENREPORTS], [WGPOLICYK8S, OPENREPORTS], [], "serves both groups"),
    ("auto", [OPENREPORTS], [OPENREPORTS], [], "serves openreports.io/v1alpha1 reports, not wgpolicyk8s.io/v1alpha2"),
    ("auto", [WGPOLICYK8S], [WGPOLICYK8S], [], "serves wgpolicyk8s.io/v1alpha2 reports, not openreports.io/v1alpha1"),
    ("auto", [], [], [WGPOLICYK8S, OPENREPORTS], "serves neither group"),
    # A named format writes its own group only, and says when it is not served.
    ("openreports", [WGPOLICYK8S, OPENREPORTS], [OPENREPORTS], [], "--report-format=openreports"),
    ("wgpolicyk8s", [OPENREPORTS], [], [WGPOLICYK8S], "--report-format=wgpolicyk8s"),
    ("both", [OPENREPORTS], [OPENREPORTS], [WGPOLICYK8S], "--report-format=both"),
    ("both", [WGPOLICYK8S, OPENREPORTS], [WGPOLICYK8S, OPENREPORTS], [], "--report-format=both"),
])
def test_the_format_and_the_served_crds_choose_the_groups(report_format, served, chosen, missing, why):
    choice = choose_report_apis(ReportFormat(report_format), served)
    assert (list(choice.apis), list(choice.missing)) == (chosen, missing)
    assert why in choice.why


def test_each_format_may_write_only_its_groups():
    assert [api.format for api in ReportFormat.AUTO.candidates()] == ["wgpolicyk8s", "openreports"]
    assert ReportFormat.BOTH.candidates() == ReportFormat.AUTO.candidates()
    assert ReportFormat.OPENREPORTS.candidates() == (OPENREPORTS,)
    assert ReportFormat.WGPOLICYK8S.candidates() == (WGPOLICYK8S,)
    assert OPENREPORTS.resources() == ["reports.openreports.io/v1alpha1", "clusterreports.openreports.io/v1alpha1"]


def book_with(findings, now=T0, existing=()):
    book = PolicyReportBook(T0, GRACE, existing)
    book.record("p", "compliance", findings, now)
    return book


def apply(book, plan):
    for key, body in plan.writes.items():
        book.written(key, body)
    for key in plan.deletes:
        book.deleted(key)


def test_findings_are_written_once_rewritten_when_they_change_and_deleted_when_they_clear():
    first = compliance_findings("p", [drifted("a", "data", drift())])
    book = book_with(first)
    plan = book.plan(T0)
    assert list(plan.writes) == ["data"] and plan.deletes == []
    apply(book, plan)
    book.record("p", "compliance", first, T0 + timedelta(seconds=30))
    assert not book.plan(T0 + timedelta(seconds=30)), "nothing changed: nothing to write"

    more = compliance_findings("p", [drifted("a", "data", drift()), drifted("b", "web", drift())])
    book.record("p", "compliance", more, T0 + timedelta(seconds=60))
    plan = book.plan(T0 + timedelta(seconds=60))
    assert list(plan.writes) == ["web"], "only the namespace whose findings changed"
    # The finding that lasts keeps the time it was first found.
    assert plan.writes["web"]["results"][0]["timestamp"]["seconds"] == int((T0 + timedelta(seconds=60)).timestamp())
    apply(book, plan)

    book.record("p", "compliance", [], T0 + timedelta(seconds=90))
    plan = book.plan(T0 + timedelta(seconds=90))
    assert plan.writes == {} and plan.deletes == ["data", "web"]


def test_each_profile_and_source_replaces_only_its_own_findings():
    book = book_with(compliance_findings("p", [drifted("a", "data", drift())]))
    book.record("q", "compliance", compliance_findings("q", [drifted("b", "data", drift())]), T0)
    book.record("q", "credits", credit_findings("q", {"state": "Empty", "fileSystemId": "fs-1"}), T0)
    plan = book.plan(T0)
    assert [r["policy"] for r in plan.writes["data"]["results"]] == ["p", "q"]
    assert [r["rule"] for r in plan.writes[None]["results"]] == ["CreditsEmpty"]
    apply(book, plan)
    book.forget("q", T0)
    plan = book.plan(T0)
    assert [r["policy"] for r in plan.writes["data"]["results"]] == ["p"] and plan.deletes == [None]


def test_reports_of_an_earlier_run_wait_out_the_grace_before_they_are_deleted():
    book = book_with(compliance_findings("p", [drifted("a", "data", drift())]), existing=["data", "old", None])
    plan = book.plan(T0 + GRACE / 2)
    assert list(plan.writes) == ["data"] and plan.deletes == [], "other profiles may not have been checked yet"
    apply(book, plan)
    assert book.plan(T0 + GRACE).deletes == ["old", None]


def test_a_message_that_changes_rewrites_the_report_but_keeps_the_first_seen_time():
    book = PolicyReportBook(T0, GRACE)
    book.record("p", "credits", credit_findings("p", {"state": "Draining", "fileSystemId": "fs", "message": "3 h"}), T0)
    apply(book, book.plan(T0))
    later = T0 + timedelta(minutes=5)
    book.record("p", "credits", credit_findings("p", {"state": "Draining", "fileSystemId": "fs", "message": "2 h"}),
                later)
    (result,) = book.plan(later).writes[None]["results"]
    assert result["message"] == "fs: 2 h" and result["timestamp"]["seconds"] == int(T0.timestamp())


def test_a_finding_identity_ignores_its_message():
    pod = Subject("Pod", "a", "data", "uid-a")
    def finding(message, volume):
        return Finding(Reason.OPTION_MISMATCH, Severity.ERROR, message, subject=pod, profile="p",
                       evidence={"volume": volume, "option": "acregmax"})

    one, two, other = finding("first", "pv-1"), finding("second", "pv-1"), finding("first", "pv-2")
    assert one.identity == two.identity != other.identity


def test_a_write_that_failed_is_planned_again_until_it_is_confirmed():
    book = book_with(compliance_findings("p", [drifted("a", "data", drift())]))
    assert list(book.plan(T0).writes) == ["data"]
    assert list(book.plan(T0 + timedelta(seconds=30)).writes) == ["data"], "not confirmed: still due"
    apply(book, book.plan(T0 + timedelta(seconds=60)))
    assert not book.plan(T0 + timedelta(seconds=90))


SCHEMA_WORDS = {"type", "description", "properties", "items", "required", "enum", "format", "additionalProperties",
                "x-kubernetes-list-type", "x-kubernetes-map-type"}


def schema_words_misused(node, path="") -> list[str]:
    """Keys of a schema node that are no OpenAPI word (a YAML slip that makes the API server refuse the CRD)."""
    if not isinstance(node, dict):
        return []
    odd = [f"{path}.{key}" for key in node if key not in SCHEMA_WORDS and not path.endswith("properties")]
    return odd + [found for key, child in node.items() for found in schema_words_misused(child, f"{path}.{key}")]


@pytest.mark.parametrize(("api", "cluster_wide"), [(api, cluster_wide) for api in REPORT_APIS
                                                   for cluster_wide in (False, True)],
                         ids=lambda value: getattr(value, "format", None) or ("cluster" if value else "namespaced"))
def test_the_shipped_crds_are_each_groups_reports_with_a_clean_schema(api, cluster_wide):
    directory, upstream = CRDS[api]
    plural, kind = (api.cluster_plural, api.cluster_kind) if cluster_wide else (api.plural, api.kind)
    text = (directory / f"{api.group}_{plural}.yaml").read_text()
    assert upstream in text and "at commit" in text  # where it was written from
    definition = yaml.safe_load(text)
    assert (definition["metadata"]["name"], definition["spec"]["names"]["kind"], definition["spec"]["scope"]) == (
        f"{plural}.{api.group}", kind, "Cluster" if cluster_wide else "Namespaced")
    (version,) = definition["spec"]["versions"]
    assert version["name"] == api.version and version["served"] and version["storage"]
    assert schema_words_misused(version["schema"]["openAPIV3Schema"]) == []
