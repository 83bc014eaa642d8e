"""Broken mounts on a real kubelet: a pod stuck Terminating, an orphaned mount, a stale handle evicted past a PDB.

On the real node (the lab VM joined to the local control plane, a real kubelet mounting in-tree NFS):

- A PersistentVolume is mounted through a local TCP forwarder (lab/guest/tunnel.py, on a port of its own),
  so that its server can be made to stop answering for this volume alone: the forwarder stopped (SIGSTOP),
  it holds its connections and forwards nothing. Two pods write to it; with the server gone their next
  stat() waits for the writeback of what they wrote, which SIGKILL does not end. One pod is deleted: it
  stays Terminating, and the operator says StuckTerminating on it, naming the stuck process. The other is
  force-deleted: the API forgets it, the kubelet cannot unmount its volume, and the operator says
  OrphanedMount on the Node, with the path. The forwarder resumed, the processes end, the kubelet
  unmounts, the first pod goes, and both findings go with them.
- A Deployment of two replicas mounts a profile's volume, the profile asking for stale-handle eviction,
  a PodDisruptionBudget refusing any disruption. The volume's directory is replaced on the server: both
  pods are on a stale handle (StaleFileHandle on each). The budget refuses the eviction (EvictionRefused,
  naming it) and nothing is evicted; relaxed, the pods are evicted one at a time, their replacements
  mount afresh, and the findings go.

Every finding is read where users read it: its Event, the operator's mountwarden_mount_failures gauge,
and the PolicyReports.
"""

import time
from collections.abc import Iterator

import kubernetes
import pytest
from tests.integration.test_policy_reports import cluster_results, policy_report_crds, report  # noqa: F401
from tests.realnode.conftest import CHART_START_SECONDS, active_operator
from tests.realnode.test_chart_on_node import helm_upgrade
from tests.realnode.test_real_node import TIMEOUT, make_volume, options_profile, pod_spec, reported
from tests.support import parse_metrics, profile_events, wait_for

from mountwarden.lab.node import NODE_NAME
from mountwarden.lab.vm import GUEST_DIR

FORWARDER_PORT = 20050
#: NFSv3 through the forwarder: a 4.1 client would be folded into the node's other 4.1 client of the same
#: server (session trunking: the kernel lab notes) and never go through it. proto=tcp: with a port but no
#: protocol, mount.nfs asks rpcbind for the NFS program at that port and fails. nolock: NLM would go around it.
THROUGH_FORWARDER = ["vers=3", "proto=tcp", f"port={FORWARDER_PORT}", "nolock", "hard", "timeo=20", "retrans=1"]
#: Appends 64 KiB to a file it keeps open and stat()s it, twice a second: with the server gone, the stat()
#: waits for the writeback of what was written, uninterruptibly (SIGKILL does not end it: kernel lab).
WRITER = ("exec 3> /data/$(hostname).bin; while true; do dd if=/dev/zero bs=65536 count=1 >&3 2>/dev/null; "
          "stat /data/$(hostname).bin > /dev/null; sleep 0.5; done")
STUCK_AFTER = 20
#: The chart's operator serves its metrics here (charts/mountwarden/templates/operator.yaml).
OPERATOR_METRICS_PORT = 9800
#: The real node joins within the first test's time (a boot under TCG), and pods take minutes each.
pytestmark = pytest.mark.timeout(2400)


class ChartOperator:
    """The chart's active operator replica on the real node, its metrics read on the node (its pod's own address)."""

    def __init__(self, kube, vm) -> None:
        self.kube, self.vm = kube, vm

    def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        pod = wait_for(lambda: active_operator(self.kube), timeout=TIMEOUT, what="an active operator replica")
        url = f"http://{pod.status.pod_ip}:{OPERATOR_METRICS_PORT}/metrics"
        page = self.vm.run(["python3", "-c", f"import urllib.request; print(urllib.request.urlopen({url!r}, "
                                              "timeout=30).read().decode())"])
        return parse_metrics(page.stdout)


@pytest.fixture(scope="module")
def failures_operator(cluster, chart, kube, policy_report_crds) -> ChartOperator:  # noqa: F811
    """The chart's operator judging failures every 3 s and a mount left behind after 20 s, with PolicyReports on:
    `helm upgrade --reuse-values`, as a user would set them."""
    helm_upgrade(cluster, "policyReports.enabled=true", f"operator.stuckAfterSeconds={STUCK_AFTER}",
                 "operator.failureIntervalSeconds=3")
    wait_for(lambda: (pod := active_operator(kube)) and f"--stuck-after={STUCK_AFTER}" in pod.spec.containers[0].args,
             timeout=CHART_START_SECONDS, interval=5, what="the upgraded operator replica active")
    return ChartOperator(kube, chart.vm)


def failure_count(operator: ChartOperator, reason: str) -> float:
    return sum(value for (name, labels), value in operator.metrics().items()
               if name == "mountwarden_mount_failures" and dict(labels).get("reason") == reason
               and dict(labels).get("node") == NODE_NAME)


def pod_events(kube, namespace: str, pod: str, reason: str) -> list[str]:
    return [event.message for event in kube.core.list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={pod},reason={reason}").items]


def node_events(kube, reason: str) -> list[str]:
    """The Node's Events as `kubectl describe node` finds them: no namespace, uid the node's name."""
    return [event.message for event in kube.core.list_namespaced_event(
        "default", field_selector=f"involvedObject.kind=Node,involvedObject.name={NODE_NAME},"
                                  f"involvedObject.uid={NODE_NAME},involvedObject.namespace=,reason={reason}").items]


def node_event_saying(kube, reason: str, text: str) -> str | None:
    """The first of the Node's ``reason`` Events whose message holds ``text``: the node is shared, so its Events may
    hold older ones of the same reason about other mounts or servers (an earlier module's pods)."""
    return next((message for message in node_events(kube, reason) if text in message), None)


def results(kube, namespace: str | None, rule: str) -> list[dict]:
    if namespace is None:
        return [r for r in cluster_results(kube, "mountwarden-failures") if r["rule"] == rule]
    body = report(kube, namespace) or {}
    return [r for r in body.get("results") or [] if r["rule"] == rule and r["policy"] == "mountwarden-failures"]


def run(kube, namespace: str, name: str, claim: str, command: str) -> str:
    kube.core.create_namespaced_pod(namespace, {"metadata": {"name": name}, "spec": pod_spec(claim, command)})
    return wait_for(lambda: (pod := kube.core.read_namespaced_pod(name, namespace)).status.phase == "Running"
                    and pod.metadata.uid, timeout=TIMEOUT, interval=2, what=f"pod {name} Running")


def gone(kube, namespace: str, name: str) -> bool:
    try:
        kube.core.read_namespaced_pod(name, namespace)
    except kubernetes.client.ApiException as error:
        return error.status == 404
    return False


@pytest.fixture(scope="module")
def server_down(real_node, kube, failures_operator, cluster, tmp_path_factory) -> Iterator[dict]:
    """Two writing pods on the forwarded volume, the forwarder stopped, one pod deleted, the other force-deleted."""
    vm = real_node.vm
    namespace = f"mw-failures-{int(time.time())}"
    kube.core.create_namespace({"metadata": {"name": namespace}})
    wait_for(lambda: kube.core.list_namespaced_service_account(namespace).items, what="the default account")
    vm.run(f"python3 {GUEST_DIR}/tunnel.py {FORWARDER_PORT} 127.0.0.1 2049 > /tmp/forwarder.log 2>&1 &"
           " echo $! > /tmp/forwarder.pid")
    wait_for(lambda: "listening" in vm.run("cat /tmp/forwarder.log", check=False).stdout, what="the forwarder")
    forwarder = int(vm.run("cat /tmp/forwarder.pid").stdout)
    claim = make_volume(kube, real_node, namespace, f"pv-forwarded-{int(time.time())}", "", THROUGH_FORWARDER,
                        "/forwarded")
    uids = {name: run(kube, namespace, name, claim, WRITER) for name in ("deleted", "forced")}
    mounts = {name: f"/var/lib/kubelet/pods/{uid}/volumes/kubernetes.io~nfs/{claim}" for name, uid in uids.items()}
    wait_for(lambda: all(reported(kube, uid) for uid in uids.values()), timeout=TIMEOUT, what="both volumes reported")
    vm.run(f"kill -STOP {forwarder}")
    stuck = wait_for(lambda: all((reported(kube, uid) or {}).get("stuckProcesses") for uid in uids.values())
                     and {name: reported(kube, uid)["stuckProcesses"] for name, uid in uids.items()},
                     timeout=TIMEOUT, interval=2, what="both pods' writers stuck on the stopped server")
    kube.core.delete_namespaced_pod("deleted", namespace, grace_period_seconds=1)
    kube.core.delete_namespaced_pod("forced", namespace, grace_period_seconds=0)  # kubectl delete --force
    try:
        yield {"vm": vm, "namespace": namespace, "uids": uids, "mounts": mounts, "stuck": stuck,
               "forwarder": forwarder, "operator": failures_operator}
    finally:
        vm.run(f"kill -CONT {forwarder}", check=False)
        kube.core.delete_namespace(namespace)


def test_a_deleted_pod_whose_writer_is_stuck_on_the_server_is_stuck_terminating(kube, server_down):
    namespace, operator = server_down["namespace"], server_down["operator"]
    writers = server_down["stuck"]["deleted"]
    messages = wait_for(lambda: pod_events(kube, namespace, "deleted", "StuckTerminating"), timeout=TIMEOUT,
                        interval=2, what="a StuckTerminating Event on the deleted pod")
    assert not gone(kube, namespace, "deleted")  # still Terminating
    message = messages[0]
    assert f"pod {namespace}/deleted, deleted to be gone by" in message and "still has its volume" in message
    assert any(f"pid {w['pid']} ({w['command']}, in D in" in message for w in writers), (writers, message)
    assert "In order of safety" in message
    assert f"umount -f {server_down['mounts']['deleted']}" in message  # the remedy, whole, with the Event
    assert failure_count(operator, "StuckTerminating") == 1
    (result,) = wait_for(lambda: results(kube, namespace, "StuckTerminating"), timeout=60,
                         what="the StuckTerminating result in the namespace's PolicyReport")
    assert result["resources"][0]["uid"] == server_down["uids"]["deleted"] and result["result"] == "fail"
    print(f"StuckTerminating Event: {message}")


def test_a_force_deleted_pods_volume_left_mounted_is_an_orphaned_mount_on_the_node(kube, server_down):
    operator, mount = server_down["operator"], server_down["mounts"]["forced"]
    assert gone(kube, server_down["namespace"], "forced")
    message = wait_for(lambda: node_event_saying(kube, "OrphanedMount", mount), timeout=TIMEOUT, interval=2,
                       what=f"an OrphanedMount Event on the Node naming {mount}")
    assert f"its pod (UID {server_down['uids']['forced']}) no longer exists" in message
    assert f"On node {NODE_NAME}: umount {mount} (the kubelet" in message
    assert failure_count(operator, "OrphanedMount") == 1
    (result,) = wait_for(lambda: results(kube, None, "OrphanedMount"), timeout=60,
                         what="the OrphanedMount result in the ClusterPolicyReport")
    assert result["resources"][0]["kind"] == "Node" and result["properties"]["mountPoint"] == mount
    print(f"OrphanedMount Event: {message}")


def test_the_server_itself_is_said_not_responding_on_the_node(kube, server_down):
    said = f"NFS server 127.0.0.1:{FORWARDER_PORT} does not answer"
    wait_for(lambda: node_event_saying(kube, "ServerNotResponding", said), timeout=TIMEOUT, interval=2,
             what=f"a ServerNotResponding Event on the Node saying {said!r}")


def test_the_server_back_the_pod_goes_the_mounts_go_and_so_do_the_findings(kube, server_down):
    vm, operator = server_down["vm"], server_down["operator"]
    vm.run(f"kill -CONT {server_down['forwarder']}")
    wait_for(lambda: gone(kube, server_down["namespace"], "deleted"), timeout=TIMEOUT, interval=2,
             what="the deleted pod gone")
    wait_for(lambda: not any(m in vm.read_text("/proc/1/mountinfo") for m in server_down["mounts"].values()),
             timeout=TIMEOUT, interval=2, what="both volumes unmounted by the kubelet")
    wait_for(lambda: failure_count(operator, "StuckTerminating") == failure_count(operator, "OrphanedMount")
             == failure_count(operator, "ServerNotResponding") == 0, timeout=TIMEOUT, interval=2,
             what="no failure counted any more")
    wait_for(lambda: not results(kube, None, "OrphanedMount") and not results(
        kube, server_down["namespace"], "StuckTerminating"), timeout=120, what="the results gone from the reports")


# -- a stale handle, evicted past a PodDisruptionBudget ------------------------------------------------------


def web_pods(kube, namespace: str) -> list:
    return kube.core.list_namespaced_pod(namespace, label_selector="app=web").items


def test_pods_on_a_stale_handle_are_evicted_one_at_a_time_as_the_budget_allows(real_node, kube, failures_operator,
                                                                             namespace, unique):
    vm, operator = real_node.vm, failures_operator
    profile = f"evict-{unique}"
    body = options_profile(profile, ["vers=4.1", "hard", "timeo=600", "retrans=2"])
    body["spec"]["remediation"] = {"staleFileHandle": "Evict", "windowSeconds": 600}
    kube.apply_profile(body)
    wait_for(lambda: kube.classes_of(profile), what="the profile's class")
    path = f"/stale-{unique}"
    pv = make_volume(kube, real_node, namespace, f"pv-stale-{unique}", f"{profile}-v1",
                     list(kube.storage.read_storage_class(f"{profile}-v1").mount_options or []), path)
    kube.apps.create_namespaced_deployment(namespace, {
        "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": pod_spec(pv, pinned=False)}}})
    policy = kubernetes.client.PolicyV1Api(kube.client)
    policy.create_namespaced_pod_disruption_budget(namespace, {
        "metadata": {"name": "web"}, "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}})
    old = wait_for(lambda: len(pods := [p for p in web_pods(kube, namespace) if p.status.phase == "Running"]) == 2
                   and all(reported(kube, p.metadata.uid) for p in pods) and pods, timeout=TIMEOUT, interval=2,
                   what="both replicas Running and reported")
    old_uids = {p.metadata.uid for p in old}
    # The directory of the export the PV names is replaced on the server: both live mounts are stale.
    vm.run(f"rm -rf /srv/export{path} && mkdir /srv/export{path} && chmod 1777 /srv/export{path}")
    for pod in old:
        stale = wait_for(lambda pod=pod: pod_events(kube, namespace, pod.metadata.name, "StaleFileHandle"),
                         timeout=TIMEOUT, interval=2, what=f"a StaleFileHandle Event on {pod.metadata.name}")
        assert "ESTALE" in stale[0] and f"/srv/export{path}" in stale[0]
    assert failure_count(operator, "StaleFileHandle") == 2
    print(f"StaleFileHandle Event: {stale[0]}")

    refused = wait_for(lambda: profile_events(kube, profile, "EvictionRefused"), timeout=TIMEOUT, interval=2,
                       what="an EvictionRefused Event on the profile")
    assert "web" in refused[0] and "stale file handle" in refused[0]
    assert {p.metadata.uid for p in web_pods(kube, namespace)} == old_uids  # the budget held: nothing evicted

    policy.patch_namespaced_pod_disruption_budget("web", namespace, {"spec": {"minAvailable": 1}})
    terminating_at_once = []

    def replaced():
        pods = web_pods(kube, namespace)
        terminating_at_once.append(sum(1 for p in pods if p.metadata.uid in old_uids and p.metadata.deletion_timestamp))
        fresh = [p for p in pods if p.metadata.uid not in old_uids and p.status.phase == "Running"]
        return len(fresh) == 2 and not any(p.metadata.uid in old_uids for p in pods) and fresh

    fresh = wait_for(replaced, timeout=TIMEOUT * 2, interval=1, what="both replicas evicted and replaced")
    assert max(terminating_at_once) <= 1, terminating_at_once  # one at a time
    evicted = profile_events(kube, profile, "StaleHandleEvicted")
    assert len(evicted) == 2, evicted
    assert operator.metrics().get(("mountwarden_stale_handle_evictions_total",
                                   (("outcome", "evicted"), ("profile", profile))), 0) == 2
    # The replacements mounted afresh: no stale handle left, the failures gone from the gauge and the reports.
    wait_for(lambda: all(reported(kube, p.metadata.uid) for p in fresh) and failure_count(
        operator, "StaleFileHandle") == 0 and not results(kube, namespace, "StaleFileHandle"), timeout=TIMEOUT,
        interval=2, what="no stale handle left")
    for pod in fresh:
        assert not pod_events(kube, namespace, pod.metadata.name, "StaleFileHandle")
