"""stat() answered from the kernel's cache only: statx(2) with AT_STATX_DONT_SYNC, which never asks a server.

Why not os.stat: on NFS, stat() of a regular file first writes the file's dirty pages back
(nfs_getattr flushes so that c/mtime are the server's), and that wait on writeback is
uninterruptible. Behind a dead server a thread in it cannot be killed, so the process can
never exit: its exit waits for every thread, SIGKILL included. Seen in the kernel lab
(tests/kernel/test_dead_server.py): a SQLite scan's stat() of a rollback journal stuck in
nfs_getattr -> filemap_write_and_wait_range -> folio_wait_writeback, the process a zombie
that nothing could reap. With AT_STATX_DONT_SYNC, nfs_getattr skips both the flush and the
revalidation and fills the answer from the inode it has (fs/nfs/inode.c, out_no_revalidate).

What the agent needs of a file (its device, inode, type and whether it can hold a 16-byte
header) never changes or does not need to be fresh, so the cache is enough. Python 3.11 has no
os.statx, so this calls glibc's statx (2.28+) through ctypes.
"""

import ctypes
import ctypes.util
import os
from dataclasses import dataclass

AT_FDCWD = -100
#: "Don't sync anything; take whatever the system has cached" (statx(2)).
AT_STATX_DONT_SYNC = 0x4000
STATX_TYPE, STATX_MODE, STATX_INO, STATX_SIZE = 0x1, 0x2, 0x100, 0x200
_WANTED = STATX_TYPE | STATX_MODE | STATX_INO | STATX_SIZE


class _Timestamp(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_int64), ("tv_nsec", ctypes.c_uint32), ("reserved", ctypes.c_int32)]


class _Statx(ctypes.Structure):
    """struct statx of include/uapi/linux/stat.h (256 bytes)."""

    _fields_ = [
        ("stx_mask", ctypes.c_uint32), ("stx_blksize", ctypes.c_uint32), ("stx_attributes", ctypes.c_uint64),
        ("stx_nlink", ctypes.c_uint32), ("stx_uid", ctypes.c_uint32), ("stx_gid", ctypes.c_uint32),
        ("stx_mode", ctypes.c_uint16), ("spare0", ctypes.c_uint16), ("stx_ino", ctypes.c_uint64),
        ("stx_size", ctypes.c_uint64), ("stx_blocks", ctypes.c_uint64), ("stx_attributes_mask", ctypes.c_uint64),
        ("stx_atime", _Timestamp), ("stx_btime", _Timestamp), ("stx_ctime", _Timestamp),
        ("stx_mtime", _Timestamp),
        ("stx_rdev_major", ctypes.c_uint32), ("stx_rdev_minor", ctypes.c_uint32),
        ("stx_dev_major", ctypes.c_uint32), ("stx_dev_minor", ctypes.c_uint32),
        ("spare", ctypes.c_uint64 * 14),
    ]



@dataclass(frozen=True, slots=True)
class CachedStatus:
    """What statx returned from the cache: enough to tell a file's identity, type and size."""

    major: int
    minor: int
    inode: int
    mode: int
    size: int

    @property
    def device(self) -> tuple[int, int]:
        return (self.major, self.minor)


def _load_statx():
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    function = getattr(libc, "statx", None)
    if function is None:
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.POINTER(_Statx)]
    function.restype = ctypes.c_int
    return function


_statx = _load_statx()


class CachedStatUnavailable(OSError):
    """This C library has no statx (glibc before 2.28, or not glibc): nothing can be stat()ed without the server."""


def cached_stat(path: str | os.PathLike) -> CachedStatus:
    """The file at ``path`` as the kernel has it cached (following links, /proc/<pid>/fd/<n> included).

    Raises OSError as os.stat does (ENOENT for a descriptor closed meanwhile), and
    CachedStatUnavailable where statx cannot be called: the caller then knows nothing, rather
    than asking a server that may never answer.
    """
    if _statx is None:
        raise CachedStatUnavailable("statx(2) is not in this C library: glibc 2.28 or later is needed")
    result = _Statx()
    if _statx(AT_FDCWD, os.fsencode(path), AT_STATX_DONT_SYNC, _WANTED, ctypes.byref(result)) != 0:
        number = ctypes.get_errno()
        raise OSError(number, os.strerror(number), str(path))
    return CachedStatus(result.stx_dev_major, result.stx_dev_minor, result.stx_ino, result.stx_mode,
                        result.stx_size)
