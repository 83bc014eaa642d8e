"""The indexes of pods, PVs and claims the operator keeps outside kopf: what each object files, and unfiles."""

import json
from datetime import UTC, datetime

import msgspec
import pytest

from mountwarden.adapters.pods import (
    POD_INDEXES,
    PodPlacements,
    placements_of_list,
    pod_entries,
    pod_page_entries,
    rollout_pods_of_page,
)
from mountwarden.adapters.watches import ReducedWatch, reduce_json_page
from mountwarden.adapters.workloads import slim_volumes_of_page
from mountwarden.core.adoption import CandidateVolume
from mountwarden.core.networkstorage import NetworkVolume
from mountwarden.core.rollout import Pod, Volume, WorkloadRef
from mountwarden.handlers.indexes import CLAIM_INDEXES, VOLUME_INDEXES, claim_entries, volume_entries


def pv(name, storage_class="scratch-v1", claim=("data", "db")):
    spec = {"storageClassName": storage_class}
    if claim:
        spec["claimRef"] = {"namespace": claim[0], "name": claim[1]}
    return {"metadata": {"name": name, "uid": f"uid-{name}"}, "spec": spec}


def pod(name, node="node-1", claims=("db",), nfs=False):
    volumes = [{"name": c, "persistentVolumeClaim": {"claimName": c}} for c in claims]
    if nfs:
        volumes.append({"name": "inline", "nfs": {"server": "nas", "path": "/"}})
    return {"metadata": {"name": name, "namespace": "data", "uid": f"uid-{name}"},
            "spec": {"nodeName": node, "volumes": volumes}}


def test_a_pv_files_itself_under_its_class_and_its_claim_and_unfiles_on_change_and_delete():
    volumes = ReducedWatch("persistentvolumes", None, volume_entries, VOLUME_INDEXES)
    volumes.load({"uid-a": volume_entries(pv("a")), "uid-b": volume_entries(pv("b", claim=None))})
    by_class, claims = volumes.indexes["volumes_by_class"], volumes.indexes["claims_by_volume"]
    assert sorted(by_class.get("scratch-v1")) == ["a", "b"]
    assert claims.get("a") == ({"claim": ("data", "db"), "storageClass": "scratch-v1", "mountOptions": ()},)
    assert "b" not in claims  # unbound

    volumes.apply("uid-a", volume_entries(pv("a", storage_class="scratch-v2")))
    assert by_class.get("scratch-v1") == ("b",) and by_class.get("scratch-v2") == ("a",)
    volumes.apply("uid-b", {})
    assert "scratch-v1" not in by_class and dict(by_class) == {"scratch-v2": ("a",)}


def test_only_unbound_claims_keep_their_class_alive():
    claims = ReducedWatch("persistentvolumeclaims", None, claim_entries, CLAIM_INDEXES)
    pending = {"metadata": {"name": "new", "namespace": "data", "uid": "u1"}, "spec": {"storageClassName": "x-v1"},
               "status": {"phase": "Pending"}}
    bound = {**pending, "metadata": {"name": "old", "namespace": "data", "uid": "u2"}, "status": {"phase": "Bound"}}
    claims.load({"u1": claim_entries(pending), "u2": claim_entries(bound)})
    assert dict(claims.indexes["unbound_claims_by_class"]) == {"x-v1": ("data/new",)}


def test_listeners_hear_what_changed_and_only_that():
    volumes = ReducedWatch("persistentvolumes", None, volume_entries, VOLUME_INDEXES)
    heard = []
    volumes.listeners.append(lambda uid, before, after: heard.append((uid, set(before), set(after))))
    volumes.load({"uid-a": volume_entries(pv("a"))})
    volumes.apply("uid-a", volume_entries(pv("a")))  # the same entries: nothing to tell
    volumes.apply("uid-a", {})
    filed = {"volumes_by_class", "claims_by_volume"}  # not on network storage, adopted by nobody
    assert heard == [("uid-a", set(), filed), ("uid-a", filed, set())]


def test_a_key_filed_by_several_answers_each_in_the_order_they_came_and_keeps_the_rest_when_one_goes():
    volumes = ReducedWatch("persistentvolumes", None, volume_entries, VOLUME_INDEXES)
    volumes.load({"uid-a": volume_entries(pv("a")), "uid-b": volume_entries(pv("b"))})
    by_class = volumes.indexes["volumes_by_class"]
    assert by_class.get("scratch-v1") == ("a", "b")
    volumes.apply("uid-c", volume_entries(pv("c")))
    volumes.apply("uid-a", {})
    assert by_class.get("scratch-v1") == ("b", "c") and by_class["scratch-v1"] == ("b", "c")
    volumes.apply("uid-b", {})
    assert by_class.get("scratch-v1") == ("c",)
    volumes.apply("uid-b", volume_entries(pv("b")))  # back after the key was down to one filer
    assert by_class.get("scratch-v1") == ("c", "b")
    volumes.apply("uid-c", volume_entries(pv("c", storage_class="scratch-v2")))
    assert dict(by_class) == {"scratch-v1": ("b",), "scratch-v2": ("c",)}
    assert volumes.entries_of("uid-c") == volume_entries(pv("c", storage_class="scratch-v2"))
    assert volumes.entries_of("uid-a") == {} and len(volumes) == 2


def test_a_relist_tells_listeners_only_what_changed_while_the_watch_was_away():
    volumes = ReducedWatch("persistentvolumes", None, volume_entries, VOLUME_INDEXES)
    volumes.load({"uid-a": volume_entries(pv("a")), "uid-b": volume_entries(pv("b")),
                  "uid-c": volume_entries(pv("c"))})
    heard = []
    volumes.listeners.append(lambda uid, before, after: heard.append((uid, before, after)))
    moved = volume_entries(pv("b", storage_class="scratch-v2"))
    volumes.load({"uid-a": volume_entries(pv("a")), "uid-b": moved, "uid-d": volume_entries(pv("d"))})
    assert sorted(heard, key=lambda told: told[0]) == [
        ("uid-b", volume_entries(pv("b")), moved),
        ("uid-c", volume_entries(pv("c")), {}),
        ("uid-d", {}, volume_entries(pv("d"))),
    ]
    assert volumes.indexes["volumes_by_class"].get("scratch-v1") == ("a", "d")


def test_a_pv_on_network_storage_files_what_it_is_and_an_adopted_one_its_adopter():
    nfs = {**pv("a"), "spec": {**pv("a")["spec"], "nfs": {"server": "fs-0123456789abcdef0.efs.eu-west-1.amazonaws.com",
                                                           "path": "/"}, "mountOptions": ["sync"]}}
    nfs["metadata"]["annotations"] = {"mountwarden.io/adopted-by": "importer"}
    ebs = {**pv("b"), "spec": {**pv("b")["spec"], "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-1"}}}
    other = {**pv("c"), "spec": {**pv("c")["spec"], "csi": {"driver": "files.example.com", "volumeHandle": "x"}}}
    volumes = ReducedWatch("persistentvolumes", None, volume_entries, VOLUME_INDEXES)
    volumes.load({"a": volume_entries(nfs), "b": volume_entries(ebs),
                  "c": volume_entries(other, network_drivers=("files.example.com",))})
    (found,) = volumes.indexes["network_volumes"].get("a")
    assert (found.source, found.file_system_id, found.adopted_by) == ("nfs", "fs-0123456789abcdef0", "importer")
    assert "b" not in volumes.indexes["network_volumes"]  # EBS is not network storage
    assert volumes.indexes["network_volumes"].get("c")[0].source == "files.example.com"  # named by the operator
    assert volumes.indexes["volumes_by_adopter"].get("importer") == ("a",)
    assert volumes.indexes["claims_by_volume"].get("a")[0]["adoptedBy"] == "importer"


def test_pods_are_kept_by_uid_and_claim_with_their_node_and_only_if_they_can_mount_a_report_volume():
    pods = PodPlacements(ReducedWatch("pods", None, pod_entries, POD_INDEXES))
    pods.watch.load({"uid-web": pod_entries(pod("web", claims=())),
                     "uid-db": pod_entries(pod("db")),
                     "uid-nas": pod_entries(pod("nas", node="node-2", claims=(), nfs=True))})
    assert pods.get("uid-web") is None  # mounts neither a claim nor NFS: no report can name it
    assert pods.node_of("uid-db") == "node-1" and pods.node_of("uid-nas") == "node-2"
    assert pods.name_of("uid-db") == "data/db" and pods.name_of("uid-web") is None
    assert [p.name for p in pods.of_claim("data", "db")] == ["db"]
    pods.watch.apply("uid-db", pod_entries(pod("db", node="node-3")))
    assert pods.node_of("uid-db") == "node-3"
    pods.watch.apply("uid-db", {})
    assert pods.of_claim("data", "db") == [] and pods.node_of("uid-db") is None


#: Pods of every shape a placement reads, in their wire form with what the API server adds around it.
WIRE_PODS = [
    pod("claims", claims=("db", "cache", "db")),
    pod("inline-nfs", claims=(), nfs=True),
    pod("nothing", claims=()),
    {**pod("unscheduled"), "spec": {"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "d"}}]}},
    {"metadata": {"name": "inline-csi", "namespace": "data", "uid": "uid-csi", "labels": None, "ownerReferences": None},
     "spec": {"nodeName": "node-1", "volumes": [{"name": "x", "csi": {"driver": "efs.csi.aws.com"}}]}},
    {"metadata": {"name": "web-5d8f7c9b6-abcde", "namespace": "shop", "uid": "uid-web",
                  "labels": {"app": "web", "pod-template-hash": "5d8f7c9b6"},
                  "deletionTimestamp": "2026-12-04T10:00:30Z",
                  "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "u"},
                                      {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-5d8f7c9b6",
                                       "uid": "u2", "controller": True, "blockOwnerDeletion": True}],
                  "managedFields": [{"manager": "kube-controller-manager", "fieldsV1": {"f:spec": {}}}]},
     "spec": {"nodeName": "node-2", "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "uploads",
                                                                                         "readOnly": True}},
                                                 {"name": "token", "projected": {"sources": []}}],
              "containers": [{"name": "app", "image": "app:1"}]},
     "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}},
    {"metadata": {"name": "db-0", "namespace": "shop", "uid": "uid-db-0",
                  "ownerReferences": [{"kind": "StatefulSet", "name": "db", "controller": True}]},
     "spec": {"nodeName": "node-3", "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data-db-0"}}]}},
    {"metadata": {"name": "bare", "namespace": "shop", "uid": "uid-bare",
                  "ownerReferences": [{"kind": "ReplicaSet", "name": "orphaned", "controller": False}]},
     "spec": {"volumes": None}},
]


@pytest.mark.parametrize("token", ["next-page", None])
def test_a_pod_lists_page_files_exactly_what_each_of_its_pods_files_alone(token):
    """The page reducer decodes only what a placement reads: it must file what the reducer of watch events does."""
    page = {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "4242", "continue": token},
            "items": WIRE_PODS}
    data = json.dumps(page).encode()
    expected = {obj["metadata"]["uid"]: pod_entries(obj) for obj in WIRE_PODS}
    assert pod_page_entries(data) == (expected, token, "4242") == reduce_json_page(data, pod_entries)
    assert placements_of_list(data) == [entries["pods_by_uid"][uid] for uid, entries in expected.items() if entries]
    kept = {uid: entries["pods_by_uid"][uid] for uid, entries in expected.items() if entries}
    assert set(kept) == {"uid-claims", "uid-inline-nfs", "uid-unscheduled", "uid-csi", "uid-web", "uid-db-0"}
    assert kept["uid-claims"].claims == ("cache", "db") and kept["uid-unscheduled"].node is None
    web = kept["uid-web"]
    assert (web.workload, web.controlled, web.deleting_at, web.claims) == (
        "Deployment/web", True, "2026-12-04T10:00:30Z", ("uploads",))
    assert (kept["uid-db-0"].workload, kept["uid-db-0"].controlled) == ("StatefulSet/db", True)


ROLLOUT_PODS = [
    *WIRE_PODS,
    {"metadata": {"name": "starting", "namespace": "shop", "uid": "uid-starting", "labels": {"app": "web"},
                  "deletionTimestamp": ""},
     "spec": {"nodeName": "node-1", "volumes": [{"name": "a", "persistentVolumeClaim": {"claimName": "x"}},
                                                {"name": "b", "persistentVolumeClaim": {"claimName": "x"}},
                                                {"name": "scratch", "emptyDir": {}}]},
     "status": {"phase": "Running", "startTime": "2026-12-04T10:00:00Z", "podIP": "10.0.0.7",
                "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "False"},
                               {"type": "ContainersReady", "status": "True"}],
                "containerStatuses": [{"name": "app", "ready": False, "restartCount": 0}]}},
    {"metadata": {"name": "no-phase", "uid": "uid-no-phase"}, "status": {"phase": None, "conditions": None}},
    {"metadata": {"name": "done", "namespace": "shop", "uid": "uid-done"}, "spec": None,
     "status": {"phase": "Succeeded", "conditions": [{"type": "Ready", "status": "True", "reason": "PodCompleted"}]}},
]


def test_a_rollouts_pod_list_reads_each_field_its_pods_keep_from_the_wire_form():
    """The rollout decodes only the fields its Pod keeps, from every shape a pod list may hold them in."""
    data = json.dumps({"kind": "PodList", "metadata": {"resourceVersion": "7"}, "items": ROLLOUT_PODS}).encode()
    web_rs = WorkloadRef("ReplicaSet", "shop", "web-5d8f7c9b6")
    started = datetime(2026, 12, 4, 10, tzinfo=UTC)
    # namespace, name, uid, node, phase, ready, terminating, started_at, claims (claim -> volume), owner, labels
    assert rollout_pods_of_page(data) == ([
        Pod("data", "claims", "uid-claims", "node-1", "Pending", False, False, None, {"db": "db", "cache": "cache"}),
        Pod("data", "inline-nfs", "uid-inline-nfs", "node-1", "Pending", False, False, None, {}),
        Pod("data", "nothing", "uid-nothing", "node-1", "Pending", False, False, None, {}),
        Pod("data", "unscheduled", "uid-unscheduled", None, "Pending", False, False, None, {"d": "d"}),
        Pod("data", "inline-csi", "uid-csi", "node-1", "Pending", False, False, None, {}),
        # Only the controller among its owners; a deletionTimestamp makes it terminating, whatever its phase.
        Pod("shop", "web-5d8f7c9b6-abcde", "uid-web", "node-2", "Running", True, True, None, {"uploads": "d"},
            web_rs, {"app": "web", "pod-template-hash": "5d8f7c9b6"}),
        Pod("shop", "db-0", "uid-db-0", "node-3", "Pending", False, False, None, {"data-db-0": "d"},
            WorkloadRef("StatefulSet", "shop", "db")),
        Pod("shop", "bare", "uid-bare", None, "Pending", False, False, None, {}),
        # An empty deletionTimestamp is none; Ready is the Ready condition only; two volumes of one claim: the last.
        Pod("shop", "starting", "uid-starting", "node-1", "Running", False, False, started, {"x": "b"}, None,
            {"app": "web"}),
        Pod("", "no-phase", "uid-no-phase", None, None, False, False, None, {}),
        Pod("shop", "done", "uid-done", None, "Succeeded", True, False, None, {}),
    ], None)
    live = [pod.name for pod in rollout_pods_of_page(data)[0] if pod.live]
    assert "web-5d8f7c9b6-abcde" not in live and "done" not in live and "starting" in live


def test_a_rollouts_pod_page_gives_the_token_of_the_next_page_and_none_at_the_last():
    middle = json.dumps({"kind": "PodList", "metadata": {"resourceVersion": "7", "continue": "abc"},
                         "items": ROLLOUT_PODS[:2]}).encode()
    pods, token = rollout_pods_of_page(middle)
    assert [pod.name for pod in pods] == ["claims", "inline-nfs"] and token == "abc"
    assert rollout_pods_of_page(json.dumps({"metadata": {"resourceVersion": "7"}, "items": []}).encode()) == ([], None)
    assert rollout_pods_of_page(b'{"items": null}') == ([], None)


def test_a_pod_list_page_that_is_not_a_list_fails_by_name():
    with pytest.raises(msgspec.ValidationError, match="uid"):
        pod_page_entries(json.dumps({"metadata": {}, "items": [{"metadata": {"name": "no-uid"}}]}).encode())


ROLLOUT_PVS = [
    {"metadata": {"name": "nfs-bound", "uid": "u1", "resourceVersion": "11", "labels": {"team": "shop"},
                  "annotations": {"mountwarden.io/applied-version": "p-v2",
                                  "mountwarden.io/previous-mount-options": '["hard","actimeo=3"]',
                                  "mountwarden.io/adopted-by": "p",
                                  "kubectl.kubernetes.io/last-applied-configuration": '{"kind":"PersistentVolume"}'},
                  "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]},
     "spec": {"storageClassName": "p-v1", "mountOptions": ["hard", "nfsvers=4.1"], "capacity": {"storage": "1Gi"},
              "claimRef": {"kind": "PersistentVolumeClaim", "namespace": "shop", "name": "a", "uid": "c1"},
              "nfs": {"server": "fs-0123456789abcdef0.efs.eu-west-1.amazonaws.com", "path": "/"}},
     "status": {"phase": "Bound", "lastPhaseTransitionTime": "2026-12-04T10:00:00Z"}},
    {"metadata": {"name": "efs-csi", "annotations": {"pv.kubernetes.io/provisioned-by": "efs.csi.aws.com"}},
     "spec": {"storageClassName": "efs", "csi": {"driver": "efs.csi.aws.com", "volumeHandle": "fs-0abc1234::fsap-1",
                                                 "fsType": "nfs"},
              "claimRef": {"namespace": "data", "name": "b"}},
     "status": {"phase": "Released"}},
    {"metadata": {"name": "nfs-csi", "labels": None, "annotations": None},
     "spec": {"storageClassName": None, "mountOptions": None, "claimRef": None,
              "csi": {"driver": "nfs.csi.k8s.io", "volumeHandle": "nas#share#",
                      "volumeAttributes": {"server": "nas", "share": "/exports/a"}}}},
    {"metadata": {"name": "block"}, "spec": {"storageClassName": "gp3", "csi": {"driver": "ebs.csi.aws.com",
                                                                                "volumeHandle": "vol-1"}}},
    {"metadata": {"name": "bare"}},
]


@pytest.mark.parametrize("drivers", [(), ("nfs.csi.k8s.io",)])
def test_a_rollouts_pv_list_keeps_every_field_its_readers_read(drivers):
    """The rollout keeps each PV slim: Volume, CandidateVolume and NetworkVolume must read from it what they read
    from the whole object."""
    slim, token = slim_volumes_of_page(json.dumps({"kind": "PersistentVolumeList", "metadata": {"continue": "next"},
                                                   "items": ROLLOUT_PVS}).encode())
    assert token == "next"
    assert slim_volumes_of_page(b'{"kind": "PersistentVolumeList", "metadata": {}, "items": []}') == ([], None)
    assert [Volume.from_object(pv) for pv in slim] == [Volume.from_object(pv) for pv in ROLLOUT_PVS]
    assert [CandidateVolume.from_object(pv, drivers) for pv in slim] == [
        CandidateVolume.from_object(pv, drivers) for pv in ROLLOUT_PVS]
    assert [NetworkVolume.from_object(pv, drivers) for pv in slim] == [
        NetworkVolume.from_object(pv, drivers) for pv in ROLLOUT_PVS]
    assert "managedFields" not in slim[0]["metadata"]
    assert list(slim[0]["metadata"]["annotations"]) == [
        "mountwarden.io/applied-version", "mountwarden.io/previous-mount-options", "mountwarden.io/adopted-by"]
    assert Volume.from_object(slim[0]).claim == ("shop", "a")
    assert NetworkVolume.from_object(slim[1], drivers).file_system_id == "fs-0abc1234"
