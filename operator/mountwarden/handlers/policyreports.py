"""PolicyReports on (`mountwarden operator --policy-reports`, the chart's policyReports.enabled): find the report
CRDs at start-up, or say in one line that they are missing and carry on without; follow profiles' deletion.

Registered only when asked for; the findings reach the reports through mountwarden.handlers.findings.
"""

import logging
from datetime import UTC, datetime, timedelta

import kopf
from kubernetes.client import ApiException

from mountwarden.adapters.policyreports import PolicyReports
from mountwarden.api.base import GROUP, VERSION
from mountwarden.api.storageprofile import PLURAL
from mountwarden.core.policyreport import PolicyReportBook
from mountwarden.handlers.credits import CREDIT_INTERVAL_SECONDS, watched_file_system
from mountwarden.handlers.errors import retry_transient
from mountwarden.handlers.findings import CREDITS, PolicyReportPublisher
from mountwarden.handlers.reports import COMPLIANCE_INTERVAL_SECONDS

#: Reports an earlier run left are kept until every profile has surely been checked again.
GRACE = timedelta(seconds=2 * max(COMPLIANCE_INTERVAL_SECONDS, CREDIT_INTERVAL_SECONDS))
log = logging.getLogger("mountwarden.policyreports")


@kopf.on.startup()
@retry_transient
def start_policy_reports(memo: kopf.Memo, **_) -> None:
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
    memo.policy_reports = PolicyReportPublisher(reports, PolicyReportBook(datetime.now(UTC), GRACE, existing))
    log.info("PolicyReports on: findings go to the PolicyReport 'mountwarden' of each namespace and the "
             "ClusterPolicyReport 'mountwarden'")


@kopf.on.event(GROUP, VERSION, PLURAL)
def follow_profile(name: str, type: str, spec: kopf.Spec, memo: kopf.Memo, **_) -> None:
    """A deleted profile takes its findings along; one no longer watching credits, its credit finding."""
    publisher: PolicyReportPublisher | None = memo.get("policy_reports")
    if publisher is None:
        return
    if type == "DELETED":
        publisher.forget(name)
    elif watched_file_system(dict(spec or {})) is None:
        publisher.record(name, CREDITS, [])
