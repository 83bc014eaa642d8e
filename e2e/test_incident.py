"""The incident of design.md, end to end: the operator and one agent per node, against the local control plane.

One EFS file system (moto) serves an importer that keeps a SQLite database on a
`cached` scratch volume and an upload service that assembles chunks on a
`staging` staging directory. kubectl shows the admission warnings; the agents,
reading each node's /proc (written by a kernel simulator from real mountstats
blocks), report what is mounted and the SQLite locks; the operator turns that
into compliance, Events and a credit forecast for the draining file system; a
policy change of the upload service rolls out, verified on the nodes.
"""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from tests.integration.moto_server import aligned_now, seed
from tests.procsim import ProcRootSimulator
from tests.support import profile_body, wait_for

TIMEOUT = 180


def profile(name, file_system_id, cache_policy, team, app, **spec):
    return profile_body(
        name, cache_policy, parameters={"provisioningMode": "efs-ap", "fileSystemId": file_system_id},
        consumers={"namespaceSelector": {"matchLabels": {"team": team}}, "pvcSelector": {"matchLabels": {"app": app}}},
        creditWatch={"fileSystemId": file_system_id, "windowHours": 3}, **spec,
    )


def claim(namespace, name, storage_class, labels):
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": storage_class,
                     "resources": {"requests": {"storage": "5Gi"}}}}


def volume(name, claim_ref, storage_class, options, file_system_id):
    """What the EFS CSI provisioner would make for the claim: the class's options, bound to the claim."""
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
            "spec": {"capacity": {"storage": "5Gi"}, "accessModes": ["ReadWriteMany"],
                     "storageClassName": storage_class, "mountOptions": options,
                     "persistentVolumeReclaimPolicy": "Retain", "claimRef": claim_ref,
                     "nfs": {"server": f"{file_system_id}.efs.us-east-1.amazonaws.com", "path": f"/{name}"}}}


def deployment(namespace, name, claim_name, replicas):
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": name, "image": "registry.invalid/app:1"}],
                                           "volumes": [{"name": "data",
                                                        "persistentVolumeClaim": {"claimName": claim_name}}]}}}}


def apply(cluster, *documents, check=True):
    return cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(documents), check=check)


def status(kube, name):
    return (kube.profile(name) or {}).get("status") or {}


@pytest.fixture
def agents(cluster, tmp_path, unique):
    """A kernel simulator writing each node's /proc, and one real agent process per node reading it."""
    simulator = ProcRootSimulator(cluster.api_client(), list(cluster.node_names), tmp_path / "nodes",
                                  sqlite_volumes={f"importer-scratch-pv-{unique}"})
    processes = []
    simulator.start()
    try:
        for node in cluster.node_names:
            simulator.proc_root(node).mkdir(parents=True, exist_ok=True)
            log = (tmp_path / f"agent-{node}.log").open("w")
            processes.append(subprocess.Popen(
                [sys.executable, "-m", "mountwarden", "agent", "--node-name", node,
                 "--proc-root", str(simulator.proc_root(node)), "--interval", "1", "--heartbeat", "60",
                 "--metrics-port", "0", "--kubeconfig", str(cluster.kubeconfig)],
                stdout=log, stderr=subprocess.STDOUT))
        yield simulator
    finally:
        for process in processes:
            process.terminate()
            process.wait(timeout=30)
        simulator.stop()
        assert not simulator.errors, simulator.errors


def test_the_incident_end_to_end(cluster, kube, operator, moto_server, agents, unique):
    file_system = seed(moto_server, aligned_now())["draining"]
    importer, uploads = f"importer-scratch-{unique}", f"upload-staging-{unique}"
    data, web = f"data-{unique}", f"web-{unique}"
    for namespace, team in ((data, "data"), (web, "web")):
        kube.core.create_namespace({"metadata": {"name": namespace, "labels": {"team": team}}})
    apply(cluster,
          profile(importer, file_system, "cached", "data", "importer", sqlite="warn"),
          profile(uploads, file_system, "staging", "web", "uploads",
                  rollout={"strategy": "PatchBoundVolumes", "approval": "Automatic"}))
    for name in (importer, uploads):
        wait_for(lambda name=name: (kube.condition(name, "Ready") or {}).get("status") == "True", what=f"{name} Ready")
    importer_class, uploads_class = status(kube, importer)["storageClassName"], status(kube, uploads)["storageClassName"]

    # kubectl apply: the warnings a platform engineer sees before anything breaks. The webhook answers from the
    # operator's indexes, which take the profiles' classes from the watch event of the status just read: a dry run
    # first, until it warns.
    sqlite_db = claim(data, "importer-db", importer_class, {"app": "importer", "mountwarden.io/contents": "sqlite"})
    wrong = claim(web, "uploads-wrong", importer_class, {"app": "uploads"})
    for document, said in ((sqlite_db, "holds SQLite"), (wrong, f"use storageClassName {uploads_class}")):
        wait_for(lambda document=document, said=said: said in cluster.kubectl(
            "apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump(document)).stderr,
            what=f"the webhook's indexes holding both profiles' classes ({said})")
    sqlite_claim = apply(cluster, sqlite_db)
    assert (f"Warning: PVC {data}/importer-db holds SQLite but StorageClass {importer_class} is NFS: WAL is "
            "impossible and every lock is a network round trip; use a local volume") in sqlite_claim.stderr
    wrong_class = apply(cluster, wrong)
    assert (f"Warning: PVC {web}/uploads-wrong is a consumer of StorageProfile {uploads} but asks for"
            in wrong_class.stderr and f"use storageClassName {uploads_class}" in wrong_class.stderr)
    apply(cluster, claim(web, "uploads-staging", uploads_class, {"app": "uploads"}))

    # What the provisioner and the kubelet would do: volumes with the classes' options, pods mounting them.
    importer_options = status(kube, importer)["effectiveMountOptions"]
    staging_options = status(kube, uploads)["effectiveMountOptions"]
    apply(cluster,
          volume(f"importer-scratch-pv-{unique}", {"namespace": data, "name": "importer-db"}, importer_class,
                 importer_options, file_system),
          volume(f"uploads-pv-{unique}", {"namespace": web, "name": "uploads-staging"}, uploads_class,
                 staging_options, file_system),
          deployment(data, "importer", "importer-db", 1),
          deployment(web, "uploads", "uploads-staging", 2))

    # The agents report; the operator compares: compliant, with the importer's SQLite database found.
    importer_compliance = wait_for(lambda: (c := status(kube, importer).get("compliance"))
                                   and c["volumes"]["compliant"] == 1 and c, timeout=TIMEOUT,
                                   what="the importer's volume verified on its node")
    assert importer_compliance["sqliteDatabases"] == 1
    wait_for(lambda: (c := status(kube, uploads).get("compliance")) and c["volumes"]["compliant"] == 2,
             timeout=TIMEOUT, what="both upload replicas verified")
    importer_pod = kube.core.list_namespaced_pod(data, label_selector="app=importer").items[0].metadata.name
    sqlite_events = wait_for(lambda: [e for e in kube.core.list_namespaced_event(
        data, field_selector=f"involvedObject.name={importer_pod}").items if e.reason == "SQLiteOnNFS"],
        timeout=TIMEOUT, what="the SQLiteOnNFS event on the importer")
    assert f"importer-scratch-pv-{unique}" in sqlite_events[0].message

    # The credit forecast: the shared file system is draining.
    credits = wait_for(lambda: (c := status(kube, uploads).get("credits")) and c.get("state") == "Draining" and c,
                       timeout=TIMEOUT, what="the credit forecast")
    assert credits["fileSystemId"] == file_system and credits["throughputMode"] == "bursting"
    assert credits["message"].startswith("balance 1.2 TiB falling 96 MiB/s: empty in")
    assert kube.condition(uploads, "CreditsDraining")["status"] == "True"

    # A policy change: the upload service wants listings fresh too (strict). The webhook warns what
    # that costs on a Bursting file system; the rollout restarts the Deployment and verifies it.
    tighter = profile(uploads, file_system, "strict", "web", "uploads",
                      rollout={"strategy": "PatchBoundVolumes", "approval": "Automatic"})
    changed = apply(cluster, tighter)
    assert (f"Warning: StorageProfile {uploads}: this change makes a new StorageClass {uploads}-v2; 1 bound "
            "PersistentVolume keeps its old mount options until remounted") in changed.stderr
    rollout = wait_for(lambda: (r := status(kube, uploads).get("rollout")) and r.get("phase") == "Complete"
                       and r.get("targetVersion") == 2 and r, timeout=TIMEOUT, what="the rollout to complete")
    (workload,) = rollout["workloads"]
    assert (workload["kind"], workload["name"], workload["state"]) == ("Deployment", "uploads", "Done")
    strict = status(kube, uploads)["effectiveMountOptions"]
    assert "lookupcache=none" in strict
    pv = kube.core.read_persistent_volume(f"uploads-pv-{unique}")
    assert pv.spec.mount_options == strict
    wait_for(lambda: (c := status(kube, uploads).get("compliance")) and c["volumes"]["compliant"] == 2,
             timeout=TIMEOUT, what="both new replicas verified with the strict options")
    # A new claim on the strict class: the webhook says what strict costs on a Bursting file system.
    costly = apply(cluster, claim(web, "uploads-more", f"{uploads}-v2", {"app": "uploads"}))
    assert (f"Warning: StorageProfile {uploads}: on Bursting EFS {file_system} its effective options actimeo=0, "
            "lookupcache=none make every stat() and open() a round trip per path component") in costly.stderr
    assert "use cachePolicy staging for data several clients change" in costly.stderr
    assert Path(agents.proc_root(cluster.node_names[0])).exists()
