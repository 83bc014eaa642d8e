"""mountstats parser: table tests over real captures, targeted malformed lines, and fuzzing."""

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.samples import LOCAL_SAMPLES, shared_sample

from mountwarden.core.procfs.mountstats import (
    BYTE_COUNTER_NAMES,
    EVENT_COUNTER_NAMES,
    MountstatsDevice,
    RpcOperationStats,
    parse_mountstats,
    read_mountstats,
)


def local_sample(name: str) -> str:
    return (LOCAL_SAMPLES / name).read_text(encoding="utf-8")


def sample(name: str) -> str:
    return local_sample(name) if (LOCAL_SAMPLES / name).exists() else shared_sample(name)


NASBOX_SHARES = (
    "music",
    "newmovies",
    "Public",
    "assets",
    "movies",
    "downloads",
    "books",
    "Web",
    "scan",
    "photos",
)
RDMA_EXPORTS = ("prod", "test", "icds", "group", "home", "icds", "work", "prod", "test", "pcp-data")


def nfs_mount(text: str, mount_point: str) -> MountstatsDevice:
    (device,) = [d for d in parse_mountstats(text).devices if d.mount_point == mount_point]
    return device


@pytest.mark.parametrize(
    ("name", "devices", "nfs_mount_points", "skipped"),
    [
        ("mountstats-empty-device-procfs-rs.txt", 1, [], ()),
        ("mountstats-nfs41-krb5-procfs-rs.txt", 1, ["/srv/elwe/space"], ()),
        ("mountstats-nfs3-nfs40-nfs42-telegraf.txt", 30, ["/A", "/B", "/C", "/D"], (231,)),
        ("mountstats-nfs3-nfs40-nfs41-pcp.txt", 16, ["/ifs", "/mnt/nfsv4", "/ifsfoo", "/mnt/nfs41"], ()),
        (
            "mountstats-nfs3-pcp-nasbox.txt",
            50,
            [f"/nasbox/{share}" for share in NASBOX_SHARES],
            (),
        ),
        (
            "mountstats-nfs3-rdma-nconnect8-pcp-el8.7.txt",
            47,
            [f"/storage/{name}" for name in RDMA_EXPORTS],
            (),
        ),
        ("mountstats-nfs42-krb5p-pcp.txt", 34, ["/home"], ()),
        (
            "mountstats-nfs42-nfs41-nfs40-nfs3-pcp-el8-4.18.0-105-rpc1.1.txt",
            36,
            ["/mnt/nfsv4.2", "/mnt/nfsv4.1", "/mnt/nfsv4.0", "/mnt/nfsv3"],
            (),
        ),
        (
            "mountstats-nfs42-nfs41-nfs40-nfs3-pcp-el8-4.18.0-80-rpc1.0.txt",
            36,
            ["/mnt/nfsv4.2", "/mnt/nfsv4.1", "/mnt/nfsv4.0", "/mnt/nfsv3"],
            (),
        ),
        ("mountstats-no-nfs-pcp.txt", 36, [], ()),
    ],
)
def test_every_sample_yields_its_devices_in_file_order(name, devices, nfs_mount_points, skipped):
    result = parse_mountstats(sample(name))

    assert len(result.devices) == devices
    assert [device.index for device in result.devices] == list(range(devices))
    assert [device.mount_point for device in result.nfs_mounts] == nfs_mount_points
    assert result.skipped_line_numbers == skipped


@pytest.mark.parametrize(
    ("name", "mount_point", "nfs_version", "rpc_iostats_version", "transport", "xprt_count", "op_count"),
    [
        ("mountstats-nfs3-nfs40-nfs42-telegraf.txt", "/A", "3", "1.0", "tcp", 1, 22),
        ("mountstats-nfs3-nfs40-nfs42-telegraf.txt", "/B", "4.0", "1.0", "tcp", 1, 46),
        ("mountstats-nfs3-nfs40-nfs42-telegraf.txt", "/D", "4.2", "1.1", "tcp", 1, 68),
        ("mountstats-nfs41-krb5-procfs-rs.txt", "/srv/elwe/space", "4.1", "1.0", "tcp", 1, 5),
        ("mountstats-nfs3-nfs40-nfs41-pcp.txt", "/mnt/nfsv4", "4.0", "1.0", "tcp", 1, 47),
        ("mountstats-nfs3-nfs40-nfs41-pcp.txt", "/mnt/nfs41", "4.1", "1.0", "tcp", 1, 53),
        ("mountstats-nfs42-krb5p-pcp.txt", "/home", "4.2", "1.0", "tcp", 1, 60),
        (
            "mountstats-nfs42-nfs41-nfs40-nfs3-pcp-el8-4.18.0-105-rpc1.1.txt",
            "/mnt/nfsv3",
            "3",
            "1.1",
            "tcp",
            1,
            22,
        ),
        (
            "mountstats-nfs42-nfs41-nfs40-nfs3-pcp-el8-4.18.0-80-rpc1.0.txt",
            "/mnt/nfsv3",
            "3",
            "1.0",
            "tcp",
            1,
            22,
        ),
    ],
)
def test_nfs_mount_summary(
    name, mount_point, nfs_version, rpc_iostats_version, transport, xprt_count, op_count
):
    device = nfs_mount(sample(name), mount_point)

    assert device.statvers == "1.1"
    assert device.nfs_version == nfs_version
    assert device.rpc_iostats_version == rpc_iostats_version
    assert device.transport == transport
    assert device.xprt_count == xprt_count
    assert len(device.operations) == op_count


def test_per_op_counters_under_rpc_iostats_1_0_have_no_errors_column():
    device = nfs_mount(local_sample("mountstats-nfs3-nfs40-nfs42-telegraf.txt"), "/C")

    assert device.operations["GETATTR"] == RpcOperationStats(
        name="GETATTR",
        ops=145712,
        transmissions=145712,
        major_timeouts=0,
        bytes_sent=22994472,
        bytes_received=16319744,
        queue_ms=532,
        rtt_ms=107480,
        execute_ms=109969,
        errors=None,
    )
    assert device.operations["GETATTR"].avg_rtt_ms == pytest.approx(107480 / 145712)
    assert device.operations["READ"].avg_rtt_ms is None


def test_per_op_counters_under_rpc_iostats_1_1_carry_errors():
    device = nfs_mount(local_sample("mountstats-nfs3-nfs40-nfs42-telegraf.txt"), "/D")

    lookup = device.operations["LOOKUP"]
    assert (lookup.ops, lookup.bytes_sent, lookup.bytes_received, lookup.execute_ms, lookup.errors) == (
        3,
        628,
        484,
        1,
        2,
    )
    assert device.operations["RECLAIM_COMPLETE"].rtt_ms == 107


def test_the_same_mount_captured_under_rpc_1_0_and_1_1():
    old = nfs_mount(
        shared_sample("mountstats-nfs42-nfs41-nfs40-nfs3-pcp-el8-4.18.0-80-rpc1.0.txt"), "/mnt/nfsv3"
    )
    new = nfs_mount(
        shared_sample("mountstats-nfs42-nfs41-nfs40-nfs3-pcp-el8-4.18.0-105-rpc1.1.txt"), "/mnt/nfsv3"
    )

    assert {operation.errors for operation in old.operations.values()} == {None}
    # PCP's test pattern: the NFSv3 errors column counts 1..21 down the op list, then COMMIT has 50.
    assert [operation.errors for operation in new.operations.values()] == [*range(1, 22), 50]
    assert (old.operations["GETATTR"].ops, new.operations["GETATTR"].ops) == (4, 8)


def test_real_error_counts_from_the_rdma_capture():
    result = parse_mountstats(shared_sample("mountstats-nfs3-rdma-nconnect8-pcp-el8.7.txt"))
    group = next(device for device in result.devices if device.mount_point == "/storage/group")

    assert group.operations["LOOKUP"].errors == 90189
    assert group.operations["LOOKUP"].ops == 116511


def test_rdma_with_nconnect_8_keeps_every_connection_with_27_named_counters():
    result = parse_mountstats(shared_sample("mountstats-nfs3-rdma-nconnect8-pcp-el8.7.txt"))

    for device in result.nfs_mounts:
        assert device.xprt_count == 8
        assert {transport.protocol for transport in device.transports} == {"rdma"}
        assert {len(transport.counters) for transport in device.transports} == {27}
        assert device.opts_by_name["nconnect"] == "8"
    first_icds = next(device for device in result.devices if device.mount_point == "/storage/icds")
    counters = first_icds.transports[0].counters
    assert (counters["rpcsends"], counters["inflightsends"], counters["write_segments"]) == (12, 12, 6)
    assert (counters["total_rdma_req"], counters["total_rdma_rep"]) == (352256, 352256)
    assert (counters["allocated_mrs"], counters["local_invalidates"], counters["reply_waits_for_send"]) == (
        11,
        6,
        0,
    )
    assert "unnamed_27" not in counters


def test_duplicated_device_and_mount_point_stay_apart():
    result = parse_mountstats(shared_sample("mountstats-nfs3-rdma-nconnect8-pcp-el8.7.txt"))
    prod = [device for device in result.devices if device.mount_point == "/storage/prod"]

    assert [(device.index, device.line_number, device.device) for device in prod] == [
        (36, 37, "example.com:/icds-prod"),
        (43, 317, "example.com:/icds-prod"),
    ]
    assert [device.operations["GETATTR"].ops for device in prod] == [3, 216327]
    assert [device.operations["LOOKUP"].errors for device in prod] == [1, 15]
    assert len([device for device in result.devices if device.mount_point == "/storage/test"]) == 2
    assert len([device for device in result.devices if device.mount_point == "/storage/icds"]) == 2


def test_a_wrapped_u64_counter_is_kept_as_is_and_never_negative():
    device = nfs_mount(shared_sample("mountstats-nfs42-krb5p-pcp.txt"), "/home")
    access = device.operations["ACCESS"]

    assert access.queue_ms == 18446744073706749450
    assert (access.ops, access.transmissions) == (69477, 69476)
    assert access.has_wrapped_counter
    assert not access.is_queue_bound
    assert device.operations["WRITE"].is_queue_bound  # 67493582 of 70664356 ms queued
    assert device.opts_by_name["sec"] == "krb5p"
    assert device.sec == {"flavor": "6", "pseudoflavor": "390005"}


def test_telegraf_stray_trailing_layoutreturn_line_is_skipped_not_merged():
    text = local_sample("mountstats-nfs3-nfs40-nfs42-telegraf.txt")
    result = parse_mountstats(text)
    last = result.devices[-1]

    assert text.split("\n")[230] == "        LAYOUTRETURN: 0 0 0 0 0 0 0 0"
    assert result.skipped_line_numbers == (231,)
    assert last.mount_point == "/D"
    assert last.operations["LAYOUTRETURN"].errors == 0  # the 9-column line of /D's own block


def test_telegraf_opts_with_stray_spaces_after_commas():
    device = nfs_mount(local_sample("mountstats-nfs3-nfs40-nfs42-telegraf.txt"), "/B")

    options = device.opts_by_name
    assert (options["acregmax"], options["acdirmin"], options["clientaddr"]) == ("60", "30", "3.3.3.3")
    assert options["hard"] is True
    assert device.operations["DESTROY_SESSION"].ops == 500
    assert device.operations["READ"].bytes_sent == 1000
    assert device.nfsv4 == {"bm0": "0xfdffafff", "bm1": "0xf9be3e", "acl": "0x0"}


def test_procfs_rs_sample_with_trailing_spaces_and_no_final_newline():
    text = local_sample("mountstats-nfs41-krb5-procfs-rs.txt")
    assert text.endswith("        ") and not text.endswith("\n")
    result = parse_mountstats(text)
    (device,) = result.devices

    assert result.skipped_lines == 0
    assert (device.device, device.mount_point, device.fstype) == ("elwe:/space", "/srv/elwe/space", "nfs4")
    assert device.age_seconds == 3542
    assert device.opts_by_name["sec"] == "krb5"
    assert device.caps["caps"] == "0x3ffdf"
    assert device.nfsv4["sessions"] is None
    assert device.nfsv4["pnfs"] == "not configured"
    assert device.sec == {"flavor": "6", "pseudoflavor": "390003"}
    assert device.other_fields == {"impl_id": "name='',domain='',date='0,0'"}
    assert list(device.event_counters) == list(EVENT_COUNTER_NAMES)
    assert (device.event_counters["inoderevalidate"], device.event_counters["vfsaccess"]) == (114, 3019)
    assert (device.event_counters["delay"], device.event_counters["pnfswrite"]) == (9, 1)
    assert device.byte_counters == dict(zip(BYTE_COUNTER_NAMES, range(1, 9), strict=True))
    assert device.transports[0].counters == {
        "port": 909,
        "bind_count": 0,
        "connect_count": 1,
        "connect_time": 0,
        "idle_time": 2,
        "rpcsends": 294,
        "rpcreceives": 294,
        "badxids": 0,
        "inflightsends": 294,
        "backlogutil": 0,
        "maxslots": 2,
        "sendutil": 0,
        "pendutil": 0,
    }
    assert device.operations["OPEN"] == RpcOperationStats("OPEN", 1, 1, 0, 320, 420, 0, 124, 124, None)


def test_empty_device_name():
    (device,) = parse_mountstats(local_sample("mountstats-empty-device-procfs-rs.txt")).devices

    assert (device.device, device.mount_point, device.fstype, device.statvers) == ("", "/", "tmpfs", None)
    assert not device.is_nfs
    assert (device.nfs_version, device.transport, device.xprt_count) == (None, None, 0)
    assert device.operations == {} and device.event_counters == {}


def test_age_with_a_human_comment_and_old_style_minorversion():
    device = nfs_mount(shared_sample("mountstats-nfs3-nfs40-nfs41-pcp.txt"), "/mnt/nfsv4")

    assert device.age_seconds == 19
    assert (device.opts_by_name["vers"], device.opts_by_name["minorversion"]) == ("4", "0")
    assert device.nfs_version == "4.0"
    assert device.operations["READ"].bytes_received == 628138612


def test_nfs_mounts_sharing_one_superblock_and_a_queue_bound_getattr():
    result = parse_mountstats(shared_sample("mountstats-nfs3-pcp-nasbox.txt"))
    getattrs = [device.operations["GETATTR"] for device in result.nfs_mounts]

    assert getattrs.count(getattrs[0]) == 9
    assert (getattrs[0].ops, getattrs[0].transmissions, getattrs[0].major_timeouts) == (4125, 4322, 1)
    assert getattrs[0].is_queue_bound  # 310200 of 347664 ms waiting to be sent
    assert not result.nfs_mounts[1].operations["GETATTR"].is_queue_bound
    assert {device.opts_by_name["local_lock"] for device in result.nfs_mounts} == {"all"}
    assert all(device.opts_by_name["nolock"] is True for device in result.nfs_mounts)


def test_a_file_without_nfs_mounts():
    result = parse_mountstats(shared_sample("mountstats-no-nfs-pcp.txt"))

    assert result.nfs_mounts == ()
    assert ("-hosts", "/net", "autofs") in [(d.device, d.mount_point, d.fstype) for d in result.devices]


NFS_BLOCK_1_0 = """\
device srv:/export mounted on /mnt/with\\040space with fstype nfs statvers=1.1
\topts:\trw,vers=3,proto=tcp
\tage:\t10
\tRPC iostats version: 1.0  p/v: 100003/3 (nfs)
\txprt:\ttcp 700 1 1 0 0 5 5 0 5 0
\tper-op statistics
\t        NULL: 0 0 0 0 0 0 0 0
"""


def test_escaped_mount_point_and_an_old_kernel_tcp_line_with_10_numbers():
    (device,) = parse_mountstats(NFS_BLOCK_1_0).devices

    assert device.mount_point == "/mnt/with space"
    assert list(device.transports[0].counters) == [
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
    ]


@pytest.mark.parametrize(
    ("bad_line", "why"),
    [
        ("\t        READ: 1 2 3 4 5 6 7 8 9", "9 numbers under RPC iostats 1.0"),
        ("\t        READ: 1 2 3 4 5 6 7", "7 numbers"),
        ("\t        READ: 1 2 3 -4 5 6 7 8", "a negative counter"),
        ("\t        READ: 1 2 3 x 5 6 7 8", "not a number"),
        ("\t        NULL: 1 2 3 4 5 6 7 8", "NULL repeated"),
        ("\t        READ 1 2 3 4 5 6 7 8", "no colon"),
    ],
)
def test_malformed_per_op_lines_are_skipped_and_counted(bad_line, why):
    result = parse_mountstats(NFS_BLOCK_1_0 + bad_line + "\n")

    assert result.skipped_line_numbers == (8,), why
    assert set(result.devices[0].operations) == {"NULL"}


@pytest.mark.parametrize(
    ("bad_line", "why"),
    [
        ("\tage:\tforever", "age is not a number"),
        ("\tage:\t11", "a second age line"),
        ("\tevents:\t1 2 three", "events are not numbers"),
        ("\tbytes:\t", "no byte counters"),
        ("\txprt:\t", "no transport"),
        ("\txprt:\ttcp 1 2 x", "transport counters are not numbers"),
        ("\tRPC iostats version:", "no version"),
        ("\twhat is this", "not a labelled line"),
    ],
)
def test_malformed_section_lines_are_skipped_and_counted(bad_line, why):
    head, tail = NFS_BLOCK_1_0.split("\tRPC iostats", 1)
    result = parse_mountstats(head + bad_line + "\n\tRPC iostats" + tail)

    assert result.skipped_line_numbers == (4,), why
    assert result.devices[0].age_seconds == 10
    assert set(result.devices[0].operations) == {"NULL"}


def test_lines_outside_a_device_block_are_not_attributed_to_a_neighbour():
    text = "\tage:\t5\n" + NFS_BLOCK_1_0 + "device broken line\n\tage:\t7\n\t        READ: 1 1 0 1 1 1 1 1\n"
    result = parse_mountstats(text)

    assert result.skipped_line_numbers == (1, 9, 10, 11)
    assert [device.age_seconds for device in result.devices] == [10]


def test_an_unknown_newer_rpc_iostats_version_and_transport_are_read_leniently():
    text = NFS_BLOCK_1_0.replace("version: 1.0", "version: 1.2").replace("tcp 700", "vsock 700")
    text = text.replace("NULL: 0 0 0 0 0 0 0 0", "NULL: 1 1 0 1 1 1 1 1 4 9")
    (device,) = parse_mountstats(text).devices

    assert device.operations["NULL"].errors == 4
    assert device.transports[0].counters == {
        f"unnamed_{position}": value for position, value in enumerate([700, 1, 1, 0, 0, 5, 5, 0, 5, 0])
    }


def test_read_mountstats_reads_a_path(tmp_path):
    path = tmp_path / "mountstats"
    path.write_text(NFS_BLOCK_1_0, encoding="utf-8")

    assert read_mountstats(path).devices[0].mount_point == "/mnt/with space"


def test_this_machines_own_mountstats_parses_cleanly():
    path = Path("/proc/self/mountstats")

    result = read_mountstats(path)

    assert result.skipped_line_numbers == ()
    assert result.devices


REAL_LINES = [
    line
    for name in ("mountstats-nfs3-nfs40-nfs42-telegraf.txt", "mountstats-nfs41-krb5-procfs-rs.txt")
    for line in local_sample(name).split("\n")
]


@settings(deadline=None)
@given(st.text())
def test_arbitrary_text_never_raises(text):
    result = parse_mountstats(text)

    assert all(number >= 1 for number in result.skipped_line_numbers)


@settings(deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(REAL_LINES), st.integers(0, 120), st.text(max_size=4)), max_size=40)
)
def test_real_lines_cut_and_spliced_never_raise(pieces):
    text = "\n".join(line[:cut] + noise + line[cut:] for line, cut, noise in pieces)

    result = parse_mountstats(text)

    for device in result.devices:
        for operation in device.operations.values():
            assert min(operation.ops, operation.queue_ms, operation.rtt_ms, operation.execute_ms) >= 0


def test_the_mount_list_of_two_reads_ignores_the_counters_that_always_move():
    from mountwarden.core.procfs import mounted_devices

    first = "device a:/x mounted on /m with fstype nfs4 statvers=1.1\n\tage:\t10\n"
    later = "device a:/x mounted on /m with fstype nfs4 statvers=1.1\n\tage:\t11\n"
    assert mounted_devices(first) == mounted_devices(later) == ["device a:/x mounted on /m with fstype nfs4 statvers=1.1"]
    assert mounted_devices(first + "device b:/y mounted on /n with fstype nfs4 statvers=1.1\n") != mounted_devices(first)
