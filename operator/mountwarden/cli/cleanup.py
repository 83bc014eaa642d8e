"""Subcommand: cleanup (remove mountwarden's finalizers once the operator is gone, so that deletions finish)."""

from typing import Annotated

import typer
from kubernetes.client import ApiException
from kubernetes.config import ConfigException

from mountwarden.adapters.finalizers import FINALIZER, release_finalizers
from mountwarden.adapters.kube import api_client
from mountwarden.cli._app import app
from mountwarden.cli._output import console, fail, print_json


@app.command()
def cleanup(
    kubeconfig: Annotated[str | None, typer.Option("--kubeconfig", envvar="KUBECONFIG",
                                                   help="Outside a cluster: the kubeconfig to use.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only list the objects that have the finalizer.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document.")] = False,
) -> None:
    """Remove mountwarden's finalizer (mountwarden.io/finalizer) from every StorageProfile, NodeMountReport and
    NetworkFileSystem, so that deleting them finishes without the operator.

    For after `helm uninstall` (or any time the operator is gone for good): the finalizer's owner is gone, and a
    deleted profile would wait for it forever. Run it while the operator runs and a deleted profile's unused
    StorageClasses are not removed. Nothing is deleted here: the objects being deleted go at once, the others
    stay, and StorageClasses stay (delete them by the label mountwarden.io/profile once no volume uses them).
    """
    try:
        released = [item.to_dict() for item in release_finalizers(api_client(kubeconfig), dry_run=dry_run)]
    except (ApiException, ConfigException) as error:
        fail(f"could not release mountwarden's finalizers: {error}")
    if as_json:
        print_json({"finalizer": FINALIZER, "dryRun": dry_run, "released": released})
        return
    verb = "would release" if dry_run else "released"
    for item in released:
        console.print(f"{verb} {item['resource']}/{item['name']}" + (" (being deleted)" if item["deleting"] else ""))
    console.print(f"{len(released)} object(s): {verb} {FINALIZER}")
