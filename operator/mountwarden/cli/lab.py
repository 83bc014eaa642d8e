"""Subcommands: lab build | try (a real Linux NFS client and server in a QEMU VM)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from mountwarden.cli._app import app
from mountwarden.cli._output import console, fail, print_json, progress
from mountwarden.lab.image import LabBuildError, build_image, find_image
from mountwarden.lab.trial import Trial, try_options
from mountwarden.lab.vm import LabError, LabVM

lab_app = typer.Typer(
    help=(
        "A real Linux kernel's NFS client and server in a QEMU VM (Debian 12's kernel, built from Debian "
        "packages, no network device): ask it what the kernel really does with mount options."
    ),
    no_args_is_help=True,
)
app.add_typer(lab_app, name="lab")

JsonFlag = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]


_progress = progress("lab")


@lab_app.command("build")
def build_command(
    print_dir: Annotated[bool, typer.Option("--print-dir", help="Print only the image's directory on stdout.")]
    = False,
    recipe: Annotated[str, typer.Option(
        "--recipe", help="lab: the kernel lab; node: the lab plus containerd, runc, the CNI plugins and a tools "
                         "image, for the real node (dev-cluster up --real-node).")] = "lab",
) -> None:
    """Build the lab image (kernel, root, modules, the guest's Python packages), or find it cached.

    The image goes to ~/.cache/mountwarden/lab/<versions>/ ($MOUNTWARDEN_LAB_CACHE), keyed by the
    kernel package's version and a hash of what else goes in: about 4 minutes cold on 2 cores,
    instant when cached. Needs root (debootstrap, chroot) and a Debian 12 host's apt sources.
    """
    from mountwarden.lab.node import RECIPES  # registers the node recipe

    if recipe not in RECIPES:
        fail(f"--recipe {escape(recipe)}: use one of {', '.join(RECIPES)}")
    try:
        image = build_image(RECIPES[recipe], progress=_progress)
    except LabBuildError as error:
        fail(escape(str(error)))
    if print_dir:
        print(image.dir)
        return
    manifest = image.manifest
    console.print(f"{image.dir}\nkernel {manifest['kernel_release']} ({manifest['kernel_package']} "
                  f"{manifest['kernel_version']}), initramfs {manifest['initrd_bytes'] / 2**20:.0f} MiB, "
                  f"built in {manifest['build_seconds']:.0f} s")


def _image():
    try:
        image = find_image()
        return image if image is not None else build_image(progress=_progress)
    except LabBuildError as error:
        fail(escape(str(error)))


@lab_app.command("try")
def try_command(
    options: Annotated[list[str], typer.Argument(
        metavar="OPTIONS...", help="One mount's options per argument, e.g. 'vers=4.1,timeo=100' "
                                   "'vers=4.1,timeo=600'. They are mounted in this order.")],
    server_max_io: Annotated[int, typer.Option(
        "--server-max-io", min=4096, max=1048576, metavar="BYTES",
        help="The largest rsize/wsize the server offers (knfsd's max_block_size; EFS offers 1 MiB).")]
    = 1048576,
    out: Annotated[Path | None, typer.Option(
        "--out", metavar="DIR", help="Keep the guest's raw mountinfo, mountstats, locks and dmesg here.")] = None,
    json_output: JsonFlag = False,
) -> None:
    """Mount a real NFS export once per OPTIONS, in order, and say what the kernel made of each.

    For each mount: what it asked for, what is in effect (mountstats prints every option, defaults
    included), what mountinfo shows, its superblock and the earlier mount it shares it with (a shared
    superblock keeps the first mount's options), its number of transports (nconnect), and the findings
    mountwarden's own scan makes on the VM's live /proc. A mount the kernel refuses is reported with
    its own error. The VM is always torn down.

    Exit code 0 when every mount was made as asked, 1 when a mount has findings, 2 when the kernel
    refused a mount (or the lab cannot start).
    """
    image = _image()
    try:
        with LabVM(image) as vm:
            _progress(f"booted kernel {vm.kernel_release} in {vm.boot_seconds:.1f} s ({vm.accelerator})")
            trial = try_options(vm, options, server_max_io=server_max_io, out=out, progress=_progress)
    except LabError as error:
        fail(escape(str(error)))
    if json_output:
        print_json(trial.to_dict())
    else:
        _print_trial(trial)
    if trial.refused:
        raise typer.Exit(2)
    raise typer.Exit(1 if trial.has_findings else 0)


def _print_trial(trial: Trial) -> None:
    console.print(f"kernel {trial.kernel}, server offers rsize/wsize up to {trial.server_max_io}")
    table = Table(show_lines=True)
    for column in ("#", "asked", "in effect (mountstats)", "superblock", "xprts", "findings"):
        table.add_column(column, overflow="fold")
    for mount in trial.mounts:
        if not mount.mounted:
            table.add_row(str(mount.index), escape(mount.asked), f"[red]refused:[/] {escape(mount.error or '')}",
                          "", "", "")
            continue
        shared = f" = #{mount.shares_superblock_with}" if mount.shares_superblock_with is not None else ""
        findings = "\n".join(f"[yellow]{f['reason']}[/] {escape(f['message'])}" for f in mount.findings)
        table.add_row(str(mount.index), escape(mount.asked), escape(",".join(mount.effective)),
                      f"{mount.superblock}{shared}", str(mount.transports or ""), findings or "[green]none[/]")
    console.print(table)


@lab_app.command("measure")
def measure_command(
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", metavar="FILE",
        help="Write the facts here (make kernel-facts writes operator/mountwarden/core/options/kernel_facts.json); "
             "default: stdout.")] = None,
) -> None:
    """Measure what the real kernel does, for the facts file the docs and `options presets` quote.

    In one VM: which option differences share a superblock and what a later mount runs with, nconnect
    per client, rsize/wsize outcomes, what mountinfo and mountstats print for each preset, whether
    nolock keeps locks local on NFSv3 and NFSv4.1, and per preset (and per deprecated preset, as it
    was) the RPC cost of a stat() loop, `ls -l`, an open()/close() loop and a stat() loop on a missing
    name, the worst staleness a reader on another client sees by stat() and by open()+fstat() while a
    writer appends, and how long a file another client creates stays missing after a failed lookup.
    Takes 15-20 minutes under TCG (more on a loaded machine).
    """
    import json

    from mountwarden.lab.experiments import Lab, measure_all

    image = _image()
    try:
        with LabVM(image) as vm:
            _progress(f"booted kernel {vm.kernel_release} in {vm.boot_seconds:.1f} s ({vm.accelerator})")
            facts = measure_all(Lab.start(vm), progress=_progress)
    except LabError as error:
        fail(escape(str(error)))
    text = json.dumps(facts, indent=2, sort_keys=True) + "\n"
    if output is None:
        print(text, end="")
    else:
        output.write_text(text)
        _progress(f"wrote {output}")
