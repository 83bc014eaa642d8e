"""Subcommands: operator (run the controller) and crds (print or write the generated CRDs)."""

from pathlib import Path
from typing import Annotated

import typer

from mountwarden.cli._app import app
from mountwarden.cli._output import err_console


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
    stale = [name for name, text in documents.items()
             if not (output_dir / name).exists() or (output_dir / name).read_text() != text]
    if check:
        for name in stale:
            err_console.print(f"[red]{output_dir / name} differs from the models: run `make crds`.[/]")
        raise typer.Exit(1 if stale else 0)
    output_dir.mkdir(parents=True, exist_ok=True)
    for name, text in documents.items():
        (output_dir / name).write_text(text)
    err_console.print(f"wrote {len(documents)} CRDs to {output_dir}")


@app.command("operator")
def operator_command(
    kubeconfig: Annotated[str | None, typer.Option("--kubeconfig", envvar="KUBECONFIG",
                                                   help="Outside a cluster: the kubeconfig to use.")] = None,
    standalone: Annotated[bool, typer.Option("--standalone/--peering", help="--peering: run as one of several "
                                             "replicas, one active at a time (kopf peering).")] = True,
    peering_name: Annotated[str, typer.Option("--peering-name", help="The KopfPeering object replicas share.")] = "mountwarden",
    priority: Annotated[int, typer.Option("--priority", help="With --peering: the highest priority is active; "
                                          "give replicas different values so none freezes.")] = 0,
    liveness: Annotated[str | None, typer.Option("--liveness", help="Serve a liveness probe, "
                                                 "e.g. http://0.0.0.0:8080/healthz.")] = None,
    collect_interval: Annotated[float, typer.Option(
        "--collect-interval", envvar="MOUNTWARDEN_COLLECT_INTERVAL", min=1,
        help="Seconds between sweeps that delete superseded StorageClasses no volume holds any more.")] = 60.0,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log every handler and API call.")] = False,
) -> None:
    """Run the controller: StorageProfiles into versioned StorageClasses, and more as issues land."""
    import os

    import kopf

    from mountwarden.handlers.config import OperatorConfig
    from mountwarden.handlers.runner import run

    kopf.configure(verbose=verbose)
    # The sweep's interval is fixed when kopf registers the timer, at import of the handlers.
    os.environ["MOUNTWARDEN_COLLECT_INTERVAL"] = str(collect_interval)

    run(
        OperatorConfig(kubeconfig=kubeconfig),
        standalone=standalone,
        liveness_endpoint=liveness,
        peering_name=None if standalone else peering_name,
        priority=priority,
    )
