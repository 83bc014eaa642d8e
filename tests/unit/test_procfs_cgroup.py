"""/proc/<pid>/cgroup parser and the pod/container found in kubelet cgroup paths.

The paths come from public code that handles them (falco/libsinsp's container
cgroup tests, cadvisor-style cgroupfs layouts, kind's kubelet.slice layout),
written out here rather than guessed.
"""

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mountwarden.core.procfs.cgroup import (
    CgroupEntry,
    PodCgroup,
    parse_cgroup,
    parse_pod_cgroup_path,
    read_cgroup,
)

CONTAINERD_ID = "605439acbd4fb18c145069289094b17f17e0cfa938f78012d4960bc797305f22"
CRIO_ID = "17d8c9eacc629f9945f304d89e9708c0c619649a484a215b240628319548a09f"
KIND_ID = "ee3fc60554cd9eefdd745a10dda84e041a7883c0381d067e76185d342de64759"
POD_UID = "3d1b6e2d-0d6c-4b5e-9a3f-1c2d3e4f5a6b"
POD_UID_SYSTEMD = POD_UID.replace("-", "_")


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (
            f"/kubepods/besteffort/podac04f3f2-1f2c-11e9-b015-1ebee232acfa/{CONTAINERD_ID}",
            PodCgroup("ac04f3f2-1f2c-11e9-b015-1ebee232acfa", "besteffort", "cgroupfs", None, CONTAINERD_ID),
        ),
        (
            f"/kubepods/burstable/pod63b3ebfc-2890-11e9-8154-16bf8ef8d9dc/crio-{CRIO_ID}",
            PodCgroup("63b3ebfc-2890-11e9-8154-16bf8ef8d9dc", "burstable", "cgroupfs", "crio", CRIO_ID),
        ),
        (
            f"/kubepods/pod{POD_UID}/{CONTAINERD_ID}",
            PodCgroup(POD_UID, "guaranteed", "cgroupfs", None, CONTAINERD_ID),
        ),
        (
            f"/kubelet/kubepods/burstable/pod{POD_UID}/{CONTAINERD_ID}",
            PodCgroup(POD_UID, "burstable", "cgroupfs", None, CONTAINERD_ID),
        ),
        (
            f"/kubepods/burstable/pod{POD_UID}",
            PodCgroup(POD_UID, "burstable", "cgroupfs", None, None),
        ),
        (
            "/kubepods.slice/kubepods-besteffort.slice/"
            f"kubepods-besteffort-pod63b3ebfc_2890_11e9_8154_16bf8ef8d9dc.slice/crio-{CRIO_ID}.scope",
            PodCgroup("63b3ebfc-2890-11e9-8154-16bf8ef8d9dc", "besteffort", "systemd", "crio", CRIO_ID),
        ),
        (
            "/kubepods.slice/kubepods-burstable.slice/"
            f"kubepods-burstable-pod{POD_UID_SYSTEMD}.slice/cri-containerd-{CONTAINERD_ID}.scope",
            PodCgroup(POD_UID, "burstable", "systemd", "containerd", CONTAINERD_ID),
        ),
        (
            f"/kubepods.slice/kubepods-pod{POD_UID_SYSTEMD}.slice/docker-{CONTAINERD_ID}.scope",
            PodCgroup(POD_UID, "guaranteed", "systemd", "docker", CONTAINERD_ID),
        ),
        (
            "/kubepods.slice/kubepods-burstable.slice/"
            f"kubepods-burstable-pod{POD_UID_SYSTEMD}.slice/crio-conmon-{CRIO_ID}.scope",
            PodCgroup(POD_UID, "burstable", "systemd", "crio-conmon", CRIO_ID),
        ),
        (
            "/kubepods.slice/kubepods-burstable.slice/"
            f"kubepods-burstable-pod{POD_UID_SYSTEMD}.slice/crio-{CRIO_ID}.scope/container",
            PodCgroup(POD_UID, "burstable", "systemd", "crio", CRIO_ID),
        ),
        (
            f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{POD_UID_SYSTEMD}.slice",
            PodCgroup(POD_UID, "burstable", "systemd", None, None),
        ),
        (
            "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/"
            f"kubelet-kubepods-burstable-podb1e89a2fcc688644de3eb95aee8025ce.slice/cri-containerd-{KIND_ID}.scope",
            PodCgroup("b1e89a2fcc688644de3eb95aee8025ce", "burstable", "systemd", "containerd", KIND_ID),
        ),
        (
            f"/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-pod{POD_UID_SYSTEMD}.slice",
            PodCgroup(POD_UID, "guaranteed", "systemd", None, None),
        ),
        (
            "/kubepods-burstable-podbd12dd3393227d950605a2444b13c27a.slice:cri-containerd:"
            "d52db56a9c80d536a91354c0951c061187ca46249e64865a12703003d8f42366",
            PodCgroup(
                "bd12dd3393227d950605a2444b13c27a",
                "burstable",
                "systemd",
                "containerd",
                "d52db56a9c80d536a91354c0951c061187ca46249e64865a12703003d8f42366",
            ),
        ),
    ],
)
def test_pod_and_container_from_kubelet_cgroup_paths(path, expected):
    assert parse_pod_cgroup_path(path) == expected


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "",
        "/init.scope",
        "/system.slice/containerd.service",
        "/user.slice/user-1000.slice/session-915.scope",
        "/docker/7951fb549ab99e0722a949b6c121634e1f3a36b5bacbe5392991e3b12251e6b8",
        f"/system.slice/crio-conmon-{CRIO_ID}.scope",
        "/kubepods.slice/kubepods-burstable.slice",
        "/kubepods/burstable",
        "/kubepods.slice/kubepods-burstable-podNOTAUUID.slice/cri-containerd-abc.scope",
        f"/somewhere/pod{POD_UID}/{CONTAINERD_ID}",
        f"/kubepods/burstable/pod{POD_UID.upper()}",
    ],
)
def test_paths_that_name_no_pod(path):
    assert parse_pod_cgroup_path(path) is None


def test_a_short_or_unknown_container_segment_leaves_only_the_pod():
    pod = parse_pod_cgroup_path(f"/kubepods/burstable/pod{POD_UID}/not-a-container")

    assert pod == PodCgroup(POD_UID, "burstable", "cgroupfs", None, None)


CGROUP_V1 = f"""\
12:pids:/kubepods/burstable/pod{POD_UID}/{CONTAINERD_ID}
11:cpu,cpuacct:/kubepods/burstable/pod{POD_UID}/{CONTAINERD_ID}
1:name=systemd:/kubepods/burstable/pod{POD_UID}/{CONTAINERD_ID}
"""


def test_cgroup_v1_lines():
    result = parse_cgroup(CGROUP_V1)

    assert result.entries[1] == CgroupEntry(
        hierarchy_id=11,
        controllers=("cpu", "cpuacct"),
        path=f"/kubepods/burstable/pod{POD_UID}/{CONTAINERD_ID}",
        is_deleted=False,
        line_number=2,
    )
    assert result.entries[2].controllers == ("name=systemd",)
    assert not any(entry.is_unified for entry in result.entries)
    assert result.pod == PodCgroup(POD_UID, "burstable", "cgroupfs", None, CONTAINERD_ID)


def test_cgroup_v2_line_is_preferred_in_hybrid_mode():
    v2_path = f"/kubepods.slice/kubepods-pod{POD_UID_SYSTEMD}.slice/cri-containerd-{CRIO_ID}.scope"
    result = parse_cgroup("1:name=systemd:/user.slice\n" + f"0::{v2_path}\n")

    assert result.entries[1].is_unified and result.entries[1].controllers == ()
    assert result.pod == PodCgroup(POD_UID, "guaranteed", "systemd", "containerd", CRIO_ID)


def test_a_removed_cgroup_and_a_path_with_colons():
    result = parse_cgroup(
        "0::/kubepods/besteffort/podac04f3f2-1f2c-11e9-b015-1ebee232acfa (deleted)\n"
        "0::/kubepods-besteffort-podbd12dd3393227d950605a2444b13c27a.slice:crio:" + CRIO_ID + "\n"
    )
    removed, colons = result.entries

    assert removed.is_deleted and removed.path.endswith("1ebee232acfa")
    assert colons.path.endswith(":crio:" + CRIO_ID)
    assert result.pod is not None and result.pod.pod_uid == "ac04f3f2-1f2c-11e9-b015-1ebee232acfa"


def test_a_process_outside_any_pod():
    result = parse_cgroup("0::/system.slice/containerd.service\n")

    assert result.pod is None
    assert result.skipped_lines == 0


@pytest.mark.parametrize(
    ("bad_line", "why"),
    [
        ("garbage", "no fields"),
        ("x:cpu:/", "hierarchy ID is not a number"),
        ("3:cpu:relative/path", "path is not absolute"),
        ("3:cpu", "no path"),
    ],
)
def test_malformed_lines_are_skipped_and_counted(bad_line, why):
    result = parse_cgroup(f"0::/\n{bad_line}\n")

    assert result.skipped_line_numbers == (2,), why
    assert len(result.entries) == 1


def test_read_cgroup_reads_a_path(tmp_path):
    path = tmp_path / "cgroup"
    path.write_text(CGROUP_V1, encoding="utf-8")

    assert read_cgroup(path).pod is not None


def test_this_process_cgroup_parses_cleanly():
    path = Path("/proc/self/cgroup")

    result = read_cgroup(path)

    assert result.skipped_line_numbers == ()
    assert result.entries


@settings(deadline=None)
@given(st.text())
def test_arbitrary_text_never_raises(text):
    result = parse_cgroup(text)

    assert len(result.entries) + result.skipped_lines == sum(1 for line in text.split("\n") if line.strip())
    _ = result.pod


@settings(deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                "kubepods",
                "burstable",
                "kubepods.slice",
                f"pod{POD_UID}",
                f"kubepods-pod{POD_UID_SYSTEMD}.slice",
                CONTAINERD_ID,
                f"crio-{CRIO_ID}.scope",
                "",
                ":",
                "container",
            ]
        ),
        max_size=8,
    )
)
def test_shuffled_path_segments_never_raise(segments):
    pod = parse_pod_cgroup_path("/".join(segments))

    assert pod is None or "_" not in pod.pod_uid
