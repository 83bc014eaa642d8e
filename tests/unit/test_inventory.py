"""The inventory (mountwarden.core.inventory): every class and volume on network storage by file system, governed
or not, the options three ways and where they disagree, each pod volume judged; and its two renderings, the
NetworkFileSystem object and `mountwarden inventory`."""

import gc
import json
import weakref
from datetime import UTC, datetime, timedelta

import pytest
from tests.support import read_report

from mountwarden.adapters.pods import PodPlacement
from mountwarden.api import networkfilesystem
from mountwarden.api.networkfilesystem import SPEC_BUDGET, network_file_system
from mountwarden.core.adoption import Adopter
from mountwarden.core.compliance import Contract
from mountwarden.core.inventory import ClusterFacts, same_options, take_inventory
from mountwarden.core.networkstorage import NetworkVolume, object_name
from mountwarden.core.options.normalize import normalize
from mountwarden.core.storageclass import ClassEntry

NOW = datetime(2026, 3, 1, 12, tzinfo=UTC)
EFS_ID = "fs-0123456789abcdef0"
EFS_HOST = f"{EFS_ID}.efs.us-east-1.amazonaws.com"
IMPORT = ("sync", "actimeo=0", "lookupcache=none")
KERNEL_V41 = ("rw", "vers=4.1", "rsize=1048576", "wsize=1048576", "hard", "proto=tcp", "timeo=600", "retrans=2",
              "local_lock=none")
IMPORT_IN_EFFECT = ("sync", "acregmin=0", "acregmax=0", "acdirmin=0", "acdirmax=0", "lookupcache=none")
CACHED = ("vers=4.1", "rsize=1048576", "wsize=1048576", "hard", "timeo=600", "retrans=2", "noresvport",
          "acregmin=600", "acregmax=600", "acdirmin=600", "acdirmax=600", "lookupcache=all")


def pv_object(name: str, storage_class: str, options, *, nfs_server: str | None = None, claim: str | None = None,
              **annotations) -> dict:
    spec = {"storageClassName": storage_class, "mountOptions": list(options),
            "claimRef": {"namespace": "shop", "name": claim or name}}
    if nfs_server:
        spec["nfs"] = {"server": nfs_server, "path": f"/{name}"}
    else:
        spec["csi"] = {"driver": "efs.csi.aws.com", "volumeHandle": f"{EFS_ID}::fsap-{name}"}
    return {"metadata": {"name": name, "annotations": annotations}, "spec": spec}


def volume(*args, **fields) -> NetworkVolume:
    found = NetworkVolume.from_object(pv_object(*args, **fields))
    assert found is not None
    return found


def mount(pod: PodPlacement, pv: str, options, **fields) -> dict:
    return {"podUid": pod.uid, "volumeName": pv, "server": fields.pop("server", EFS_HOST),
            "mountPoint": f"/var/lib/kubelet/pods/{pod.uid}/volumes/kubernetes.io~csi/{pv}/mount", "superblock": "0:60",
            "effectiveOptions": list(options), **fields}


def pod(name: str, node: str, *claims: str) -> PodPlacement:
    return PodPlacement(f"uid-{name}", "shop", name, node, tuple(claims))


def cluster(pods, volumes, reports, *, classes=(), contracts=None, adopters=()) -> ClusterFacts:
    by_claim: dict = {}
    for p in pods:
        for claim in p.claims:
            by_claim.setdefault((p.namespace, claim), []).append(p)
    return ClusterFacts(classes=classes, volumes=volumes, pods_of_claim=lambda ns, c: by_claim.get((ns, c), []),
                        pod_of_uid={p.uid: p for p in pods}.get,
                        reports={r.node: r for r in reports}, contracts=contracts or {}, adopters=adopters)


def inventory(facts: ClusterFacts, **kwargs):
    return take_inventory(facts, now=NOW, stale_after=timedelta(minutes=15), **kwargs)


def day_one():
    """efs-sc (EFS) with two PVs that disagree, a profile's own class, and an in-tree NFS PV on another server."""
    classes = [ClassEntry("efs-sc", "efs.csi.aws.com", is_default=True, mount_options=IMPORT,
                          parameters={"fileSystemId": EFS_ID}),
               ClassEntry("uploads-v1", "efs.csi.aws.com", profile="uploads", version=1, mount_options=CACHED,
                          parameters={"fileSystemId": EFS_ID}),
               ClassEntry("gp3", "ebs.csi.aws.com")]
    volumes = [volume("pv-import", "efs-sc", IMPORT), volume("pv-old", "efs-sc", ("sync", "timeo=600")),
               volume("pv-uploads", "uploads-v1", CACHED), volume("pv-nas", "", ("vers=3", "nolock"),
                                                                  nfs_server="10.0.0.5")]
    pods = [pod("import-0", "n1", "pv-import"), pod("import-1", "n2", "pv-import"), pod("old-0", "n1", "pv-old"),
            pod("uploads-0", "n2", "pv-uploads"), pod("nas-0", "n1", "pv-nas"), pod("nas-1", "n2", "pv-nas")]
    p = {x.name: x for x in pods}
    v3 = ("rw", "vers=3", "hard", "proto=tcp", "timeo=600", "retrans=2", "nolock", "local_lock=all")
    reports = [
        read_report("n1", scanTime="2026-03-01T11:59:00Z", volumes=[
            mount(p["import-0"], "pv-import", (*KERNEL_V41, *IMPORT_IN_EFFECT)),
            mount(p["old-0"], "pv-old", (*KERNEL_V41, "sync", "timeo=100")),
            mount(p["nas-0"], "pv-nas", v3, server="10.0.0.5", plugin="nfs")]),
        read_report("n2", scanTime="2026-03-01T11:59:00Z", volumes=[
            mount(p["import-1"], "pv-import", (*KERNEL_V41, *IMPORT_IN_EFFECT)),
            mount(p["uploads-0"], "pv-uploads", CACHED),
            mount(p["nas-1"], "pv-nas", v3, server="10.0.0.5", plugin="nfs"),
            {**mount(pod("inline-0", "n2"), "scratch", KERNEL_V41, server="10.0.0.5", plugin="nfs"),
             "podUid": "uid-inline-0"}]),
    ]
    pods.append(pod("inline-0", "n2"))
    contracts = {"uploads": Contract(normalize(CACHED).options)}
    return cluster(pods, volumes, reports, classes=classes, contracts=contracts,
                   adopters=[Adopter("importer", ("efs-sc",), provisioner="efs.csi.aws.com",
                                     listed=frozenset({"pv-import"}))])


def test_every_volume_is_filed_under_its_file_system_governed_or_not():
    result = inventory(day_one())
    assert [fs.name for fs in result.file_systems] == ["10.0.0.5", EFS_ID]
    nas, efs = result.file_systems
    assert efs.efs and not nas.efs and efs.servers == {EFS_HOST}
    assert sorted(efs.classes) == ["efs-sc", "uploads-v1"]  # gp3 (EBS) is not network storage
    by_name = {view.volume.name: view for view in efs.volumes}
    assert by_name["pv-uploads"].governed_by == "uploads"
    assert by_name["pv-import"].governed_by is None
    assert by_name["pv-import"].adoption == {"profile": "importer", "state": "Pending"}
    assert efs.classes["efs-sc"].adoption_pending_by == "importer"
    summary = efs.summary()
    assert (summary["volumes"], summary["governed"], summary["ungoverned"], summary["adoptionPending"]) == (3, 1, 2, 1)
    assert (summary["pods"], summary["nodes"]) == (4, 2)
    assert [inline.volume_name for inline in nas.inline] == ["scratch"]


def test_an_inventory_is_freed_as_soon_as_nothing_holds_it_without_a_collection():
    """The operator takes one every pass, with automatic collections off (handlers/collector.py): a reference cycle
    in it would keep each one until a full collection."""
    result = inventory(day_one())
    file_systems = [weakref.ref(fs) for fs in result.file_systems]
    assert any(fs().volumes for fs in file_systems)
    enabled = gc.isenabled()
    gc.disable()
    try:
        del result
        assert [fs() for fs in file_systems] == [None, None]
    finally:
        if enabled:
            gc.enable()


def test_governed_volumes_are_judged_by_their_profile_and_the_others_by_the_baseline():
    efs = inventory(day_one()).file_systems[1]
    uploads = next(v for v in efs.volumes if v.volume.name == "pv-uploads")
    assert [(p.contract, str(p.state)) for p in uploads.pods] == [("uploads", "compliant")]
    imported = next(v for v in efs.volumes if v.volume.name == "pv-import")
    assert {(p.pod, p.contract, str(p.state), p.reason) for p in imported.pods} == {
        ("shop/import-0", "baseline", "drifted", "RoundTripOptions"),
        ("shop/import-1", "baseline", "drifted", "RoundTripOptions")}
    reasons = {(f.reason, f.profile) for f in efs.findings}
    assert ("RoundTripOptions", "mountwarden-baseline") in reasons and ("MissingNoresvport", "mountwarden-baseline") \
        in reasons
    assert not any(f.profile == "uploads" for f in efs.findings)  # compliant: nothing to say
    nas = inventory(day_one()).file_systems[0]
    assert {f.reason for f in nas.findings} == {"LocalLocksAcrossNodes"}  # v3 nolock, read-write on n1 and n2


def test_where_class_pv_and_node_disagree_is_said_naming_them():
    efs = inventory(day_one()).file_systems[1]
    said = "\n".join(efs.disagreements)
    assert "StorageClass efs-sc carry 2 different sets of options" in said
    assert ("PersistentVolume pv-old carries options its StorageClass efs-sc does not have (any more): the PV has "
            "timeo=600,sync, the class acregmin=0,acregmax=0,acdirmin=0,acdirmax=0,lookupcache=none,sync") in said
    assert ("node n1 mounts PersistentVolume pv-old (pod UID uid-old-0) with options it does not ask for: the kernel "
            "has timeo=100 where the PV asks timeo=600") in said


def test_without_the_baseline_nothing_is_found_on_ungoverned_volumes_but_they_are_listed():
    result = inventory(day_one(), baseline=False)
    assert not result.baseline_findings
    efs = result.file_systems[1]
    assert {p.reason for v in efs.volumes if v.governed_by is None for p in v.pods} == {"BaselineOff"}


def test_without_reports_classes_and_volumes_are_listed_and_the_note_says_why_nothing_is_in_effect():
    facts = day_one()
    result = inventory(ClusterFacts(facts.classes, facts.volumes, facts.pods_of_claim, facts.pod_of_uid, {},
                                    facts.contracts, facts.adopters))
    assert result.notes and "no NodeMountReport" in result.notes[0]
    efs = result.file_systems[1]
    assert {p.reason for v in efs.volumes for p in v.pods} == {"ReportMissing"}


def test_the_network_file_system_object_is_the_inventory_of_one_file_system_within_etcds_limit():
    efs = inventory(day_one()).to_dict()["items"][1]
    body = network_file_system(efs, "2026-03-01T12:00:00Z")
    assert body["kind"] == "NetworkFileSystem" and body["metadata"]["name"] == EFS_ID
    spec = body["spec"]
    assert spec["fileSystem"] == EFS_ID and spec["kind"] == "efs" and spec["summary"]["volumes"] == 3
    assert "omitted" not in spec
    huge = {**efs, "volumes": efs["volumes"] * 2000}
    trimmed = network_file_system(huge, "2026-03-01T12:00:00Z")["spec"]
    assert len(str(trimmed)) < SPEC_BUDGET * 1.2 and "mountwarden inventory --json" in trimmed["omitted"]


def _trimmed_by_encoding_the_whole_spec(spec: dict) -> tuple[int, int]:
    """The oracle: the budget's rule, measured with one json.dumps of the whole spec each time (how it was done)."""
    if len(json.dumps(spec)) <= SPEC_BUDGET:
        return len(spec["volumes"]), len(spec["findings"])
    volumes = [{**v, "pods": [{**pod, "effectiveOptions": None} for pod in v["pods"]]} for v in spec["volumes"]]
    kept_volumes, kept_findings = len(volumes), len(spec["findings"])
    while len(json.dumps({**spec, "volumes": volumes[:kept_volumes], "findings": spec["findings"][:kept_findings]})) \
            > SPEC_BUDGET and (kept_volumes or kept_findings):
        kept_volumes, kept_findings = kept_volumes * 3 // 4, kept_findings * 3 // 4
    return kept_volumes, kept_findings


@pytest.mark.parametrize("copies", [1, 300, 1500, 2000, 5000])
def test_the_budget_keeps_what_encoding_the_whole_spec_would_and_never_encodes_it_whole(copies, monkeypatch):
    efs = inventory(day_one()).to_dict()["items"][1]
    finding = {"reason": "Drift", "message": "x" * 300, "policy": "uploads"}
    spec = {"fileSystem": EFS_ID, **{k: v for k, v in efs.items() if k not in ("name", "objectName")},
            "volumes": efs["volumes"] * copies, "findings": [finding] * (copies * 2), "checkedAt": "2026-03-01T12:00:00Z"}
    expected = _trimmed_by_encoding_the_whole_spec(spec)
    encoded: list[int] = []
    real_dumps = networkfilesystem.json.dumps
    monkeypatch.setattr(networkfilesystem.json, "dumps", lambda value: encoded.append(len(real := real_dumps(value)))
                        or real)
    trimmed = networkfilesystem._within_budget(spec, lambda: spec["volumes"])
    monkeypatch.undo()
    assert (len(trimmed["volumes"]), len(trimmed["findings"])) == expected
    assert len(json.dumps(trimmed)) <= SPEC_BUDGET + 300 or expected == (0, 0)  # + the "omitted" sentence
    # The C encoder holds the GIL while it runs: no call may take the whole spec (MBs at 20,000 pods).
    biggest_item = max(len(real_dumps(item)) for item in [*spec["volumes"][:1], finding])
    assert max(encoded) <= max(biggest_item, len(json.dumps({**spec, "volumes": [], "findings": []})))
    # Each list is sized only until it alone passes the budget: what a pass encodes stays a few budgets' worth
    # however big the file system (at 5,000 copies, 18 MB of spec, every volume encoded twice was 29 MB).
    assert sum(encoded) <= 3 * SPEC_BUDGET


class _Tracked(dict):
    """A volume's dict that can be counted while it lives (a plain dict takes no weak reference)."""


@pytest.mark.parametrize("copies", [1, 2000])
def test_a_file_systems_volumes_are_made_as_sized_and_only_those_kept_made_again(copies):
    """The operator's pass (handlers/inventory.py) hands the volumes as a maker: the object is the same as from the
    whole dict, and no more than the kept volumes and the one being sized are ever alive at once (at 20,000 pods
    every volume as a dict was 13 MiB of the pass)."""
    efs = inventory(day_one()).file_systems[1]
    efs.volumes = efs.volumes * copies
    whole = network_file_system(efs.to_dict(), "2026-03-01T12:00:00Z")
    alive = most_alive = calls = 0

    def dropped() -> None:
        nonlocal alive
        alive -= 1

    def made():
        nonlocal calls, alive, most_alive
        calls += 1
        for volume in efs.volume_dicts():
            tracked = _Tracked(volume)
            weakref.finalize(tracked, dropped)
            alive += 1
            most_alive = max(most_alive, alive)
            yield tracked
            del tracked

    streamed = network_file_system(efs.head_dict(), "2026-03-01T12:00:00Z", made)
    assert streamed == whole
    kept = len(whole["spec"]["volumes"])
    # Trimmed, the kept volumes are copies without their pods' options: of the made ones, a few at a time at most.
    assert calls == 2 and most_alive <= (kept + 2 if kept == len(efs.volumes) else 3)
    assert ("omitted" in whole["spec"]) == (copies > 1)


def test_file_systems_are_named_as_kubernetes_allows():
    assert object_name(EFS_ID) == EFS_ID and object_name("10.0.0.5") == "10.0.0.5"
    v6 = object_name("fd00::5")
    assert v6.startswith("fd00-5-") and v6 != object_name("fd00:5")
    assert object_name("NAS.Example.com").islower()


def test_an_efs_mount_targets_name_and_a_csi_handle_both_say_the_file_system():
    in_tree = volume("a", "", IMPORT, nfs_server=f"us-east-1a.{EFS_HOST}")
    assert in_tree.file_system == EFS_ID and in_tree.efs
    assert volume("b", "efs-sc", IMPORT).file_system == EFS_ID


def test_options_are_the_same_whatever_their_order_spelling_or_defaults_said():
    assert same_options(["nfsvers=4.1", "hard", "timeo=600"], ["vers=4.1"])
    assert not same_options(["hard"], ["soft"]) and not same_options([], ["sync"])


def test_the_command_shows_one_file_system_a_screen(capsys, monkeypatch):
    from mountwarden.cli import inventory as command

    monkeypatch.setattr(command.console, "width", 160)

    result = inventory(day_one())
    for fs in result.file_systems:
        command.show(fs)
    shown = capsys.readouterr().out
    assert "fs-0123456789abcdef0 (efs)" in shown and "adopting: importer" in shown
    assert "RoundTripOptions" in shown and "Disagreements" in shown


class RecordingWriter:
    """Stands in for the NetworkFileSystem objects' API: what the loop wrote and deleted, by name."""

    def __init__(self) -> None:
        self.written: list[str] = []
        self.deleted: list[str] = []

    def write(self, body: dict) -> None:
        self.written.append(body["metadata"]["name"])

    def delete(self, name: str) -> None:
        self.deleted.append(name)


def test_the_loop_rewrites_a_file_systems_object_only_when_its_spec_changed_or_its_heartbeat_is_due():
    """The loop keeps a digest of each spec it wrote, not the spec (up to 1 MB of JSON: 0.81 MB is 3.6 MiB of objects)."""
    from mountwarden.handlers import inventory as loop

    state, writer = loop.InventoryLoop(loop=None), RecordingWriter()
    names = [fs.object_name for fs in inventory(day_one()).file_systems]
    loop._write(inventory(day_one()), state, writer, NOW)
    assert writer.written == names and all(isinstance(digest, bytes) for digest, _ in state.written.values())

    loop._write(inventory(day_one()), state, writer, NOW + timedelta(minutes=1))  # only checkedAt differs
    assert writer.written == names

    changed = inventory(day_one())
    nas = changed.file_systems[-1]
    nas.volumes[0].pods.pop()
    loop._write(changed, state, writer, NOW + timedelta(minutes=2))
    assert writer.written == [*names, nas.object_name]

    written_at = state.written[names[0]][1]
    state.written[names[0]] = (state.written[names[0]][0], written_at - loop.HEARTBEAT_SECONDS)
    loop._write(changed, state, writer, NOW + timedelta(minutes=3))
    assert writer.written == [*names, nas.object_name, names[0]]

    changed.file_systems.pop()
    loop._write(changed, state, writer, NOW + timedelta(minutes=4))
    assert writer.deleted == [nas.object_name] and nas.object_name not in state.written


def test_a_spec_digest_ignores_checked_at_and_the_order_of_keys_and_sees_any_other_change():
    from mountwarden.handlers.inventory import _digest

    spec = {"fileSystem": "nas", "summary": {"volumes": 2, "pods": 3}, "volumes": [{"name": "a", "pods": [1]},
                                                                                   {"name": "b", "pods": []}],
            "findings": [], "checkedAt": "2026-03-01T12:00:00Z"}
    same = {"checkedAt": "2026-03-01T12:05:00Z", "findings": [], "fileSystem": "nas",
            "volumes": [{"pods": [1], "name": "a"}, {"name": "b", "pods": []}], "summary": {"pods": 3, "volumes": 2}}
    assert _digest(spec) == _digest(same)
    for changed in ({**spec, "volumes": spec["volumes"][::-1]}, {**spec, "volumes": spec["volumes"][:1]},
                    {**spec, "summary": {"volumes": 2, "pods": 4}}, {**spec, "findings": [{"name": "a"}]},
                    {**spec, "omitted": "1 volume"}, {**spec, "findings": {}}):
        assert _digest(changed) != _digest(spec), changed
