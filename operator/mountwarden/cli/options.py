"""Subcommands: options normalize | explain | check."""

from pathlib import Path
from typing import Annotated

import typer
import yaml
from pydantic import ValidationError
from rich.table import Table

from mountwarden.api.storageprofile import StorageProfileSpec
from mountwarden.cli._app import app
from mountwarden.cli._output import console, fail, print_json
from mountwarden.core.options import presetsheet
from mountwarden.core.options.compare import check
from mountwarden.core.options.explain import explain
from mountwarden.core.options.kernelfacts import kernel_release
from mountwarden.core.options.normalize import normalize
from mountwarden.core.options.presets import LOCAL_STORAGE_NOTE, CachePolicy
from mountwarden.core.policy import resolve_policy

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
    """List the cache-policy presets: each one's promise, what it is (not) for, and what the kernel lab measured.

    The promise is in the terms code depends on: how stale a stat() by path can be, what open()+fstat()
    sees after another client's close(), how long a file another client creates stays missing after a
    failed lookup, what a write waits for, and the cost. The measured figures are those of a real Linux
    NFS client (the kernel lab, `make kernel-facts`) mounting each preset as a profile on EFS does (the
    AWS baseline under the preset), against a server that grants no delegations, as EFS grants none.
    Deprecated names are listed with what they mean now and the measurement that retired them.
    """
    if json_output:
        print_json(presetsheet.to_dict())
        return
    console.print(f"[dim]measured: Linux {kernel_release()} in the kernel lab (make kernel-facts)[/]\n")
    for sheet in presetsheet.preset_sheets():
        preset, promise = sheet.preset, sheet.preset.promise
        measured = (f"{sheet.measured.describe_staleness()}; {sheet.measured.describe_cost()}" if sheet.measured
                    else "[yellow]not measured with these options: run make kernel-facts[/]")
        console.print(f"[bold]{preset.name}[/]  {','.join(preset.options)}  [dim](on EFS: {sheet.efs_options})[/]")
        for label, text in (("for", preset.use_for), ("not for", preset.not_for),
                            ("stat() by path", promise.stat_by_path),
                            ("open() after another client's close()", promise.open_after_close),
                            ("a file another client creates", promise.new_files), ("writes", promise.writes),
                            ("cost", promise.cost), ("measured", measured)):
            console.print(f"  [bold]{label}:[/] {text}")
        console.print()
    console.print(f"[bold]SQLite and small files:[/] {LOCAL_STORAGE_NOTE}\n")
    for sheet in presetsheet.deprecated_sheets():
        before = (f" As it was ({sheet.former_efs_options}): {sheet.measured_before.describe_staleness()}."
                  if sheet.measured_before else "")
        console.print(f"[yellow]deprecated[/] {sheet.deprecation.warning()}{before}")


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
