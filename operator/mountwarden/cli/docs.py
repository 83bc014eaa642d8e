"""Subcommand: docs (the reference pages generated from the API models and the metric definitions)."""

from pathlib import Path
from typing import Annotated

import typer

from mountwarden.cli._app import app
from mountwarden.cli._output import write_generated

METRICS_HEADER = "<!-- Generated from the metric definitions by `mountwarden docs` (make docs). Do not edit. -->\n\n"


def _metrics_reference() -> str:
    from prometheus_client import REGISTRY, CollectorRegistry

    import mountwarden.handlers.metrics  # noqa: F401  (registers the operator's metrics)
    from mountwarden.agent.metrics import AgentMetrics

    operator_rows = _metric_rows(REGISTRY, prefix="mountwarden_")
    agent_rows = _metric_rows(AgentMetrics("node", CollectorRegistry()).registry, prefix="mountwarden_")
    lines = [METRICS_HEADER + "# Metrics", "",
             "The operator serves them on `--metrics-port` (9800), each agent on its own `--metrics-port` (9801).", ""]
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


def rendered() -> dict[str, str]:
    """File name -> Markdown of every generated reference page."""
    from mountwarden.api import nodemountreport, storageprofile
    from mountwarden.api.docgen import model_reference
    from mountwarden.core import presetsheet
    from mountwarden.core.kernelfacts import facts
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
        "metrics.md": _metrics_reference(),
        "kernel-behaviour.md": factsdoc.render(facts()),
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
