"""PolicyReports on (`mountwarden operator --policy-reports`, the chart's policyReports.enabled): find the report
CRDs at start-up, or say in one line that they are missing and carry on without; write what the findings say;
follow profiles' deletion.

Registered only when asked for (`register` does nothing otherwise). The findings reach the publisher through
mountwarden.handlers.findings; the core builds the reports (mountwarden.core.policyreport), the adapter writes
them (mountwarden.adapters.policyreports). A report that cannot be written now is written at the next check: the
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
from mountwarden.core.policyreport import PolicyReportBook
from mountwarden.handlers.config import OperatorConfig
from mountwarden.handlers.context import OperatorContext
from mountwarden.handlers.credits import watched_file_system
from mountwarden.handlers.errors import retry_transient
from mountwarden.handlers.findings import CREDITS

log = logging.getLogger("mountwarden.policyreports")


class PolicyReportPublisher:
    """The book of findings and the API, under one lock: handlers of several profiles run at once."""

    def __init__(self, reports: PolicyReports, book: PolicyReportBook) -> None:
        self.reports = reports
        self.book = book
        self._lock = threading.Lock()

    def record(self, profile: str, source: str, findings: Iterable[Finding]) -> None:
        now = datetime.now(UTC)
        with self._lock:
            self.book.record(profile, source, findings, now)
            self._sync(now)

    def forget(self, profile: str) -> None:
        now = datetime.now(UTC)
        with self._lock:
            self.book.forget(profile, now)
            self._sync(now)

    def _sync(self, now: datetime) -> None:
        plan = self.book.plan(now)
        for key, body in plan.writes.items():
            try:
                self.reports.write(key, body)
                self.book.written(key, body)
            except (ApiException, TransientApiError) as error:
                log.warning(f"could not write the {body['kind']} of {key or 'the cluster'} (retried at the next "
                            f"check): {getattr(error, 'reason', None) or error}")
        for key in plan.deletes:
            try:
                self.reports.delete(key)
                self.book.deleted(key)
            except (ApiException, TransientApiError) as error:
                log.warning(f"could not delete the policy report of {key or 'the cluster'} (retried at the next "
                            f"check): {getattr(error, 'reason', None) or error}")


def grace(config: OperatorConfig) -> timedelta:
    """How long reports an earlier run left are kept: until every profile has surely been checked again."""
    return timedelta(seconds=2 * max(config.compliance_interval, config.credit_interval))


@retry_transient
def start_policy_reports(memo: OperatorContext, **_) -> None:
    reports = PolicyReports(memo.kube_client)
    try:
        missing = reports.missing_resources()
        existing = [] if missing else reports.existing()
    except ApiException as error:  # e.g. 403: the role lacks the report rules (the chart's policyReports.enabled)
        log.warning(f"PolicyReports are off: reading them failed ({error.status} {error.reason}); the operator "
                    "needs list, create, patch and delete on policyreports and clusterpolicyreports.wgpolicyk8s.io.")
        return
    if missing:
        log.warning(f"PolicyReports are off: the API server does not serve {' and '.join(missing)}. Install the "
                    "wgpolicyk8s.io v1alpha2 CRDs (Kyverno and Policy Reporter ship them) and restart the operator.")
        return
    book = PolicyReportBook(datetime.now(UTC), grace(memo.config), existing)
    memo.policy_reports = PolicyReportPublisher(reports, book)
    log.info("PolicyReports on: findings go to the PolicyReport 'mountwarden' of each namespace and the "
             "ClusterPolicyReport 'mountwarden'")


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
