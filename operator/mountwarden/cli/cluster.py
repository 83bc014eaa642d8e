"""Subcommands: dev-cluster up|down|watch (a real local control plane with kwok nodes; `make run`'s view)."""

from __future__ import annotations

import os
import subprocess
import time
from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from mountwarden.cli._app import app
from mountwarden.cli._output import console, err_console, fail, print_json
from mountwarden.devcluster import (
    AlreadyRunningError,
    BinariesError,
    DevCluster,
    DevClusterError,
)
from mountwarden.devcluster.binaries import ENV_VAR
from mountwarden.devcluster.demoview import SELECTORS, fetch_objects
from mountwarden.devcluster.demoview import watch as watch_views


def _default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "mountwarden" / "dev-cluster"


dev_cluster = typer.Typer(
    name="dev-cluster",
    help=(
        "A real local Kubernetes control plane for tests and demos: etcd, kube-apiserver, "
        "kube-controller-manager, kube-scheduler and kwok (simulated nodes whose pods become "
        "Running and Ready). No container runtime needed."
    ),
    no_args_is_help=True,
)
app.add_typer(dev_cluster, name="dev-cluster")


StateDirOption = Annotated[
    Path,
    typer.Option(
        "--state-dir",
        help="Directory for the cluster's kubeconfig, certificates, etcd data, logs and process ids.",
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]
DEFAULT_STATE_DIR = _default_state_dir()


@dev_cluster.command("up")
def up(
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
    nodes: Annotated[
        int, typer.Option("--nodes", min=1, help="How many simulated (kwok) nodes to create.")
    ] = 3,
    binaries: Annotated[
        Path | None,
        typer.Option(
            "--binaries",
            help=(
                "Directory holding etcd, kube-apiserver, kube-controller-manager, kube-scheduler, "
                f"kubectl, kwok and helm. Default: ${ENV_VAR}, else built (once, cached) by the "
                "repository's hack/testbin/build.sh."
            ),
        ),
    ] = None,
    timeout: Annotated[
        float, typer.Option("--timeout", help="Seconds to wait for the cluster to be usable.")
    ] = 180.0,
    real_node: Annotated[
        bool, typer.Option("--real-node", help=(
            "Also start lab-node-0: the kernel lab VM (QEMU, a Debian kernel with a real NFS client and server) "
            "running containerd, runc and a kubelet built from the same source, whose pods mount real NFS. "
            "Minutes to build the first time (hack/nodebin, the lab's node image); needs root to build."))
    ] = False,
    json_output: JsonOption = False,
) -> None:
    """Start the control plane and wait until it is usable; the processes keep running detached.

    Usable: the API server is ready, the default ServiceAccount exists and every node is Ready.
    With --real-node, the real node lab-node-0 has joined and is Ready too; a node that does not
    join fails the command with its kubelet's last log lines.
    On failure, prints the tail of the failing component's log and stops whatever had started.
    Exit code 1 when it cannot start, or when a cluster already runs in --state-dir.
    """
    interactive = err_console.is_terminal
    with err_console.status("dev-cluster: starting", spinner="dots") as status:

        def progress(message: str) -> None:
            status.update(f"dev-cluster: {escape(message)}")
            if not interactive:
                # No spinner without a terminal (CI logs): one line per step instead.
                err_console.print(f"dev-cluster: {escape(message)}", highlight=False)

        def build_output(line: str) -> None:
            err_console.print(line, markup=False, highlight=False, soft_wrap=True)

        cluster = DevCluster(
            state_dir,
            binaries,
            on_progress=progress,
            on_build_output=build_output,
        )
        try:
            info = cluster.up(nodes=nodes, timeout=timeout, real_node=real_node)
        except AlreadyRunningError as e:
            status.stop()
            fail(escape(e.message), code=1)
        except BinariesError as e:
            status.stop()
            fail(escape(str(e)), code=1)
        except DevClusterError as e:
            status.stop()
            _report_failure(e, cluster)
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            status.stop()
            err_console.print("[bold red]interrupted:[/] stopped every process that had started.")
            raise typer.Exit(130) from None

    if json_output:
        print_json(info.to_json())
        return
    bin_dir = info.binaries
    console.print(
        f"[bold green]Dev cluster ready[/] in {info.startup_seconds:.1f}s: Kubernetes "
        f"{escape(info.version or 'unknown')}, API server {escape(info.api_server)}, "
        f"{len(info.nodes)} node{'s' if len(info.nodes) != 1 else ''} ({escape(', '.join(info.nodes))})"
        + (f" and the real node {info.real_node} (joined in {info.real_node_seconds:.0f}s)." if info.real_node else "."),
        highlight=False,
        soft_wrap=True,
    )
    # Plain lines from here on: they are meant to be copied into a shell.
    lines = [
        "",
        "Use it:",
        f"  export KUBECONFIG={info.kubeconfig}",
        f"  export PATH={bin_dir}:$PATH    # the kubectl and helm built for it",
        "  kubectl get nodes",
        "",
        f"Logs: {info.state_dir / 'logs'}/",
        "Stop it:",
        f"  mountwarden dev-cluster down --state-dir {info.state_dir}",
    ]
    console.print("\n".join(lines), markup=False, highlight=False, soft_wrap=True)


def _report_failure(error: DevClusterError, cluster: DevCluster) -> None:
    err_console.print(f"[bold red]error:[/] {escape(error.message)}", highlight=False)
    if error.log_tail:
        err_console.rule(f"last lines of {escape(error.log_path)}", style="red")
        err_console.print(error.log_tail, markup=False, highlight=False, soft_wrap=True)
        err_console.rule(style="red")
    if error.stopped:
        err_console.print(
            f"Stopped what had started ({escape(', '.join(error.stopped))}). "
            f"All logs: {escape(str(cluster.logs_dir))}/",
            highlight=False,
            soft_wrap=True,
        )


@dev_cluster.command("down")
def down(
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
    purge: Annotated[bool, typer.Option("--purge", help="Also remove --state-dir (logs included).")] = False,
    grace_period: Annotated[
        float,
        typer.Option("--grace-period", min=0, help="Seconds between SIGTERM and SIGKILL, per component."),
    ] = 10.0,
    json_output: JsonOption = False,
) -> None:
    """Stop every process that `up` started in --state-dir (idempotent)."""
    started = time.monotonic()
    cluster = DevCluster(state_dir)
    existed = cluster.state_dir.exists()
    try:
        stopped = cluster.down(purge=purge, grace_seconds=grace_period)
    except DevClusterError as e:
        fail(escape(str(e)), code=1)
    seconds = time.monotonic() - started
    if json_output:
        print_json(
            {
                "state_dir": str(cluster.state_dir),
                "stopped": stopped,
                "purged": purge and existed,
                "seconds": round(seconds, 2),
            }
        )
        return
    if stopped:
        console.print(
            f"Stopped {escape(', '.join(stopped))} in {seconds:.1f}s.", highlight=False, soft_wrap=True
        )
    else:
        console.print(
            f"Nothing was running in {escape(str(cluster.state_dir))}.", highlight=False, soft_wrap=True
        )
    if purge and existed:
        console.print(f"Removed {escape(str(cluster.state_dir))}.", highlight=False, soft_wrap=True)


@dev_cluster.command("watch")
def watch(
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
    interval: Annotated[float, typer.Option("--interval", min=0.5, help="Seconds between two looks.")] = 3.0,
    while_pid: Annotated[
        int | None, typer.Option("--while-pid", help="Stop when this process (the operator `make run` started) exits.")
    ] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print the view once as one JSON document.")] = False,
) -> None:
    """Show what the operator found (`make run`'s view), again only when something in it changes.

    The profiles, their classes, what the nodes' agents report, the operator's latest Events and the
    PolicyReports, each profile with its worst finding (ranked by impact: `sync` and `lookupcache=none`,
    a round trip per write and per lookup, before a directory cache's difference). Ages and timestamps are
    left out, so the view changes only when what it says does. On a terminal it is redrawn in place (Ctrl-C
    stops); piped or logged, each change is appended as one block under the time it was seen.
    """
    cluster = DevCluster(state_dir)
    if not cluster.kubeconfig.exists():
        fail(f"no cluster in {escape(str(state_dir))} (no kubeconfig): start one with `mountwarden dev-cluster up "
             f"--state-dir {escape(str(state_dir))}`, or pass the --state-dir `make run` printed.", code=1)

    def get(kind: str) -> tuple[bool, str]:
        scope = () if kind in ("storageprofiles", "storageclasses", "nodemountreports", "clusterpolicyreports") \
            else ("-A",)
        try:
            result = cluster.kubectl("get", kind, *scope, *SELECTORS.get(kind, ()), "-o", "json", check=False,
                                     timeout=60)
        except subprocess.TimeoutExpired:
            return False, "kubectl had no answer in 60 s"
        return result.returncode == 0, result.stdout if result.returncode == 0 else result.stderr

    def fetch():
        try:
            return fetch_objects(get)
        except BinariesError as e:
            fail(escape(str(e)), code=1)

    if json_output:
        print_json(fetch().to_json())
        return

    def keep_going() -> bool:
        if while_pid is None:
            return True
        try:
            os.kill(while_pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass  # alive, someone else's
        return True

    view_console = console if console.is_terminal else Console(width=int(os.environ.get("COLUMNS") or 160))
    try:
        watch_views(fetch, view_console, interval=interval, keep_going=keep_going, sleep=time.sleep,
                    now=datetime.now)
    except KeyboardInterrupt:
        raise typer.Exit(0) from None
