"""Operator settings: the handlers are registered from them, and read them from kopf's memo (``memo.config``)."""

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from mountwarden.adapters.webhookconfig import REPAIR_SECONDS, parse_service
from mountwarden.core.admission import service_account_username
from mountwarden.core.node.failures import DEFAULT_STUCK_AFTER_SECONDS
from mountwarden.core.policyreport import ReportFormat

#: A namespace's name is a DNS label (RFC 1123): the API server refuses a webhook naming anything else.
_NAMESPACE_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


class WebhookMode(StrEnum):
    """local: serve on webhook_host and register the webhook; cluster: serve, the chart registers it."""

    AUTO = "auto"  # cluster inside a pod, local elsewhere
    LOCAL = "local"
    CLUSTER = "cluster"
    OFF = "off"


@dataclass(frozen=True)
class OperatorConfig:
    kubeconfig: str | None = None
    #: Port of the Prometheus /metrics endpoint; 0 turns it off.
    metrics_port: int = 9800
    webhook_mode: WebhookMode = WebhookMode.AUTO
    #: None: a free port locally, 9443 in a cluster.
    webhook_port: int | None = None
    #: tls.crt, tls.key (and ca.crt); locally made there when absent, or in a scratch directory when None.
    webhook_cert_dir: str | None = None
    #: Locally: the address the API server reaches the webhook at.
    webhook_host: str = "127.0.0.1"
    #: The operator's own namespace: its PVCs never wait on its webhook.
    namespace: str | None = None
    #: Namespaces whose PVCs call none of mountwarden's webhooks, besides kube-system and the operator's own.
    exempt_namespaces: tuple[str, ...] = ()
    #: Provisioners that mount NFS beyond the built-in list (see mountwarden.core.admission).
    network_provisioners: tuple[str, ...] = ()
    #: NAMESPACE:NAME of the node agent's service account, whose report writes are checked.
    agent_service_account: str | None = None
    #: cluster mode: NAMESPACE/NAME[:PORT] of the Service the API server reaches the webhook through.
    webhook_service: str | None = None
    #: cluster mode: the chart-made ValidatingWebhookConfiguration that receives the deny webhooks.
    enforce_configuration: str | None = None
    #: A label key this replica keeps on its own pod while it answers admission.
    active_label: str | None = None
    #: Seconds between sweeps that delete superseded StorageClasses no volume holds any more.
    collect_interval: float = 60.0
    #: Seconds between EFS credit checks.
    credit_interval: float = 300.0
    #: Seconds between compliance checks of each profile.
    compliance_interval: float = 30.0
    #: Seconds after which a rollout with no event is checked anyway (events drive it; this is a safety net).
    rollout_interval: float = 30.0
    #: A report older than this proves nothing: the agent heartbeats every 5 minutes.
    report_stale_after: float = 900.0
    #: Publish findings as policy reports (when their CRDs are served).
    policy_reports: bool = False
    #: Which groups: wgpolicyk8s.io PolicyReports, openreports.io Reports, both, or those served (auto).
    report_format: ReportFormat = ReportFormat.AUTO
    #: Seconds past a deleted pod's deadline (StuckTerminating), or with its pod gone (OrphanedMount), that a
    #: mount left behind must last to be a finding.
    stuck_after: float = DEFAULT_STUCK_AFTER_SECONDS
    #: Seconds between checks that the webhook configuration is still what mountwarden wrote (repaired if not).
    webhook_repair_interval: float = REPAIR_SECONDS
    #: Seconds between judgements of every node's failures (time alone makes StuckTerminating, OrphanedMount).
    failure_interval: float = 30.0
    #: Seconds between two handlings of one node's report: faster writes are coalesced, the latest handled
    #: (mountwarden.core.node.pace).
    report_min_interval: float = 2.0
    #: Judge every pod volume no StorageProfile governs against the baseline (mountwarden.core.baseline).
    baseline: bool = True
    #: False when the agents are kept off control-plane nodes (the chart's agent.controlPlaneNodes: false), so
    #: that a missing report there is explained, not looked for.
    agent_on_control_plane: bool = True

    # Parsed from the settings above, once, when the config is made (a ValueError names the flag that is wrong).
    #: system:serviceaccount:NS:NAME of agent_service_account; None checks no report writes.
    agent_username: str | None = field(init=False, default=None)
    #: webhook_service as a webhook clientConfig's service reference.
    webhook_service_ref: Mapping | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        try:
            username = service_account_username(self.agent_service_account) if self.agent_service_account else None
        except ValueError as error:
            raise ValueError(f"--agent-service-account: {error}") from None
        bad = [name for name in self.exempt_namespaces if not _NAMESPACE_NAME.fullmatch(name)]
        if bad:
            raise ValueError(f"--exempt-namespace: not a namespace name (a DNS label: at most 63 lowercase "
                             f"alphanumerics and '-'): {', '.join(map(repr, bad))}")
        try:
            service = parse_service(self.webhook_service) if self.webhook_service else None
        except ValueError as error:
            raise ValueError(f"--webhook-service: {error}") from None
        object.__setattr__(self, "agent_username", username)
        object.__setattr__(self, "webhook_service_ref", service)
