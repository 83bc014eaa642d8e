"""CrossAZMount: which mount target a volume really talks to, in which zone, and what crossing costs."""

from datetime import UTC, datetime

import pytest

from mountwarden.api.storageprofile import CrossAzMounts
from mountwarden.core.credits import MIB
from mountwarden.core.credits.consumers import ReportedVolume, VolumeOwners, reported_volumes
from mountwarden.core.credits.crossaz import cross_az_mounts
from mountwarden.core.credits.pricing import SECONDS_PER_MONTH
from mountwarden.core.credits.series import MountTarget
from mountwarden.core.credits.units import GIB
from mountwarden.core.node.report import NodeReport, OperationCounters, ReportedMount
from mountwarden.core.node.userspace import SocketOwner, TlsTunnel, tls_tunnels
from mountwarden.core.procfs.tcp import TcpSocket

FS = "fs-0123456789abcdef0"
TARGETS = (MountTarget("fsmt-a", "10.0.1.4", "eu-west-1a", "euw1-az3"),
           MountTarget("fsmt-b", "10.0.2.25", "eu-west-1b", "euw1-az1"))
ZONES = {"node-a": "eu-west-1a", "node-b": "eu-west-1b", "node-c": "eu-west-1c"}
OWNERS = VolumeOwners.from_mappings(
    pods={"uid-1": "data/importer-0", "uid-2": "data/uploader-0", "uid-3": "web/static-0", "uid-4": "web/tls-0"},
    storage_classes={"pv-1": "scratch-v1", "pv-2": "scratch-v1", "pv-3": "scratch-v1", "pv-4": "scratch-v1",
                     "pv-x": "other-v1"},
    profiles={"scratch-v1": "scratch", "other-v1": "other"},
    file_systems={"scratch": FS, "other": "fs-0fedcba987654321f"},
)


def mounted(node, uid, pv, address, age=3600, read=0, written=0, tunnel_peer=None):
    return ReportedVolume(node, uid, pv, f"0:{pv}", age,
                          {"READ": OperationCounters(10, 0, read), "WRITE": OperationCounters(10, written, 0),
                           "GETATTR": OperationCounters(10**6, 10**8, 10**8)},
                          address=address, tunnel_peer=tunnel_peer)


def test_a_volume_on_another_zones_target_is_found_with_the_cost_of_the_bytes_it_moved():
    volumes = [
        # node-b (zone b) mounted through zone a's target: 1 MiB/s read and 1 MiB/s written for an hour.
        mounted("node-b", "uid-1", "pv-1", "10.0.1.4", read=3600 * MIB, written=3600 * MIB),
        mounted("node-a", "uid-2", "pv-2", "10.0.1.4", read=10 * MIB),  # same zone: fine
    ]
    check = cross_az_mounts(volumes, OWNERS, FS, TARGETS, ZONES)
    assert check.judged == 2 and check.notes == ()
    (crossing,) = check.mounts
    assert (crossing.node, crossing.node_zone, crossing.target.mount_target_id) == ("node-b", "eu-west-1b", "fsmt-a")
    # Metadata (GETATTR's bytes) is not data moved: READ and WRITE payloads only.
    assert crossing.bytes_per_second == pytest.approx(2 * MIB)
    assert crossing.monthly_usd == pytest.approx(round(2 * MIB * SECONDS_PER_MONTH / GIB * 0.01, 2))
    assert crossing.local_target == TARGETS[1]
    finding = crossing.finding()
    assert finding.reason == "CrossAZMount" and finding.profile == "scratch"
    assert (finding.subject.kind, finding.subject.namespace, finding.subject.name, finding.subject.uid) == (
        "Pod", "data", "importer-0", "uid-1")
    assert "zone eu-west-1b" in finding.message and "fsmt-a at 10.0.1.4 in zone eu-west-1a" in finding.message
    assert "$0.01/GB" in finding.message and "a lower bound" in finding.message
    assert "fsmt-b (10.0.2.25)" in finding.remedy and "DNS name" in finding.remedy
    assert finding.evidence["monthlyCostUsd"] == f"{crossing.monthly_usd:.2f}"


def test_with_no_target_in_the_nodes_zone_the_remedy_is_to_create_one():
    check = cross_az_mounts([mounted("node-c", "uid-3", "pv-3", "10.0.2.25")], OWNERS, FS, TARGETS, ZONES)
    (crossing,) = check.mounts
    assert crossing.local_target is None
    assert "Create a mount target in zone eu-west-1c" in crossing.remedy


def test_a_tls_mount_is_judged_by_its_tunnels_peer_and_unjudged_without_it():
    through_tunnel = mounted("node-a", "uid-4", "pv-4", "127.0.0.1", tunnel_peer="10.0.2.25")
    assert through_tunnel.through_tunnel and through_tunnel.mount_target_address == "10.0.2.25"
    (crossing,) = cross_az_mounts([through_tunnel], OWNERS, FS, TARGETS, ZONES).mounts
    assert crossing.target.mount_target_id == "fsmt-b" and crossing.node_zone == "eu-west-1a"

    hidden = cross_az_mounts([mounted("node-a", "uid-4", "pv-4", "127.0.0.1")], OWNERS, FS, TARGETS, ZONES)
    assert hidden.mounts == () and hidden.judged == 0
    assert "local TLS tunnel" in hidden.notes[0]


def test_what_cannot_be_judged_is_said_and_other_file_systems_are_left_out():
    volumes = [mounted("node-z", "uid-1", "pv-1", "10.0.1.4"),  # a node with no zone label
               mounted("node-a", "uid-2", "pv-2", "192.0.2.9"),  # no mount target of this file system
               mounted("node-b", "uid-3", "pv-x", "10.0.1.4")]  # another file system's volume
    check = cross_az_mounts(volumes, OWNERS, FS, TARGETS, ZONES)
    assert check.mounts == () and check.judged == 0
    assert any("node-z" in note and "topology.kubernetes.io/zone" in note for note in check.notes)
    assert any("none of the file system's mount targets" in note for note in check.notes)
    assert len(check.notes) == 2


def test_a_report_without_a_mount_age_crosses_with_no_cost_and_the_status_accepts_it():
    volumes = [mounted("node-b", "uid-1", "pv-1", "10.0.1.4", age=None),
               mounted("node-b", "uid-2", "pv-2", "10.0.1.4", read=3600 * MIB)]
    check = cross_az_mounts(volumes, OWNERS, FS, TARGETS, ZONES)
    assert [m.pod for m in check.mounts] == ["data/uploader-0", "data/importer-0"]  # busiest first
    assert check.mounts[1].monthly_usd is None and "a month" not in check.mounts[1].message
    document = check.to_json()
    assert document["monthlyCostUsd"] == check.mounts[0].monthly_usd
    assert CrossAzMounts.model_validate(document).to_wire() == document


def test_the_address_and_the_tunnel_peer_come_from_the_report():
    # mountstats' opts never show addr= (the agent reports mountinfo's as serverAddress); options read from
    # mountinfo alone may carry it.
    mounts = (ReportedMount("uid-1", "pv-1", "/m1", "0:1", ("vers=4.1",), server_address="10.0.1.4"),
              ReportedMount("uid-2", "pv-2", "/m2", "0:2", ("vers=4.1", "addr=10.0.2.25")),
              ReportedMount("uid-4", "pv-4", "/m4", "0:4", ("vers=4.1", "port=20051"), server_address="127.0.0.1"),
              ReportedMount("uid-3", "pv-3", "/m3", "0:3", ("vers=4.1", "port=20099"), server_address="127.0.0.1"))
    report = NodeReport("node-a", datetime(2026, 12, 1, tzinfo=UTC), mounts, tunnel_peers={20051: "10.0.2.25"})
    by_volume = {v.volume_name: v for v in reported_volumes(report)}
    assert by_volume["pv-1"].mount_target_address == "10.0.1.4" and not by_volume["pv-1"].through_tunnel
    assert by_volume["pv-2"].mount_target_address == "10.0.2.25"
    assert by_volume["pv-4"].mount_target_address == "10.0.2.25"
    assert by_volume["pv-3"].through_tunnel and by_volume["pv-3"].mount_target_address is None


def listening(port, inode):
    return TcpSocket("127.0.0.1", port, "0.0.0.0", 0, "LISTEN", inode)


def connected(remote, inode, port=2049):
    return TcpSocket("10.0.1.9", 40000 + inode, remote, port, "ESTABLISHED", inode)


def test_each_tunnels_listening_port_is_paired_with_the_one_server_it_is_connected_to():
    stunnel, proxy, both, app = (SocketOwner(10, "stunnel"), SocketOwner(11, "efs-proxy"),
                                 SocketOwner(12, "stunnel5"), SocketOwner(13, "python3", "pod-a"))
    sockets = [listening(20051, 1), connected("10.0.2.25", 2),
               listening(20052, 3), listening(20053, 4), connected("10.0.1.4", 5),
               # connected to two servers at once: which listener goes where is unknowable
               listening(20054, 6), connected("10.0.1.4", 7), connected("10.0.2.25", 8),
               # not a tunnel's
               listening(20055, 9), connected("10.0.1.4", 10)]
    owners = {1: stunnel, 2: stunnel, 3: proxy, 4: proxy, 5: proxy, 6: both, 7: both, 8: both, 9: app, 10: app}
    assert tls_tunnels(sockets, owners) == [TlsTunnel(20051, "10.0.2.25", 10, "stunnel"),
                                            TlsTunnel(20052, "10.0.1.4", 11, "efs-proxy"),
                                            TlsTunnel(20053, "10.0.1.4", 11, "efs-proxy")]
