"""Parsers for the kernel's /proc text formats: one module per format, typed results, no I/O
beyond the ``read_*`` helpers that take a path.

Every parser takes text and never raises on malformed input: lines it cannot read
are skipped and their 1-based numbers kept in ``skipped_line_numbers``.
"""

from mountwarden.core.procfs.cgroup import (
    CgroupEntry,
    CgroupResult,
    PodCgroup,
    parse_cgroup,
    parse_pod_cgroup_path,
    read_cgroup,
)
from mountwarden.core.procfs.locks import FileLock, LocksResult, parse_locks, read_locks
from mountwarden.core.procfs.maps import MapsResult, MemoryMapping, parse_maps, read_maps
from mountwarden.core.procfs.mountinfo import (
    MountinfoEntry,
    MountinfoResult,
    decode_octal_escapes,
    decode_option_tokens,
    parse_mountinfo,
    read_mountinfo,
)
from mountwarden.core.procfs.mounts import MountsEntry, MountsResult, parse_mounts, read_mounts
from mountwarden.core.procfs.mountstats import (
    MountstatsDevice,
    MountstatsResult,
    RpcOperationStats,
    TransportStats,
    mounted_devices,
    parse_mountstats,
    read_mountstats,
)
from mountwarden.core.procfs.tcp import TcpResult, TcpSocket, parse_tcp

__all__ = [
    "CgroupEntry",
    "CgroupResult",
    "FileLock",
    "LocksResult",
    "MapsResult",
    "MemoryMapping",
    "MountinfoEntry",
    "MountinfoResult",
    "MountsEntry",
    "MountsResult",
    "MountstatsDevice",
    "MountstatsResult",
    "PodCgroup",
    "RpcOperationStats",
    "TcpResult",
    "TcpSocket",
    "TransportStats",
    "decode_octal_escapes",
    "decode_option_tokens",
    "mounted_devices",
    "parse_cgroup",
    "parse_locks",
    "parse_maps",
    "parse_mountinfo",
    "parse_mounts",
    "parse_mountstats",
    "parse_tcp",
    "parse_pod_cgroup_path",
    "read_cgroup",
    "read_locks",
    "read_maps",
    "read_mountinfo",
    "read_mounts",
    "read_mountstats",
]
