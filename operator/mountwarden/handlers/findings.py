"""Where findings go out: pod Events (each once), PolicyReports (when they are on) and metrics, from one list.

The compliance check and the credit watch hand a profile's findings (mountwarden.core.findings.Finding) to
``publish``, which renders them to the PolicyReports and to the ``mountwarden_findings`` gauge; the node reports'
handler posts each finding on its pod with ``post_once``. Each door renders the same Finding: its reason is
the Event's reason (or the one it maps to: ``EVENT_REASONS``), the PolicyReport's rule and the metric's label.
"""

import logging
from collections.abc import Iterable, Mapping

import kopf

from mountwarden.core.findings import Finding, Reason
from mountwarden.handlers import metrics
from mountwarden.handlers.context import OperatorContext
from mountwarden.handlers.posted import PostedFindings

#: What found them: each source's findings of a profile replace that source's earlier ones.
COMPLIANCE, CREDITS, CROSS_AZ = "compliance", "credits", "cross-az"
log = logging.getLogger(__name__)

#: The Event reason of each finding's reason, where they differ: every option drift is MountPolicyDrift.
EVENT_REASONS = {Reason.OPTION_MISMATCH: "MountPolicyDrift", Reason.UNDECLARED_OPTION: "MountPolicyDrift"}


def event_reason(finding: Finding) -> str:
    return EVENT_REASONS.get(finding.reason, str(finding.reason))


#: What an Event's message holds (kopf cuts longer ones in the middle).
EVENT_MESSAGE_CHARS = 1024


def with_remedy(message: str, remedy: str, limit: int = EVENT_MESSAGE_CHARS) -> str:
    """The message and its remedy in one text of at most ``limit`` characters: the message is cut, never the remedy."""
    if not remedy:
        return message[:limit]
    room = limit - len(remedy) - 1
    if len(message) > room:
        message = message[:max(0, room - 1)].rstrip() + "…"
    return f"{message} {remedy}"[:limit]


def warn(body: Mapping, finding: Finding) -> None:
    """A Warning Event on ``body`` saying ``finding``."""
    kopf.warn(body, reason=event_reason(finding), message=finding.message[:EVENT_MESSAGE_CHARS])


def post_once(posted: PostedFindings, finding: Finding) -> None:
    """A Warning Event on the finding's subject, once (PostedFindings remembers it for as long as Events live)."""
    subject = finding.subject
    assert subject is not None and subject.uid is not None, finding
    if not posted.first_time(subject.uid, event_reason(finding), finding.message):
        return
    log.info("%s %s/%s: %s: %s", subject.kind.lower(), subject.namespace, subject.name, event_reason(finding),
             finding.message)
    metadata = {"name": subject.name, "namespace": subject.namespace}
    if subject.kind != "Node":  # a Node is named, not identified, by the key PostedFindings keeps for it
        metadata["uid"] = subject.uid
    try:
        warn({"apiVersion": subject.api_version, "kind": subject.kind, "metadata": metadata}, finding)
    except Exception:  # not posted: a later judgement posts it, rather than never
        posted.forget(subject.uid, event_reason(finding), finding.message)
        raise


def publish(context: OperatorContext, profile: str, source: str, findings: Iterable[Finding]) -> None:
    """One profile's findings of one source: to the PolicyReports (when on) and the findings gauge."""
    findings = list(findings)
    metrics.record_findings(profile, source, findings, context.pods.workload_of)
    if context.policy_reports is not None:
        context.policy_reports.record(profile, source, findings)
