"""A node's report is believed only about pods scheduled on that node (core.nodereport.of_own_pods)."""

from tests.support import read_report

from mountwarden.core.node.report import NodeReport, of_own_pods

NODES = {"uid-here": "node-a", "uid-there": "node-b", "uid-pending": ""}


def report(*entries: tuple[str | None, str]) -> NodeReport:
    return read_report(
        "node-a",
        volumes=[{"podUid": uid, "volumeName": volume, "mountPoint": f"/m/{volume}", "superblock": "0:50",
                  "effectiveOptions": ["vers=4.1"]} for uid, volume in entries],
        sqlite=[{"podUid": uid, "volumeName": volume, "path": f"/m/{volume}/db"} for uid, volume in entries],
    )


def test_entries_of_pods_on_other_nodes_unscheduled_or_unknown_are_dropped_and_said_why():
    forged = report(("uid-here", "pv-1"), ("uid-there", "pv-2"), ("uid-pending", "pv-3"), ("uid-gone", "pv-4"),
                    (None, "pv-staging"))
    kept, foreign = of_own_pods(forged, NODES.get)
    assert [m.volume_name for m in kept.mounts] == ["pv-1", "pv-staging"]
    assert [s.volume_name for s in kept.sqlite] == ["pv-1", "pv-staging"]
    assert kept.mount_of("uid-there", ["pv-2"]) is None and kept.mount_of("uid-here", ["pv-1"]) is not None
    assert [(f.pod_uid, f.reason) for f in foreign] == [
        ("uid-there", "other-node"), ("uid-pending", "other-node"), ("uid-gone", "unknown-pod"),
        ("uid-there", "other-node"), ("uid-pending", "other-node"), ("uid-gone", "unknown-pod")]
    assert str(foreign[0]) == ("NodeMountReport node-a names pod UID uid-there (volume pv-2), but that pod is "
                               "scheduled on node node-b: the entry is ignored (a node reports only its own pods)")
    assert "not scheduled on any node" in str(foreign[1]) and "no pod with that UID is known" in str(foreign[2])


def test_an_honest_report_is_kept_as_it_is():
    honest = report(("uid-here", "pv-1"))
    assert of_own_pods(honest, NODES.get) == (honest, [])
