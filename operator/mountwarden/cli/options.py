"""Subcommands: options normalize | explain | check."""

from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer
import yaml
from pydantic import ValidationError
from rich.table import Table

from mountwarden.api.storageprofile import StorageProfileSpec
from mountwarden.cli._app import app
from mountwarden.cli._output import console, fail, print_json
from mountwarden.core.compare import check
from mountwarden.core.explain import explain
from mountwarden.core.kernelfacts import kernel_release, preset_measurement
from mountwarden.core.options import normalize
from mountwarden.core.policy import resolve_policy
from mountwarden.core.presets import EFS_PROVISIONER, PRESETS, CachePolicy

options_app = typer.Typer(
    help="Validate, normalize, explain and check NFS mount options (no cluster needed).",
    no_args_is_help=True,
)
app.add_typer(options_app, name="options")

JsonFlag = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]


@options_app.command("normalize")
def normalize_command(
    options: Annotated[str, typer.Argument(help="Options as written in mountOptions, /proc/mounts or mountstats, "
                                                "e.g. 'nfsvers=4.1,actimeo=0,lookupcache=pos'.")],
    json_output: JsonFlag = False,
) -> None:
    """Validate options against the NFS client's table and print their canonical form.

    The canonical form is what mountwarden compares: nfsvers -> vers, lookupcache=pos -> positive,
    v4.1 -> vers=4.1, actimeo=N -> the four ac* times, noac -> the four at 0 plus sync, in a stable order.
    Exit code 0 when valid, 2 when any option is wrong.
    """
    result = normalize(options)
    if json_output:
        print_json(result.to_dict())
    else:
        console.print(result.canonical or "[dim](no options)[/]")
        for problem in result.errors:
            console.print(f"[bold red]error[/] {problem.option}: {problem.message}")
        for problem in result.warnings:
            console.print(f"[yellow]warning[/] {problem.option}: {problem.message}")
    if not result.valid:
        raise typer.Exit(2)


@options_app.command("explain")
def explain_command(
    options: Annotated[str, typer.Argument(help="Options to explain, e.g. 'sync,actimeo=0,lookupcache=none'.")],
    json_output: JsonFlag = False,
) -> None:
    """Say what each option means and what it costs in consistency and in round trips."""
    explanations = explain(options)
    if json_output:
        print_json({"options": [item.to_dict() for item in explanations]})
        return
    table = Table(show_lines=True)
    table.add_column("option", style="bold")
    table.add_column("meaning")
    table.add_column("consequence")
    for item in explanations:
        table.add_row(item.token, item.meaning, item.consequence, style=None if item.known else "red")
    console.print(table)


@options_app.command("presets")
def presets_command(json_output: JsonFlag = False) -> None:
    """List the cache-policy presets: what each is for, its staleness and cost, and what the kernel lab measured.

    The measured figures are those of a real Linux NFS client (the kernel lab, `make kernel-facts`) mounting
    each preset as a profile on EFS does (the AWS baseline under the preset), against a server that grants
    no delegations, as EFS grants none: the worst age of a size seen by stat() and by open()+fstat() while
    another client appends, and the RPCs of a stat() loop, an open()/close() loop and `ls -l` of 50 files.
    """
    rows = []
    for preset in PRESETS.values():
        mount_options = ",".join(resolve_policy(provisioner=EFS_PROVISIONER, cache_policy=preset.name).mount_options)
        rows.append((preset, preset_measurement(str(preset.name), mount_options)))
    if json_output:
        print_json({"kernel": kernel_release(), "presets": [
            {"name": str(p.name), "options": list(p.options), "useFor": p.use_for, "staleness": p.staleness,
             "cost": p.cost, "measured": asdict(m) if m else None}
            for p, m in rows
        ]})
        return
    table = Table(show_lines=True, caption=f"measured: Linux {kernel_release()} in the kernel lab (make kernel-facts)")
    for column in ("preset", "options", "use for", "staleness", "cost", "measured"):
        table.add_column(column)
    for preset, measured in rows:
        shown = (f"{measured.describe_staleness()}\n{measured.describe_cost()}" if measured
                 else "[yellow]not measured with these options: run make kernel-facts[/]")
        table.add_row(str(preset.name), ",".join(preset.options), preset.use_for, preset.staleness, preset.cost, shown)
    console.print(table)


def _declared_from_profile(path: Path) -> tuple[dict, list[str], list[str]]:
    try:
        document = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        fail(f"cannot read the profile {path}: {error}")
    if not isinstance(document, dict) or "spec" not in document:
        fail(f"{path} is not a StorageProfile: it has no spec.")
    try:
        spec = StorageProfileSpec.model_validate(document["spec"])
    except ValidationError as error:
        fail(f"{path}: " + "; ".join(f"spec.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors()))
    policy = spec.resolve()
    if not policy.valid:
        fail(f"{path}: " + "; ".join(str(problem) for problem in policy.errors))
    return policy.options, spec.required_options, spec.forbidden_options


@options_app.command("check")
def check_command(
    actual: Annotated[str, typer.Option("--actual", help="The options a mount really has: the 4th field of "
                                                          "/proc/mounts or the opts: line of mountstats.")],
    preset: Annotated[CachePolicy | None, typer.Option("--preset", help="Check against a preset.")] = None,
    profile: Annotated[Path | None, typer.Option("--profile", help="Check against a StorageProfile YAML file.")] = None,
    efs: Annotated[bool, typer.Option("--efs", help="With --preset: include the EFS baseline options.")] = False,
    json_output: JsonFlag = False,
) -> None:
    """Compare what a mount really has with what a preset or a profile declares.

    An option missing from the actual options counts as its kernel default (/proc/mounts prints most
    options only when they differ from the default, and never prints actimeo).
    Exit code 0 when compliant, 1 when not, 2 when the input is wrong.
    """
    if (preset is None) == (profile is None):
        fail("give exactly one of --preset or --profile.")
    if profile is not None:
        declared, required, forbidden = _declared_from_profile(profile)
    else:
        policy = resolve_policy(provisioner="efs.csi.aws.com" if efs else "", cache_policy=preset)
        declared, required, forbidden = policy.options, [], []
    observed = normalize(actual, observed=True)
    result = check(declared, observed.options, required=required, forbidden=forbidden)
    if json_output:
        print_json(result.to_dict())
    else:
        if result.compliant:
            console.print("[bold green]compliant[/]: the mount has every declared option in effect.")
        for finding in result.findings:
            colour = {"error": "red", "warning": "yellow"}.get(finding.severity, "blue")
            console.print(f"[bold {colour}]{finding.severity}[/] {finding.option}: {finding.message}")
    if not result.compliant:
        raise typer.Exit(1)
