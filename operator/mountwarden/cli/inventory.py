"""Subcommand: inventory (every StorageClass and PersistentVolume on network storage, by file system; no profile needed)."""

from datetime import UTC, datetime, timedelta
from typing import Annotated

import typer
from kubernetes.client import ApiException
from kubernetes.config import ConfigException
from rich.table import Table

from mountwarden.adapters.inventory import read_facts
from mountwarden.adapters.kube import TransientApiError, api_client
from mountwarden.cli._app import app
from mountwarden.cli._output import console, fail, print_json
from mountwarden.core.baseline import WHERE_BASELINE
from mountwarden.core.inventory import FileSystemView, Inventory, same_options, take_inventory
from mountwarden.core.options.normalize import normalize

#: A report older than this proves nothing (the agent heartbeats every 5 minutes): as the operator's default.
STALE_AFTER = timedelta(seconds=900)
STATE_STYLE = {"compliant": "green", "drifted": "red", "unknown": "yellow"}


def _pv_options(volume: dict) -> str:
    """The PV's options: '= class' when they are its class's, else themselves."""
    options = volume["options"]
    if options["storageClass"] is not None and same_options(options["storageClass"], options["persistentVolume"]):
        return "= class"
    return ",".join(normalize(options["persistentVolume"], observed=True).mount_options) or "(none)"


def _pods(volume: dict) -> str:
    lines = []
    for pod in volume["pods"]:
        style = STATE_STYLE.get(pod["state"], "")
        why = "" if pod["state"] == "compliant" else f" ({pod['reason']})"
        lines.append(f"{pod['pod']}@{pod['node'] or '-'} [{style}]{pod['state']}[/]{why}")
    return "\n".join(lines) or "-"


def _short(finding: dict) -> str:
    """A finding's first sentence, without the volume and node it begins with (its columns say them)."""
    message = finding["message"]
    where = f"{finding['volume']} on {finding['node']}"
    if message.startswith(where):
        message = message[len(where):].removeprefix(WHERE_BASELINE).removeprefix(": ")
    return message.split(". ")[0]

def show(fs: FileSystemView) -> None:
    item = fs.to_dict()
    summary = item["summary"]
    console.rule(f"[bold]{item['name']}[/] ({item['kind']})  servers: {', '.join(item['servers']) or '-'}")
    console.print(f"{summary['classes']} classes, {summary['volumes']} volumes ({summary['governed']} governed, "
                  f"{summary['ungoverned']} ungoverned, {summary['adoptionPending']} adoption pending), "
                  f"{summary['claims']} claims, {summary['pods']} pods on {summary['nodes']} nodes, "
                  f"{summary['findings']} findings")
    if item["classes"]:
        classes = Table("StorageClass", "provisioner", "profile", "mountOptions", box=None)
        for cls in item["classes"]:
            profile = cls["governedBy"] or (f"adopted by {cls['adoptedBy']}" if cls["adoptedBy"] else None) or (
                f"none (adopting: {cls['adoptionPendingBy']})" if cls["adoptionPendingBy"] else "none")
            name = cls["name"] + (" (default)" if cls["default"] else "")
            classes.add_row(name, cls["provisioner"], profile, ",".join(cls["mountOptions"]) or "-")
        console.print(classes)
    if item["volumes"]:
        volumes = Table("PersistentVolume", "class", "claim", "profile", "PV options", "pods@node: verdict",
                        box=None)
        for volume in item["volumes"]:
            adoption = volume["adoption"]
            profile = volume["governedBy"] or (f"none (adopting: {adoption['profile']})"
                                               if adoption and adoption["state"] == "Pending" else "none")
            volumes.add_row(volume["name"], volume["storageClassName"] or "-", volume["claim"] or "-", profile,
                            _pv_options(volume), _pods(volume))
        console.print(volumes)
    for inline in item["inlineVolumes"]:
        console.print(f"in-line volume {inline['volumeName']} of {inline['pod']} @{inline['node']}: "
                      f"{inline['state']} ({inline['reason']})")
    if item["disagreements"]:
        console.print("[bold]Disagreements[/] (class, PV, node):")
        for line in item["disagreements"]:
            console.print(f"  - {line}")
    if item["findings"]:
        console.print("[bold]Findings[/] (`--json` has each with its evidence and remedy):")
        for finding in item["findings"]:
            console.print(f"  [{'red' if finding['severity'] != 'warning' else 'yellow'}]{finding['reason']}[/] "
                          f"{finding['pod'] or ''}@{finding['node'] or '-'} {finding['volume'] or ''} "
                          f"({finding['policy']}): {_short(finding)[:200]}", overflow="fold")


@app.command("inventory")
def inventory_command(
    kubeconfig: Annotated[str | None, typer.Option("--kubeconfig", envvar="KUBECONFIG",
                                                   help="Outside a cluster: the kubeconfig to use.")] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout: every file "
                                                             "system with everything on it.")] = False,
    network_provisioners: Annotated[list[str] | None, typer.Option(
        "--network-provisioner", help="A provisioner (CSI driver) whose volumes are NFS, beyond the known ones "
                                      "(repeatable), as the operator's flag.")] = None,
    no_baseline: Annotated[bool, typer.Option("--no-baseline", help="Do not judge volumes no StorageProfile "
                                                                    "governs against the baseline.")] = False,
) -> None:
    """List every StorageClass and PersistentVolume on network storage, by file system: no profile needed.

    For each EFS file system or NFS server: its classes and volumes, their claims, the pods using them and
    their nodes, which StorageProfile governs each (or none), the options in the class, in the PV and in
    effect on the nodes (NodeMountReports, when the agent runs), where those disagree, and every finding:
    a profile's, or the baseline's for volumes no profile governs. Reads the cluster and changes nothing;
    the operator keeps the same view in NetworkFileSystem objects (`kubectl get netfs`). Exit 1 when there
    are findings.
    """
    try:
        facts = read_facts(api_client(kubeconfig), tuple(network_provisioners or ()))
    except (ConfigException, ApiException, TransientApiError) as error:
        fail(f"cannot read the cluster: {error}")
    result: Inventory = take_inventory(facts, now=datetime.now(UTC), stale_after=STALE_AFTER,
                                       baseline=not no_baseline)
    if json_output:
        print_json(result.to_dict())
    else:
        if not result.file_systems:
            console.print("no StorageClass or PersistentVolume on network storage")
        for fs in result.file_systems:
            show(fs)
        for note in result.notes:
            console.print(f"[yellow]note:[/] {note}")
    raise typer.Exit(1 if any(f.counts for fs in result.file_systems for f in fs.findings) else 0)
