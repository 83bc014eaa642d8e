"""What users install, running: the chart's own pods from the image `make image` built, on the real node.

The operator's replicas and the agent run as containers under containerd and runc, with the chart's exact
securityContext; what each process may do is read back from the kernel (/proc/<pid>/status in the VM), not from
YAML. The API server reaches the active replica's webhook through the chart's Service; the standby takes over when
the active pod is killed; and the agent's privileges are the ones its features need, proven by what it can and
cannot see without each of them.
"""

from __future__ import annotations

import json
import re

import pytest
from tests.realnode.conftest import (
    CHART_START_SECONDS,
    MODULE_TIMEOUT,
    active_operator,
    node_report,
    operator_pods,
    scale_operator,
)
from tests.realnode.test_real_node import TIMEOUT, make_volume, pod_spec, reported
from tests.support import profile_body, wait_for

from mountwarden.lab.appimage import UID
from mountwarden.lab.node import CHART, CHART_NAMESPACE, CHART_RELEASE, NODE_NAME

#: The node's start (boot, image import, the chart) is the first test's; every pod under emulation takes minutes.
pytestmark = pytest.mark.timeout(MODULE_TIMEOUT)

#: A line of the agent's log on stderr (logging's default format with a time), as opposed to its report on stdout.
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ [A-Z]+ ")
#: CapEff of a process with exactly these capabilities (linux/capability.h).
CAPABILITY_BITS = {"DAC_READ_SEARCH": 2, "SYS_PTRACE": 19}


def capabilities(*names: str) -> int:
    return sum(1 << CAPABILITY_BITS[name] for name in names)


def mountwarden_pid(real_node, pod) -> str:
    """The pid, in the VM, of the pod's mountwarden process (the one in the pod's cgroup)."""
    uid = pod.metadata.uid
    found = real_node.vm.run("for p in $(pgrep -f '/usr/local/bin/mountwarden'); do "
                             f"grep -qE 'pod{uid}|pod{uid.replace('-', '_')}' /proc/$p/cgroup 2>/dev/null "
                             "&& echo $p && break; done", timeout=60).stdout.split()
    assert found, f"no mountwarden process of pod {pod.metadata.name} on {NODE_NAME}"
    return found[0]


def process_status(real_node, pod) -> dict[str, str]:
    """/proc/<pid>/status of the pod's mountwarden process, as the VM's kernel has it."""
    pid = mountwarden_pid(real_node, pod)
    text = real_node.vm.run(f"cat /proc/{pid}/status && grep -E ' / / ' /proc/{pid}/mountinfo", timeout=60).stdout
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line and "\t" in line)
    fields = {name: value.strip() for name, value in fields.items()}
    fields["root"] = next(line for line in text.splitlines() if " / / " in line)
    return fields


def agent_pod(kube):
    pods = [pod for pod in kube.core.list_namespaced_pod(CHART_NAMESPACE, label_selector=(
        "app.kubernetes.io/component=agent")).items
        if pod.spec.node_name == NODE_NAME and pod.metadata.deletion_timestamp is None]
    return pods[0] if len(pods) == 1 and pods[0].status.phase == "Running" else None


def helm_upgrade(cluster, *settings: str) -> None:
    """Change the release's values as a user would (`helm upgrade --reuse-values --set ...`), and wait for it."""
    cluster.dev_cluster.helm("upgrade", CHART_RELEASE, str(CHART), "-n", CHART_NAMESPACE, "--reuse-values",
                             *(arg for setting in settings for arg in ("--set", setting)),
                             "--wait", "--timeout", f"{CHART_START_SECONDS}s")


def test_the_chart_runs_the_built_image_under_its_own_security_context(real_node, chart, kube, mountwarden_image):
    operators = operator_pods(kube)
    agent = wait_for(lambda: agent_pod(kube), timeout=TIMEOUT, what="the agent's pod on the node")
    # One replica: the session's node runs one (conftest.py); the standby's test scales to the chart's two.
    assert len(operators) == 1 and {pod.spec.node_name for pod in operators} == {NODE_NAME}
    for pod in [*operators, agent]:
        (status,) = pod.status.container_statuses
        # The image this checkout built, imported with no registry: containerd names it by digest.
        assert mountwarden_image.digest in status.image_id or mountwarden_image.manifest["config_digest"] in (
            status.image_id), status.image_id
    for pod in operators:
        status = process_status(real_node, pod)
        assert status["Uid"].split()[:2] == [str(UID), str(UID)]  # the image's named user, not root
        assert int(status["CapEff"], 16) == 0 and int(status["CapPrm"], 16) == 0
        assert status["NoNewPrivs"] == "1" and status["Seccomp"] == "2"  # RuntimeDefault
        assert " ro," in status["root"] or " ro " in status["root"]  # readOnlyRootFilesystem
    # The agent with the defaults (both features on): root for its two capabilities, and nothing else.
    status = process_status(real_node, agent)
    assert status["Uid"].split()[:2] == ["0", "0"]
    assert int(status["CapEff"], 16) == capabilities("SYS_PTRACE", "DAC_READ_SEARCH")
    assert status["NoNewPrivs"] == "1" and status["Seccomp"] == "2"


def test_the_active_replicas_webhook_warns_on_a_pvc_through_the_charts_service(real_node, chart, cluster, kube,
                                                                              namespace, unique):
    """The API server calls the chart's Service (its endpoint: the active pod's IP, inside the node) over TLS."""
    active = active_operator(kube)
    endpoints = json.loads(cluster.kubectl("get", "endpointslices", "-n", CHART_NAMESPACE, "-l",
                                           f"kubernetes.io/service-name={CHART_RELEASE}-webhook", "-o", "json").stdout)
    addresses = [a for s in endpoints["items"] for e in s.get("endpoints") or [] for a in e["addresses"]]
    assert addresses == [active.status.pod_ip]
    profile = f"hook-{unique}"
    kube.apply_profile(profile_body(profile, "cached", backend={"provisioner": "nfs.csi.k8s.io"}))
    wait_for(lambda: kube.classes_of(profile), timeout=TIMEOUT, what="the profile's class")
    warned = warning_on_claim(cluster, namespace, f"{profile}-v1", "mountwarden.io/contents=sqlite")
    assert "SQLite" in warned, warned


def warning_on_claim(cluster, namespace: str, storage_class: str, label: str) -> str:
    """The admission warnings `kubectl create` prints for a claim of ``storage_class`` (a dry run: nothing kept)."""
    key, value = label.split("=")
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
             "metadata": {"name": "data", "namespace": namespace, "labels": {key: value}},
             "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": storage_class,
                      "resources": {"requests": {"storage": "1Gi"}}}}

    def warned() -> str:
        result = cluster.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(claim), check=False)
        return result.stderr if "Warning:" in result.stderr else ""

    # A review under emulation may outlast the webhook's 3 s (failurePolicy Ignore: created without warnings).
    return wait_for(warned, timeout=TIMEOUT, interval=5, what=f"an admission warning on a claim of {storage_class}")


#: The killed replica's peering entry outlives it by kopf's lifetime (60 s); the standby then resumes and labels
#: itself, under emulation in a minute or two.
TAKEOVER_SECONDS = 600


def active_name(kube) -> str | None:
    pod = active_operator(kube)
    return pod.metadata.name if pod is not None else None


def ready(pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def test_the_standby_takes_over_when_the_active_pod_is_killed(real_node, chart, cluster, kube, namespace, unique,
                                                              request):
    replicas = scale_operator(kube, 2)  # the chart's default: the session's node runs one (conftest.py)
    request.addfinalizer(lambda: scale_operator(kube, replicas))
    before = wait_for(lambda: active_operator(kube), timeout=CHART_START_SECONDS, interval=5, what="an active replica")
    standby = wait_for(lambda: next((pod for pod in operator_pods(kube) if pod.metadata.name != before.metadata.name
                                     and ready(pod)), None), timeout=CHART_START_SECONDS, interval=5,
                       what="a second replica Ready, standing by")
    kube.core.delete_namespaced_pod(before.metadata.name, CHART_NAMESPACE, grace_period_seconds=0)
    # The standby, not the ReplicaSet's replacement: it started earlier, so its priority is the higher
    # (cli/operator.py derived_priority). It waits out the killed replica's peering entry (kopf: 60 s).
    after = wait_for(lambda: (pod := active_operator(kube)) and pod.metadata.name == standby.metadata.name and pod,
                     timeout=TAKEOVER_SECONDS, interval=5,
                     what=lambda: f"{standby.metadata.name} taking over (active now: {active_name(kube)})")
    wait_for(lambda: [a for s in json.loads(cluster.kubectl(
        "get", "endpointslices", "-n", CHART_NAMESPACE, "-l", f"kubernetes.io/service-name={CHART_RELEASE}-webhook",
        "-o", "json").stdout)["items"] for e in s.get("endpoints") or [] for a in e["addresses"]]
        == [after.status.pod_ip], timeout=TIMEOUT, what="the webhook Service routing to the new active replica")
    profile = f"takeover-{unique}"
    kube.apply_profile(profile_body(profile, "cached", backend={"provisioner": "nfs.csi.k8s.io"}))
    wait_for(lambda: kube.classes_of(profile), timeout=TIMEOUT, what="the new active replica reconciling")
    assert "SQLite" in warning_on_claim(cluster, namespace, f"{profile}-v1", "mountwarden.io/contents=sqlite")


# -- the agent's privileges, as the runtime enforces them ----------------------------------------------------------
# The chart as installed first (both features on), then each `helm upgrade` away from it: under emulation each
# roll of the agent is a Python start of a minute or more, so no test rolls it only to reach the defaults.


def agent_once(cluster, kube, namespace: str, name: str, *, args: list[str], drop: tuple[str, ...] = (),
               run_as: int | None = None) -> tuple[dict, str]:
    """The installed DaemonSet's own pod, run once on the node as a bare Pod with ``args`` added (and capabilities
    ``drop``-ped from what the chart gives, or as user ``run_as``): its report's spec (--dry-run, on stdout) and its
    log."""
    daemonset = json.loads(cluster.kubectl("get", "daemonset", f"{CHART_RELEASE}-agent", "-n", CHART_NAMESPACE,
                                           "-o", "json").stdout)
    spec = daemonset["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    replaced = {arg.split("=", 1)[0] for arg in args}
    container["args"] = [arg for arg in container["args"] if arg.split("=", 1)[0] not in replaced
                         and not arg.startswith("--metrics-port")] + [*args, "--once", "--dry-run", "--no-name-pods"]
    added = container["securityContext"]["capabilities"].get("add", [])
    container["securityContext"]["capabilities"]["add"] = [cap for cap in added if cap not in drop]
    container.pop("ports", None)
    spec.update(nodeName=NODE_NAME, restartPolicy="Never", tolerations=None)
    if run_as is not None:
        spec["securityContext"].update(runAsUser=run_as, runAsGroup=run_as, runAsNonRoot=True)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": CHART_NAMESPACE},
           "spec": spec}
    cluster.kubectl("create", "-f", "-", input=json.dumps(pod))
    try:
        wait_for(lambda: kube.core.read_namespaced_pod(name, CHART_NAMESPACE).status.phase in ("Succeeded", "Failed"),
                 timeout=CHART_START_SECONDS, interval=5, what=f"the agent pod {name} to finish its one scan")
        out = cluster.kubectl("logs", "-n", CHART_NAMESPACE, name).stdout
    finally:
        cluster.kubectl("delete", "pod", name, "-n", CHART_NAMESPACE, "--ignore-not-found", "--wait=false")
    # The container's log interleaves stderr's log lines with stdout's report, line by line.
    logged = [line for line in out.splitlines() if LOG_LINE.match(line)]
    printed = "\n".join(line for line in out.splitlines() if not LOG_LINE.match(line))
    body, _ = json.JSONDecoder().raw_decode(printed, printed.index("{"))  # the NodeMountReport it would have written
    return body["spec"], "\n".join(logged)


def nfs_pod(kube, real_node, namespace: str, unique: str, command: str = "sleep 100000", *,
            run_as_user: int | None = None) -> tuple[str, str]:
    """A pod on the node with an NFS volume (options of the `cached` preset); its UID and its volume's PV."""
    pv = make_volume(kube, real_node, namespace, f"pv-priv-{unique}", "", ["vers=4.1", "actimeo=600"],
                     f"/priv-{unique}")
    spec = pod_spec(pv, command)
    if run_as_user is not None:
        spec["securityContext"] = {"runAsUser": run_as_user, "runAsGroup": run_as_user}
    kube.core.create_namespaced_pod(namespace, {"metadata": {"name": f"app-{unique}"}, "spec": spec})
    uid = wait_for(lambda: (p := kube.core.read_namespaced_pod(f"app-{unique}", namespace)).status.phase == "Running"
                   and p.metadata.uid, timeout=TIMEOUT, interval=2, what=f"pod app-{unique} Running")
    return uid, pv


def volume_of(report: dict, pod_uid: str) -> dict:
    return next(volume for volume in report["volumes"] if volume.get("podUid") == pod_uid)


def test_probe_servers_fails_by_name_without_sys_ptrace_and_answers_with_it(
        real_node, chart, cluster, kube, namespace, unique):
    uid, _ = nfs_pod(kube, real_node, namespace, unique)
    # The chart never gives probeServers without SYS_PTRACE: run its pod so, once, to show what that does.
    report, log = agent_once(cluster, kube, namespace, f"probe-{unique}", args=["--probe-timeout=5"],
                             drop=("SYS_PTRACE",))
    volume = volume_of(report, uid)
    assert "serverResponding" not in volume
    assert any(note.startswith("ProbeForbidden: ") and "CAP_SYS_PTRACE" in note for note in volume["notes"])
    assert "ProbeForbidden: the statvfs() probe may not follow /host/proc/1/root" in log
    # The chart's own agent, as installed (probeServers on): SYS_PTRACE, and the server's answer.
    agent = wait_for(lambda: (pod := agent_pod(kube)) and "--probe-timeout=0" not in pod.spec.containers[0].args
                     and pod, timeout=CHART_START_SECONDS, interval=5, what="the chart's agent with probeServers")
    assert int(process_status(real_node, agent)["CapEff"], 16) == capabilities("SYS_PTRACE", "DAC_READ_SEARCH")
    volume = wait_for(lambda: (v := reported(kube, uid)) and v.get("serverResponding") is True and v,
                      timeout=TIMEOUT, what="serverResponding from the agent with SYS_PTRACE")
    assert not [note for note in volume.get("notes", []) if note.startswith("ProbeForbidden")]


def test_sqlite_detection_needs_dac_read_search_and_says_what_it_cannot_see_without_it(
        real_node, chart, cluster, kube, namespace, unique):
    hold = ("printf 'CREATE TABLE IF NOT EXISTS t(x);\\nBEGIN IMMEDIATE;\\nINSERT INTO t VALUES (1);\\n"
            ".shell sleep 100000\\n' | sqlite3 /data/app.db")
    # Another pod's database, held by another user than any the agent runs as.
    uid, pv = nfs_pod(kube, real_node, namespace, unique, hold, run_as_user=1000)
    report, _ = agent_once(cluster, kube, namespace, f"sqlite-{unique}", args=["--probe-timeout=0"],
                           drop=("DAC_READ_SEARCH",))
    (finding,) = [f for f in report["sqlite"] if f.get("podUid") == uid]
    # Its files unread, the database has no path; its pod (the cgroup, readable by all) has one volume on that
    # superblock, so the volume is certain all the same.
    assert "path" not in finding and finding["volumeName"] == pv, finding
    assert "OpenFilesForbidden" in finding["message"] and "CAP_DAC_READ_SEARCH" in finding["message"]
    assert "which file this is is unknown" in finding["message"], finding["message"]
    # The chart's own agent, as installed (readOtherProcesses on), with DAC_READ_SEARCH: the database, its pod and
    # its volume.
    agent = wait_for(lambda: (pod := agent_pod(kube)) and "--no-sqlite-scan" not in pod.spec.containers[0].args
                     and pod, timeout=CHART_START_SECONDS, interval=5, what="the chart's agent with SQLite detection")
    assert int(process_status(real_node, agent)["CapEff"], 16) == capabilities("SYS_PTRACE", "DAC_READ_SEARCH")
    finding = wait_for(lambda: next((f for f in (node_report(kube) or {}).get("spec", {}).get("sqlite", [])
                                     if f.get("podUid") == uid and f.get("path")), None),
                       timeout=TIMEOUT, what="the chart's agent finding the other pod's database")
    assert finding["path"].endswith("/app.db") and finding["volumeName"] == pv
    assert "OpenFilesForbidden" not in finding["message"]


def test_with_both_features_off_the_agent_has_no_capability_and_still_reports_mounts_and_counters(
        real_node, chart, cluster, kube, namespace, unique):
    helm_upgrade(cluster, "agent.readOtherProcesses=false", "agent.probeServers=false")
    agent = wait_for(lambda: (pod := agent_pod(kube)) and "--no-sqlite-scan" in pod.spec.containers[0].args and pod,
                     timeout=CHART_START_SECONDS, interval=5, what="the agent rolled without its features")
    status = process_status(real_node, agent)
    assert status["Uid"].split()[:2] == ["0", "0"]
    assert int(status["CapEff"], 16) == 0 and int(status["CapPrm"], 16) == 0 and int(status["CapBnd"], 16) == 0
    uid, _ = nfs_pod(kube, real_node, namespace, unique, "while true; do ls /data > /dev/null; sleep 1; done")
    volume = wait_for(lambda: (v := reported(kube, uid)) and v.get("operations") and v, timeout=TIMEOUT,
                      what="the capability-less agent's report of the pod's volume, with its counters")
    assert volume["optionsSource"] == "mountstats" and "acregmax=600" in volume["effectiveOptions"]
    assert sum(operation["ops"] for operation in volume["operations"].values()) > 0
    assert "serverResponding" not in volume  # probeServers off: not asked
    # Why uid 0: as the image's own user the kernel refuses the host's mountstats (root's, mode 0400).
    report, log = agent_once(cluster, kube, namespace, f"nonroot-{unique}", args=[], run_as=UID)
    volume = volume_of(report, uid)
    assert volume["optionsSource"] == "mountinfo" and not volume.get("operations")
    assert "MountstatsForbidden: /host/proc/1/mountstats may not be read" in log


#: Run in the agent container's mount and pid namespaces, as its user with no capability (nsenter -S/-G), by the
#: image's own python3: a write into every mount it has from the host and below them (each pod volume it sees,
#: propagated in), then a read of each path given.
REACH = """
import json, os, sys
def attempt(path, flags):
    try:
        os.close(os.open(path, flags, 0o600))
    except OSError as error:
        return error.strerror
    return "done"
points = [line.split()[4] for line in open("/proc/self/mountinfo")]
host = [p for p in points if p.startswith(("/host/proc", "/var/lib/kubelet/pods"))]
extra = ["/host/proc/1/root/etc/mountwarden-probe", "/host/proc/1/root/var/lib/kubelet/mountwarden-probe"]
writes = {p: attempt(os.path.join(p, "mountwarden-probe"), os.O_WRONLY | os.O_CREAT) for p in host + extra}
reads = {p: attempt(p, os.O_RDONLY) for p in sys.argv[1:]}
print(json.dumps({"points": points, "writes": writes, "reads": reads}))
"""


def host_secrets(real_node) -> list[str]:
    """What must stay unreadable, found by root in the VM: every pod's service account token, the kubelet's keys
    (through /host/proc/1/root, the host's root), the host's shadow file and pid 1's environment."""
    found = real_node.vm.run("ls -d /var/lib/kubelet/pods/*/volumes/kubernetes.io~projected/*/token "
                             "/var/lib/kubelet/pki/*.key /var/lib/kubelet/pki/*.pem 2>/dev/null",
                             check=False, timeout=60).stdout.split()
    tokens = [path for path in found if path.endswith("/token")]
    keys = [f"/host/proc/1/root{path}" for path in found if "/pki/" in path]
    assert tokens and keys, found
    return [*tokens, *keys, "/host/proc/1/root/etc/shadow", "/host/proc/1/environ"]


def test_an_agent_that_is_not_root_reports_counters_and_answers_and_can_write_and_read_nothing_of_the_host(
        real_node, chart, cluster, kube, namespace, unique):
    helm_upgrade(cluster, "agent.root=false", "agent.readOtherProcesses=false", "agent.probeServers=true")
    try:
        agent = wait_for(lambda: (pod := agent_pod(kube)) and "--mount-table=own" in pod.spec.containers[0].args
                         and pod, timeout=CHART_START_SECONDS, interval=5, what="the agent rolled as uid 65532")
        status = process_status(real_node, agent)
        assert status["Uid"].split()[:2] == [str(UID), str(UID)] and status["Gid"].split()[:2] == [str(UID)] * 2
        assert int(status["CapEff"], 16) == 0 and int(status["CapPrm"], 16) == 0 and int(status["CapBnd"], 16) == 0
        # A pod mounted after the agent started: its volume propagated into the agent's own mount table, with the
        # kernel's defaults, counters, and its server's answer to the RPC NULL call.
        uid, _ = nfs_pod(kube, real_node, namespace, unique, "while true; do ls /data > /dev/null; sleep 1; done")
        volume = wait_for(lambda: (v := reported(kube, uid)) and v.get("operations") and "serverResponding" in v
                          and v, timeout=TIMEOUT, what="the report of the agent that is not root")
        assert volume["optionsSource"] == "mountstats" and "acregmax=600" in volume["effectiveOptions"]
        assert sum(operation["ops"] for operation in volume["operations"].values()) > 0
        assert volume["serverResponding"] is True
        # What its process can reach, under the runtime's own namespaces and identity.
        pid = mountwarden_pid(real_node, agent)
        secrets = host_secrets(real_node)
        reach = json.loads(real_node.vm.run(
            ["nsenter", "-t", pid, "-m", "-p", "-S", str(UID), "-G", str(UID), "/usr/bin/python3", "-c", REACH,
             *secrets], timeout=120).stdout)
        print(json.dumps({"writes": reach["writes"], "reads": reach["reads"]}, indent=1))
        assert any(f"/pods/{uid}/volumes/kubernetes.io~nfs/" in point for point in reach["points"]), reach["points"]
        assert len(reach["writes"]) > 4 and all(answer != "done" for answer in reach["writes"].values()), reach
        assert all(answer == "Permission denied" for answer in reach["reads"].values()), reach["reads"]
    finally:
        helm_upgrade(cluster, "agent.root=true", "agent.readOtherProcesses=true")


# -- upgrade and rollback ----------------------------------------------------------------------------------------


#: A readiness gate (a pod condition the kubelet leaves alone; the test sets it through pods/status, as a controller
#: would) holds web-b's pods unready until the test lets them: the upgrade then lands while web-b is Restarting, every
#: run. Without it, on an idle host the old replica finished the whole rollout before it stopped (the run's Events:
#: RolloutComplete in the second the Deployment scaled it down), and the takeover went untested.
HELD = "mountwarden.io/test-held"


def held_pod_spec(claim: str) -> dict:
    return {**pod_spec(claim, pinned=False), "readinessGates": [{"conditionType": HELD}]}


def let_ready(kube, namespace: str, pod) -> None:
    kube.core.patch_namespaced_pod_status(pod.metadata.name, namespace, {"status": {"conditions": [
        {"type": HELD, "status": "True"}]}})


def replica_sets(kube, namespace: str, app: str) -> set[str]:
    return {rs.metadata.name for rs in kube.apps.list_namespaced_replica_set(namespace, label_selector=f"app={app}").items}


def webhook_answers(cluster, kube, namespace: str, storage_class: str) -> None:
    """The webhook configuration points at the chart's Service, whose one endpoint is the active replica, which
    answers: a claim of the class gets its warning through the API server."""
    hooks = json.loads(cluster.kubectl("get", "validatingwebhookconfiguration", CHART_RELEASE, "-o", "json").stdout)
    assert {hook["clientConfig"]["service"]["name"] for hook in hooks["webhooks"]} == {f"{CHART_RELEASE}-webhook"}
    active = wait_for(lambda: active_operator(kube), timeout=CHART_START_SECONDS, interval=5,
                      what="an active replica")
    wait_for(lambda: [a for s in json.loads(cluster.kubectl(
        "get", "endpointslices", "-n", CHART_NAMESPACE, "-l", f"kubernetes.io/service-name={CHART_RELEASE}-webhook",
        "-o", "json").stdout)["items"] for e in s.get("endpoints") or [] for a in e["addresses"]]
        == [active.status.pod_ip], timeout=TIMEOUT, what="the webhook Service routing to the active replica")
    assert "SQLite" in warning_on_claim(cluster, namespace, storage_class, "mountwarden.io/contents=sqlite")


def test_an_upgrade_and_a_rollback_in_the_middle_of_a_rollout_lose_and_repeat_nothing(
        real_node, chart, cluster, kube, namespace, unique):
    """helm upgrade (every pod of the release rolls: the active operator goes, the new one takes the rollout over)
    while a PatchBoundVolumes rollout restarts two Deployments one at a time, then helm rollback: each workload is
    restarted exactly once, the rollout completes, the reports keep every volume, the webhook answers throughout.
    web-b's restarted pod is held unready (HELD) until the upgraded operator is the active one, so the old replica
    stops in the middle of the rollout and the new one finishes it."""
    profile = f"upgrade-{unique}"
    automatic = {"strategy": "PatchBoundVolumes", "approval": "Automatic"}
    backend = {"provisioner": "nfs.csi.k8s.io"}
    kube.apply_profile(profile_body(profile, "cached", backend=backend, rollout=automatic))
    wait_for(lambda: kube.classes_of(profile), timeout=TIMEOUT, what="v1")
    options = list(kube.storage.read_storage_class(f"{profile}-v1").mount_options or [])
    apps = ("web-a", "web-b")
    for app in apps:
        pv = make_volume(kube, real_node, namespace, f"pv-{app}-{unique}", f"{profile}-v1", options,
                         f"/{app}-{unique}")
        kube.apps.create_namespaced_deployment(namespace, {
            "metadata": {"name": app},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": app}},
                     "template": {"metadata": {"labels": {"app": app}},
                                  "spec": held_pod_spec(pv) if app == "web-b" else pod_spec(pv, pinned=False)}}})
    for app in apps:
        pod = wait_for(lambda app=app: (pods := kube.core.list_namespaced_pod(namespace, label_selector=f"app={app}")
                                        .items) and pods[0].status.phase == "Running" and pods[0],
                       timeout=TIMEOUT, interval=2, what=f"{app} Running")
        wait_for(lambda pod=pod: reported(kube, pod.metadata.uid), timeout=TIMEOUT, what=f"{app}'s volume reported")
        if app == "web-b":
            let_ready(kube, namespace, pod)
    before = {app: replica_sets(kube, namespace, app) for app in apps}

    def rollout() -> dict:
        return ((kube.profile(profile) or {}).get("status") or {}).get("rollout") or {}

    kube.apply_profile(profile_body(profile, "staging", backend=backend, rollout=automatic))
    wait_for(lambda: (r := rollout()).get("phase") == "Progressing" and r.get("targetStorageClassName")
             == f"{profile}-v2" and r, timeout=TIMEOUT * 2, interval=2, what="the rollout under way")
    (held,) = wait_for(lambda: [pod for pod in kube.core.list_namespaced_pod(namespace, label_selector="app=web-b").items
                                if pod.metadata.deletion_timestamp is None and pod.status.phase == "Running"
                                and not any(c.type == HELD for c in pod.status.conditions or [])],
                       timeout=TIMEOUT, interval=2, what="web-b restarted by the rollout, its new pod held unready")
    helm_upgrade(cluster, "logLevel=debug")  # a changed value of both the operator and the agent
    assert all("--verbose" in pod.spec.containers[0].args for pod in operator_pods(kube))
    wait_for(lambda: (pod := active_operator(kube)) and "--verbose" in pod.spec.containers[0].args,
             timeout=CHART_START_SECONDS, interval=2, what="the upgraded operator active (the old one gone)")
    assert rollout()["phase"] == "Progressing"  # the old replica stopped in the middle of it
    let_ready(kube, namespace, held)
    done = wait_for(lambda: (r := rollout()).get("phase") == "Complete" and r, timeout=CHART_START_SECONDS * 2,
                    interval=5, what="the rollout Complete after the upgrade")
    assert [line["state"] for line in done["workloads"]] == ["Done", "Done"]
    after = {app: replica_sets(kube, namespace, app) for app in apps}
    assert all(len(after[app] - before[app]) == 1 for app in apps), (before, after)  # restarted once, never twice
    for app in apps:
        (pod,) = [p for p in kube.core.list_namespaced_pod(namespace, label_selector=f"app={app}").items
                  if p.metadata.deletion_timestamp is None]
        volume = wait_for(lambda pod=pod: reported(kube, pod.metadata.uid), timeout=TIMEOUT,
                          what=f"{app}'s new pod in the upgraded agent's report")
        assert "acregmax=0" in volume["effectiveOptions"]
    webhook_answers(cluster, kube, namespace, f"{profile}-v2")

    cluster.dev_cluster.helm("rollback", CHART_RELEASE, "-n", CHART_NAMESPACE, "--wait", "--timeout",
                             f"{CHART_START_SECONDS}s")
    wait_for(lambda: all("--verbose" not in pod.spec.containers[0].args for pod in operator_pods(kube))
             and active_operator(kube), timeout=CHART_START_SECONDS, interval=5, what="the rolled back operator active")
    assert rollout()["phase"] == "Complete"
    assert {app: replica_sets(kube, namespace, app) for app in apps} == after  # nothing restarted again
    for app in apps:
        (pod,) = [p for p in kube.core.list_namespaced_pod(namespace, label_selector=f"app={app}").items
                  if p.metadata.deletion_timestamp is None]
        wait_for(lambda pod=pod: reported(kube, pod.metadata.uid), timeout=TIMEOUT,
                 what=f"{app}'s volume in the rolled back agent's report")
    webhook_answers(cluster, kube, namespace, f"{profile}-v2")
