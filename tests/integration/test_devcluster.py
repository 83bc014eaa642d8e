"""The local control plane is real: workloads on kwok nodes roll out, claims bind, and
`up`/`down` leave nothing behind.

The workload tests share the session `cluster`; the lifecycle tests start their own
DevCluster in a temporary directory.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest
from tests.support import wait_for

from mountwarden.devcluster import (
    COMPONENTS,
    AlreadyRunningError,
    Binaries,
    DevCluster,
    DevClusterError,
)

PINNED_KUBERNETES = "v1.34.4"


# -- workloads on the session cluster -------------------------------------------------------


def test_api_server_reports_the_pinned_version(cluster, request):
    import kubernetes

    version = kubernetes.client.VersionApi(cluster.api_client()).get_code()
    assert version.git_version != "v0.0.0", (
        "the build lost its -ldflags -X ...gitVersion: fix hack/testbin/build.sh"
    )
    if cluster.dev_cluster is not None:
        assert version.git_version == PINNED_KUBERNETES
    # The collection hook marks every test that uses the control plane.
    assert request.node.get_closest_marker("cluster") is not None


def test_nodes_are_ready_kwok_nodes(cluster):
    nodes = json.loads(cluster.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    by_name = {n["metadata"]["name"]: n for n in nodes}
    assert len(cluster.node_names) >= 2
    for name in cluster.node_names:
        node = by_name[name]
        conditions = {c["type"]: c["status"] for c in node["status"]["conditions"]}
        assert conditions["Ready"] == "True", name
        assert not node["spec"].get("taints"), f"{name} is tainted: {node['spec']['taints']}"
        if cluster.dev_cluster is not None:
            assert node["metadata"]["labels"]["type"] == "kwok"
            assert node["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"


def test_deployment_pods_become_ready_on_kwok_nodes(cluster, namespace):
    """kube-controller-manager creates the pods, the scheduler places them, kwok runs them."""
    cluster.kubectl(
        "apply",
        "-n",
        namespace,
        "-f",
        "-",
        input=textwrap.dedent(
            """
            apiVersion: apps/v1
            kind: Deployment
            metadata: {name: web}
            spec:
              replicas: 2
              selector: {matchLabels: {app: web}}
              template:
                metadata: {labels: {app: web}}
                spec:
                  containers: [{name: web, image: registry.invalid/web:1}]
            """
        ),
    )
    cluster.kubectl(
        "wait", "-n", namespace, "deployment/web", "--for=jsonpath={.status.readyReplicas}=2", "--timeout=60s"
    )
    pods = json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-l", "app=web", "-o", "json").stdout)[
        "items"
    ]
    assert len(pods) == 2
    for pod in pods:
        assert pod["status"]["phase"] == "Running"
        assert pod["spec"]["nodeName"] in cluster.node_names
        assert pod["status"].get("podIP"), "kwok gives every pod an IP"


def test_statefulset_rolls_out_a_new_revision(cluster, namespace):
    cluster.kubectl(
        "apply",
        "-n",
        namespace,
        "-f",
        "-",
        input=textwrap.dedent(
            """
            apiVersion: v1
            kind: Service
            metadata: {name: db}
            spec: {clusterIP: None, selector: {app: db}}
            ---
            apiVersion: apps/v1
            kind: StatefulSet
            metadata: {name: db}
            spec:
              serviceName: db
              replicas: 2
              selector: {matchLabels: {app: db}}
              template:
                metadata: {labels: {app: db}}
                spec:
                  containers: [{name: db, image: registry.invalid/db:1}]
            """
        ),
    )
    cluster.kubectl("rollout", "status", "-n", namespace, "statefulset/db", "--timeout=60s")
    first = json.loads(cluster.kubectl("get", "statefulset", "-n", namespace, "db", "-o", "json").stdout)
    # A new template: the controller deletes and recreates each pod in turn (kwok's
    # pod-delete stage stands in for the kubelet that would confirm the deletion).
    cluster.kubectl("set", "image", "-n", namespace, "statefulset/db", "db=registry.invalid/db:2")
    cluster.kubectl("rollout", "status", "-n", namespace, "statefulset/db", "--timeout=90s")
    status = json.loads(cluster.kubectl("get", "statefulset", "-n", namespace, "db", "-o", "json").stdout)[
        "status"
    ]
    assert status["updateRevision"] != first["status"]["updateRevision"]
    assert status["currentRevision"] == status["updateRevision"]
    assert status["readyReplicas"] == status["updatedReplicas"] == 2
    images = cluster.kubectl(
        "get", "pods", "-n", namespace, "-l", "app=db", "-o", "jsonpath={.items[*].spec.containers[0].image}"
    ).stdout.split()
    assert images == ["registry.invalid/db:2"] * 2


def test_static_nfs_volume_binds_to_its_claim(cluster, namespace):
    """The PV controller in kube-controller-manager binds a pre-created NFS PV to a claim."""
    pv = f"{namespace}-nfs"
    cluster.kubectl(
        "apply",
        "-f",
        "-",
        input=textwrap.dedent(
            f"""
            apiVersion: v1
            kind: PersistentVolume
            metadata: {{name: {pv}}}
            spec:
              capacity: {{storage: 5Gi}}
              accessModes: [ReadWriteMany]
              persistentVolumeReclaimPolicy: Retain
              storageClassName: ""
              mountOptions: [nfsvers=4.1, hard, noresvport]
              nfs: {{server: fs-0123456789abcdef0.efs.us-east-1.amazonaws.com, path: /}}
            ---
            apiVersion: v1
            kind: PersistentVolumeClaim
            metadata: {{name: data, namespace: {namespace}}}
            spec:
              accessModes: [ReadWriteMany]
              storageClassName: ""
              volumeName: {pv}
              resources: {{requests: {{storage: 5Gi}}}}
            """
        ),
    )
    try:
        cluster.kubectl(
            "wait", "-n", namespace, "pvc/data", "--for=jsonpath={.status.phase}=Bound", "--timeout=60s"
        )
        cluster.kubectl("wait", f"pv/{pv}", "--for=jsonpath={.status.phase}=Bound", "--timeout=60s")
        claim_ref = json.loads(cluster.kubectl("get", "pv", pv, "-o", "jsonpath={.spec.claimRef}").stdout)
        assert (claim_ref["namespace"], claim_ref["name"]) == (namespace, "data")
    finally:
        cluster.kubectl("delete", "pv", pv, "--wait=false", check=False)


# -- lifecycle: a DevCluster of its own ------------------------------------------------------


def _survivors(pids: list[int], state_dir: Path) -> list[str]:
    """Live processes among `pids`, or whose command line mentions `state_dir`."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            if proc.info["status"] == psutil.STATUS_ZOMBIE or proc.pid == os.getpid():
                continue
            cmdline = " ".join(proc.info["cmdline"] or [])
        except psutil.Error:
            continue
        if proc.pid in pids or str(state_dir) in cmdline:
            found.append(f"{proc.pid}: {cmdline[:200]}")
    return found


@pytest.mark.cluster
def test_up_then_down_leaves_nothing_behind(testbin: Binaries, tmp_path):
    state_dir = tmp_path / "lifecycle"
    dev = DevCluster(state_dir, testbin)
    info = dev.up(nodes=2)
    pids = [p.pid for p in info.processes.values()]
    try:
        assert info.version == PINNED_KUBERNETES
        assert sorted(info.processes) == sorted(COMPONENTS)
        assert info.nodes == ["kwok-node-0", "kwok-node-1"]
        assert info.kubeconfig == state_dir / "kubeconfig" and info.kubeconfig.is_file()
        for component in COMPONENTS:
            assert (state_dir / "logs" / f"{component}.log").is_file()
        assert sorted(dev.running()) == sorted(COMPONENTS)
        assert info.startup_seconds < 60, info.timings

        # The JSON document the CLI prints has the documented fields.
        document = info.to_json()
        assert {"kubeconfig", "state_dir", "api_server", "processes", "nodes"} <= set(document)
        assert document["processes"]["etcd"]["pid"] == info.processes["etcd"].pid

        # A second `up` on the same directory is refused, says what to do, and leaves the
        # running cluster alone.
        with pytest.raises(AlreadyRunningError) as refused:
            DevCluster(state_dir, testbin).up(nodes=2)
        assert "already runs" in str(refused.value)
        assert f"mountwarden dev-cluster down --state-dir {state_dir}" in str(refused.value)
        assert sorted(dev.running()) == sorted(COMPONENTS)
        nodes = dev.kubectl("get", "nodes", "-o", "name").stdout.split()
        assert nodes == ["node/kwok-node-0", "node/kwok-node-1"]
    finally:
        stopped = dev.down()

    assert sorted(stopped) == sorted(COMPONENTS)
    assert _survivors(pids, state_dir) == []
    assert dev.running() == []
    # Idempotent: nothing left to stop, and no error.
    assert DevCluster(state_dir).down() == []


@pytest.mark.cluster
def test_a_restarted_api_server_waits_for_its_port_names_who_holds_it_and_comes_back_on_it(testbin: Binaries,
                                                                                       tmp_path):
    # In CI, another process bound a restarted API server's port while it was down, and the new one
    # exited with "address already in use". Here this test's process is that other process.
    messages: list[str] = []
    squatters: list[socket.socket] = []
    release_when_named = False

    def on_progress(message: str) -> None:
        messages.append(message)
        if release_when_named and "waiting for kube-apiserver's port" in message:
            squatters.pop().close()

    def squat(port: int) -> None:
        squatter = socket.socket()
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatters.append(squatter)
        wait_for(lambda: _bound(squatter, port), what=f"port {port} taken by the test")
        squatter.listen()

    dev = DevCluster(tmp_path / "restart", testbin, on_progress=on_progress)
    info = dev.up(nodes=1)
    port = int(info.api_server.rsplit(":", 1)[1])
    holder = f"{port} by {os.getpid()} ("
    try:
        # The API server goes away, as in an outage, and the port is taken before the restart.
        apiserver = psutil.Process(info.processes["kube-apiserver"].pid)
        apiserver.kill()
        apiserver.wait(timeout=30)
        squat(port)
        # Held to the deadline: the error names the holder and the way out.
        with pytest.raises(DevClusterError) as held:
            dev.restart("kube-apiserver", timeout=2)
        assert holder in str(held.value) and "dev-cluster down" in str(held.value)
        assert any(holder in message for message in messages), messages

        # Released once the restart says whom it waits for: the API server comes back on the same port.
        squatters.pop().close()
        squat(port)
        release_when_named = True
        dev.restart("kube-apiserver")
        assert squatters == []
        assert dev.kubectl("get", "nodes", "-o", "name").stdout.split() == ["node/kwok-node-0"]
        assert DevCluster(tmp_path / "restart").info().api_server == info.api_server
    finally:
        for squatter in squatters:
            squatter.close()
        dev.down()


def _bound(probe: socket.socket, port: int) -> bool:
    try:
        probe.bind(("127.0.0.1", port))
    except OSError:
        return False
    return True


@pytest.mark.cluster
def test_failed_start_stops_what_had_started_and_shows_the_log(testbin: Binaries, tmp_path):
    # The real binaries, except an API server that refuses to start.
    broken = tmp_path / "bin"
    broken.mkdir()
    for name in ("etcd", "kube-controller-manager", "kube-scheduler", "kubectl", "kwok", "helm"):
        (broken / name).symlink_to(testbin.path(name))
    fake = broken / "kube-apiserver"
    fake.write_text("#!/bin/sh\necho 'E0101 refusing to start: bad --etcd-servers (simulated)' >&2\nexit 3\n")
    fake.chmod(0o755)

    state_dir = tmp_path / "broken"
    with pytest.raises(DevClusterError) as failed:
        DevCluster(state_dir, broken).up(nodes=1, timeout=60)
    error = failed.value
    assert error.component == "kube-apiserver"
    assert "exit code 3" in error.message
    assert "refusing to start" in error.log_tail
    assert error.stopped == ["etcd"]
    assert _survivors([], state_dir) == []


@pytest.mark.cluster
def test_cli_up_json_then_down_purge(testbin: Binaries, tmp_path):
    state_dir = tmp_path / "cli"
    mountwarden = [sys.executable, "-m", "mountwarden", "dev-cluster"]
    up = subprocess.run(
        [
            *mountwarden,
            "up",
            "--state-dir",
            str(state_dir),
            "--binaries",
            str(testbin.dir),
            "--nodes",
            "1",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    try:
        assert up.returncode == 0, up.stderr
        document = json.loads(up.stdout)  # stdout holds exactly one JSON document
        assert document["state_dir"] == str(state_dir)
        assert document["nodes"] == ["kwok-node-0"]
        assert sorted(document["processes"]) == sorted(COMPONENTS)
        assert document["api_server"].startswith("https://127.0.0.1:")
        pids = [p["pid"] for p in document["processes"].values()]
        # The processes outlived the command that started them.
        assert all(psutil.pid_exists(pid) for pid in pids)
    finally:
        down = subprocess.run(
            [*mountwarden, "down", "--state-dir", str(state_dir), "--purge", "--json"],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert down.returncode == 0, down.stderr
    assert sorted(json.loads(down.stdout)["stopped"]) == sorted(COMPONENTS)
    assert not state_dir.exists()
    assert _survivors(pids, state_dir) == []
