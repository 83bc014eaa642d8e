"""Findings as `wgpolicyk8s.io/v1alpha2` PolicyReports, where policy tools (Policy Reporter, Kyverno's UIs) show them.

One PolicyReport named ``mountwarden`` per namespace holds one result per finding on a pod of that namespace
(drift, a shared superblock, an ignored nconnect, SQLite on NFS); one ClusterPolicyReport of the same name holds
the findings on cluster-scoped subjects (a StorageProfile's draining EFS credits). Each result says: policy =
the StorageProfile, rule = the finding's reason (the same word as the pod Event and the runbook), severity,
and the subject.

`PolicyReportBook` keeps the findings of every profile and says what to write and delete so that the reports
follow the findings; the operator's adapter does the writing. It is pure: no client, no clock of its own.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from mountwarden.core.compliance import Verdict
from mountwarden.core.options.normalize import Severity

API_GROUP = "wgpolicyk8s.io"
API_VERSION = "v1alpha2"
#: Every report mountwarden writes has this name (one per namespace, one cluster-wide) and these labels.
REPORT_NAME = "mountwarden"
LABELS = {"app.kubernetes.io/managed-by": "mountwarden"}
SOURCE = "mountwarden"
CATEGORY = "NFS mounts"
PROFILE_API_VERSION = "mountwarden.io/v1alpha1"

#: The report's severities are high | medium | low (the v1alpha2 schema); its results pass | fail | warn | error
#: | skip. An error finding fails its policy; a warning is a warn.
_SEVERITY = {"critical": "high", Severity.ERROR: "high", Severity.WARNING: "medium"}
_RESULT = {"critical": "fail", Severity.ERROR: "fail", Severity.WARNING: "warn"}
#: Credit states that are findings, and their severity: Draining still has time, Empty and Trap throttle now.
_CREDIT_SEVERITY = {"Draining": Severity.WARNING, "Empty": Severity.ERROR, "Trap": Severity.ERROR}

#: Which report a finding goes to: its subject's namespace, or None for the ClusterPolicyReport.
ReportKey = str | None


@dataclass(frozen=True, slots=True)
class Subject:
    """The object a finding is about (the report's ``resources`` entry)."""

    kind: str
    name: str
    namespace: str | None = None
    uid: str | None = None
    api_version: str = "v1"

    def reference(self) -> dict:
        ref = {"apiVersion": self.api_version, "kind": self.kind, "name": self.name, "namespace": self.namespace,
               "uid": self.uid}
        return {key: value for key, value in ref.items() if value}


@dataclass(frozen=True, slots=True)
class ReportFinding:
    profile: str
    rule: str  # the finding's reason, e.g. OptionMismatch, SQLiteOnNFS, CreditsDraining
    severity: str  # mountwarden's: error | warning (| critical for SQLite)
    message: str
    subject: Subject
    #: What else identifies the finding (node, volume, option, file system): shown by report UIs.
    properties: Mapping[str, str] = field(default_factory=dict)

    @property
    def identity(self) -> tuple:
        """Stays the same while the finding lasts (its message may change, e.g. a credit forecast)."""
        return (self.profile, self.rule, self.subject.kind, self.subject.namespace, self.subject.uid or
                self.subject.name, self.properties.get("volume", ""), self.properties.get("option", ""))

    @property
    def report(self) -> ReportKey:
        return self.subject.namespace


def compliance_findings(profile: str, verdicts: Iterable[Verdict]) -> list[ReportFinding]:
    """The findings of a profile's compliance check: every warning or error on a pod volume, and SQLite on NFS
    where the profile does not allow it (the verdicts already leave out what it allows)."""
    findings = []
    for verdict in verdicts:
        consumer = verdict.consumer
        pod = Subject("Pod", consumer.pod_name, consumer.namespace, consumer.pod_uid)
        where = {"node": consumer.node or "", "volume": consumer.volume_name}
        for finding in verdict.findings:
            if finding.severity is Severity.INFO:
                continue
            properties = {**where, **({"option": finding.option} if finding.option else {})}
            message = f"{consumer.volume_name} on {consumer.node}: {finding.message} {finding.remedy}".strip()
            findings.append(ReportFinding(profile, str(finding.reason), str(finding.severity), message, pod,
                                          properties))
        for use in verdict.sqlite:
            properties = {**where, "mode": use.mode, **({"path": use.path} if use.path else {})}
            findings.append(ReportFinding(profile, "SQLiteOnNFS", use.severity,
                                          f"{consumer.volume_name} on {consumer.node}: {use.message}", pod, properties))
    return findings


def credit_findings(profile: str, credits: Mapping[str, object]) -> list[ReportFinding]:
    """A profile's credit watch as a finding on the (cluster-scoped) profile while its credits drain or are gone."""
    state = str(credits.get("state") or "")
    if state not in _CREDIT_SEVERITY:
        return []
    subject = Subject("StorageProfile", profile, api_version=PROFILE_API_VERSION)
    file_system = str(credits.get("fileSystemId") or "")
    message = f"{file_system}: {credits.get('message', '')}".strip(": ")
    return [ReportFinding(profile, f"Credits{state}", str(_CREDIT_SEVERITY[state]), message, subject,
                          {"fileSystemId": file_system})]


def _result(finding: ReportFinding, found_at: datetime) -> dict:
    return {
        "policy": finding.profile,
        "rule": finding.rule,
        "result": _RESULT.get(finding.severity, "warn"),
        "severity": _SEVERITY.get(finding.severity, "medium"),
        "scored": True,
        "category": CATEGORY,
        "source": SOURCE,
        "message": finding.message[:1000],
        "resources": [finding.subject.reference()],
        "properties": {key: value for key, value in sorted(finding.properties.items()) if value},
        "timestamp": {"seconds": int(found_at.timestamp()), "nanos": 0},
    }


def report_body(key: ReportKey, findings: Sequence[ReportFinding], first_seen: Mapping[tuple, datetime]) -> dict:
    """One PolicyReport (key: its namespace) or the ClusterPolicyReport (key None), results in a stable order."""
    ordered = sorted(findings, key=lambda f: (f.profile, f.subject.namespace or "", f.subject.name, f.rule,
                                              f.properties.get("volume", ""), f.properties.get("option", "")))
    results = [_result(finding, first_seen[finding.identity]) for finding in ordered]
    counts = Counter(result["result"] for result in results)
    metadata: dict = {"name": REPORT_NAME, "labels": dict(LABELS)}
    if key is not None:
        metadata["namespace"] = key
    return {
        "apiVersion": f"{API_GROUP}/{API_VERSION}",
        "kind": "PolicyReport" if key is not None else "ClusterPolicyReport",
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
    """The findings of every profile, by source (compliance, credits), and what the reports hold.

    Only the reports a change touches are rebuilt, and each stays due until its write or delete is confirmed
    (`written`, `deleted`), so a failed write is retried by the next plan. Reports left by an earlier run of
    the operator (``existing``) are kept until ``grace`` has passed since ``started_at``, so that every profile
    has been checked again before a report nobody claims is deleted: a restart neither empties a UI nor makes
    it flicker.
    """

    def __init__(self, started_at: datetime, grace: timedelta, existing: Iterable[ReportKey] = ()) -> None:
        self._findings: dict[tuple[str, str], tuple[ReportFinding, ...]] = {}
        self._by_report: dict[ReportKey, dict[tuple[str, str], list[ReportFinding]]] = {}
        self._first_seen: dict[tuple, datetime] = {}
        self._written: dict[ReportKey, str] = {}
        self._due: set[ReportKey] = set()
        self._inherited: set[ReportKey] = set(existing)
        self._sweep_after = started_at + grace

    def record(self, profile: str, source: str, findings: Iterable[ReportFinding], now: datetime) -> None:
        """Replace what ``source`` found for ``profile``."""
        key, found = (profile, source), tuple(findings)
        old = self._findings.get(key, ())
        if found == old:
            return
        for report in {finding.report for finding in old}:
            self._by_report.get(report, {}).pop(key, None)
            self._due.add(report)
        for finding in found:
            self._by_report.setdefault(finding.report, {}).setdefault(key, []).append(finding)
            self._due.add(finding.report)
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
                body = report_body(key, findings, self._first_seen)
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
