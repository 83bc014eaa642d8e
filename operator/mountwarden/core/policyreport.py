"""Findings as policy reports, where policy tools (Policy Reporter, Kyverno's UIs) show them: the
`wgpolicyk8s.io/v1alpha2` PolicyReports and their successor, OpenReports' `openreports.io/v1alpha1` Reports.

One report named ``mountwarden`` per namespace (a PolicyReport, or a Report) holds one result per finding on a
pod of that namespace (drift, a shared superblock, an ignored nconnect, SQLite on NFS); one cluster-wide report
of the same name (a ClusterPolicyReport, or a ClusterReport) holds the findings on cluster-scoped subjects (a
StorageProfile's draining EFS credits). Each result says: policy = the StorageProfile, rule = the finding's reason
(the same word as the pod Event and the runbook), severity, and the subject. A result is rendered once
(``_result``), the same under either group: the two groups share the v1alpha2 result schema, and OpenReports
only widened its severities (critical, info), which mountwarden does not use so that both say the same.

`ReportFormat` (``--report-format``) and `choose_report_apis` say which groups the reports go to;
`PolicyReportBook` keeps the findings of every profile and says what to write and delete so that one group's
reports follow the findings; the operator's adapter does the writing. It is pure: no client, no clock of its own.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from mountwarden.core.compliance import Verdict
from mountwarden.core.findings import Finding, Reason, Severity, Subject


@dataclass(frozen=True)
class ReportApi:
    """One API group of policy reports: its version, and its namespaced and cluster-wide kinds."""

    #: Its word in ``--report-format``.
    format: str
    group: str
    version: str
    kind: str
    plural: str
    cluster_kind: str
    cluster_plural: str
    #: Who installs its CRDs (mountwarden never does: a cluster has one owner of them).
    shipped_by: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    def resources(self) -> list[str]:
        """Its two resources as `kubectl api-resources` and the log name them."""
        return [f"{plural}.{self.api_version}" for plural in (self.plural, self.cluster_plural)]


WGPOLICYK8S = ReportApi("wgpolicyk8s", "wgpolicyk8s.io", "v1alpha2", "PolicyReport", "policyreports",
                        "ClusterPolicyReport", "clusterpolicyreports", "Kyverno and Policy Reporter ship them")
OPENREPORTS = ReportApi("openreports", "openreports.io", "v1alpha1", "Report", "reports",
                        "ClusterReport", "clusterreports", "github.com/openreports/reports-api ships them")
REPORT_APIS = (WGPOLICYK8S, OPENREPORTS)


class ReportFormat(StrEnum):
    """Which groups the reports go to (``--report-format``, the chart's policyReports.format)."""

    AUTO = "auto"  # every group whose CRDs the API server serves at start-up
    WGPOLICYK8S = "wgpolicyk8s"
    OPENREPORTS = "openreports"
    BOTH = "both"

    def candidates(self) -> tuple[ReportApi, ...]:
        """The groups this format may write (the chart grants exactly these)."""
        return tuple(api for api in REPORT_APIS if self in (ReportFormat.AUTO, ReportFormat.BOTH, api.format))


@dataclass(frozen=True)
class ReportChoice:
    """The groups the reports go to, why (one sentence for the log), and what was asked for but is not served."""

    apis: tuple[ReportApi, ...]
    why: str
    missing: tuple[ReportApi, ...]


def choose_report_apis(report_format: ReportFormat, served: Collection[ReportApi]) -> ReportChoice:
    """The groups to write, from the format and the groups whose two CRDs the API server serves: auto takes
    every one served (both where both are, so that no reader of either loses its reports); a named format takes
    its own where served and says which are missing."""
    wanted = report_format.candidates()
    apis = tuple(api for api in wanted if api in served)
    missing = tuple(api for api in wanted if api not in served)
    if report_format != ReportFormat.AUTO:
        why = f"--report-format={report_format}"
    elif not apis:
        why = "--report-format=auto and the API server serves neither group"
    elif missing:
        why = (f"--report-format=auto and the API server serves {apis[0].api_version} reports, not "
               f"{missing[0].api_version}")
    else:
        why = ("--report-format=auto and the API server serves both groups; --report-format="
               f"{OPENREPORTS.format} or {WGPOLICYK8S.format} writes one")
    return ReportChoice(apis, why, missing if report_format != ReportFormat.AUTO or not apis else ())


#: Every report mountwarden writes has this name (one per namespace, one cluster-wide) and these labels.
REPORT_NAME = "mountwarden"
LABELS = {"app.kubernetes.io/managed-by": "mountwarden"}
SOURCE = "mountwarden"
CATEGORY = "NFS mounts"
PROFILE_API_VERSION = "mountwarden.io/v1alpha1"

#: The report's severities are high | medium | low (the v1alpha2 schema); its results pass | fail | warn | error
#: | skip. An error (or critical) finding fails its policy; a warning is a warn.
_SEVERITY = {Severity.CRITICAL: "high", Severity.ERROR: "high", Severity.WARNING: "medium"}
_RESULT = {Severity.CRITICAL: "fail", Severity.ERROR: "fail", Severity.WARNING: "warn"}
#: Credit states that are findings, and their severity: Draining still has time, Empty and Trap throttle now.
_CREDIT_FINDINGS = {"Draining": (Reason.CREDITS_DRAINING, Severity.WARNING),
                    "Empty": (Reason.CREDITS_EMPTY, Severity.ERROR),
                    "Trap": (Reason.CREDITS_TRAP, Severity.ERROR)}

#: Which report a finding goes to: its subject's namespace, or None for the cluster-wide one.
ReportKey = str | None


def report_of(finding: Finding) -> ReportKey:
    return finding.subject.namespace if finding.subject else None


def compliance_findings(profile: str, verdicts: Iterable[Verdict]) -> list[Finding]:
    """The findings of a profile's compliance check, each on its pod: every warning or error on a pod volume, and
    SQLite on NFS where the profile does not allow it (the verdicts already leave out what it allows)."""
    findings = []
    for verdict in verdicts:
        consumer = verdict.consumer
        pod = Subject("Pod", consumer.pod_name, consumer.namespace, consumer.pod_uid)
        where = f"{consumer.volume_name} on {consumer.node}"
        for finding in verdict.findings:
            if finding.counts:
                findings.append(finding.with_message(f"{where}: {finding.message} {finding.remedy}".strip())
                                .about(pod, profile=profile, node=consumer.node or "", volume=consumer.volume_name,
                                       option=finding.option or ""))
    return findings


def credit_findings(profile: str, credits: Mapping[str, object]) -> list[Finding]:
    """A profile's credit watch as a finding on the (cluster-scoped) profile while its credits drain or are gone."""
    state = str(credits.get("state") or "")
    if state not in _CREDIT_FINDINGS:
        return []
    reason, severity = _CREDIT_FINDINGS[state]
    subject = Subject("StorageProfile", profile, api_version=PROFILE_API_VERSION)
    file_system = str(credits.get("fileSystemId") or "")
    message = f"{file_system}: {credits.get('message', '')}".strip(": ")
    return [Finding(reason, severity, message, subject=subject, profile=profile,
                    evidence={"fileSystemId": file_system})]


def _result(finding: Finding, found_at: datetime) -> dict:
    return {
        "policy": finding.profile,
        "rule": str(finding.reason),
        "result": _RESULT.get(finding.severity, "warn"),
        "severity": _SEVERITY.get(finding.severity, "medium"),
        "scored": True,
        "category": CATEGORY,
        "source": SOURCE,
        "message": finding.message[:1000],
        "resources": [finding.subject.reference()] if finding.subject else [],
        "properties": {key: value for key, value in sorted(finding.evidence.items()) if value},
        "timestamp": {"seconds": int(found_at.timestamp()), "nanos": 0},
    }


def report_body(key: ReportKey, findings: Sequence[Finding], first_seen: Mapping[tuple, datetime],
                api: ReportApi = WGPOLICYK8S) -> dict:
    """One group's report of a namespace (key: its namespace) or its cluster-wide one (key None), results in a
    stable order."""
    ordered = sorted(findings, key=lambda f: (f.profile or "", f.subject.namespace or "" if f.subject else "",
                                              f.subject.name if f.subject else "", f.reason,
                                              f.evidence.get("volume", ""), f.evidence.get("option", "")))
    results = [_result(finding, first_seen[finding.identity]) for finding in ordered]
    counts = Counter(result["result"] for result in results)
    metadata: dict = {"name": REPORT_NAME, "labels": dict(LABELS)}
    if key is not None:
        metadata["namespace"] = key
    return {
        "apiVersion": api.api_version,
        "kind": api.kind if key is not None else api.cluster_kind,
        "metadata": metadata,
        "summary": {outcome: counts.get(outcome, 0) for outcome in ("pass", "fail", "warn", "error", "skip")},
        "results": results,
    }


@dataclass(frozen=True)
class ReportPlan:
    """What to write (whole reports) and delete so that the reports say what the findings say."""

    writes: dict[ReportKey, dict]
    deletes: list[ReportKey]

    def __bool__(self) -> bool:
        return bool(self.writes or self.deletes)


class PolicyReportBook:
    """The findings of every profile, by source (compliance, credits), and what one group's reports hold.

    Only the reports a change touches are rebuilt, and each stays due until its write or delete is confirmed
    (`written`, `deleted`), so a failed write is retried by the next plan. Reports left by an earlier run of
    the operator (``existing``) are kept until ``grace`` has passed since ``started_at``, so that every profile
    has been checked again before a report nobody claims is deleted: a restart neither empties a UI nor makes
    it flicker.
    """

    def __init__(self, started_at: datetime, grace: timedelta, existing: Iterable[ReportKey] = (),
                 api: ReportApi = WGPOLICYK8S) -> None:
        self.api = api
        self._findings: dict[tuple[str, str], tuple[Finding, ...]] = {}
        self._by_report: dict[ReportKey, dict[tuple[str, str], list[Finding]]] = {}
        self._first_seen: dict[tuple, datetime] = {}
        self._written: dict[ReportKey, str] = {}
        self._due: set[ReportKey] = set()
        self._inherited: set[ReportKey] = set(existing)
        self._sweep_after = started_at + grace

    def record(self, profile: str, source: str, findings: Iterable[Finding], now: datetime) -> None:
        """Replace what ``source`` found for ``profile``."""
        key, found = (profile, source), tuple(findings)
        old = self._findings.get(key, ())
        if found == old:
            return
        for report in {report_of(finding) for finding in old}:
            self._by_report.get(report, {}).pop(key, None)
            self._due.add(report)
        for finding in found:
            self._by_report.setdefault(report_of(finding), {}).setdefault(key, []).append(finding)
            self._due.add(report_of(finding))
            self._first_seen.setdefault(finding.identity, now)
        for gone in {f.identity for f in old} - {f.identity for f in found}:
            self._first_seen.pop(gone, None)
        if found:
            self._findings[key] = found
        else:
            self._findings.pop(key, None)

    def forget(self, profile: str, now: datetime) -> None:
        """A deleted profile's findings go with it."""
        for profile_, source in [key for key in self._findings if key[0] == profile]:
            self.record(profile_, source, (), now)

    def plan(self, now: datetime) -> ReportPlan:
        writes: dict[ReportKey, dict] = {}
        deletes: list[ReportKey] = []
        if now >= self._sweep_after:
            self._due |= self._inherited
        for key in list(self._due):
            findings = [finding for group in self._by_report.get(key, {}).values() for finding in group]
            if findings:
                body = report_body(key, findings, self._first_seen, self.api)
                if self._written.get(key) != _fingerprint(body):
                    writes[key] = body
                    continue
            elif key in self._written or key in self._inherited:
                deletes.append(key)
                continue
            self._due.discard(key)  # nothing to do for it
        return ReportPlan(writes, sorted(deletes, key=lambda key: (key is None, key or "")))

    def written(self, key: ReportKey, body: dict) -> None:
        self._written[key] = _fingerprint(body)
        self._inherited.discard(key)
        self._due.discard(key)

    def deleted(self, key: ReportKey) -> None:
        self._written.pop(key, None)
        self._inherited.discard(key)
        self._due.discard(key)
        self._by_report.pop(key, None)


def _fingerprint(body: dict) -> str:
    return json.dumps(body, sort_keys=True)
