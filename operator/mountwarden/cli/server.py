"""Subcommand ``ping-server``: is an NFS server answering, asked without a mount and without root."""

from typing import Annotated

import typer
from rich.markup import escape

from mountwarden.agent.rpcping import ping
from mountwarden.cli._app import app
from mountwarden.cli._output import console, err_console, print_json
from mountwarden.core.node.rpcnull import NFS_PORT, Verdict


@app.command("ping-server")
def ping_server_command(
    address: Annotated[str, typer.Argument(help="The server's address or name: a mount's addr= option, or "
                                               "127.0.0.1 for an EFS mount through its TLS tunnel.")],
    port: Annotated[int, typer.Option("--port", min=1, max=65535,
                                      help="The mount's port= option: 2049, or the tunnel's local port.")] = NFS_PORT,
    version: Annotated[int, typer.Option("--version", min=2, max=4,
                                         help="The NFS version to ask for (4 for 4.0, 4.1 and 4.2).")] = 4,
    timeout: Annotated[float, typer.Option("--timeout", min=0.1, metavar="SECONDS",
                                           help="How long to wait for the answer, connecting included.")] = 5.0,
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")] = False,
) -> None:
    """Ask an NFS server the RPC NULL call: does it answer this NFS version?

    NULL is the procedure every RPC program answers at once and without
    doing anything, so this touches no file and no mount. It works as any
    user, and it waits at most --timeout seconds, where a command on a hard
    mount of a server that is gone hangs. Run it in the network the mount
    uses (the node's, or the pod's network namespace) to ask the same path
    the kernel asks.

    Exit 0 when the server answered, 1 when it did not or refused, 2 on a
    bad argument.
    """
    result = ping(address, port=port, version=version, timeout=timeout)
    answered = result.answer is not None and result.answer.verdict is Verdict.ANSWERED
    if json_output:
        print_json({"address": address, "port": port, "version": version, "answered": answered,
                    "verdict": result.answer.verdict.value if result.answer else None,
                    "versions": list(result.answer.versions) if result.answer and result.answer.versions else None,
                    "error": result.error, "seconds": round(result.seconds, 3)})
    elif answered:
        console.print(f"[green]{escape(address)}:{port} answered[/] NFS version {version} in {result.seconds:.3f} s")
    elif result.answer is not None:
        served = result.answer.versions
        also = f" (it serves versions {served[0]} to {served[1]})" if served else ""
        err_console.print(f"[red]{escape(address)}:{port} {result.answer.verdict.value}[/] for NFS version "
                          f"{version}{also}", soft_wrap=True)
    else:
        err_console.print(f"[red]{escape(address)}:{port} did not answer[/] within {timeout:g} s: "
                          f"{escape(result.error or '')}. Check the address and port from the mount's addr= and "
                          "port= options, and whether the server (or the EFS tunnel) is up.", soft_wrap=True)
    raise typer.Exit(0 if answered else 1)
