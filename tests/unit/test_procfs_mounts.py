"""/proc/mounts parser: a real capture with a quoted SELinux context, escapes, malformed lines."""

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.samples import shared_sample

from mountwarden.core.procfs.mounts import MountsEntry, parse_mounts, read_mounts


def test_real_proc_mounts_with_a_quoted_selinux_context():
    result = parse_mounts(shared_sample("mounts-pcp-cgroups-root-003.txt"))

    assert len(result.mounts) == 35
    assert result.skipped_lines == 0
    assert result.mounts[0] == MountsEntry("rootfs", "/", "rootfs", "rw,seclabel", 0, 0, line_number=1)
    docker = result.mounts[-1]
    assert docker.fstype == "ext4"
    assert docker.option_tokens == [
        ("rw", None),
        ("context", '"system_u:object_r:svirt_sandbox_file_t:s0:c575,c786"'),
        ("relatime", None),
        ("discard", None),
        ("stripe", "16"),
        ("data", "ordered"),
    ]
    assert "/sys/fs/cgroup/cpu,cpuacct" in [mount.mount_point for mount in result.mounts]


def test_the_capture_has_nfs_server_plumbing_but_no_nfs_client_mount():
    fstypes = {
        mount.fstype for mount in parse_mounts(shared_sample("mounts-pcp-cgroups-root-003.txt")).mounts
    }

    assert {"rpc_pipefs", "nfsd"} <= fstypes
    assert not {"nfs", "nfs4"} & fstypes


def test_nfs_mount_with_escapes_and_an_empty_source_printed_as_a_leading_space():
    text = "srv:/my\\040export /mnt/a\\040b nfs4 rw,vers=4.2,proto=tcp 0 0\n /run/x tmpfs rw,size=1k 0 2\n"
    nfs, tmpfs = parse_mounts(text).mounts

    assert (nfs.source, nfs.mount_point, nfs.fstype) == ("srv:/my export", "/mnt/a b", "nfs4")
    assert ("vers", "4.2") in nfs.option_tokens
    assert (tmpfs.source, tmpfs.mount_point, tmpfs.fsck_pass) == ("", "/run/x", 2)


@pytest.mark.parametrize(
    ("bad_line", "why"),
    [
        ("proc /proc proc rw 0", "no pass field"),
        ("proc /proc proc rw 0 x", "pass is not a number"),
        ("proc /proc", "too few fields"),
        ("proc /proc proc  0 0", "no options"),
    ],
)
def test_malformed_lines_are_skipped_and_counted(bad_line, why):
    result = parse_mounts(f"sysfs /sys sysfs rw 0 0\n{bad_line}\n")

    assert result.skipped_line_numbers == (2,), why
    assert len(result.mounts) == 1


def test_read_mounts_reads_a_path(tmp_path):
    path = tmp_path / "mounts"
    path.write_text("sysfs /sys sysfs rw 0 0\n", encoding="utf-8")

    assert read_mounts(path).mounts[0].mount_point == "/sys"


def test_this_machines_own_mounts_parse_cleanly():
    path = Path("/proc/self/mounts")

    assert read_mounts(path).skipped_line_numbers == ()


@settings(deadline=None)
@given(st.text())
def test_arbitrary_text_never_raises(text):
    result = parse_mounts(text)

    assert len(result.mounts) + result.skipped_lines == sum(1 for line in text.split("\n") if line.strip())
