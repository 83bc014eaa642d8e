"""Subcommands that read procfs files: ``mounts`` and ``mountstats``."""

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from mountwarden.cli._app import app
from mountwarden.cli._output import console, err_console, fail, print_json
from mountwarden.core.options.effects import nconnect_sizing
from mountwarden.core.options.table import DEFAULT_PER_FLOW_CAP_GBPS
from mountwarden.core.procfs.mountinfo import MountinfoEntry, read_mountinfo
from mountwarden.core.procfs.mounts import MountsEntry, read_mounts
from mountwarden.core.procfs.mountstats import (
    WRAPPED_COUNTER_FLOOR,
    MountstatsDevice,
    RpcOperationStats,
    read_mountstats,
)

ParseResult = TypeVar("ParseResult")

JsonFlag = Annotated[
    bool, typer.Option("--json", help="Print one JSON document on stdout instead of tables.")
]


@app.command("mounts")
def mounts_command(
    mountinfo: Annotated[
        Path | None,
        typer.Option("--mountinfo", metavar="FILE", help="A mountinfo file, such as /proc/self/mountinfo."),
    ] = None,
    mounts: Annotated[
        Path | None,
        typer.Option("--mounts", metavar="FILE", help="A file in /proc/mounts format instead."),
    ] = None,
    json_output: JsonFlag = False,
) -> None:
    """List the mounts of a mountinfo (or /proc/mounts) file, one per line of the file.

    From mountinfo, each mount has: mount_id and parent_id; major_minor, the
    device number of the superblock ("MAJ:MIN", decimal), which is equal for
    mounts that share one NFS superblock and so share its options (the
    kernel shares one only between mounts that differ at most in timeo,
    retrans, resvport or nconnect: kernel lab); root, the directory of the file system mounted
    here; mount_point; mount_options, the per-mount options (ro/rw, nosuid,
    relatime); optional_fields, the propagation tags (shared:N, master:N,
    propagate_from:N, unbindable); fstype; source (for NFS, server:/export);
    super_options, the per-superblock options where NFS keeps vers, rsize,
    actimeo, lookupcache. Options are printed as the kernel wrote them.

    From /proc/mounts: source, mount_point, fstype, mount_options (both kinds
    mixed), dump and pass.

    skipped_lines counts lines that were not in the expected format.
    """
    if mountinfo is not None and mounts is None:
        _show_mountinfo(mountinfo, json_output)
    elif mounts is not None and mountinfo is None:
        _show_proc_mounts(mounts, json_output)
    else:
        fail("give exactly one of --mountinfo FILE or --mounts FILE")


@app.command("mountstats")
def mountstats_command(
    file: Annotated[
        Path,
        typer.Option("--file", metavar="FILE", help="A mountstats file, such as /proc/self/mountstats."),
    ],
    mount: Annotated[
        str | None,
        typer.Option("--mount", metavar="PATH", help="Only the device(s) mounted on PATH."),
    ] = None,
    nfs_only: Annotated[
        bool,
        typer.Option(
            "--nfs-only",
            help="Leave devices that are not NFS out of the JSON (the tables show NFS mounts only).",
        ),
    ] = False,
    json_output: JsonFlag = False,
) -> None:
    """Show NFS client statistics per mount: which RPC operations run, how long they take, where time goes.

    The tables list, per NFS mount and per operation that ran (ops > 0),
    most frequent first: ops; average RTT (time on the wire and in the server);
    average execute (the whole life of a request); average queue (time waiting
    to be sent); errors (RPC iostats 1.1 only). When the average queue is more
    than half the average execute, requests wait for the connection rather than
    the server: one TCP flow carries about 5 Gbit/s at most on EC2, and
    nconnect spreads requests over several connections.

    JSON lists every device in file order (NFS or not, unless --nfs-only), with
    index, its position in the file: the same device and mount point can appear
    twice with different counters. Per device: device, mount_point, fstype,
    statvers, nfs_version ("3", "4.1"), age_seconds, rpc_iostats_version,
    transport (tcp, udp, rdma), xprt_count (connections; above 1 with
    nconnect), opts (every effective option, defaults included; true for a
    flag), ops (per operation: ops, transmissions, major_timeouts, bytes_sent,
    bytes_received, queue_ms, rtt_ms, execute_ms as cumulative totals, and
    errors, null under RPC iostats 1.0), events and bytes (the kernel's named
    counters). Devices that are not NFS have null or empty NFS fields. Counters
    are unsigned 64-bit: a value near 2^64 went below zero in the kernel.
    """
    result = _read(file, read_mountstats)
    _check_format(file, len(result.devices), result.skipped_line_numbers, "mountstats")
    devices = list(result.devices)
    if mount is not None:
        wanted = _normal_mount_point(mount)
        devices = [device for device in devices if _normal_mount_point(device.mount_point) == wanted]
        if not devices:
            fail(f"no device is mounted on {escape(mount)} in {escape(str(file))}")
    if json_output:
        if nfs_only:
            devices = [device for device in devices if device.is_nfs]
        print_json(
            {
                "mounts": [_mountstats_json(device) for device in devices],
                "skipped_lines": result.skipped_lines,
            }
        )
        return
    nfs_devices = [device for device in devices if device.is_nfs]
    for device in nfs_devices:
        _print_mountstats_device(device)
    other_count = len(devices) - len(nfs_devices)
    summary = f"{len(nfs_devices)} NFS mount(s)"
    if other_count:
        summary += f"; {other_count} other device(s) not shown (see --json)"
    console.print(summary)


def _show_mountinfo(path: Path, json_output: bool) -> None:
    result = _read(path, read_mountinfo)
    _check_format(path, len(result.mounts), result.skipped_line_numbers, "mountinfo")
    if json_output:
        print_json(
            {"mounts": [_mountinfo_json(m) for m in result.mounts], "skipped_lines": result.skipped_lines}
        )
    else:
        console.print(_mountinfo_table(result.mounts))


def _show_proc_mounts(path: Path, json_output: bool) -> None:
    result = _read(path, read_mounts)
    _check_format(path, len(result.mounts), result.skipped_line_numbers, "/proc/mounts")
    if json_output:
        print_json(
            {"mounts": [_mounts_json(m) for m in result.mounts], "skipped_lines": result.skipped_lines}
        )
    else:
        console.print(_mounts_table(result.mounts))


def _read(path: Path, reader: Callable[[Path], ParseResult]) -> ParseResult:
    try:
        return reader(path)
    except OSError as error:
        fail(f"cannot read {escape(str(path))}: {escape(str(error.strerror or error))}")


def _check_format(path: Path, parsed: int, skipped: tuple[int, ...], format_name: str) -> None:
    """Stop when nothing in the file is in the format; warn on stderr about lines that were not."""
    if not skipped:
        return
    if not parsed:
        fail(f"{escape(str(path))} holds no {format_name} lines ({len(skipped)} line(s) in another format)")
    shown = ", ".join(str(number) for number in skipped[:10])
    more = ", ..." if len(skipped) > 10 else ""
    err_console.print(
        f"[yellow]warning:[/] skipped {len(skipped)} malformed line(s) in {escape(str(path))}: {shown}{more}"
    )


def _normal_mount_point(path: str) -> str:
    return path.rstrip("/") or "/"


def _mountinfo_json(entry: MountinfoEntry) -> dict[str, Any]:
    return {
        "mount_id": entry.mount_id,
        "parent_id": entry.parent_id,
        "major_minor": entry.major_minor,
        "root": entry.root,
        "mount_point": entry.mount_point,
        "mount_options": entry.mount_options,
        "optional_fields": list(entry.optional_fields),
        "fstype": entry.fstype,
        "source": entry.source,
        "super_options": entry.super_options,
    }


def _mounts_json(entry: MountsEntry) -> dict[str, Any]:
    return {
        "source": entry.source,
        "mount_point": entry.mount_point,
        "fstype": entry.fstype,
        "mount_options": entry.mount_options,
        "dump": entry.dump_frequency,
        "pass": entry.fsck_pass,
    }


def _operation_json(operation: RpcOperationStats) -> dict[str, int | None]:
    return {
        "ops": operation.ops,
        "transmissions": operation.transmissions,
        "major_timeouts": operation.major_timeouts,
        "bytes_sent": operation.bytes_sent,
        "bytes_received": operation.bytes_received,
        "queue_ms": operation.queue_ms,
        "rtt_ms": operation.rtt_ms,
        "execute_ms": operation.execute_ms,
        "errors": operation.errors,
    }


def _mountstats_json(device: MountstatsDevice) -> dict[str, Any]:
    return {
        "index": device.index,
        "device": device.device,
        "mount_point": device.mount_point,
        "fstype": device.fstype,
        "statvers": device.statvers,
        "nfs_version": device.nfs_version,
        "age_seconds": device.age_seconds,
        "rpc_iostats_version": device.rpc_iostats_version,
        "transport": device.transport,
        "xprt_count": device.xprt_count,
        "opts": device.opts_by_name,
        "ops": {name: _operation_json(operation) for name, operation in device.operations.items()},
        "events": device.event_counters,
        "bytes": device.byte_counters,
    }


def _folding_table(*headers: str) -> Table:
    """A table that wraps long paths and option strings instead of cutting them off."""
    table = Table()
    for header in headers:
        table.add_column(header, overflow="fold")
    return table


def _mountinfo_table(entries: tuple[MountinfoEntry, ...]) -> Table:
    table = _folding_table(
        "ID", "parent", "MAJ:MIN", "type", "source", "root", "mount point", "mount options", "super options"
    )
    for entry in entries:
        table.add_row(
            str(entry.mount_id),
            str(entry.parent_id),
            entry.major_minor,
            Text(entry.fstype),
            Text(entry.source),
            Text(entry.root),
            Text(entry.mount_point),
            Text(entry.mount_options),
            Text(entry.super_options),
        )
    return table


def _mounts_table(entries: tuple[MountsEntry, ...]) -> Table:
    table = _folding_table("source", "mount point", "type", "options", "dump", "pass")
    for entry in entries:
        table.add_row(
            Text(entry.source),
            Text(entry.mount_point),
            Text(entry.fstype),
            Text(entry.mount_options),
            str(entry.dump_frequency),
            str(entry.fsck_pass),
        )
    return table


def _average(total: int, ops: int) -> str:
    if total >= WRAPPED_COUNTER_FLOOR:
        return "wrapped"
    return f"{total / ops:.2f}"


def _print_mountstats_device(device: MountstatsDevice) -> None:
    connections = f"{device.xprt_count} connection(s)" if device.xprt_count else "no connection stats"
    title = (
        f"#{device.index} {escape(device.device)} on {escape(device.mount_point)}: NFS {device.nfs_version or '?'} "
        f"over {device.transport or '?'}, {connections}, RPC iostats {device.rpc_iostats_version or '?'}"
    )
    active = sorted(
        (operation for operation in device.operations.values() if operation.ops),
        key=lambda operation: operation.ops,
        reverse=True,
    )
    if not active:
        console.print(f"{title}\n  no RPC operations have run yet\n")
        return
    table = Table(
        "op", "ops", "avg RTT ms", "avg exe ms", "avg queue ms", "errors", title=title, title_justify="left"
    )
    for operation in active:
        table.add_row(
            operation.name,
            str(operation.ops),
            _average(operation.rtt_ms, operation.ops),
            _average(operation.execute_ms, operation.ops),
            _average(operation.queue_ms, operation.ops),
            "-" if operation.errors is None else str(operation.errors),
        )
    console.print(table)
    queue_bound = [operation for operation in active if operation.is_queue_bound]
    for operation in queue_bound:
        console.print(
            f"[yellow]warning:[/] {operation.name}: average queue {operation.queue_ms / operation.ops:.2f} ms "
            f"is more than half of average execute {operation.execute_ms / operation.ops:.2f} ms"
        )
    if queue_bound:
        console.print(f"[bold]hint:[/] {_queue_remedy(device)}")
    console.print()


def _queue_remedy(device: MountstatsDevice) -> str:
    sizing = (f"{nconnect_sizing()} (EFS gives one client at most 1,500 MiB/s in Elastic mode and 500 MiB/s "
              "otherwise: EFS User Guide, 'Amazon EFS performance specifications').")
    if device.xprt_count > 1:
        return (
            "requests wait for the connection, not the server; this mount already spreads them over "
            f"{device.xprt_count} connections (nconnect): if they move less than the instance and the file system "
            f"allow, {sizing} Otherwise look for a server-side limit."
        )
    return (
        f"requests wait for the connection, not the server; one TCP flow carries at most "
        f"{DEFAULT_PER_FLOW_CAP_GBPS:g} Gbit/s between EC2 instances outside a cluster placement group (EC2 User "
        f"Guide, 'Amazon EC2 instance network bandwidth'): {sizing} The mount's xprt: lines then show whether the "
        "kernel opened them (Linux 5.3 brought nconnect; some older enterprise kernels carry it backported)."
    )
