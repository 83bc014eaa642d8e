"""mountinfo parser: the kernel's documented example, escapes, propagation tags, malformed lines."""

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mountwarden.core.procfs.mountinfo import (
    MountinfoEntry,
    decode_octal_escapes,
    decode_option_tokens,
    parse_mountinfo,
    read_mountinfo,
)

LOCAL_SAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "procfs"

KUBELET_NFS_MOUNT = (
    "1529 27 0:312 / /var/lib/kubelet/pods/0c6f3f1e-8d2b-4a43-9a6e-2f0d1c6b7e55/volumes/kubernetes.io~csi/"
    "pvc-3f9e/mount rw,relatime shared:812 master:3 - nfs4 fs-0123abcd.efs.us-east-1.amazonaws.com:/ "
    "rw,vers=4.1,rsize=1048576,wsize=1048576,namlen=255,hard,noresvport,proto=tcp,timeo=600,retrans=2,"
    "sec=sys,clientaddr=10.0.1.17,local_lock=none,addr=10.0.2.31"
)


def test_the_example_from_the_kernel_documentation():
    result = parse_mountinfo(
        "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue\n"
    )

    assert result.mounts == (
        MountinfoEntry(
            mount_id=36,
            parent_id=35,
            major=98,
            minor=0,
            root="/mnt1",
            mount_point="/mnt2",
            mount_options="rw,noatime",
            optional_fields=("master:1",),
            fstype="ext3",
            source="/dev/root",
            super_options="rw,errors=continue",
            line_number=1,
        ),
    )
    assert result.mounts[0].major_minor == "98:0"
    assert result.skipped_lines == 0


def test_a_kubelet_nfs_volume_mount():
    (mount,) = parse_mountinfo(KUBELET_NFS_MOUNT).mounts

    assert mount.major_minor == "0:312"
    assert mount.source == "fs-0123abcd.efs.us-east-1.amazonaws.com:/"
    assert mount.mount_point.endswith("/volumes/kubernetes.io~csi/pvc-3f9e/mount")
    assert (mount.shared_peer_group, mount.master_peer_group, mount.propagate_from) == (812, 3, None)
    assert not mount.is_unbindable
    assert mount.mount_option_tokens == [("rw", None), ("relatime", None)]
    assert mount.super_option_tokens[:2] == [("rw", None), ("vers", "4.1")]
    assert ("local_lock", "none") in mount.super_option_tokens


def test_propagation_tags_and_no_optional_fields():
    text = (
        "40 39 0:40 / /a rw shared:2 master:1 propagate_from:1 - tmpfs tmpfs rw\n"
        "41 39 0:41 / /b rw unbindable - tmpfs tmpfs rw\n"
        "42 39 0:42 / /c rw - tmpfs tmpfs rw\n"
    )
    a, b, c = parse_mountinfo(text).mounts

    assert (a.shared_peer_group, a.master_peer_group, a.propagate_from) == (2, 1, 1)
    assert b.is_unbindable and b.optional_fields == ("unbindable",)
    assert c.optional_fields == () and c.shared_peer_group is None


def test_octal_escapes_in_root_mount_point_and_source():
    text = r"50 27 0:50 /exp\040one /mnt/tab\011new\012line\134back rw - nfs srv:/exp\040one rw,vers=3"
    (mount,) = parse_mountinfo(text).mounts

    assert mount.root == "/exp one"
    assert mount.mount_point == "/mnt/tab\tnew\nline\\back"
    assert mount.source == "srv:/exp one"


def test_escapes_are_decoded_once_and_a_backslash_stays_a_backslash():
    assert decode_octal_escapes(r"a\134040b") == "a\\040b"
    assert decode_octal_escapes(r"no\escape\9") == r"no\escape\9"


def test_an_escaped_comma_inside_an_option_value_stays_in_that_value():
    assert decode_option_tokens(r"rw,context=a\054b,lookupcache=none") == [
        ("rw", None),
        ("context", "a,b"),
        ("lookupcache", "none"),
    ]


def test_empty_mount_source_from_rootless_pasta():
    text = (LOCAL_SAMPLES / "mountinfo-empty-source-procfs-rs.txt").read_text(encoding="utf-8")
    (mount,) = parse_mountinfo(text).mounts

    assert (mount.mount_id, mount.parent_id, mount.major_minor) == (303, 98, "0:47")
    assert (mount.root, mount.mount_point, mount.fstype, mount.source) == ("/", "/", "tmpfs", "")
    assert mount.mount_options == "ro,nosuid,nodev,noexec,relatime"
    assert mount.super_options == "ro,size=0k,nr_inodes=2,uid=1000,gid=1000,inode64"


@pytest.mark.parametrize(
    ("bad_line", "why"),
    [
        ("36 35 98:0 /mnt1 /mnt2 rw,noatime ext3 /dev/root rw", "no separator"),
        ("36 35 98:0 /mnt1 rw - ext3 /dev/root rw", "too few mount fields"),
        ("x 35 98:0 /mnt1 /mnt2 rw - ext3 /dev/root rw", "mount ID is not a number"),
        ("36 35 98-0 /mnt1 /mnt2 rw - ext3 /dev/root rw", "no colon in major:minor"),
        ("36 35 fd:0 /mnt1 /mnt2 rw - ext3 /dev/root rw", "hex major here, where the kernel writes decimal"),
        ("36 35 98:0 /mnt1 /mnt2 rw - ext3 /dev/root", "no super options"),
        ("36 35 98:0 /mnt1 /mnt2 rw  master:1 - ext3 /dev/root rw", "an empty optional field"),
        ("36 35 ٩٨:0 /mnt1 /mnt2 rw - ext3 /dev/root rw", "digits that are not ASCII"),
    ],
)
def test_malformed_lines_are_skipped_and_counted(bad_line, why):
    text = f"1 0 8:1 / / rw - ext4 /dev/sda1 rw\n\n{bad_line}\n2 1 0:5 / /proc rw - proc proc rw\n"
    result = parse_mountinfo(text)

    assert result.skipped_line_numbers == (3,), why
    assert [mount.line_number for mount in result.mounts] == [1, 4]


def test_read_mountinfo_reads_a_path(tmp_path):
    path = tmp_path / "mountinfo"
    path.write_text(KUBELET_NFS_MOUNT + "\n", encoding="utf-8")

    assert read_mountinfo(path).mounts[0].fstype == "nfs4"


def test_this_machines_own_mountinfo_parses_cleanly():
    path = Path("/proc/self/mountinfo")

    result = read_mountinfo(path)

    assert result.skipped_line_numbers == ()
    assert "/" in {mount.mount_point for mount in result.mounts}


@settings(deadline=None)
@given(st.text())
def test_arbitrary_text_never_raises(text):
    result = parse_mountinfo(text)

    nonblank = sum(1 for line in text.split("\n") if line.strip())
    assert len(result.mounts) + result.skipped_lines == nonblank


@settings(deadline=None)
@given(st.lists(st.sampled_from(KUBELET_NFS_MOUNT.split(" ") + ["-", "", "\\040", "7:7"]), max_size=20))
def test_shuffled_real_fields_never_raise(fields):
    parse_mountinfo(" ".join(fields))
