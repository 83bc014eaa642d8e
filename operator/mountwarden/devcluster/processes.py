"""Detached component processes: start, identify after the fact, stop, and read their logs.

Each component runs in its own session (and so its own process group, whose id is the
component's pid), detached from the terminal that ran `dev-cluster up`, so it outlives
that command and a Ctrl-C in the shell does not reach it. `down` may run in another
process much later, so a process is identified by what survives a restart of the
caller: its pid plus its start time from /proc (a reused pid has another start time).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

#: How long a component gets to exit after SIGTERM before it is killed.
DEFAULT_GRACE_SECONDS = 10.0


@dataclass
class RecordedProcess:
    """One started component, as written to `<state-dir>/state.json`."""

    name: str
    pid: int
    #: Start time in clock ticks since boot (/proc/<pid>/stat field 22).
    start_ticks: int
    log: str
    args: list[str]

    def to_dict(self) -> dict:
        return {
            "pid": self.pid,
            "start_ticks": self.start_ticks,
            "log": self.log,
            "args": self.args,
        }

    @classmethod
    def from_dict(cls, name: str, data: dict) -> RecordedProcess:
        return cls(
            name=name,
            pid=int(data["pid"]),
            start_ticks=int(data.get("start_ticks", 0)),
            log=str(data.get("log", "")),
            args=list(data.get("args", [])),
        )


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def free_ports(count: int) -> list[int]:
    """`count` distinct TCP ports on 127.0.0.1 that nobody listens on right now."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """True when a server could listen on ``host:port`` now.

    Probed as Go's net.Listen binds (SO_REUSEADDR), so connections a stopped server left in
    TIME_WAIT do not count as holding the port; a live listener or a plain bind does.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
        return True


def port_holders(port: int) -> list[str]:
    """``"<pid> (<command>)"`` of each process holding a TCP socket on local ``port``.

    From /proc/net/tcp{,6} (the socket's inode) and each process's open descriptors; sockets no
    process owns any more (TIME_WAIT) have inode 0 and are left out.
    """
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) > 9 and int(fields[1].rsplit(":", 1)[1], 16) == port and fields[9] != "0":
                inodes.add(f"socket:[{fields[9]}]")
    holders: list[str] = []
    if not inodes:
        return holders
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if any(os.readlink(fd) in inodes for fd in (entry / "fd").iterdir()):
                holders.append(f"{entry.name} ({(entry / 'comm').read_text().strip()})")
        except OSError:
            continue
    return holders


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nobody listens on right now.

    Chosen below the kernel's ephemeral range: the port is released before the component
    binds it, and a port from that range could meanwhile become the source port of any
    outgoing connection (the API server opens many to etcd). Below it, only another
    explicit bind can take it, which a random choice among ~20000 ports makes unlikely.
    """
    low, _ = _ephemeral_range()
    if low > 11000:
        for _ in range(100):
            port = random.randrange(10000, low)
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (which may contain spaces)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # "pid (comm) state ppid pgrp session ..." - split after the last ')'.
    return raw[raw.rfind(")") + 2 :].split()


def start_ticks(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[19]) if fields else None


def _state(pid: int) -> str | None:
    fields = _stat_fields(pid)
    return fields[0] if fields else None


def is_alive(pid: int) -> bool:
    """True when the process exists and is not a zombie (a zombie holds no resources)."""
    _reap(pid)
    state = _state(pid)
    return state is not None and state not in ("Z", "X")


#: Exit codes of our own children reaped by _reap (negative: killed by that signal).
_exit_codes: dict[int, int] = {}


def _reap(pid: int) -> None:
    # Collect our own exited children so they do not linger as zombies; a process that is
    # not our child (a `down` in another process) is reaped by whoever adopted it.
    try:
        reaped, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return
    if reaped:
        _exit_codes[pid] = os.waitstatus_to_exitcode(status)


def exit_code(pid: int) -> int | None:
    """The exit code of one of our children that has exited (None if unknown or running)."""
    _reap(pid)
    return _exit_codes.get(pid)


def is_ours(record: RecordedProcess) -> bool:
    """Whether the recorded pid still names the process we started (not a reused pid)."""
    return is_alive(record.pid) and start_ticks(record.pid) == record.start_ticks


def _live_groups() -> dict[int, list[int]]:
    """Live (non-zombie) processes by process group id, from one pass over /proc."""
    groups: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields and fields[0] not in ("Z", "X"):
            groups.setdefault(int(fields[2]), []).append(int(entry.name))
    return groups


def processes_mentioning(text: str, executables: Iterable[str]) -> list[int]:
    """Live processes running one of `executables` (by base name) whose command line contains `text`.

    The safety net of `down`: finds components whose pid never made it into state.json
    (a crash between start and record) without touching unrelated processes, such as a
    `tail -f` on a log in the state directory.
    """
    names = set(executables)
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        if pid == os.getpid():
            continue
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        if not argv or not argv[0]:
            continue
        if os.path.basename(argv[0].decode(errors="replace")) not in names:
            continue
        if any(text.encode() in arg for arg in argv[1:]) and is_alive(pid):
            found.append(pid)
    return found


def _die_with_parent(parent: int) -> None:
    """In the child, before exec: get SIGKILL when the process that started us dies.

    SIGKILL, not SIGTERM: all components would get it at once, and an API server asked to
    stop while etcd stops too hangs retrying etcd. Nothing here is worth a clean shutdown.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_pdeathsig = 1
    libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def spawn(
    name: str, args: Sequence[str], log_path: Path, cwd: Path, *, stop_with_parent: bool = False
) -> tuple[RecordedProcess, subprocess.Popen]:
    """Start a component detached, in its own session, with stdout and stderr in `log_path`.

    With `stop_with_parent`, the component is killed if the starting process dies
    without stopping it (a test run killed by its CI job); otherwise it outlives it.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    parent = os.getpid()
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            list(args),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            # Own session and process group: survives the caller and its terminal, and
            # `down` can signal the whole group.
            start_new_session=True,
            close_fds=True,
            preexec_fn=(lambda: _die_with_parent(parent)) if stop_with_parent else None,
        )
    ticks = start_ticks(proc.pid) or 0
    return RecordedProcess(
        name=name, pid=proc.pid, start_ticks=ticks, log=str(log_path), args=list(args)
    ), proc


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _signal_pid(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def stop(
    phases: Sequence[Sequence[RecordedProcess]],
    *,
    extra_pids: Sequence[int] = (),
    grace_seconds: float = DEFAULT_GRACE_SECONDS,
) -> list[str]:
    """Stop recorded components (each one's whole process group), phase after phase.

    Within a phase all processes get SIGTERM at once, and SIGKILL if still there after
    `grace_seconds`; the next phase starts when the previous one is gone. `extra_pids`
    are stopped with the first phase. Returns the names of the components that were
    running. Safe to call on records whose processes are long gone (idempotent).
    """
    stopped: list[str] = []
    for index, phase in enumerate(phases):
        groups: list[int] = []
        pids: set[int] = set(extra_pids) if index == 0 else set()
        live = _live_groups()
        for record in phase:
            _reap(record.pid)
            leader_alive = is_alive(record.pid)
            if leader_alive and start_ticks(record.pid) != record.start_ticks:
                # The pid was reused by an unrelated process after ours exited: leave it alone.
                continue
            # A pid cannot be handed out again while a process group with that id still
            # has members, so members of group <pid> are ours even when the leader exited.
            members = live.get(record.pid, [])
            if leader_alive or members:
                groups.append(record.pid)
                pids.update(members)
                stopped.append(record.name)
        _terminate(groups, pids, grace_seconds)
    return stopped


def _terminate(groups: list[int], pids: set[int], grace_seconds: float) -> None:
    if not groups and not pids:
        return
    for pgid in groups:
        _signal_group(pgid, signal.SIGTERM)
    for pid in pids:
        _signal_pid(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_seconds
    while time.monotonic() < deadline:
        if not _any_alive(groups, pids):
            return
        time.sleep(0.02)
    for pgid in groups:
        _signal_group(pgid, signal.SIGKILL)
    for pid in pids:
        _signal_pid(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and _any_alive(groups, pids):
        time.sleep(0.02)


def _any_alive(groups: Iterable[int], pids: Iterable[int]) -> bool:
    if any(is_alive(pid) for pid in pids):  # is_alive also reaps our own exited children
        return True
    live = _live_groups()
    return any(pgid in live for pgid in groups)


def tail(path: str | Path, lines: int = 40) -> str:
    """The last `lines` lines of a log file ('' when it does not exist)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            data = f.read().decode(errors="replace")
    except FileNotFoundError:
        return ""
    return "\n".join(data.splitlines()[-lines:])
