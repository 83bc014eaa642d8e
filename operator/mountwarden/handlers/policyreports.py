"""PolicyReports on (`mountwarden operator --policy-reports`, the chart's policyReports.enabled): choose the report
groups at start-up from --report-format and the API server's discovery (wgpolicyk8s.io, openreports.io or both) and
say in one line which and why, or that none is served and the operator carries on without; write what the
findings say under each group; follow profiles' deletion.

Registered only when asked for (`register` does nothing otherwise). The findings reach the publisher through
mountwarden.handlers.findings; the core builds the reports (mountwarden.core.policyreport), one book per group so
that each group's reports follow the findings on their own, and the adapter writes them
(mountwarden.adapters.policyreports). A report that cannot be written now is written at the next check: the
findings themselves are in status and Events already.
"""

import logging
import threading
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

import kopf
from kubernetes.client import ApiException

from mountwarden.adapters.kube import TransientApiError
from mountwarden.adapters.policyreports import PolicyReports
from mountwarden.api.base import GROUP, VERSION
from mountwarden.api.storageprofile import PLURAL
from mountwarden.core.findings import Finding
from mountwarden.core.policyreport import PolicyReportBook, ReportApi, choose_report_apis
from mountwarden.handlers.config import OperatorConfig
from mountwarden.handlers.context import OperatorContext
from mountwarden.handlers.credits import watched_file_system
from mountwarden.handlers.errors import retry_transient
from mountwarden.handlers.findings import CREDITS

log = logging.getLogger("mountwarden.policyreports")


class PolicyReportPublisher:
    """The books of findings (one per report group) and the API, under one lock: handlers of several profiles
    run at once."""

    def __init__(self, outlets: Iterable[tuple[PolicyReports, PolicyReportBook]]) -> None:
        self.outlets = list(outlets)
        self._lock = threading.Lock()

    def record(self, profile: str, source: str, findings: Iterable[Finding]) -> None:
        now, findings = datetime.now(UTC), tuple(findings)
        with self._lock:
            for reports, book in self.outlets:
                book.record(profile, source, findings, now)
                _sync(reports, book, now)

    def forget(self, profile: str) -> None:
        now = datetime.now(UTC)
        with self._lock:
            for reports, book in self.outlets:
                book.forget(profile, now)
                _sync(reports, book, now)


def _sync(reports: PolicyReports, book: PolicyReportBook, now: datetime) -> None:
    plan = book.plan(now)
    for key, body in plan.writes.items():
        try:
            reports.write(key, body)
            book.written(key, body)
        except (ApiException, TransientApiError) as error:
            log.warning(f"could not write the {body['kind']} of {key or 'the cluster'} (retried at the next "
                        f"check): {getattr(error, 'reason', None) or error}")
    for key in plan.deletes:
        try:
            reports.delete(key)
            book.deleted(key)
        except (ApiException, TransientApiError) as error:
            kind = reports.api.kind if key is not None else reports.api.cluster_kind
            log.warning(f"could not delete the {kind} of {key or 'the cluster'} (retried at the next check): "
                        f"{getattr(error, 'reason', None) or error}")


def grace(config: OperatorConfig) -> timedelta:
    """How long reports an earlier run left are kept: until every profile has surely been checked again."""
    return timedelta(seconds=2 * max(config.compliance_interval, config.credit_interval))


def _reports_named(api: ReportApi) -> str:
    return f"the {api.kind} 'mountwarden' of each namespace and the {api.cluster_kind} 'mountwarden' ({api.api_version})"


def _resources(apis: Iterable[ReportApi]) -> str:
    return ", nor ".join(" and ".join(api.resources()) for api in apis)


def _install_hint(apis: Iterable[ReportApi]) -> str:
    return " or ".join(f"the {api.group} {api.version} CRDs ({api.shipped_by})" for api in apis)


@retry_transient
def start_policy_reports(memo: OperatorContext, **_) -> None:
    candidates = {api: PolicyReports(memo.kube_client, api) for api in memo.config.report_format.candidates()}
    try:
        served = [api for api, reports in candidates.items() if reports.served()]
    except ApiException as error:
        log.warning(f"PolicyReports are off: reading the API server's discovery failed ({error.status} "
                    f"{error.reason})")
        return
    choice = choose_report_apis(memo.config.report_format, served)
    if not choice.apis:
        log.warning(f"PolicyReports are off: the API server does not serve {_resources(choice.missing)} "
                    f"({choice.why}). Install {_install_hint(choice.missing)} and restart the operator.")
        return
    if choice.missing:
        log.warning(f"PolicyReports: none in {' or '.join(api.api_version for api in choice.missing)}: the API "
                    f"server does not serve {_resources(choice.missing)} ({choice.why}). Install "
                    f"{_install_hint(choice.missing)} and restart the operator.")
    outlets = []
    for api in choice.apis:
        reports = candidates[api]
        try:
            existing = reports.existing()
        except ApiException as error:  # e.g. 403: the role lacks the report rules (the chart's policyReports)
            log.warning(f"PolicyReports: no reports in {api.api_version}: reading them failed ({error.status} "
                        f"{error.reason}); the operator needs list, create, patch and delete on "
                        f"{_resources([api])}.")
            continue
        outlets.append((reports, PolicyReportBook(datetime.now(UTC), grace(memo.config), existing, api)))
    if not outlets:
        return
    memo.policy_reports = PolicyReportPublisher(outlets)
    log.info(f"PolicyReports on ({choice.why}): findings go to "
             f"{'; and to '.join(_reports_named(reports.api) for reports, _ in outlets)}")


def follow_profile(name: str, type: str, spec: kopf.Spec, memo: OperatorContext, **_) -> None:
    """A deleted profile takes its findings along; one no longer watching credits, its credit finding."""
    publisher = memo.policy_reports
    if publisher is None:
        return
    if type == "DELETED":
        publisher.forget(name)
    elif watched_file_system(dict(spec or {})) is None:
        publisher.record(name, CREDITS, [])


def register(registry: kopf.OperatorRegistry, config: OperatorConfig) -> None:
    """The reports' handlers: registered only with --policy-reports."""
    if not config.policy_reports:
        return
    kopf.on.startup(registry=registry)(start_policy_reports)
    kopf.on.event(GROUP, VERSION, PLURAL, registry=registry)(follow_profile)
