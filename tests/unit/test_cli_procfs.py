"""`mountwarden mounts` and `mountwarden mountstats` run on real samples; JSON parsed back."""

import json
from pathlib import Path

import pytest
from tests.samples import LOCAL_SAMPLES, shared_sample_path
from typer.testing import CliRunner

from mountwarden.cli import app

TELEGRAF = LOCAL_SAMPLES / "mountstats-nfs3-nfs40-nfs42-telegraf.txt"
OPS_KEYS = {
    "ops",
    "transmissions",
    "major_timeouts",
    "bytes_sent",
    "bytes_received",
    "queue_ms",
    "rtt_ms",
    "execute_ms",
    "errors",
}



def run(*args: str | Path):
    return CliRunner().invoke(app, [str(arg) for arg in args])


def run_json(*args: str | Path):
    result = run(*args, "--json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_mounts_from_mountinfo_as_json():
    document = run_json("mounts", "--mountinfo", LOCAL_SAMPLES / "mountinfo-empty-source-procfs-rs.txt")

    assert document == {
        "mounts": [
            {
                "mount_id": 303,
                "parent_id": 98,
                "major_minor": "0:47",
                "root": "/",
                "mount_point": "/",
                "mount_options": "ro,nosuid,nodev,noexec,relatime",
                "optional_fields": [],
                "fstype": "tmpfs",
                "source": "",
                "super_options": "ro,size=0k,nr_inodes=2,uid=1000,gid=1000,inode64",
            }
        ],
        "skipped_lines": 0,
    }


def test_mounts_from_proc_mounts_keeps_the_quoted_selinux_context():
    document = run_json("mounts", "--mounts", shared_sample_path("mounts-pcp-cgroups-root-003.txt"))

    assert len(document["mounts"]) == 35
    assert document["mounts"][-1]["mount_options"] == (
        'rw,context="system_u:object_r:svirt_sandbox_file_t:s0:c575,c786",relatime,discard,stripe=16,data=ordered'
    )
    assert set(document["mounts"][0]) == {"source", "mount_point", "fstype", "mount_options", "dump", "pass"}


def test_mounts_table_shows_each_mount():
    result = run("mounts", "--mountinfo", LOCAL_SAMPLES / "mountinfo-empty-source-procfs-rs.txt")

    assert result.exit_code == 0
    assert "303" in result.stdout and "0:47" in result.stdout and "tmpfs" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["mounts"], "exactly one of --mountinfo FILE or --mounts FILE"),
        (
            ["mounts", "--mountinfo", TELEGRAF, "--mounts", TELEGRAF],
            "exactly one of --mountinfo FILE or --mounts FILE",
        ),
        (["mounts", "--mountinfo", "/nonexistent/mountinfo"], "cannot read /nonexistent/mountinfo"),
        (["mounts", "--mountinfo", TELEGRAF], "holds no mountinfo lines"),
        (["mountstats", "--file", "/nonexistent/mountstats"], "cannot read /nonexistent/mountstats"),
        (["mountstats", "--file", TELEGRAF, "--mount", "/nowhere"], "no device is mounted on /nowhere"),
    ],
)
def test_errors_name_the_file_or_the_problem(args, message):
    result = run(*args)

    assert result.exit_code == 2
    assert message in " ".join(result.stderr.split())
    assert result.stdout == ""


def test_mountstats_json_lists_every_device_with_nfs_fields():
    result = run("mountstats", "--file", TELEGRAF, "--json")
    document = json.loads(result.stdout)
    devices = document["mounts"]

    assert result.exit_code == 0
    assert "skipped 1 malformed line(s)" in result.stderr
    assert document["skipped_lines"] == 1
    assert [device["index"] for device in devices] == list(range(30))
    rootfs = devices[0]
    assert rootfs == {
        "index": 0,
        "device": "rootfs",
        "mount_point": "/",
        "fstype": "rootfs",
        "statvers": None,
        "nfs_version": None,
        "age_seconds": None,
        "rpc_iostats_version": None,
        "transport": None,
        "xprt_count": 0,
        "opts": {},
        "ops": {},
        "events": {},
        "bytes": {},
    }
    by_mount = {device["mount_point"]: device for device in devices if device["fstype"].startswith("nfs")}
    c, d = by_mount["/C"], by_mount["/D"]
    assert (c["nfs_version"], c["rpc_iostats_version"], c["transport"], c["xprt_count"]) == (
        "3",
        "1.0",
        "tcp",
        1,
    )
    assert c["opts"]["vers"] == "3" and c["opts"]["hard"] is True
    assert c["ops"]["GETATTR"] == {
        "ops": 145712,
        "transmissions": 145712,
        "major_timeouts": 0,
        "bytes_sent": 22994472,
        "bytes_received": 16319744,
        "queue_ms": 532,
        "rtt_ms": 107480,
        "execute_ms": 109969,
        "errors": None,
    }
    assert d["ops"]["LOOKUP"]["errors"] == 2
    assert set(d["ops"]["NULL"]) == OPS_KEYS
    assert (d["nfs_version"], d["age_seconds"]) == ("4.2", 2)
    assert d["events"]["dentryrevalidate"] == 112 and len(d["events"]) == 27
    assert d["bytes"] == {
        "normalreadbytes": 0,
        "normalwritebytes": 0,
        "directreadbytes": 0,
        "directwritebytes": 0,
        "serverreadbytes": 0,
        "serverwritebytes": 0,
        "readpages": 0,
        "writepages": 0,
    }


def test_mountstats_nfs_only_and_one_mount_point_with_two_captures():
    assert [
        device["mount_point"] for device in run_json("mountstats", "--file", TELEGRAF, "--nfs-only")["mounts"]
    ] == [
        "/A",
        "/B",
        "/C",
        "/D",
    ]
    rdma = shared_sample_path("mountstats-nfs3-rdma-nconnect8-pcp-el8.7.txt")
    prod = run_json("mountstats", "--file", rdma, "--mount", "/storage/prod/")["mounts"]
    assert [(device["index"], device["ops"]["GETATTR"]["ops"]) for device in prod] == [(36, 3), (43, 216327)]
    assert {device["xprt_count"] for device in prod} == {8}


def test_mountstats_keeps_a_wrapped_u64_counter_exact_in_json():
    document = run_json(
        "mountstats", "--file", shared_sample_path("mountstats-nfs42-krb5p-pcp.txt"), "--mount", "/home"
    )

    assert document["mounts"][0]["ops"]["ACCESS"]["queue_ms"] == 18446744073706749450


def test_mountstats_table_sorts_active_ops_and_warns_when_queue_dominates():
    result = run(
        "mountstats",
        "--file",
        shared_sample_path("mountstats-nfs3-pcp-nasbox.txt"),
        "--mount",
        "/nasbox/music",
    )
    out = result.stdout

    assert result.exit_code == 0
    assert out.index("GETATTR") < out.index("LOOKUP") < out.index("READDIRPLUS") < out.index("PATHCONF")
    assert "SETATTR" not in out  # ops == 0
    assert "75.20" in out and "84.28" in out  # GETATTR average queue and execute, ms
    assert "warning: GETATTR" in out and "warning: FSSTAT" in out and "warning: LOOKUP" not in out
    assert "nconnect" in out and "5 Gbit/s" in " ".join(out.split())


def test_mountstats_table_hint_mentions_connections_already_in_use():
    rdma = shared_sample_path("mountstats-nfs3-rdma-nconnect8-pcp-el8.7.txt")
    out = " ".join(run("mountstats", "--file", rdma, "--mount", "/storage/icds").stdout.split())

    assert "already spreads them over 8 connections" in out
    assert "2 NFS mount(s)" in out


def test_mountstats_table_marks_wrapped_averages_and_missing_errors():
    out = run("mountstats", "--file", shared_sample_path("mountstats-nfs42-krb5p-pcp.txt")).stdout

    access_row = next(line for line in out.splitlines() if "ACCESS" in line)
    assert "wrapped" in access_row and "-" in access_row
    assert "33 other device(s) not shown" in " ".join(out.split())


@pytest.mark.parametrize(("command", "term"), [("mounts", "major_minor"), ("mountstats", "nconnect")])
def test_help_explains_the_output(command, term):
    result = run(command, "--help")

    assert result.exit_code == 0
    assert term in result.stdout and "--json" in result.stdout
