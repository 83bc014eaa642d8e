"""Subcommand ``sqlite-scan``: SQLite databases in use on network filesystems, from a proc root."""

from functools import partial
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from mountwarden.adapters.procreader import ProcRoot
from mountwarden.agent.loop import say_what_is_left_stuck
from mountwarden.agent.sqlitescan import DEFAULT_HEADER_SCAN_BUDGET, SqliteScan, scan_sqlite
from mountwarden.cli._app import app
from mountwarden.cli._output import console, err_console, fail, print_json
from mountwarden.core.sqlite import (
    DEFAULT_KUBELET_ROOT,
    DEFAULT_NETWORK_FSTYPES,
    Severity,
    kubelet_pod_volume,
    network_mounts,
    parse_network_fstypes,
)

SEVERITY_STYLES = {Severity.CRITICAL: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}


@app.command("sqlite-scan")
def sqlite_scan_command(
    proc_root: Annotated[
        Path,
        typer.Option(
            "--proc-root",
            metavar="DIR",
            help="The procfs to read: /proc, or the host's /proc mounted in a container (/host/proc).",
        ),
    ] = Path("/proc"),
    network_fstypes: Annotated[
        str,
        typer.Option(
            "--network-fstypes",
            metavar="LIST",
            help="Comma-separated filesystem types that count as network storage.",
        ),
    ] = ",".join(sorted(DEFAULT_NETWORK_FSTYPES)),
    kubelet_root: Annotated[
        str,
        typer.Option(
            "--kubelet-root",
            metavar="DIR",
            help="The kubelet's directory: its pods/<uid>/volumes/... mounts name the pod and the volume.",
        ),
    ] = DEFAULT_KUBELET_ROOT,
    header_scan: Annotated[
        bool,
        typer.Option(
            "--header-scan",
            help="Also read the first 16 bytes of files open on network mounts, to find databases that "
            "hold no lock right now. Only from servers that answer a statvfs() probe first: a read behind a "
            "dead server could never be interrupted.",
        ),
    ] = False,
    header_scan_budget: Annotated[
        int,
        typer.Option(
            "--header-scan-budget",
            metavar="FILES",
            min=0,
            help="At most this many files read by --header-scan (each costs the server an open and a read).",
        ),
    ] = DEFAULT_HEADER_SCAN_BUDGET,
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")] = False,
) -> None:
    """Find SQLite databases in use on network filesystems (NFS, EFS), from /proc/locks.

    SQLite locks bytes of the database file that hold no data, so every SQLite
    process shows in /proc/locks. Byte 1073741824 (0x40000000) is PENDING, a
    writer waiting for readers to finish; 1073741825 is RESERVED, a writer
    preparing its transaction; 1073741826 to 1073742335 (510 bytes) are SHARED,
    locked READ by every reader and WRITE (EXCLUSIVE) while a commit is
    written. A POSIX lock there, on a network filesystem, is a SQLite database
    in use on it: the lock's pid leads to the pod and container (its cgroup),
    its device to the mount and pod volume, its inode to the path (the
    process's open files).

    WAL mode is critical: WAL keeps its index in the -shm file beside the
    database, which every connection maps as shared memory, and a network
    filesystem cannot share memory between hosts; connections on different
    nodes then read stale indexes and can corrupt the database. It shows as a
    -shm open or mapped beside the database, or as locks on bytes 120 to 128
    of the -shm: 120 WRITE, 121 CKPT, 122 RECOVER, 123 to 127 READ0 to READ4,
    and 128, held by every open connection. Rollback-journal mode is a warning:
    it works, but each lock is a round trip to the server and each commit
    waits for the server to sync. Waiting locks (-> lines) are contention on
    the holder's database, not databases of their own.

    JSON: findings (severity critical, warning or info; mode wal, rollback or
    unknown; pid, pod_uid, container_id, device MAJ:MIN, inode, path as the
    process sees it, mount_point, volume_name, lock SHARED, RESERVED, PENDING
    or EXCLUSIVE, message, remedy), network_fstypes, network_mounts and
    counters (lock lines, processes read, headers read, entries vanished or
    forbidden mid-scan).

    Exit codes: 0 nothing found, 1 findings, 2 bad input.

    Example, on a node: mountwarden sqlite-scan --proc-root /proc --json
    """
    try:
        fstypes = parse_network_fstypes(network_fstypes)
    except ValueError as error:
        fail(f"--network-fstypes: {escape(str(error))}")
    if not (proc_root / "locks").is_file():
        fail(f"{escape(str(proc_root))} is not a procfs: it has no locks file")
    reader = ProcRoot(proc_root)
    mountinfo = reader.mountinfo(1)
    if not mountinfo.mounts:
        fail(f"no mount table in {escape(str(proc_root / '1' / 'mountinfo'))}")
    mounts = network_mounts(mountinfo.mounts, fstypes, partial(kubelet_pod_volume, kubelet_root=kubelet_root))
    scan = scan_sqlite(reader, mounts, header_scan=header_scan, header_scan_budget=header_scan_budget)
    say_what_is_left_stuck(reader)
    if json_output:
        print_json(
            {
                "findings": [finding.to_dict() for finding in scan.findings],
                "network_fstypes": sorted(fstypes),
                "network_mounts": len(mounts),
                "counters": scan.counters.to_dict(),
            }
        )
    else:
        _print_scan(scan, fstypes, len(mounts))
    raise typer.Exit(1 if scan.findings else 0)


def _print_scan(scan: SqliteScan, network_fstypes: frozenset[str], mount_count: int) -> None:
    where = f"{mount_count} mount(s) of type {', '.join(sorted(network_fstypes))}"
    if not scan.findings:
        console.print(f"No SQLite database in use on {escape(where)}.")
        return
    table = Table("#", "severity", "mode", "pid", "pod", "lock", "database", "mount (volume)", title=where)
    for number, finding in enumerate(scan.findings, start=1):
        mount = finding.mount_point + (f" ({finding.volume_name})" if finding.volume_name else "")
        table.add_row(
            str(number),
            Text(str(finding.severity), style=SEVERITY_STYLES[finding.severity]),
            str(finding.mode),
            "-" if finding.pid is None else str(finding.pid),
            Text(finding.pod_uid or "-", overflow="fold"),
            str(finding.lock or "-"),
            Text(
                finding.path or f"{finding.file_id.major_minor} inode {finding.file_id.inode}",
                overflow="fold",
            ),
            Text(mount, overflow="fold"),
        )
    console.print(table)
    for number, finding in enumerate(scan.findings, start=1):
        console.print(Text(f"{number}. {finding.message}"), soft_wrap=True)  # its path whole, for copy and paste
    remedies = {finding.remedy for finding in scan.findings}
    # The WAL remedy extends the general one: print only the longest of remedies that share a start.
    for remedy in sorted(remedies):
        if not any(other != remedy and other.startswith(remedy) for other in remedies):
            console.print(Text.assemble(("remedy: ", "bold"), remedy))
    unreadable = scan.counters.vanished + scan.counters.forbidden
    if unreadable:
        err_console.print(
            f"note: {unreadable} /proc entries vanished or were forbidden mid-scan; findings may lack "
            "paths or pods (run as root, with CAP_SYS_PTRACE, to read every process)"
        )
