"""/proc/mounts (and /proc/<pid>/mounts): the fstab-like view of the mount table.

    nfs.example:/export /mnt/data nfs4 rw,relatime,vers=4.1,rsize=1048576 0 0
    (source)            (mount point) (type) (options)                (dump) (pass)

Fields are separated by single spaces; the source may be empty (two spaces). Paths
are octal-escaped like mountinfo's. The options field mixes per-mount and
per-superblock options, and may hold quoted values with commas, such as an SELinux
``context="system_u:object_r:svirt_sandbox_file_t:s0:c575,c786"``.
"""

import os
from dataclasses import dataclass
from pathlib import Path

from mountwarden.core.options.syntax import OptionToken
from mountwarden.core.procfs.lines import parse_lines
from mountwarden.core.procfs.mountinfo import decode_octal_escapes, decode_option_tokens, is_decimal


@dataclass(frozen=True, slots=True)
class MountsEntry:
    """One /proc/mounts line; source, mount point and type are decoded, options are as printed."""

    source: str
    mount_point: str
    fstype: str
    mount_options: str
    dump_frequency: int
    fsck_pass: int
    line_number: int

    @property
    def option_tokens(self) -> list[OptionToken]:
        return decode_option_tokens(self.mount_options)


@dataclass(frozen=True, slots=True)
class MountsResult:
    mounts: tuple[MountsEntry, ...]
    skipped_line_numbers: tuple[int, ...]

    @property
    def skipped_lines(self) -> int:
        return len(self.skipped_line_numbers)


def parse_mounts(text: str) -> MountsResult:
    """Parse /proc/mounts text; malformed lines are skipped and their 1-based numbers kept."""
    mounts, skipped = parse_lines(text, _parse_line)
    return MountsResult(mounts=mounts, skipped_line_numbers=skipped)


def read_mounts(path: str | os.PathLike[str]) -> MountsResult:
    return parse_mounts(Path(path).read_text(encoding="utf-8", errors="surrogateescape"))


def _parse_line(line: str, line_number: int) -> MountsEntry | None:
    leading = line.split(" ", 3)
    if len(leading) != 4:
        return None
    source, mount_point, fstype, rest = leading
    # Split dump and pass off the right so that an option value holding a raw
    # space (some file systems print one) stays in the options field.
    trailing = rest.rsplit(" ", 2)
    if len(trailing) != 3:
        return None
    mount_options, dump_frequency, fsck_pass = trailing
    if not (
        mount_point and fstype and mount_options and is_decimal(dump_frequency) and is_decimal(fsck_pass)
    ):
        return None
    return MountsEntry(
        source=decode_octal_escapes(source),
        mount_point=decode_octal_escapes(mount_point),
        fstype=decode_octal_escapes(fstype),
        mount_options=mount_options,
        dump_frequency=int(dump_frequency),
        fsck_pass=int(fsck_pass),
        line_number=line_number,
    )
