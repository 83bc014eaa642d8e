"""/proc/<pid>/maps parser: the region shapes the kernel prints, and a file this test maps itself."""

import mmap
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mountwarden.core.procfs.maps import MemoryMapping, parse_maps, read_maps

# The kernel ends an anonymous region's line with a space (\x20 below).
MAPS = """\
55d0c0a3e000-55d0c0a40000 r--p 00000000 fd:01 1316023                    /usr/bin/sqlite3
55d0c1b6c000-55d0c1b8d000 rw-p 00000000 00:00 0                          [heap]
7f3a1c000000-7f3a1c008000 rw-s 00000000 00:2d 858746                     /data/app.db-shm
7f3a1c200000-7f3a1c201000 rw-s 00000000 00:2d 858747                     /data/my app/old.db-shm (deleted)
7f3a1c400000-7f3a1c421000 rw-p 00000000 00:00 0\x20
7f3a1c600000-7f3a1c601000 r--p 00002000 103:02 77                        /data/odd\\012name
7ffd5e5a1000-7ffd5e5c2000 rw-p 00000000 00:00 0                          [stack]
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]
"""


def test_every_region_shape():
    result = parse_maps(MAPS)
    binary, heap, shm, deleted, anonymous, newline, stack, vsyscall = result.mappings

    assert result.skipped_lines == 0
    assert binary == MemoryMapping(
        start=0x55D0C0A3E000,
        end=0x55D0C0A40000,
        permissions="r--p",
        offset=0,
        device_hex="fd:01",
        major=253,
        minor=1,
        inode=1316023,
        pathname="/usr/bin/sqlite3",
        is_deleted=False,
        line_number=1,
    )
    assert binary.major_minor == "253:1" and binary.size == 0x2000 and binary.is_file
    assert (heap.pathname, heap.inode, heap.is_file) == ("[heap]", 0, False)
    assert shm.is_shared and shm.is_writable and not shm.is_executable and shm.major_minor == "0:45"
    assert (deleted.pathname, deleted.is_deleted) == ("/data/my app/old.db-shm", True)
    assert (anonymous.pathname, anonymous.is_file) == ("", False)
    assert (newline.pathname, newline.offset, newline.major_minor) == ("/data/odd\nname", 0x2000, "259:2")
    assert stack.pathname == "[stack]" and stack.is_readable
    assert vsyscall.is_executable and not vsyscall.is_readable


@pytest.mark.parametrize(
    ("bad_line", "why"),
    [
        ("55d0c0a3e000 r--p 00000000 fd:01 1 /bin/x", "no address range"),
        ("55d0c0a3e000-55d0c0a40000 rw 00000000 fd:01 1 /bin/x", "permissions too short"),
        ("55d0c0a3e000-55d0c0a40000 r--p 00000000 fd01 1 /bin/x", "no colon in the device"),
        ("55d0c0a3e000-55d0c0a40000 r--p 00000000 fd:01 x /bin/x", "inode is not a number"),
        ("zz-55d0c0a40000 r--p 00000000 fd:01 1 /bin/x", "address is not hex"),
    ],
)
def test_malformed_lines_are_skipped_and_counted(bad_line, why):
    result = parse_maps(f"{MAPS}{bad_line}\n")

    assert result.skipped_line_numbers == (9,), why
    assert len(result.mappings) == 8


def test_a_shared_mapping_made_here_shows_its_file_device_and_deletion(tmp_path):
    path = tmp_path / "my app.db-shm"
    path.write_bytes(b"\0" * mmap.PAGESIZE)
    status = path.stat()
    with (
        path.open("r+b") as handle,
        mmap.mmap(handle.fileno(), mmap.PAGESIZE, flags=mmap.MAP_SHARED) as mapped,
    ):
        path.unlink()
        result = read_maps("/proc/self/maps")
        del mapped

    (region,) = [
        mapping for mapping in result.mappings if mapping.inode == status.st_ino and mapping.is_shared
    ]
    assert result.skipped_line_numbers == ()
    assert (region.pathname, region.is_deleted) == (str(path), True)
    assert (region.major, region.minor) == (os.major(status.st_dev), os.minor(status.st_dev))
    assert region.size == mmap.PAGESIZE


@settings(deadline=None)
@given(st.text())
def test_arbitrary_text_never_raises(text):
    result = parse_maps(text)

    assert len(result.mappings) + result.skipped_lines == sum(1 for line in text.split("\n") if line.strip())
