"""/proc/<pid>/mountinfo: one line per mount, as the kernel's show_mountinfo() prints it.

    36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
    (1)(2)(3)   (4)   (5)      (6)      (7)   (8) (9)   (10)         (11)

(1) mount ID, (2) parent ID, (3) major:minor of the superblock (decimal here, unlike
/proc/locks), (4) root of the mount inside its file system, (5) mount point,
(6) per-mount options, (7) zero or more optional fields (shared:N, master:N,
propagate_from:N, unbindable), (8) the separator, (9) file system type,
(10) mount source (may be empty: two spaces), (11) per-superblock options.

The kernel escapes space, tab, newline and backslash as ``\\040 \\011 \\012 \\134``.
The major:minor pair is what tells two mounts apart that share one NFS superblock
(and so silently share options): compare it, not the mount point.
"""

import os
import re
from dataclasses import dataclass
from pathlib import Path

from mountwarden.core.options.syntax import OptionToken, parse_option_tokens
from mountwarden.core.procfs.lines import parse_lines

_OCTAL_ESCAPE = re.compile(r"\\([0-3][0-7]{2})")


def decode_octal_escapes(text: str) -> str:
    """Undo the kernel's ``\\ooo`` escaping of paths and sources (``\\040`` is a space)."""
    return _OCTAL_ESCAPE.sub(lambda match: chr(int(match.group(1), 8)), text)


def decode_option_tokens(options: str) -> list[OptionToken]:
    """Parse an option string as printed in procfs into ordered ``(name, value)`` pairs.

    Splitting happens before decoding because the kernel writes a comma inside a
    value as ``\\054``; decoding first would split that value in two.
    """
    return [
        (decode_octal_escapes(name), None if value is None else decode_octal_escapes(value))
        for name, value in parse_option_tokens(options)
    ]


def is_decimal(text: str) -> bool:
    """True for ASCII digits only (``str.isdigit`` also accepts ``²`` and ``٣``)."""
    return text.isascii() and text.isdigit()


@dataclass(frozen=True, slots=True)
class MountinfoEntry:
    """One mount as mountinfo describes it; paths and source are decoded, options are as printed."""

    mount_id: int
    parent_id: int
    major: int
    minor: int
    root: str
    mount_point: str
    mount_options: str
    optional_fields: tuple[str, ...]
    fstype: str
    source: str
    super_options: str
    line_number: int

    @property
    def major_minor(self) -> str:
        """The superblock's device number as ``"MAJ:MIN"`` in decimal."""
        return f"{self.major}:{self.minor}"

    @property
    def mount_option_tokens(self) -> list[OptionToken]:
        """Per-mount options (ro/rw, nosuid, relatime, ...) as decoded pairs."""
        return decode_option_tokens(self.mount_options)

    @property
    def super_option_tokens(self) -> list[OptionToken]:
        """Per-superblock options (for NFS: vers, rsize, actimeo, ...) as decoded pairs."""
        return decode_option_tokens(self.super_options)

    @property
    def shared_peer_group(self) -> int | None:
        """N of ``shared:N``: mounts in one peer group propagate mount events to each other."""
        return self._tagged_number("shared")

    @property
    def master_peer_group(self) -> int | None:
        """N of ``master:N``: this mount receives propagation from peer group N."""
        return self._tagged_number("master")

    @property
    def propagate_from(self) -> int | None:
        """N of ``propagate_from:N``: the closest dominant peer group visible to this process."""
        return self._tagged_number("propagate_from")

    @property
    def is_unbindable(self) -> bool:
        return "unbindable" in self.optional_fields

    def _tagged_number(self, tag: str) -> int | None:
        for field in self.optional_fields:
            name, _, value = field.partition(":")
            if name == tag and is_decimal(value):
                return int(value)
        return None


@dataclass(frozen=True, slots=True)
class MountinfoResult:
    """Every well-formed mountinfo line in file order, and the numbers of the lines that were not."""

    mounts: tuple[MountinfoEntry, ...]
    skipped_line_numbers: tuple[int, ...]

    @property
    def skipped_lines(self) -> int:
        return len(self.skipped_line_numbers)


def parse_mountinfo(text: str) -> MountinfoResult:
    """Parse mountinfo text; malformed lines are skipped and their 1-based numbers kept."""
    mounts, skipped = parse_lines(text, _parse_line)
    return MountinfoResult(mounts=mounts, skipped_line_numbers=skipped)


def read_mountinfo(path: str | os.PathLike[str]) -> MountinfoResult:
    """Read and parse a mountinfo file (bytes that are not UTF-8 survive as surrogates)."""
    return parse_mountinfo(Path(path).read_text(encoding="utf-8", errors="surrogateescape"))


def _parse_line(line: str, line_number: int) -> MountinfoEntry | None:
    mount_fields, separator, filesystem_fields = line.partition(" - ")
    if not separator:
        return None
    fields = mount_fields.split(" ")
    if len(fields) < 6:
        return None
    mount_id, parent_id, device, root, mount_point, mount_options, *optional_fields = fields
    filesystem = filesystem_fields.split(" ", 2)
    if len(filesystem) != 3:
        return None
    fstype, source, super_options = filesystem
    major, colon, minor = device.partition(":")
    if not (
        is_decimal(mount_id)
        and is_decimal(parent_id)
        and colon
        and is_decimal(major)
        and is_decimal(minor)
        and root
        and mount_point
        and mount_options
        and fstype
        and super_options
        and all(optional_fields)
    ):
        return None
    return MountinfoEntry(
        mount_id=int(mount_id),
        parent_id=int(parent_id),
        major=int(major),
        minor=int(minor),
        root=decode_octal_escapes(root),
        mount_point=decode_octal_escapes(mount_point),
        mount_options=mount_options,
        optional_fields=tuple(optional_fields),
        fstype=decode_octal_escapes(fstype),
        source=decode_octal_escapes(source),
        super_options=super_options,
        line_number=line_number,
    )
