"""/proc/<pid>/mountstats: per-mount NFS client statistics, as nfs_show_stats() prints them.

Every mount gets a ``device X mounted on Y with fstype Z`` line; NFS mounts add
``statvers=1.1`` and an indented block::

    device srv:/export mounted on /data with fstype nfs4 statvers=1.1
        opts:   rw,vers=4.1,rsize=1048576,...        every effective option, defaults included
        age:    3542                                 seconds since mount
        caps:   caps=0x3ffdf,wtmult=512,...
        nfsv4:  bm0=0xfdffbfff,...,sessions           NFSv4 only
        sec:    flavor=1,pseudoflavor=1
        events: 114 1579 5 ...                       27 named counters
        bytes:  1 2 3 4 5 6 7 8                       8 named counters
        RPC iostats version: 1.1  p/v: 100003/4 (nfs)
        xprt:   tcp 909 0 1 ...                       one line per connection (nconnect)
        per-op statistics
                NULL: 0 0 0 0 0 0 0 0 0
                READ: ops transmissions major_timeouts bytes_sent bytes_received queue_ms rtt_ms execute_ms [errors]

Under ``RPC iostats version: 1.0`` per-op lines have 8 numbers; 1.1 (kernel 5.3,
RHEL 8.1) adds errors, the count of ops that completed with a negative status.
Counters are unsigned 64-bit; a value that went below zero in the kernel shows
up wrapped (18446744073706749450) and is kept as the large int it is.

The same device and mount point can appear twice with different counters, so
mounts are returned as a list in file order, never keyed by either.
"""

import os
import re
from dataclasses import dataclass
from pathlib import Path

from mountwarden.core.options.syntax import OptionToken, parse_option_tokens
from mountwarden.core.procfs.mountinfo import decode_octal_escapes, is_decimal

#: The ``events:`` counters in kernel order (enum nfs_stat_eventcounters).
EVENT_COUNTER_NAMES = (
    "inoderevalidate",
    "dentryrevalidate",
    "datainvalidate",
    "attrinvalidate",
    "vfsopen",
    "vfslookup",
    "vfsaccess",
    "vfsupdatepage",
    "vfsreadpage",
    "vfsreadpages",
    "vfswritepage",
    "vfswritepages",
    "vfsgetdents",
    "vfssetattr",
    "vfsflush",
    "vfsfsync",
    "vfslock",
    "vfsrelease",
    "congestionwait",
    "setattrtrunc",
    "extendwrite",
    "sillyrename",
    "shortread",
    "shortwrite",
    "delay",
    "pnfsread",
    "pnfswrite",
)

#: The ``bytes:`` counters in kernel order (enum nfs_stat_bytecounters).
BYTE_COUNTER_NAMES = (
    "normalreadbytes",
    "normalwritebytes",
    "directreadbytes",
    "directwritebytes",
    "serverreadbytes",
    "serverwritebytes",
    "readpages",
    "writepages",
)

_XPRT_CONNECTION = (
    "port",
    "bind_count",
    "connect_count",
    "connect_time",
    "idle_time",
    "rpcsends",
    "rpcreceives",
    "badxids",
    "inflightsends",
    "backlogutil",
)
_XPRT_SLOTS = ("maxslots", "sendutil", "pendutil")

#: ``xprt:`` counters per transport, in the order the kernel prints them
#: (xs_*_print_stats, xprt_rdma_print_stats), named as nfs-utils' mountstats names them.
TRANSPORT_COUNTER_NAMES: dict[str, tuple[str, ...]] = {
    "tcp": _XPRT_CONNECTION + _XPRT_SLOTS,
    "udp": ("port", "bind_count", "rpcsends", "rpcreceives", "badxids", "inflightsends", "backlogutil")
    + _XPRT_SLOTS,
    "local": _XPRT_CONNECTION[1:] + _XPRT_SLOTS,
    "rdma": _XPRT_CONNECTION
    + (
        "read_segments",
        "write_segments",
        "reply_segments",
        "total_rdma_req",
        "total_rdma_rep",
        "pullup",
        "fixup",
        "hardway",
        "failed_marshal",
        "bad_reply",
        "nomsg_calls",
        "recovered_mrs",
        "orphaned_mrs",
        "allocated_mrs",
        "local_invalidates",
        "empty_sendctx_q",
        "reply_waits_for_send",
    ),
}

#: Numbers per per-op line for each known ``RPC iostats version``.
PER_OP_COLUMNS = {"1.0": 8, "1.1": 9}

NFS_FSTYPES = frozenset({"nfs", "nfs4"})

#: Counters at or above this were negative in the kernel and wrapped around.
WRAPPED_COUNTER_FLOOR = 2**63

_DEVICE_LINE = re.compile(r"device (.*?) mounted on (.*?) with fstype (\S+)(?: statvers=(\S+))?")
_LABEL = re.compile(r"[A-Za-z0-9_]+", re.ASCII)
_PROTOCOL = re.compile(r"[A-Za-z][A-Za-z0-9_-]*", re.ASCII)
_SINGLE_SECTIONS = ("opts", "age", "caps", "nfsv4", "sec", "events", "bytes")


@dataclass(frozen=True, slots=True)
class RpcOperationStats:
    """One per-op line; times are cumulative milliseconds over all ``ops``.

    ``queue_ms`` is time waiting to be sent, ``rtt_ms`` time on the wire and in the
    server, ``execute_ms`` the whole life of the request (queue + rtt + client work).
    """

    name: str
    ops: int
    transmissions: int
    major_timeouts: int
    bytes_sent: int
    bytes_received: int
    queue_ms: int
    rtt_ms: int
    execute_ms: int
    errors: int | None

    @property
    def avg_rtt_ms(self) -> float | None:
        return self.rtt_ms / self.ops if self.ops else None

    @property
    def avg_execute_ms(self) -> float | None:
        return self.execute_ms / self.ops if self.ops else None

    @property
    def avg_queue_ms(self) -> float | None:
        return self.queue_ms / self.ops if self.ops else None

    @property
    def has_wrapped_counter(self) -> bool:
        counters = (
            self.ops,
            self.transmissions,
            self.major_timeouts,
            self.bytes_sent,
            self.bytes_received,
            self.queue_ms,
            self.rtt_ms,
            self.execute_ms,
            self.errors or 0,
        )
        return any(counter >= WRAPPED_COUNTER_FLOOR for counter in counters)

    @property
    def is_queue_bound(self) -> bool:
        """True when requests spend more than half their life waiting to be sent.

        That is the signature of a saturated transport (one TCP flow caps at about
        5 Gbit/s on EC2), not of a slow server; nconnect spreads the load.
        """
        if not self.ops or not self.execute_ms or self.has_wrapped_counter:
            return False
        return self.queue_ms * 2 > self.execute_ms


@dataclass(frozen=True, slots=True)
class TransportStats:
    """One ``xprt:`` line (one connection); counters beyond the known names are ``unnamed_<position>``."""

    protocol: str
    counters: dict[str, int]


@dataclass(frozen=True, slots=True)
class MountstatsDevice:
    """One ``device`` block; a non-NFS device has its identity (index..statvers) and empty statistics.

    ``index`` is the position in the file (0-based), the only reliable identity
    when the same device and mount point appear more than once.
    """

    index: int
    line_number: int
    device: str
    mount_point: str
    fstype: str
    statvers: str | None
    opts: tuple[OptionToken, ...]
    age_seconds: int | None
    caps: dict[str, str | None]
    nfsv4: dict[str, str | None]
    sec: dict[str, str | None]
    event_counters: dict[str, int]
    byte_counters: dict[str, int]
    rpc_iostats_version: str | None
    transports: tuple[TransportStats, ...]
    operations: dict[str, RpcOperationStats]
    #: Labelled lines this parser does not interpret (``impl_id``, ``fsc``), verbatim.
    other_fields: dict[str, str]

    @property
    def is_nfs(self) -> bool:
        return self.fstype in NFS_FSTYPES

    @property
    def opts_by_name(self) -> dict[str, str | bool]:
        """Options as ``{name: value}``, ``True`` for flags; a later duplicate wins, as in the kernel."""
        return {name: True if value is None else value for name, value in self.opts}

    @property
    def nfs_version(self) -> str | None:
        """The NFS version ("3", "4.0", "4.2") from ``vers``, or ``vers=4`` + ``minorversion`` on older kernels."""
        options = self.opts_by_name
        version = options.get("vers")
        if not self.is_nfs or not isinstance(version, str):
            return None
        minor = options.get("minorversion")
        if version == "4" and isinstance(minor, str):
            return f"4.{minor}"
        return version

    @property
    def transport(self) -> str | None:
        """The RPC transport (tcp, udp, rdma) from the xprt lines, else from the ``proto`` option."""
        if self.transports:
            return self.transports[0].protocol
        proto = self.opts_by_name.get("proto")
        return proto if isinstance(proto, str) else None

    @property
    def xprt_count(self) -> int:
        """Number of connections (``xprt:`` lines); above 1 with ``nconnect``."""
        return len(self.transports)


@dataclass(frozen=True, slots=True)
class MountstatsResult:
    devices: tuple[MountstatsDevice, ...]
    skipped_line_numbers: tuple[int, ...]

    @property
    def skipped_lines(self) -> int:
        return len(self.skipped_line_numbers)

    @property
    def nfs_mounts(self) -> tuple[MountstatsDevice, ...]:
        return tuple(device for device in self.devices if device.is_nfs)


def parse_mountstats(text: str) -> MountstatsResult:
    """Parse mountstats text; malformed lines are skipped and their 1-based numbers kept.

    A per-op line whose column count does not match its block's RPC iostats
    version, or that repeats an op already seen in the block, is malformed.
    """
    devices: list[MountstatsDevice] = []
    skipped: list[int] = []
    block: _DeviceBlock | None = None
    for line_number, line in enumerate(text.split("\n"), start=1):
        stripped = line.strip()
        if not stripped:
            if block is not None:
                block.in_per_op = False
            continue
        if line.startswith("device"):
            if block is not None:
                devices.append(block.finish())
            block = _start_block(line.rstrip(), line_number, index=len(devices))
            if block is None:
                skipped.append(line_number)
        elif block is None or not block.take(stripped):
            skipped.append(line_number)
    if block is not None:
        devices.append(block.finish())
    return MountstatsResult(devices=tuple(devices), skipped_line_numbers=tuple(skipped))


def mounted_devices(text: str) -> list[str]:
    """The ``device ... mounted on ... with fstype ...`` line of every mount, in order.

    What two reads of mountstats must agree on to describe the same mount table: their
    counters change between any two reads, their list of mounts only when something is
    mounted or unmounted.
    """
    return [line for line in text.split("\n") if line.startswith("device")]


def read_mountstats(path: str | os.PathLike[str]) -> MountstatsResult:
    return parse_mountstats(Path(path).read_text(encoding="utf-8", errors="surrogateescape"))


def _start_block(line: str, line_number: int, index: int) -> "_DeviceBlock | None":
    match = _DEVICE_LINE.fullmatch(line)
    if match is None:
        return None
    device, mount_point, fstype, statvers = match.groups()
    return _DeviceBlock(
        index=index,
        line_number=line_number,
        device=decode_octal_escapes(device),
        mount_point=decode_octal_escapes(mount_point),
        fstype=fstype,
        statvers=statvers,
    )


def _counters(tokens: list[str]) -> list[int] | None:
    # One check over the joined tokens: per-token checks dominated a 250-volume scan.
    if not tokens or not is_decimal("".join(tokens)):
        return None
    return list(map(int, tokens))


def _named(names: tuple[str, ...], values: list[int]) -> dict[str, int]:
    named = dict(zip(names, values, strict=False))
    for position in range(len(names), len(values)):
        named[f"unnamed_{position}"] = values[position]
    return named


class _DeviceBlock:
    """The mutable state of one device block while its lines are read."""

    def __init__(
        self, index: int, line_number: int, device: str, mount_point: str, fstype: str, statvers: str | None
    ) -> None:
        self.index = index
        self.line_number = line_number
        self.device = device
        self.mount_point = mount_point
        self.fstype = fstype
        self.statvers = statvers
        self.seen_sections: set[str] = set()
        self.opts: tuple[OptionToken, ...] = ()
        self.age_seconds: int | None = None
        self.caps: dict[str, str | None] = {}
        self.nfsv4: dict[str, str | None] = {}
        self.sec: dict[str, str | None] = {}
        self.event_counters: dict[str, int] = {}
        self.byte_counters: dict[str, int] = {}
        self.rpc_iostats_version: str | None = None
        self.transports: list[TransportStats] = []
        self.operations: dict[str, RpcOperationStats] = {}
        self.other_fields: dict[str, str] = {}
        self.in_per_op = False

    def take(self, line: str) -> bool:
        """Absorb one stripped line of this block; False when it is malformed."""
        if self.in_per_op:
            return self._take_operation(line)
        if line == "per-op statistics":
            self.in_per_op = True
            return True
        if line.startswith("RPC iostats version:"):
            return self._take_rpc_version(line)
        label, colon, value = line.partition(":")
        if not colon or not _LABEL.fullmatch(label):
            return False
        value = value.strip()
        if label == "xprt":
            return self._take_transport(value)
        if label not in _SINGLE_SECTIONS:
            self.other_fields[label] = value
            return True
        if label in self.seen_sections or not self._take_section(label, value):
            return False
        self.seen_sections.add(label)
        return True

    def _take_section(self, label: str, value: str) -> bool:
        if label == "opts":
            self.opts = tuple(parse_option_tokens(value))
        elif label == "caps":
            self.caps = dict(parse_option_tokens(value))
        elif label == "nfsv4":
            self.nfsv4 = dict(parse_option_tokens(value))
        elif label == "sec":
            self.sec = dict(parse_option_tokens(value))
        elif label == "age":
            # Some captures carry a human note after the number.
            words = value.split(maxsplit=1)
            if not words or not is_decimal(words[0]):
                return False
            self.age_seconds = int(words[0])
        else:
            values = _counters(value.split())
            if values is None:
                return False
            if label == "events":
                self.event_counters = _named(EVENT_COUNTER_NAMES, values)
            else:
                self.byte_counters = _named(BYTE_COUNTER_NAMES, values)
        return True

    def _take_rpc_version(self, line: str) -> bool:
        words = line.removeprefix("RPC iostats version:").split()
        if not words or self.rpc_iostats_version is not None:
            return False
        self.rpc_iostats_version = words[0]
        return True

    def _take_transport(self, value: str) -> bool:
        words = value.split()
        values = _counters(words[1:])
        if values is None or not _PROTOCOL.fullmatch(words[0]):
            return False
        protocol = words[0]
        self.transports.append(
            TransportStats(protocol, _named(TRANSPORT_COUNTER_NAMES.get(protocol, ()), values))
        )
        return True

    def _take_operation(self, line: str) -> bool:
        name, colon, rest = line.partition(":")
        values = _counters(rest.split())
        if not colon or not _LABEL.fullmatch(name) or values is None or name in self.operations:
            return False
        expected_columns = PER_OP_COLUMNS.get(self.rpc_iostats_version or "")
        # An unknown (newer) version is read as 1.1, which it may extend with columns.
        if len(values) < 8 or (expected_columns is not None and len(values) != expected_columns):
            return False
        self.operations[name] = RpcOperationStats(
            name, *values[:8], errors=values[8] if len(values) > 8 else None
        )
        return True

    def finish(self) -> MountstatsDevice:
        return MountstatsDevice(
            index=self.index,
            line_number=self.line_number,
            device=self.device,
            mount_point=self.mount_point,
            fstype=self.fstype,
            statvers=self.statvers,
            opts=self.opts,
            age_seconds=self.age_seconds,
            caps=self.caps,
            nfsv4=self.nfsv4,
            sec=self.sec,
            event_counters=self.event_counters,
            byte_counters=self.byte_counters,
            rpc_iostats_version=self.rpc_iostats_version,
            transports=tuple(self.transports),
            operations=self.operations,
            other_fields=self.other_fields,
        )
