"""`kubectl mountwarden` end to end: the real kubectl binary (the testbin's) finds the installed `kubectl-mountwarden`
on PATH and runs it against the local control plane, where the operator judged what `mountwarden agent --once`
reported from a proc root of real mountstats samples.

One drifted pod, one compliant pod sharing its superblock with another profile's pod, and a pod on a node with no
report: `why` explains each, `who` lists a claim's pod with the options its node has in effect.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from tests.integration.test_compliance import pod_events, pod_with, report_once, volume_for
from tests.procroot import Mount, assemble_proc_root
from tests.support import profile_body, wait_for

from mountwarden.devcluster.cluster import kwok_node

pytestmark = pytest.mark.cluster

#: Where pip put the console scripts of the installed package (the venv's bin: `make venv` installs it editable).
SCRIPTS = Path(sys.executable).parent


def kubectl_mountwarden(cluster, *args: str, check: bool = True, kubeconfig: Path | None = None
                        ) -> subprocess.CompletedProcess[str]:
    """`kubectl mountwarden ARGS` through the real kubectl, the plugin found on PATH as kubectl finds plugins."""
    assert (SCRIPTS / "kubectl-mountwarden").exists(), "the console script is not installed: run `make venv`"
    env = {**os.environ, "PATH": f"{SCRIPTS}{os.pathsep}{cluster.kubectl_path.parent}{os.pathsep}{os.environ['PATH']}",
           "KUBECONFIG": str(kubeconfig or cluster.kubeconfig), "COLUMNS": "200"}
    result = subprocess.run([str(cluster.kubectl_path), "mountwarden", *args], capture_output=True, text=True,
                            timeout=120, env=env)
    if check:
        assert result.returncode == 0, f"kubectl mountwarden {' '.join(args)}: {result.returncode}\n{result.stderr}"
    return result


def test_why_and_who_explain_a_drifted_and_a_compliant_pod(cluster, kube, operator, namespace, unique, tmp_path,
                                                          request):
    node = cluster.node_names[1]
    strict, exact = f"why-strict-{unique}", f"why-exact-{unique}"
    # strict: staging (acregmin=acregmax=0, lookupcache=positive) and retrans=5; the sample's /D mount has the
    # kernel's defaults, so it drifts. exact declares what /D really has.
    kube.apply_profile(profile_body(strict, "staging", provisioner="nfs.csi.k8s.io", mountOptions=["retrans=5"]))
    exact_body = profile_body(exact, "staging", provisioner="nfs.csi.k8s.io", mountOptions=["vers=4.2", "hard"])
    exact_body["spec"].pop("cachePolicy")
    kube.apply_profile(exact_body)
    wait_for(lambda: kube.classes_of(strict) and kube.classes_of(exact), what="both classes")
    pvs = {"drifted": (f"pv-why-drift-{unique}", f"{strict}-v1"), "peer": (f"pv-why-peer-{unique}", f"{exact}-v1"),
           "sharer": (f"pv-why-sharer-{unique}", f"{strict}-v1")}
    for pv, storage_class in pvs.values():
        volume_for(kube, namespace, pv, storage_class)
    uids = {role: pod_with(kube, namespace, node, role, pvs[role][0]) for role in pvs}
    mounts = [Mount(pvs["drifted"][0], pod_uid=uids["drifted"], sample_mount="/D"),
              # The compliant pod mounted first; the strict profile's sharer landed on its superblock.
              Mount(pvs["peer"][0], pod_uid=uids["peer"], superblock="shared", sample_mount="/D"),
              Mount(pvs["sharer"][0], pod_uid=uids["sharer"], superblock="shared")]
    assembled = assemble_proc_root(tmp_path / "proc", mounts)
    report_once(cluster, node, assembled.path)
    request.addfinalizer(lambda: kube.custom.delete_cluster_custom_object("mountwarden.io", "v1alpha1",
                                                                          "nodemountreports", node))
    wait_for(lambda: "MountPolicyDrift" in {r for r, _ in pod_events(kube, namespace, "drifted")},
             what="the operator's MountPolicyDrift event on the drifted pod")

    # The drifted pod: its contract, the four option sets, the finding with its runbook remedy, the operator's Event.
    drifted = json.loads(kubectl_mountwarden(cluster, "why", "drifted", "-n", namespace, "-o", "json").stdout)
    assert drifted["kind"] == "PodExplanation" and drifted["pod"]["node"] == node
    assert drifted["node"]["report"]["name"] == node and drifted["node"]["problem"] is None
    [volume] = drifted["volumes"]
    assert volume["name"] == "data" and volume["persistentVolume"] == pvs["drifted"][0]
    assert volume["claim"] == f"{namespace}/{pvs['drifted'][0]}" and volume["storageClass"] == f"{strict}-v1"
    assert volume["contract"]["kind"] == "StorageProfile" and volume["contract"]["name"] == strict
    assert "retrans=5" in volume["options"]["contract"] and "retrans=5" in volume["options"]["storageClass"]
    assert volume["options"]["persistentVolume"] == []  # the PV asks for nothing of its own
    assert "retrans=5" not in volume["options"]["node"] and "vers=4.2" in volume["options"]["node"]
    assert volume["state"] == "drifted" and volume["mount"]["sharedWith"] == []
    reasons = {f["reason"] for f in volume["findings"]}
    assert "OptionMismatch" in reasons, reasons
    mismatch = next(f for f in volume["findings"] if f["reason"] == "OptionMismatch")
    assert mismatch["remedy"] and mismatch["policy"] == strict
    assert "MountPolicyDrift" in {e["reason"] for e in drifted["events"]}

    # The same, as a person reads it, through the real kubectl.
    text = kubectl_mountwarden(cluster, "why", "drifted", "-n", namespace).stdout
    assert f"pod {namespace}/drifted on node {node}" in text and "drifted" in text
    assert f"StorageProfile {strict}" in text and "OptionMismatch" in text and "remedy:" in text, text
    assert "MountPolicyDrift" in text, text

    # The compliant pod, whose superblock the strict profile's sharer also uses: compliant, no finding, the sharer
    # named.
    peer = yaml.safe_load(kubectl_mountwarden(cluster, "why", "peer", "-n", namespace, "-o", "yaml").stdout)
    [volume] = peer["volumes"]
    assert volume["state"] == "compliant" and volume["reason"] == "Compliant" and volume["findings"] == []
    assert volume["contract"]["name"] == exact
    assert [s["pod"] for s in volume["mount"]["sharedWith"]] == [f"{namespace}/sharer"]
    assert peer["events"] == []
    text = kubectl_mountwarden(cluster, "why", "peer", "-n", namespace, "-o", "wide").stdout
    assert "compliant" in text and f"shared with {namespace}/sharer" in text, text
    sharer = json.loads(kubectl_mountwarden(cluster, "why", "sharer", "-n", namespace, "-o", "json").stdout)
    assert "SuperblockShared" in {f["reason"] for f in sharer["volumes"][0]["findings"]}

    # who: a claim's pod, its node and the options in effect there; a PV by name gives the same.
    who = json.loads(kubectl_mountwarden(cluster, "who", pvs["drifted"][0], "-n", namespace, "-o", "json").stdout)
    [pod] = who["pods"]
    assert (pod["pod"], pod["node"], pod["state"]) == (f"{namespace}/drifted", node, "drifted")
    assert pod["effectiveOptions"] == volume_options(drifted)
    assert who["contract"]["name"] == strict and who["nodes"] == [node]
    text = kubectl_mountwarden(cluster, "who", pvs["peer"][0], "-n", namespace, "-o", "wide").stdout
    assert f"{namespace}/peer" in text and node in text and "vers=4.2" in text, text


def volume_options(document: dict) -> list[str]:
    return document["volumes"][0]["options"]["node"]


def test_why_says_what_is_missing_and_what_to_do(cluster, kube, operator, namespace, unique, request, tmp_path):
    """No such pod, a pod whose node has no report yet, a claim that is no volume: each said, with what to do."""
    missing = kubectl_mountwarden(cluster, "why", "no-such-pod", "-n", namespace, check=False)
    assert missing.returncode == 1 and f"pod no-such-pod not found in namespace {namespace}" in missing.stderr

    node = f"noreport-{unique}"
    cluster.kubectl("apply", "-f", "-", input=json.dumps(kwok_node(node, 951)))
    request.addfinalizer(lambda: cluster.kubectl("delete", "node", node, "--wait=false", check=False))
    wait_for(lambda: kube.core.read_node(node).status.conditions, timeout=60, what="the node Ready")
    pv = f"pv-noreport-{unique}"
    volume_for(kube, namespace, pv, "")
    pod_with(kube, namespace, node, "waiting", pv)
    # The context's namespace is the default for -n, as kubectl's (in a copy of the session's kubeconfig).
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(cluster.kubeconfig.read_text())
    subprocess.run([str(cluster.kubectl_path), f"--kubeconfig={kubeconfig}", "config", "set-context", "--current",
                    f"--namespace={namespace}"], check=True, capture_output=True)
    document = json.loads(kubectl_mountwarden(cluster, "why", "waiting", "-o", "json", kubeconfig=kubeconfig).stdout)
    assert document["node"]["report"] is None
    assert f"no NodeMountReport for node {node} yet" in document["node"]["problem"]
    [volume] = document["volumes"]
    assert (volume["state"], volume["reason"]) == ("unknown", "ReportMissing")
    assert volume["contract"]["kind"] == "baseline"
    text = kubectl_mountwarden(cluster, "why", "waiting", kubeconfig=kubeconfig).stdout
    assert f"no NodeMountReport for node {node} yet" in text and "kubectl get pods -A" in text, text

    # --context names the context, as kubectl's: its namespace is the default; an unknown one is said.
    context = cluster.kubectl("config", "current-context").stdout.strip()
    chosen = json.loads(kubectl_mountwarden(cluster, "why", "waiting", "--context", context, "-o", "json",
                                            kubeconfig=kubeconfig).stdout)
    assert chosen["pod"]["uid"] == document["pod"]["uid"]
    wrong = kubectl_mountwarden(cluster, "why", "waiting", "--context", "no-such-context", check=False,
                                kubeconfig=kubeconfig)
    assert wrong.returncode == 2 and "cannot read the kubeconfig" in wrong.stderr and "no-such-context" in wrong.stderr

    unknown = kubectl_mountwarden(cluster, "who", "no-such-claim", check=False, kubeconfig=kubeconfig)
    assert unknown.returncode == 1 and "neither a PersistentVolumeClaim no-such-claim" in unknown.stderr

    # The offline commands are there too.
    explained = kubectl_mountwarden(cluster, "options", "explain", "actimeo=0")
    assert "actimeo" in explained.stdout
