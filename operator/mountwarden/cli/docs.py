"""Subcommand: docs (the reference pages generated from the API models, the metrics and the rollout tables)."""

from pathlib import Path
from typing import Annotated

import typer

from mountwarden.cli._app import app
from mountwarden.cli._output import write_generated

METRICS_HEADER = "<!-- Generated from the metric definitions by `mountwarden docs` (make docs). Do not edit. -->\n\n"


def _metrics_reference() -> str:
    from prometheus_client import REGISTRY, CollectorRegistry

    from mountwarden.agent.metrics import DEFAULT_MAX_VOLUME_SERIES, SERIES_PER_VOLUME, AgentMetrics
    from mountwarden.handlers.metrics import MAX_FINDING_SERIES  # (and registers the operator's metrics)

    operator_rows = _metric_rows(REGISTRY, prefix="mountwarden_")
    agent_rows = _metric_rows(AgentMetrics("node", CollectorRegistry()).registry, prefix="mountwarden_")
    lines = [METRICS_HEADER + "# Metrics", "",
             "The operator serves them on `--metrics-port` (9800), each agent on its own `--metrics-port` (9801).", "",
             "Series are bounded (docs/runbook.md, \"Metrics over their cap\"): an agent serves the per-volume series "
             "(labelled `namespace`, `workload` and `pod_uid`) of at most `--max-volume-series` pod volumes "
             f"(default {DEFAULT_MAX_VOLUME_SERIES}), at most {SERIES_PER_VOLUME} series each, so at most "
             f"{SERIES_PER_VOLUME * DEFAULT_MAX_VOLUME_SERIES:,} per node by default, the busiest first "
             "(`mountwarden_agent_volumes_over_cap` counts the rest); the operator serves at most "
             f"{MAX_FINDING_SERIES:,} series of `mountwarden_findings`, the most severe first "
             "(`mountwarden_findings_over_cap` counts the rest).", ""]
    for title, rows in (("Operator", operator_rows), ("Agent", agent_rows)):
        lines += [f"## {title}", "", "| metric | type | labels | meaning |", "|---|---|---|---|", *rows, ""]
    return "\n".join(lines)


def _metric_rows(registry, prefix: str) -> list[str]:
    """One table row per metric family a registry serves, with the label names its collector declares."""
    rows = []
    for collector in list(registry._collector_to_names):
        declared = getattr(collector, "_labelnames", None) or getattr(collector, "LABELS", ())
        for family in collector.describe() if hasattr(collector, "describe") else collector.collect():
            if not family.name.startswith(prefix):
                continue
            suffix = "_total" if family.type == "counter" else ""
            labels = ", ".join(f"`{label}`" for label in declared)
            rows.append(f"| `{family.name}{suffix}` | {family.type} | {labels} | {family.documentation} |")
    return sorted(set(rows))


ROLLOUT_HEADER = ("<!-- Generated from operator/mountwarden/core/rollout/machine.py by `mountwarden docs` (make docs). "
                  "Do not edit. -->\n\n")


def _rollout_reference() -> str:
    """The rollout's state machine, row for row as the code runs it."""
    from mountwarden.core.rollout.machine import (
        AWAITING_APPROVAL,
        MIGRATION_PHASES,
        PHASES,
        TURNS,
        WORKLOAD_TRANSITIONS,
    )

    def reasons(names) -> str:
        return ", ".join(f"`{name}`" for name in names)

    lines = [ROLLOUT_HEADER + "# Rollout state machine", "",
             "What `status.rollout` says and why, for strategy `PatchBoundVolumes`. Every tick (a timer) judges each "
             "workload afresh from the cluster and from its line of the last status: the first row whose condition "
             "holds gives its state and reason. The [runbook](../runbook.md#rollouts-statusrollout-phase-and-each-"
             "workloads-state-and-reason) says what to do about each reason.", "",
             "## A workload (`status.rollout.workloads[].state`, `.reason`)", "",
             f"Until the rollout is approved (when {AWAITING_APPROVAL.when}), every workload is "
             f"`{AWAITING_APPROVAL.state}` for `{AWAITING_APPROVAL.reason}`. Once it is:", "",
             "| # | when | state | reason |", "|---|---|---|---|"]
    lines += [f"| {number} | {row.when} | `{row.state}` | {reasons(row.reasons)} |"
              for number, row in enumerate(WORKLOAD_TRANSITIONS, 1)]
    lines += ["", "Then, to every `Pending` workload that holds no slot (in this order):", "",
              "| when | state | reason |", "|---|---|---|"]
    lines += [f"| {turn.when} | `{turn.state}` | `{turn.reason}` |" for turn in TURNS]
    lines += ["", "## The rollout (`status.rollout.phase`)", "", "The first row that holds:", "",
              "| when | phase |", "|---|---|"]
    lines += [f"| {rule.when} | `{rule.phase}` |" for rule in PHASES]
    lines += ["", "With strategy `NewStorageClass` nothing is restarted:", "", "| when | phase |", "|---|---|"]
    lines += [f"| {when} | `{phase}` |" for phase, when in MIGRATION_PHASES]
    return "\n".join(lines) + "\n"


def rendered() -> dict[str, str]:
    """File name -> Markdown of every generated reference page."""
    from mountwarden.api import networkfilesystem, nodemountreport, storageprofile
    from mountwarden.api.docgen import model_reference
    from mountwarden.core.options import presetsheet
    from mountwarden.core.options.kernelfacts import facts
    from mountwarden.lab import factsdoc

    return {
        "storageprofile.md": model_reference(
            "StorageProfile reference",
            "`mountwarden.io/v1alpha1`, cluster-scoped, short name `sprof`. One consumer pattern's mount contract; "
            "it reconciles into StorageClasses `<name>-v<N>`. See [concepts](../concepts.md).",
            storageprofile.StorageProfileSpec, storageprofile.StorageProfileStatus),
        "nodemountreport.md": model_reference(
            "NodeMountReport reference",
            "`mountwarden.io/v1alpha1`, cluster-scoped, short name `nmr`, named after its node and written only "
            "by that node's agent: what is really mounted there.",
            nodemountreport.NodeMountReportSpec),
        "networkfilesystem.md": model_reference(
            "NetworkFileSystem reference",
            "`mountwarden.io/v1alpha1`, cluster-scoped, short name `netfs`, one per file system (an EFS file system "
            "or an NFS server), written only by the operator from its inventory, with or without any StorageProfile "
            "(`kubectl get netfs`; `mountwarden inventory` prints the same without the operator).",
            networkfilesystem.NetworkFileSystemSpec),
        "metrics.md": _metrics_reference(),
        "kernel-behaviour.md": factsdoc.render(facts()),
        "rollout.md": _rollout_reference(),
        "presets.md": presetsheet.reference(),
    }


@app.command("docs")
def docs_command(
    output_dir: Annotated[Path, typer.Option("--output-dir", "-o", help="Where the reference pages go.")] = Path(
        "docs/reference"),
    check: Annotated[bool, typer.Option("--check", help="Exit 1 when the pages there differ from the generated "
                                                         "ones; write nothing.")] = False,
) -> None:
    """Write the reference pages generated from the API models and the metric definitions."""
    write_generated(rendered(), output_dir, check=check, what="reference pages", make_target="docs")
