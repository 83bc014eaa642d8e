"""The indexes of pods, PVs and claims the operator keeps outside kopf: what each object files, and unfiles."""

from mountwarden.adapters.pods import POD_INDEXES, PodPlacements, pod_entries
from mountwarden.adapters.watches import ReducedWatch
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
    assert [p.name for p in pods.of_claim("data", "db")] == ["db"]
    pods.watch.apply("uid-db", pod_entries(pod("db", node="node-3")))
    assert pods.node_of("uid-db") == "node-3"
    pods.watch.apply("uid-db", {})
    assert pods.of_claim("data", "db") == [] and pods.node_of("uid-db") is None
