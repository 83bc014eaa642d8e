"""Reading a host's /proc (or a proc root assembled from samples) without ever failing a scan.

Processes exit while they are being read, and some files are unreadable without
privileges: every read here returns None (or an empty result) for an entry that
vanished or is forbidden, and counts it, so one process never ends a scan.
"""

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from mountwarden.adapters.bounded import BoundedCalls
from mountwarden.core.node.activity import is_kernel_thread
from mountwarden.core.procfs import (
    CgroupResult,
    LocksResult,
    MapsResult,
    MountinfoResult,
    MountstatsResult,
    TcpResult,
    mounted_devices,
    parse_cgroup,
    parse_locks,
    parse_maps,
    parse_mountinfo,
    parse_mountstats,
    parse_tcp,
)
from mountwarden.core.procfs.sockets import Listener, parse_listeners

#: Reads of the mount table before it is taken as it is: k8s.io/mount-utils's maxListTries for the same
#: consistent read of /proc/self/mountinfo (mount_helper_unix.go, with k8s.io/utils/io.ConsistentRead).
MAX_MOUNT_TABLE_READS = 10


@dataclass
class ReadCounters:
    vanished: int = 0  # entries that disappeared mid-scan (processes exiting)
    forbidden: int = 0  # entries we may not read (needs CAP_SYS_PTRACE / CAP_DAC_READ_SEARCH)
    stalled: int = 0  # calls that reach a network server (stat, header reads) abandoned or not made: it does not answer
    inconsistent: int = 0  # mount tables taken as they were after MAX_MOUNT_TABLE_READS reads that did not agree

    def note(self, error: OSError) -> None:
        if isinstance(error, PermissionError):
            self.forbidden += 1
        else:
            self.vanished += 1


@dataclass
class ProcRoot:
    """A procfs mount: ``/proc``, a host's /proc at ``/host/proc``, or a directory of samples."""

    path: Path
    counters: ReadCounters = field(default_factory=ReadCounters)
    #: Calls that reach an NFS server through this proc root (statvfs of a mount, stat and reads of a process's
    #: files), each with a timeout and never more than one stuck per server: shared by every scan.
    calls: BoundedCalls = field(default_factory=BoundedCalls, repr=False, compare=False)

    #: Within one_scan(): the user processes as first read in it, which every walk of the scan shares.
    _processes: list[tuple[int, str]] | None = field(default=None, init=False, repr=False, compare=False)
    _scanning: bool = field(default=False, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.path = Path(self.path)

    @contextmanager
    def one_scan(self) -> Iterator[None]:
        """One scan's reads: user_processes() lists the processes once for all its walks (activity, mount
        helpers, sockets, SQLite), instead of once each."""
        self._scanning, self._processes = True, None
        try:
            yield
        finally:
            self._scanning, self._processes = False, None

    def user_processes(self) -> list[tuple[int, str]]:
        """(pid, /proc/<pid>/stat) of every living process but the kernel's own threads, by pid; read once per
        one_scan()."""
        if self._processes is not None:
            return self._processes
        found = [(pid, text) for pid in self.pids() if (text := self.stat(pid)) and not is_kernel_thread(text)]
        if self._scanning:
            self._processes = found
        return found

    def _text(self, *parts: str | int, counted: bool = True) -> str | None:
        try:
            return self.path.joinpath(*map(str, parts)).read_text(errors="replace")
        except OSError as error:  # ENOENT/ESRCH from a process exiting mid-read, EACCES without privileges
            if counted:
                self.counters.note(error)
            return None

    def mountinfo(self, pid: int | str = 1, *, counted: bool = True) -> MountinfoResult:
        return parse_mountinfo(self._text(pid, "mountinfo", counted=counted) or "")

    def mountstats(self, pid: int | str = 1) -> MountstatsResult:
        return parse_mountstats(self._text(pid, "mountstats") or "")

    def mount_tables(self, pid: int | str = 1) -> tuple[MountinfoResult, MountstatsResult]:
        """mountinfo and mountstats of one moment, for the node scan to pair block by block.

        Each file is read whole with one read() per page, so a mount made or removed meanwhile
        can tear it, and the two files are read one after the other, so they can describe two
        mount tables. Both are read again until two consecutive rounds agree (mountinfo to
        the byte, mountstats on its list of mounts: its counters always move): the second
        round then lies between two reads of the same table. As the kubelet does, after
        MAX_MOUNT_TABLE_READS rounds the last one is taken (counted in ``inconsistent``);
        pair_mountstats still refuses a block whose source or fstype disagree.
        """
        info, stats = self._text(pid, "mountinfo"), self._text(pid, "mountstats")
        for _ in range(MAX_MOUNT_TABLE_READS - 1):
            info_again, stats_again = self._text(pid, "mountinfo"), self._text(pid, "mountstats")
            agree = info_again == info and mounted_devices(stats_again or "") == mounted_devices(stats or "")
            info, stats = info_again, stats_again
            if agree:
                break
        else:
            self.counters.inconsistent += 1
        return parse_mountinfo(info or ""), parse_mountstats(stats or "")

    def locks(self) -> LocksResult:
        return parse_locks(self._text("locks") or "")

    def pids(self) -> list[int]:
        try:
            return sorted(int(entry.name) for entry in os.scandir(self.path) if entry.name.isdigit())
        except OSError as error:
            self.counters.note(error)
            return []

    def stat(self, pid: int) -> str | None:
        """/proc/<pid>/stat as text (its state never waits on a file system); None when the process is gone."""
        return self._text(pid, "stat")

    def command_line(self, pid: int) -> list[str] | None:
        """/proc/<pid>/cmdline split into its arguments; None when gone (a kernel thread's is empty)."""
        text = self._text(pid, "cmdline", counted=False)
        return None if text is None else [arg for arg in text.split("\0") if arg]

    def wchan(self, pid: int) -> str | None:
        """Where a process waits in the kernel (/proc/<pid>/wchan); None when unreadable (it reads "0" to a reader
        without ptrace access to the process)."""
        text = (self._text(pid, "wchan", counted=False) or "").strip()
        return None if text in ("", "0") else text

    def uptime(self) -> float | None:
        """Seconds since boot (/proc/uptime): with a process's start time, how long it has run."""
        text = self._text("uptime", counted=False)
        try:
            return float(text.split()[0]) if text else None
        except (ValueError, IndexError):
            return None

    def listeners(self) -> frozenset[Listener] | None:
        """The listening TCP sockets of pid 1's network namespace (the host's); None when unreadable."""
        texts = [self._text(1, "net", name, counted=False) for name in ("tcp", "tcp6")]
        if texts[0] is None:
            return None
        return frozenset(listener for text in texts if text for listener in parse_listeners(text)[0])

    def kernel_release(self) -> str | None:
        """The running kernel's release (sys/kernel/osrelease), e.g. 6.1.0-57-amd64."""
        text = self._text("sys", "kernel", "osrelease", counted=False)
        return text.strip() or None if text is not None else None

    def cgroup(self, pid: int) -> CgroupResult | None:
        text = self._text(pid, "cgroup")
        return None if text is None else parse_cgroup(text)

    def maps(self, pid: int) -> MapsResult | None:
        text = self._text(pid, "maps")
        return None if text is None else parse_maps(text)

    def open_files(self, pid: int) -> dict[int, str]:
        """fd number -> what it points at (a path, or ``socket:[...]``); empty when unreadable."""
        fd_dir = self.path / str(pid) / "fd"
        targets: dict[int, str] = {}
        try:
            entries = list(os.scandir(fd_dir))
        except OSError as error:
            self.counters.note(error)
            return targets
        for entry in entries:
            try:
                targets[int(entry.name)] = os.readlink(entry.path)
            except (OSError, ValueError) as error:
                if isinstance(error, OSError):
                    self.counters.note(error)
        return targets

    def fd_info(self, pid: int, fd: int) -> dict[str, str]:
        """/proc/<pid>/fdinfo/<n> as a mapping (pos, flags, mnt_id, and ino on Linux 5.14+); empty when gone.

        Absence is not counted: callers fall back to stat(), which counts what it cannot reach.
        """
        text = self._text(pid, "fdinfo", fd, counted=False) or ""
        fields = (line.partition(":") for line in text.splitlines())
        return {key.strip(): value.strip() for key, sep, value in fields if sep}

    def net_namespace(self, pid: int) -> str | None:
        """The process's network namespace, as /proc/<pid>/ns/net names it (net:[4026531992]); None when unreadable."""
        try:
            return os.readlink(self.path / str(pid) / "ns" / "net")
        except OSError as error:
            self.counters.note(error)
            return None

    def net_tcp(self, pid: int) -> TcpResult:
        """The TCP sockets of the process's network namespace (net/tcp and net/tcp6 together)."""
        sockets = []
        for name in ("tcp", "tcp6"):
            sockets += parse_tcp(self._text(pid, "net", name, counted=False) or "").sockets
        return TcpResult(tuple(sockets), ())

    def command(self, pid: int) -> str | None:
        text = self._text(pid, "comm")
        return text.strip() if text is not None else None

    def fd_path(self, pid: int, fd: int) -> Path:
        """The /proc/<pid>/fd/<n> link itself: stat() and open() through it reach the file."""
        return self.path / str(pid) / "fd" / str(fd)
