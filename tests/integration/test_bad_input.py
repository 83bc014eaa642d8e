"""Malformed StorageProfiles and NodeMountReports are refused, by the CRD schema or the webhook, naming the field.

Each document goes through kubectl to the real API server, as a user would send
it; the refusal must name the field (and nothing must be created).
"""

import copy

import pytest
import yaml
from tests.support import GROUP, VERSION, profile_body, wait_for

pytestmark = pytest.mark.cluster


def profile(**spec_changes):
    body = profile_body("bad-input", "cached")
    for path, value in spec_changes.items():
        node = body["spec"]
        *parents, leaf = path.split("__")
        for parent in parents:
            node = node.setdefault(parent, {})
        if value is DROP:
            node.pop(leaf, None)
        else:
            node[leaf] = value
    return body


DROP = object()

VALID_REPORT = {
    "apiVersion": f"{GROUP}/{VERSION}",
    "kind": "NodeMountReport",
    "metadata": {"name": "bad-input-node"},
    "spec": {
        "nodeName": "bad-input-node", "scanTime": "2026-11-30T12:00:00Z", "agentVersion": "test",
        "networkFstypes": ["nfs4"],
        "volumes": [{"podUid": "uid-1", "volumeName": "pv-a", "plugin": "csi", "mountPoint": "/m", "fstype": "nfs4",
                     "source": "fs:/", "superblock": "0:101", "effectiveOptions": ["vers=4.1"],
                     "optionsSource": "mountstats", "operations": {"READ": {"ops": 1}}}],
        "sqlite": [{"severity": "warning", "mode": "rollback", "device": "0:101", "inode": 7,
                    "message": "m", "remedy": "r"}],
    },
}


def report(path: str, value):
    body = copy.deepcopy(VALID_REPORT)
    node = body["spec"]
    *parents, leaf = path.split(".")
    for parent in parents:
        node = node[int(parent)] if parent.isdigit() else node[parent]
    if value is DROP:
        node.pop(leaf)
    else:
        node[leaf] = value
    return body


CASES = [
    # -- StorageProfile, refused by the CRD's structural schema --------------------------------------------
    ("no spec", {**profile(), "spec": DROP}, "spec"),
    ("no backend", profile(backend=DROP), "spec.backend"),
    ("empty provisioner", profile(backend__provisioner=""), "spec.backend.provisioner"),
    ("unknown cache policy", profile(cachePolicy="lazy"), "spec.cachePolicy"),
    ("unknown enforcement", profile(enforcement="block"), "spec.enforcement"),
    ("unknown sqlite policy", profile(sqlite="maybe"), "spec.sqlite"),
    ("unknown rollout strategy", profile(rollout__strategy="Yolo"), "spec.rollout.strategy"),
    ("unknown approval", profile(rollout__approval="Sometimes"), "spec.rollout.approval"),
    ("no concurrent workloads", profile(rollout__maxConcurrentWorkloads=0), "spec.rollout.maxConcurrentWorkloads"),
    ("verify timeout too short", profile(rollout__verifyTimeoutSeconds=5), "spec.rollout.verifyTimeoutSeconds"),
    ("file system id shape", profile(creditWatch__fileSystemId="efs-123"), "spec.creditWatch.fileSystemId"),
    ("credit interval too short", profile(creditWatch__intervalSeconds=10), "spec.creditWatch.intervalSeconds"),
    ("empty credit window", profile(creditWatch__windowHours=0), "spec.creditWatch.windowHours"),
    ("unknown reclaim policy", profile(backend__reclaimPolicy="Recycle"), "spec.backend.reclaimPolicy"),
    ("unknown binding mode", profile(backend__volumeBindingMode="Later"), "spec.backend.volumeBindingMode"),
    ("non-string parameter", profile(backend__parameters={"fileSystemId": 7}), "spec.backend.parameters.fileSystemId"),
    ("options as a string", profile(mountOptions="hard"), "spec.mountOptions"),
    ("option as a number", profile(mountOptions=[1]), "spec.mountOptions[0]"),
    ("selector operator", profile(consumers__pvcSelector={"matchExpressions": [{"key": "a", "operator": "Maybe"}]}),
     "spec.consumers.pvcSelector.matchExpressions[0].operator"),
    ("default as text", profile(default="yes"), "spec.default"),
    # -- StorageProfile, refused by the webhook (the options core) -----------------------------------------
    ("misspelt option", profile(mountOptions=["nconect=4"]), "spec.mountOptions[0]"),
    ("bad lookupcache", profile(mountOptions=["lookupcache=sometimes"]), "spec.mountOptions[0]"),
    ("hard and soft", profile(mountOptions=["hard", "soft"]), "spec.mountOptions"),
    ("nconnect out of range", profile(mountOptions=["nconnect=99"]), "spec.mountOptions[0]"),
    ("two versions", profile(mountOptions=["vers=3", "v4.1"]), "spec.mountOptions"),
    ("iam without tls", profile(mountOptions=["iam"]), "spec.mountOptions"),
    ("noac against actimeo", profile(mountOptions=["noac,actimeo=30"]), "spec.mountOptions[0]"),
    ("required option the preset breaks", profile(cachePolicy="read-only", requiredOptions=["cto"]),
     "spec.requiredOptions[0]"),
    ("forbidden option the preset sets", profile(cachePolicy="strict", forbiddenOptions=["actimeo=0"]),
     "spec.forbiddenOptions[0]"),
    ("misspelt forbidden option", profile(forbiddenOptions=["nolok"]), "spec.forbiddenOptions[0]"),
    # -- NodeMountReport, refused by the CRD's structural schema -------------------------------------------
    ("report without node name", report("nodeName", DROP), "spec.nodeName"),
    ("volume without superblock", report("volumes.0.superblock", DROP), "spec.volumes[0].superblock"),
    ("unknown volume plugin", report("volumes.0.plugin", "iscsi"), "spec.volumes[0].plugin"),
    ("no mounts to a server", report("volumes.0.serverMounts", 0), "spec.volumes[0].serverMounts"),
    ("scan time not a time", report("scanTime", "yesterday"), "spec.scanTime"),
    ("unknown journal mode", report("sqlite.0.mode", "journal"), "spec.sqlite[0].mode"),
    ("negative skipped lines", report("skippedLines", -1), "spec.skippedLines"),
    ("negative op count", report("volumes.0.operations.READ.ops", -5), "spec.volumes[0].operations.READ.ops"),
]


def strip_drops(node):
    if isinstance(node, dict):
        return {key: strip_drops(value) for key, value in node.items() if value is not DROP}
    if isinstance(node, list):
        return [strip_drops(item) for item in node]
    return node


@pytest.fixture(scope="module")
def webhook_answering(cluster, operator) -> None:
    """Half the cases are the webhook's: wait until the operator has registered it and it refuses (a loaded
    machine can take longer to start the operator than the schema cases take to run)."""
    probe = yaml.safe_dump(strip_drops(profile(mountOptions=["nconect=4"])))
    wait_for(lambda: cluster.kubectl("create", "--dry-run=server", "-f", "-", input=probe, check=False).returncode,
             timeout=120, what="the operator's webhook refusing a misspelt option")


@pytest.mark.parametrize(("document", "field"), [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_refused_naming_the_field(cluster, kube, operator, webhook_answering, document, field):
    applied = cluster.kubectl("create", "-f", "-", input=yaml.safe_dump(strip_drops(document)), check=False)
    assert applied.returncode != 0, f"accepted: {applied.stdout}"
    assert field in applied.stderr, applied.stderr
    kind = document["kind"]
    if kind == "StorageProfile":
        assert kube.profile(document["metadata"]["name"]) is None


def test_the_valid_documents_are_accepted(cluster, kube, operator):
    """The cases differ from accepted documents only in the field they break."""
    for body in (profile(), VALID_REPORT):
        created = cluster.kubectl("create", "--dry-run=server", "-f", "-", input=yaml.safe_dump(body), check=False)
        assert created.returncode == 0, created.stderr


def test_at_least_thirty_cases():
    assert len(CASES) >= 30
