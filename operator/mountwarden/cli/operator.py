"""Subcommands: operator (run the controller) and crds (print or write the generated CRDs)."""

import os
import socket
import time
import zlib
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from mountwarden.cli._app import app
from mountwarden.cli._output import fail, write_generated
from mountwarden.core.node.failures import DEFAULT_STUCK_AFTER_SECONDS
from mountwarden.core.policyreport import ReportFormat
from mountwarden.handlers.config import WebhookMode

#: Derived priorities count the milliseconds from a replica's start to this instant (2109-05-15): the earlier
#: a replica started, the higher its priority. kopf makes the live replica of the highest priority the active one,
#: so the active replica stays active when a newer one joins (a rollout's, the ReplicaSet's replacement of a killed
#: pod) and the standby that has waited longest takes over: no handover ever goes to a replica still starting,
#: and none is undone by a later one (which would cost the demoted replica a restart, handlers/standby.py).
PRIORITY_EPOCH_END_MS = 2**42
#: The pod name's CRC-32 modulo this breaks the tie between replicas started in the same millisecond (kopf pauses
#: every replica while two live ones share the highest priority).
TIE_BREAK_RANGE = 1000
#: The largest derived priority; an operator started by hand with --priority above it pauses every replica.
PRIORITY_MAX = PRIORITY_EPOCH_END_MS * TIE_BREAK_RANGE


def tie_break(pod_name: str) -> int:
    """The part of a derived priority that comes from the pod name: what a peering entry's priority ends with."""
    return zlib.crc32(pod_name.encode()) % TIE_BREAK_RANGE


def derived_priority(started_at: float, pod_name: str) -> int:
    """A peering priority for one replica started at ``started_at`` (seconds since the epoch): the earlier, the
    higher, ties between replicas started in the same millisecond broken by the pod name (``tie_break``)."""
    before_the_end = max(PRIORITY_EPOCH_END_MS - int(started_at * 1000), 1)
    return before_the_end * TIE_BREAK_RANGE + tie_break(pod_name)


def peering_priority(priority: int | None, *, standalone: bool, started_at: float,
                     environ: Mapping[str, str] = os.environ) -> tuple[int, str | None]:
    """The priority to run with, and where a derived one came from (None when given or unused)."""
    if priority is not None:
        return priority, None
    if standalone:
        return 0, None
    pod_name = environ.get("POD_NAME") or socket.gethostname()
    source = "POD_NAME" if environ.get("POD_NAME") else "the host name"
    started = datetime.fromtimestamp(started_at, UTC).isoformat(timespec="milliseconds")
    return derived_priority(started_at, pod_name), f"derived from the start at {started} and {pod_name!r} ({source})"


@app.command("crds")
def crds_command(
    output_dir: Annotated[Path | None, typer.Option("--output-dir", "-o", help="Write one file per CRD here "
                                                    "(what `make crds` does) instead of printing them.")] = None,
    check: Annotated[bool, typer.Option("--check", help="With --output-dir: exit 1 when the files there differ "
                                                         "from the generated ones, write nothing.")] = False,
) -> None:
    """Print the CustomResourceDefinitions generated from the API models (pipe into kubectl apply -f -)."""
    from mountwarden.api.crds import rendered

    documents = rendered()
    if output_dir is None:
        typer.echo("---\n".join(documents.values()), nl=False)
        return
    write_generated(documents, output_dir, check=check, what="CRDs", make_target="crds")


@app.command("operator")
def operator_command(
    kubeconfig: Annotated[str | None, typer.Option("--kubeconfig", envvar="KUBECONFIG",
                                                   help="Outside a cluster: the kubeconfig to use.")] = None,
    standalone: Annotated[bool, typer.Option("--standalone/--peering", help="--peering: run as one of several "
                                             "replicas, one active at a time (kopf peering).")] = True,
    peering_name: Annotated[str, typer.Option("--peering-name", help="The KopfPeering object replicas share.")] = "mountwarden",
    priority: Annotated[int | None, typer.Option(
        "--priority", help="With --peering: the live replica of the highest priority is active; replicas of equal "
        "priority all freeze. Default with --peering: derived from the replica's start, the earliest highest (the "
        "active replica stays active when others join, the longest-waiting standby takes over), ties broken by the "
        f"pod name ($POD_NAME, else the host name); 1..{PRIORITY_MAX}.")] = None,
    liveness: Annotated[str | None, typer.Option("--liveness", help="Serve a liveness probe, "
                                                 "e.g. http://0.0.0.0:8080/healthz.")] = None,
    collect_interval: Annotated[float, typer.Option(
        "--collect-interval", envvar="MOUNTWARDEN_COLLECT_INTERVAL", min=1,
        help="Seconds between sweeps that delete superseded StorageClasses no volume holds any more.")] = 60.0,
    metrics_port: Annotated[int, typer.Option("--metrics-port", help="Serve Prometheus /metrics on this port "
                                              "(0: off).")] = 9800,
    credit_interval: Annotated[float, typer.Option(
        "--credit-interval", envvar="MOUNTWARDEN_CREDIT_INTERVAL", min=10,
        help="Seconds between EFS credit checks (all watched file systems are fetched together). AWS "
             "credentials and region come from the standard boto3 chain (IRSA in a cluster; AWS_REGION; "
             "AWS_ENDPOINT_URL for a local endpoint).")] = 300.0,
    compliance_interval: Annotated[float, typer.Option(
        "--compliance-interval", envvar="MOUNTWARDEN_COMPLIANCE_INTERVAL", min=0.1,
        help="Seconds between compliance checks of each profile against the node reports.")] = 30.0,
    rollout_interval: Annotated[float, typer.Option(
        "--rollout-interval", envvar="MOUNTWARDEN_ROLLOUT_INTERVAL", min=0.1,
        help="Rollouts move on the events that complete each step (workload status, node reports, volumes); "
             "a profile with no event for this many seconds is checked anyway, as a safety net.")] = 30.0,
    report_stale_after: Annotated[float, typer.Option(
        "--report-stale-after", envvar="MOUNTWARDEN_REPORT_STALE_AFTER", min=1,
        help="Seconds after which a node report proves nothing (the agent heartbeats every 5 minutes).")] = 900.0,
    stuck_after: Annotated[float, typer.Option(
        "--stuck-after", envvar="MOUNTWARDEN_STUCK_AFTER", min=1,
        help="Seconds past a pod's deletion deadline with its NFS volume still mounted and stuck before it is "
             "StuckTerminating, and seconds a pod volume stays mounted with its pod gone before it is an "
             "OrphanedMount (the kubelet forces an NFS unmount after a minute on its own).")] = DEFAULT_STUCK_AFTER_SECONDS,
    failure_interval: Annotated[float, typer.Option(
        "--failure-interval", envvar="MOUNTWARDEN_FAILURE_INTERVAL", min=0.1,
        help="Seconds between judgements of every node's mount failures besides those its report's changes "
             "bring: what only time makes a failure (StuckTerminating, OrphanedMount).")] = 30.0,
    report_min_interval: Annotated[float, typer.Option(
        "--report-min-interval", envvar="MOUNTWARDEN_REPORT_MIN_INTERVAL", min=0.0,
        help="Seconds between two handlings of one node's NodeMountReport. A node that writes faster (a broken "
             "agent in a loop) has only its latest report handled, at this pace; the skipped writes are counted "
             "in mountwarden_report_writes_coalesced_total. 0 handles every write.")] = 2.0,
    webhook_mode: Annotated[WebhookMode, typer.Option(
        "--webhook-mode", envvar="MOUNTWARDEN_WEBHOOK_MODE",
        help="The admission webhook. local: serve on --webhook-host and register it with the API server; cluster: "
             "serve on 0.0.0.0 with the certificate in --webhook-cert-dir (the chart registers it); "
             "auto: cluster inside a pod, local elsewhere.")] = WebhookMode.AUTO,
    webhook_port: Annotated[int | None, typer.Option(
        "--webhook-port", envvar="MOUNTWARDEN_WEBHOOK_PORT",
        help="Default: a free port locally, 9443 in a cluster.")] = None,
    webhook_cert_dir: Annotated[str | None, typer.Option(
        "--webhook-cert-dir", envvar="MOUNTWARDEN_WEBHOOK_CERT_DIR",
        help="tls.crt and tls.key (e.g. a cert-manager Secret), reloaded when they change; locally made there "
             "when absent, with ca.crt and its key ca.key, and renewed from that same CA before they expire (the "
             "registered caBundle stays valid). Default in a cluster: /etc/mountwarden/webhook-certs.")] = None,
    webhook_host: Annotated[str, typer.Option(
        "--webhook-host", envvar="MOUNTWARDEN_WEBHOOK_HOST",
        help="local: the address the API server reaches this process at.")] = "127.0.0.1",
    namespace: Annotated[str | None, typer.Option(
        "--namespace", envvar="POD_NAMESPACE",
        help="The operator's own namespace: its PVCs, like kube-system's, skip the webhook.")] = None,
    exempt_namespaces: Annotated[list[str] | None, typer.Option(
        "--exempt-namespace", envvar="MOUNTWARDEN_EXEMPT_NAMESPACES", metavar="NAMESPACE",
        help="A namespace whose PVCs call none of mountwarden's webhooks, like kube-system and --namespace, deny "
             "profiles' failurePolicy Fail ones included (repeatable). A namespace labelled "
             "mountwarden.io/exempt=true is left out too.")] = None,
    network_provisioners: Annotated[list[str] | None, typer.Option(
        "--network-provisioner", envvar="MOUNTWARDEN_NETWORK_PROVISIONERS",
        help="A provisioner whose volumes are NFS, beyond the known ones (repeatable).")] = None,
    agent_service_account: Annotated[str | None, typer.Option(
        "--agent-service-account", envvar="MOUNTWARDEN_AGENT_SERVICE_ACCOUNT", metavar="NAMESPACE:NAME",
        help="The node agent's service account: its NodeMountReport writes are admitted only for the node its "
             "token is bound to (a webhook registered here in local mode, failurePolicy Ignore so that a stopped "
             "operator blocks nothing; by the chart in a cluster, failurePolicy Fail).")] = None,
    webhook_service: Annotated[str | None, typer.Option(
        "--webhook-service", envvar="MOUNTWARDEN_WEBHOOK_SERVICE", metavar="NAMESPACE/NAME[:PORT]",
        help="cluster: the Service the API server reaches the webhook through (port 443 by default).")] = None,
    enforce_configuration: Annotated[str | None, typer.Option(
        "--enforce-configuration", envvar="MOUNTWARDEN_ENFORCE_CONFIGURATION", metavar="NAME",
        help="cluster, with --webhook-service: the ValidatingWebhookConfiguration (made by the chart) into which "
             "the active replica writes one failurePolicy Fail webhook per deny profile.")] = None,
    active_label: Annotated[str | None, typer.Option(
        "--active-label", envvar="MOUNTWARDEN_ACTIVE_LABEL", metavar="KEY",
        help="In a pod ($POD_NAME, $POD_NAMESPACE): keep this label (value \"true\") on the pod while this "
             "replica is the active peer with its admission indexes filled, so that a Service selecting it "
             "routes webhook requests to the active replica only.")] = None,
    policy_reports: Annotated[bool, typer.Option(
        "--policy-reports/--no-policy-reports", envvar="MOUNTWARDEN_POLICY_REPORTS",
        help="Publish findings (drift, SQLite on NFS, shared superblocks, ignored nconnect, draining credits, mount "
             "failures) as policy reports, one per namespace and one cluster-wide, in the groups --report-format "
             "chooses. Needs their CRDs (Kyverno, Policy Reporter or OpenReports ship them); without them the "
             "operator says so once and runs on.")] = False,
    report_format: Annotated[ReportFormat | None, typer.Option(
        "--report-format", envvar="MOUNTWARDEN_REPORT_FORMAT",
        help="With --policy-reports, where the reports go: wgpolicyk8s (wgpolicyk8s.io/v1alpha2 PolicyReports and "
             "a ClusterPolicyReport), openreports (openreports.io/v1alpha1 Reports and a ClusterReport), both (the "
             "same results in each), or auto: every group whose CRDs the API server serves at start-up. The log "
             "says which were chosen and why. Default: auto.")] = None,
    baseline: Annotated[bool, typer.Option(
        "--baseline/--no-baseline", envvar="MOUNTWARDEN_BASELINE",
        help="Judge every pod volume on network storage that no StorageProfile governs against the baseline (the "
             "kernel's defaults and the hazards: the import's sync/actimeo=0/lookupcache=none, soft on a writable "
             "volume, locks kept on each node with writers on several, a missing noresvport on EFS, SQLite on NFS, "
             "options inherited through a shared superblock, an ignored nconnect, how the mount is doing): Events, "
             "metrics and PolicyReports under the policy mountwarden-baseline. The inventory (kubectl get netfs) is "
             "kept either way.")] = True,
    agent_on_control_plane: Annotated[bool, typer.Option(
        "--agent-on-control-plane/--no-agent-on-control-plane", envvar="MOUNTWARDEN_AGENT_ON_CONTROL_PLANE",
        help="Whether node agents run on control-plane nodes (labelled node-role.kubernetes.io/control-plane). The "
             "chart passes --no-agent-on-control-plane unless agent.controlPlaneNodes is true, so that a pod "
             "volume there without a report is said to be unverified by choice, not looked for.")] = True,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log every handler and API call.")] = False,
) -> None:
    """Run the controller: StorageProfiles into versioned StorageClasses, proof of every mount, rollouts, warnings.

    It reconciles each StorageProfile into versioned StorageClasses (<profile>-v<N>), compares every pod
    volume of a profile with what the node agents report really mounted (status.compliance, pod Events),
    keeps an inventory of every volume on network storage (NetworkFileSystem objects) and judges those no
    profile governs against the baseline, adopts existing classes named in a profile's spec.adopt,
    forecasts EFS burst credits from CloudWatch, rolls option changes out one workload at a time, and answers
    the admission webhooks (warnings on PVCs and profiles; denials only where a profile says deny).
    """
    import logging

    import kopf

    from mountwarden.handlers.config import OperatorConfig
    from mountwarden.handlers.runner import run

    try:
        config = OperatorConfig(
            kubeconfig=kubeconfig, metrics_port=metrics_port, webhook_mode=webhook_mode, webhook_port=webhook_port,
            webhook_cert_dir=webhook_cert_dir, webhook_host=webhook_host, namespace=namespace,
            exempt_namespaces=tuple(exempt_namespaces or ()),
            network_provisioners=tuple(network_provisioners or ()), agent_service_account=agent_service_account,
            webhook_service=webhook_service, enforce_configuration=enforce_configuration, active_label=active_label,
            collect_interval=collect_interval, credit_interval=credit_interval,
            compliance_interval=compliance_interval, rollout_interval=rollout_interval,
            report_stale_after=report_stale_after, policy_reports=policy_reports,
            report_format=report_format or ReportFormat.AUTO, stuck_after=stuck_after,
            failure_interval=failure_interval, report_min_interval=report_min_interval, baseline=baseline,
            agent_on_control_plane=agent_on_control_plane,
        )
    except ValueError as error:
        fail(escape(str(error)))
    if report_format is not None and not policy_reports:
        fail(f"--report-format={report_format} chooses where --policy-reports writes: add --policy-reports "
             "(MOUNTWARDEN_POLICY_REPORTS=true)")
    if bool(webhook_service) != bool(enforce_configuration):
        fail("--webhook-service and --enforce-configuration go together: the deny webhooks need both")
    if active_label and not (os.environ.get("POD_NAME") and namespace):
        fail("--active-label labels this replica's own pod: set POD_NAME and POD_NAMESPACE (or --namespace)")

    kopf.configure(verbose=verbose)
    priority, derived = peering_priority(priority, standalone=standalone, started_at=time.time())
    if derived:
        logging.getLogger("mountwarden.operator").info(f"peering priority {priority}, {derived}")

    run(
        config,
        standalone=standalone,
        liveness_endpoint=liveness,
        peering_name=None if standalone else peering_name,
        priority=priority,
    )
