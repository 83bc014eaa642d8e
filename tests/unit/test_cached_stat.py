"""stat() from the kernel's cache (statx with AT_STATX_DONT_SYNC), against os.stat on the real file system.

Whether it really never asks an NFS server (and never waits for a dirty file's writeback) is shown in the
kernel lab: tests/kernel/test_dead_server.py.
"""

import ctypes
import errno
import os
import stat

import pytest

from mountwarden.adapters import cachedstat
from mountwarden.adapters.cachedstat import cached_stat


def test_struct_statx_has_the_kernels_size():
    assert ctypes.sizeof(cachedstat._Statx) == 256


def test_it_gives_what_os_stat_gives(tmp_path):
    path = tmp_path / "database.db"
    path.write_bytes(b"SQLite format 3\0" + b"x" * 100)
    expected = os.stat(path)
    status = cached_stat(path)
    assert status.device == (os.major(expected.st_dev), os.minor(expected.st_dev))
    assert (status.inode, status.mode, status.size) == (expected.st_ino, expected.st_mode, expected.st_size)
    assert stat.S_ISREG(status.mode)


def test_it_follows_a_process_descriptor_link_to_the_file(tmp_path):
    path = tmp_path / "held"
    path.write_text("held open")
    with open(path) as handle:
        status = cached_stat(f"/proc/self/fd/{handle.fileno()}")
    assert status.inode == os.stat(path).st_ino and not stat.S_ISLNK(status.mode)


def test_a_missing_file_raises_the_errno_os_stat_would(tmp_path):
    with pytest.raises(FileNotFoundError) as raised:
        cached_stat(tmp_path / "gone")
    assert raised.value.errno == errno.ENOENT and str(tmp_path / "gone") in str(raised.value)
