"""Where the handlers hand their findings: the PolicyReports' publisher, when they are on.

The compliance check and the credit watch call `publish` with a profile's findings; it does nothing unless
mountwarden.handlers.policyreports is registered (--policy-reports) and found the report CRDs served. The core
builds the reports (mountwarden.core.policyreport), the adapter writes them. A report that cannot be written
now is written at the next check: the findings themselves are in status and Events already.
"""

import logging
import threading
from collections.abc import Iterable
from datetime import UTC, datetime

import kopf
from kubernetes.client import ApiException

from mountwarden.adapters.kube import TransientApiError
from mountwarden.adapters.policyreports import PolicyReports
from mountwarden.core.policyreport import PolicyReportBook, ReportFinding

COMPLIANCE, CREDITS = "compliance", "credits"
log = logging.getLogger("mountwarden.policyreports")


class PolicyReportPublisher:
    """The book of findings and the API, under one lock: handlers of several profiles run at once."""

    def __init__(self, reports: PolicyReports, book: PolicyReportBook) -> None:
        self.reports = reports
        self.book = book
        self._lock = threading.Lock()

    def record(self, profile: str, source: str, findings: Iterable[ReportFinding]) -> None:
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


def publish(memo: kopf.Memo, profile: str, source: str, findings: Iterable[ReportFinding]) -> None:
    """Hand one profile's findings of one source to the reports; nothing when they are off."""
    publisher: PolicyReportPublisher | None = memo.get("policy_reports")
    if publisher is not None:
        publisher.record(profile, source, findings)
