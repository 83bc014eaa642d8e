"""Day one on a cluster whose NFS volumes predate the operator, on the local control plane.

Classes, PVs, claims and running workloads are made first, and the node reports the agent would write
(tests/nodesim.py) are in before the operator starts, as a real user installs it: the inventory lists
every volume within seconds of the start, the baseline finds the hazards on volumes no profile governs
(Events, metrics, PolicyReports), and a profile adopts the existing class: observed first, then, once
approved, its PVs patched and its workloads restarted and verified, the claims untouched.

The world (namespace day1-<u>):
- efs-sc-<u> (efs.csi.aws.com, the cluster's default) with pv-import (sync,actimeo=0,lookupcache=none: the
  import's flags), used by Deployment importer, and pv-reports (vers=4.1,sync), used by Deployment reports
  (2 replicas); in-tree NFS PVs on the EFS file system's DNS name, as people mount EFS without its driver;
- nfs-client-<u> (the NFS subdir provisioner) with pv-nas (vers=3,nolock) on nas-<u>.example.com, used by
  Deployments nas-a and nas-b on two nodes: locks kept on each node, writers on both;
- pv-ebs-<u>, an EBS CSI volume labelled like the others the adopting profile selects by label.
"""

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import kubernetes
import pytest
from tests.integration.test_compliance import pod_events
from tests.integration.test_policy_reports import (
    policy_report_crds,  # noqa: F401  (a fixture here too)
    report,
    reporting_operator,
)
from tests.nodesim import NodeSimulator
from tests.support import GROUP, VERSION, Kube, OperatorProcess, profile_body, scrape, wait_for

pytestmark = pytest.mark.cluster

IMPORT_FLAGS = ["sync", "actimeo=0", "lookupcache=none"]
BASELINE = "mountwarden-baseline"
TIMEOUT = 120


@dataclass
class DayOne:
    """The world made before the operator, and the operator started after it."""

    kube: Kube
    namespace: str
    unique: str
    efs_id: str
    nas: str
    operator: OperatorProcess
    started: float
    #: `mountwarden inventory --json` as it printed before the operator started.
    before_operator: dict | None = None

    @property
    def efs_server(self) -> str:
        return f"{self.efs_id}.efs.us-east-1.amazonaws.com"

    @property
    def efs_class(self) -> str:
        return f"efs-sc-{self.unique}"

    @property
    def nfs_class(self) -> str:
        return f"nfs-client-{self.unique}"

    def pv(self, role: str) -> str:
        return f"pv-{role}-{self.unique}"

    def netfs(self, name: str) -> dict | None:
        try:
            return self.kube.custom.get_cluster_custom_object(GROUP, VERSION, "networkfilesystems", name)
        except kubernetes.client.ApiException as error:
            if error.status == 404:
                return None
            raise

    def pods(self, app: str) -> list:
        return [p for p in self.kube.core.list_namespaced_pod(self.namespace, label_selector=f"app={app}").items
                if p.metadata.deletion_timestamp is None]

    def events(self, app: str) -> set[tuple[str, str]]:
        return {event for pod in self.pods(app) for event in pod_events(self.kube, self.namespace, pod.metadata.name)}


def storage_class(kube: Kube, name: str, provisioner: str, options: list[str], *, default: bool = False,
                  parameters: dict | None = None) -> None:
    annotations = {"storageclass.kubernetes.io/is-default-class": "true"} if default else {}
    kube.storage.create_storage_class({"metadata": {"name": name, "annotations": annotations},
                                       "provisioner": provisioner, "parameters": parameters or {},
                                       "mountOptions": options, "reclaimPolicy": "Retain"})


def bound_volume(kube: Kube, namespace: str, name: str, storage_class: str, options: list[str], source: dict,
                 labels: dict | None = None) -> None:
    """A PV and the claim bound to it, as a provisioner would have left them (the claim named after the PV)."""
    kube.core.create_persistent_volume({
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"], "storageClassName": storage_class,
                 "persistentVolumeReclaimPolicy": "Retain", "mountOptions": options, **source,
                 "claimRef": {"namespace": namespace, "name": name}},
    })
    kube.core.create_namespaced_persistent_volume_claim(namespace, {
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": storage_class, "volumeName": name,
                 "resources": {"requests": {"storage": "1Gi"}}},
    })


def deployment(kube: Kube, namespace: str, name: str, claim: str, replicas: int = 1, node: str | None = None) -> None:
    spec: dict = {"containers": [{"name": "app", "image": "busybox",
                                  "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
                  "terminationGracePeriodSeconds": 0,
                  "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]}
    if node is not None:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    kube.apps.create_namespaced_deployment(namespace, {
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}}, "spec": spec}},
    })


@pytest.fixture(scope="module")
def day_one(cluster, crds_installed, request, _moto_server_process, tmp_path_factory) -> Iterator[DayOne]:
    request.getfixturevalue("policy_report_crds")
    kube = Kube(cluster.api_client())
    unique = uuid.uuid4().hex[:8]
    namespace = f"day1-{unique}"
    nodes = list(cluster.node_names)
    kube.core.create_namespace({"metadata": {"name": namespace}})
    wait_for(lambda: kube.core.list_namespaced_service_account(namespace).items, what="the default service account")
    world = DayOne(kube, namespace, unique, f"fs-{unique}{unique}", f"nas-{unique}.example.com", None, 0.0)
    simulator = NodeSimulator(cluster.api_client(), nodes)
    simulator.start()
    try:
        storage_class(kube, world.efs_class, "efs.csi.aws.com", IMPORT_FLAGS, default=True,
                      parameters={"provisioningMode": "efs-ap", "fileSystemId": world.efs_id})
        storage_class(kube, world.nfs_class, "k8s-sigs.io/nfs-subdir-external-provisioner", ["vers=3", "nolock"])
        efs = {"nfs": {"server": world.efs_server, "path": "/"}}
        bound_volume(kube, namespace, world.pv("import"), world.efs_class, IMPORT_FLAGS,
                     {"nfs": {"server": world.efs_server, "path": "/import"}}, labels={"team": f"data-{unique}"})
        bound_volume(kube, namespace, world.pv("reports"), world.efs_class, ["vers=4.1", "sync"], efs)
        bound_volume(kube, namespace, world.pv("nas"), world.nfs_class, ["vers=3", "nolock"],
                     {"nfs": {"server": world.nas, "path": "/shared"}})
        bound_volume(kube, namespace, world.pv("ebs"), "", [], {"csi": {"driver": "ebs.csi.aws.com",
                                                                        "volumeHandle": "vol-0123"}},
                     labels={"team": f"data-{unique}"})
        deployment(kube, namespace, "importer", world.pv("import"))
        deployment(kube, namespace, "reports", world.pv("reports"), replicas=2)
        deployment(kube, namespace, "nas-a", world.pv("nas"), node=nodes[0])
        deployment(kube, namespace, "nas-b", world.pv("nas"), node=nodes[1])
        for app, replicas in (("importer", 1), ("reports", 2), ("nas-a", 1), ("nas-b", 1)):
            wait_for(lambda a=app, r=replicas: len([p for p in world.pods(a) if p.status.phase == "Running"]) == r,
                     timeout=TIMEOUT, what=f"{app} running")
        wait_for(lambda: all(simulator.nodes[node].written for node in nodes[:2]), what="the node reports")
        listed = inventory_cli(cluster, "--json")
        assert listed.returncode == 1, listed.stderr  # findings: the baseline's, with no operator running
        world.before_operator = json.loads(listed.stdout)
        # Only now is the operator installed.
        world.started = time.monotonic()
        world.operator = reporting_operator(cluster, _moto_server_process.endpoint_url,
                                            tmp_path_factory.mktemp("operator"))
        yield world
    finally:
        if world.operator is not None:
            world.operator.stop()
        simulator.stop()
        for profile in (f"import-{unique}", f"late-{unique}"):
            kube.delete_profile(profile)
        kube.core.delete_namespace(namespace)
        for role in ("import", "reports", "nas", "ebs"):
            try:
                kube.core.delete_persistent_volume(world.pv(role))
            except kubernetes.client.ApiException as error:
                if error.status != 404:
                    raise
        for name in (world.efs_class, world.nfs_class):
            try:
                kube.storage.delete_storage_class(name)
            except kubernetes.client.ApiException as error:
                if error.status != 404:
                    raise
    assert not simulator.errors, simulator.errors


def inventory_cli(cluster, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mountwarden", "inventory", "--kubeconfig", str(cluster.kubeconfig),
                           *args], capture_output=True, text=True, timeout=120, env={"COLUMNS": "160", "PATH": ""})


def volumes_of(item: dict) -> dict[str, dict]:
    return {volume["name"]: volume for volume in item["volumes"]}


def test_the_inventory_lists_every_volume_within_seconds_of_the_start(day_one, cluster):
    world = day_one
    efs = wait_for(lambda: (o := world.netfs(world.efs_id)) and len(o["spec"]["volumes"]) == 2
                   and all(v["pods"] for v in o["spec"]["volumes"]) and o, timeout=TIMEOUT,
                   what="the EFS file system's NetworkFileSystem")
    print(f"\nNetworkFileSystem {world.efs_id} listed every volume {time.monotonic() - world.started:.1f} s after "
          "the operator started")
    spec = efs["spec"]
    assert spec["kind"] == "efs" and spec["servers"] == [world.efs_server]
    assert {c["name"] for c in spec["classes"]} == {world.efs_class}
    volumes = volumes_of(spec)
    imported = volumes[world.pv("import")]
    assert imported.get("governedBy") is None and imported["claim"] == f"{world.namespace}/{world.pv('import')}"
    assert imported["options"] == {"storageClass": IMPORT_FLAGS, "persistentVolume": IMPORT_FLAGS}
    (pod,) = imported["pods"]
    assert pod["contract"] == "baseline" and pod["state"] == "drifted"
    assert {"sync", "lookupcache=none"} <= set(pod["effectiveOptions"])
    assert {"RoundTripOptions", "MissingNoresvport"} <= set(pod["findings"])
    assert len(volumes[world.pv("reports")]["pods"]) == 2 and len(volumes[world.pv("reports")]["nodes"]) >= 1
    assert any(f"StorageClass {world.efs_class} carry 2 different sets of options" in line
               for line in spec["disagreements"])
    nas = wait_for(lambda: world.netfs(world.nas), timeout=TIMEOUT, what="the NFS server's NetworkFileSystem")
    assert nas["spec"]["kind"] == "nfs" and nas["spec"]["summary"]["ungoverned"] == 1
    assert world.netfs(world.pv("ebs")) is None  # EBS is not network storage
    printed = cluster.kubectl("get", "netfs", world.efs_id, world.nas).stdout
    print(printed)
    assert world.efs_id in printed and "UNGOVERNED" in printed.splitlines()[0]

    # The command read the same from the objects themselves before the operator ran.
    mine = {item["name"]: item for item in world.before_operator["items"] if item["name"] in (world.efs_id, world.nas)}
    assert set(volumes_of(mine[world.efs_id])) == {world.pv("import"), world.pv("reports")}
    assert {c["name"] for c in mine[world.nas]["classes"]} == {world.nfs_class}
    (listed,) = volumes_of(mine[world.efs_id])[world.pv("import")]["pods"]
    assert listed["state"] == "drifted" and listed["findings"] == pod["findings"]
    shown = inventory_cli(cluster)
    print(shown.stdout)
    assert f"{world.efs_id} (efs)" in shown.stdout and world.pv("import") in shown.stdout


def test_the_baseline_finds_the_hazards_and_says_them_as_every_finding(day_one):
    world = day_one
    importer = wait_for(lambda: {r for r, _ in world.events("importer")} >= {"RoundTripOptions", "MissingNoresvport"}
                        and world.events("importer"), timeout=TIMEOUT, what="the importer's baseline Events")
    (message,) = [m for r, m in importer if r == "RoundTripOptions"]
    assert "no StorageProfile governs it: the baseline" in message and "8-hour import" in message
    assert "sync, actimeo=0, lookupcache=none" in message and "adopts its class (spec.adopt)" in message
    locks = wait_for(lambda: [m for r, m in world.events("nas-a") | world.events("nas-b")
                              if r == "LocalLocksAcrossNodes"], timeout=TIMEOUT, what="LocalLocksAcrossNodes Events")
    assert "nolock" in locks[0] and "read-write on 2 nodes" in locks[0]

    expected = {(BASELINE, "RoundTripOptions"), (BASELINE, "MissingNoresvport"), (BASELINE, "LocalLocksAcrossNodes")}

    def rules() -> set[tuple[str, str]]:
        body = report(world.kube, world.namespace) or {"results": []}
        return {(r["policy"], r["rule"]) for r in body["results"]}

    # Events, the PolicyReport and the metrics are written one after the other: wait for each.
    wait_for(lambda: expected <= rules(), timeout=TIMEOUT, what=f"the namespace's PolicyReport with {expected}")
    # One series per workload (its Deployment, not the ReplicaSet), in the pods' namespace: what the alerts name.
    series = {("mountwarden_findings", (("namespace", world.namespace), ("profile", BASELINE),
                                        ("reason", "LocalLocksAcrossNodes"), ("severity", "error"),
                                        ("source", "baseline"), ("workload", f"Deployment/{app}"))): 1
              for app in ("nas-a", "nas-b")}
    series[("mountwarden_network_volumes", (("file_system", world.efs_id), ("governance", "ungoverned")))] = 2

    def scraped() -> dict:
        samples = scrape(world.operator.metrics_port)
        return {key: samples.get(key) for key in series}

    wait_for(lambda: scraped() == series, timeout=TIMEOUT, what=f"the metrics {series}")


def test_a_profile_adopts_the_class_observing_first_then_patching_and_restarting_once_approved(day_one, cluster,
                                                                                                 tmp_path):
    world = day_one
    kube, profile, late = world.kube, f"import-{world.unique}", f"late-{world.unique}"
    claims_before = {c.metadata.name: (c.metadata.uid, c.spec.volume_name) for c in
                     kube.core.list_namespaced_persistent_volume_claim(world.namespace).items}
    pvs_before = {name: kube.core.read_persistent_volume(name).metadata.uid
                  for name in (world.pv("import"), world.pv("reports"))}
    body = profile_body(profile, "cached", parameters={"provisioningMode": "efs-ap", "fileSystemId": world.efs_id},
                        rollout={"strategy": "PatchBoundVolumes", "approval": "Manual"}, default=True,
                        adopt={"storageClassNames": [world.efs_class],
                               "volumeSelector": {"matchLabels": {"team": f"data-{world.unique}"}}})
    # The dry run says the same before anything is applied.
    path = tmp_path / "profile.yaml"
    path.write_text(json.dumps(body))
    dry = subprocess.run([sys.executable, "-m", "mountwarden", "plan", str(path), "--json", "--kubeconfig",
                          str(cluster.kubeconfig)], capture_output=True, text=True, timeout=120)
    assert dry.returncode == 0, dry.stderr
    planned = json.loads(dry.stdout)
    assert {v["name"]: v["action"] for v in planned["volumes"]} == {world.pv("import"): "adopt",
                                                                    world.pv("reports"): "adopt"}
    assert [w["name"] for w in planned["workloads"]] == ["importer", "reports"]
    assert [r["reason"] for r in planned["adoption"]["refused"]] == ["NotNetworkStorage"]
    kube.apply_profile(body)

    def adoption(name=profile) -> dict:
        return ((kube.profile(name) or {}).get("status") or {}).get("adoption") or {}

    observed = wait_for(lambda: (a := adoption()).get("phase") == "AwaitingApproval" and a, timeout=TIMEOUT,
                        what="the adoption observed, awaiting approval")
    print("\nstatus.adoption before approval:\n" + json.dumps(observed, indent=2))
    assert observed["approvalKey"] == planned["approvalKey"]
    assert observed["storageClassNames"] == [world.efs_class]
    volumes = {v["name"]: v for v in observed["volumes"]}
    assert set(volumes) == {world.pv("import"), world.pv("reports")}
    assert all(v["state"] == "Pending" and v["action"] == "adopt" for v in volumes.values())
    differing = {d["option"]: (d["contract"], d["volume"]) for d in volumes[world.pv("import")]["differences"]}
    assert differing["sync"] == ("async", "sync") and differing["lookupcache"] == ("lookupcache=all",
                                                                                   "lookupcache=none")
    assert observed["workloads"] == [f"Deployment/{world.namespace}/importer", f"Deployment/{world.namespace}/reports"]
    (refusal,) = observed["refused"]
    assert (refusal["field"], refusal["reason"]) == ("spec.adopt.volumeSelector", "NotNetworkStorage")
    assert world.pv("ebs") in refusal["message"]
    rollout = kube.profile(profile)["status"]["rollout"]
    assert rollout["phase"] == "AwaitingApproval" and observed["approvalKey"] in rollout["message"]
    assert {w["state"] for w in rollout["workloads"]} == {"Pending"}
    # Observing changes nothing: the PVs keep their options, nobody is restarted, the class is as it was.
    assert kube.core.read_persistent_volume(world.pv("import")).spec.mount_options == IMPORT_FLAGS
    assert all(len(world.pods(app)) == n for app, n in (("importer", 1), ("reports", 2)))
    assert "mountwarden.io/adopted-by" not in (kube.storage.read_storage_class(world.efs_class).metadata.annotations
                                               or {})

    # A profile created later that names the same class, and a class of another provisioner, is refused.
    late_body = profile_body(late, "cached", parameters={"fileSystemId": world.efs_id},
                             rollout={"strategy": "PatchBoundVolumes"},
                             adopt={"storageClassNames": [world.efs_class, world.nfs_class]})
    kube.apply_profile(late_body)
    refused = wait_for(lambda: (a := adoption(late)).get("phase") == "Refused" and a, timeout=TIMEOUT,
                       what="the late profile's adoption refused")
    assert {(r["field"], r["reason"]) for r in refused["refused"]} == {
        ("spec.adopt.storageClassNames[0]", "ClassAdopted"), ("spec.adopt.storageClassNames[1]", "ProvisionerDiffers")}
    assert profile in refused["refused"][0]["message"]
    # One tick queues both refusals; kopf's poster sends them one after the other.
    wait_for(lambda: len([e for e in kube.core.list_event_for_all_namespaces(
        field_selector=f"involvedObject.name={late}").items if e.reason == "AdoptionRefused"]) == 2,
        timeout=TIMEOUT, what="two AdoptionRefused Events on the late profile")
    kube.delete_profile(late)

    # Approval: the PVs are patched and annotated, the workloads restarted one at a time and verified.
    kube.custom.patch_cluster_custom_object(GROUP, VERSION, "storageprofiles", profile, {
        "metadata": {"annotations": {"mountwarden.io/approve-rollout": observed["approvalKey"]}}})
    adopted = wait_for(lambda: (a := adoption()).get("phase") == "Adopted" and a, timeout=TIMEOUT * 3, interval=1,
                       what="the adoption Adopted")
    print("status.adoption after approval:\n" + json.dumps(adopted, indent=2))
    status = kube.profile(profile)["status"]
    target = status["storageClassName"]
    assert status["rollout"]["phase"] == "Complete"
    assert all(w["state"] == "Done" and w["reason"] == "Verified" for w in status["rollout"]["workloads"])
    assert {v["state"] for v in adopted["volumes"]} == {"Adopted"}
    for name, uid in pvs_before.items():
        pv = kube.core.read_persistent_volume(name)
        assert pv.metadata.uid == uid  # patched, never recreated
        assert pv.spec.mount_options == status["effectiveMountOptions"]
        assert pv.metadata.annotations["mountwarden.io/adopted-by"] == profile
        assert pv.spec.storage_class_name == world.efs_class  # it keeps its class
    claims_after = {c.metadata.name: (c.metadata.uid, c.spec.volume_name) for c in
                    kube.core.list_namespaced_persistent_volume_claim(world.namespace).items}
    assert claims_after == claims_before  # the same claims, bound to the same volumes
    for app in ("importer", "reports"):
        rsets = [rs for rs in kube.apps.list_namespaced_replica_set(world.namespace).items
                 if rs.metadata.owner_references[0].name == app]
        assert len(rsets) == 2, f"{app} restarted once"
    # What becomes of the class: kept and annotated for new claims, the default moved to the profile's class.
    efs_class = kube.storage.read_storage_class(world.efs_class).metadata.annotations or {}
    assert efs_class["mountwarden.io/adopted-by"] == profile and efs_class["mountwarden.io/superseded-by"] == target
    assert "storageclass.kubernetes.io/is-default-class" not in efs_class
    assert kube.storage.read_storage_class(target).metadata.annotations[
        "storageclass.kubernetes.io/is-default-class"] == "true"

    # The profile governs them now: compliant, in its status and in the inventory; the baseline is done with them.
    compliance = wait_for(lambda: (c := kube.profile(profile)["status"].get("compliance")) and c["volumes"][
        "compliant"] == 3 and c, timeout=TIMEOUT, what="the adopted volumes compliant")
    assert compliance["volumes"]["drifted"] == 0
    inventory = wait_for(lambda: (o := world.netfs(world.efs_id)) and all(
        v.get("governedBy") == profile and {p["state"] for p in v["pods"]} == {"compliant"} for v in o["spec"]["volumes"])
        and o, timeout=TIMEOUT, what="the inventory showing them governed and compliant")
    assert inventory["spec"]["summary"]["ungoverned"] == 0
    assert not [f for f in inventory["spec"].get("findings", []) if f.get("policy") == BASELINE]
