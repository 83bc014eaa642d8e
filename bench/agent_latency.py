"""How soon the node agent reports a new mount: mount appearing -> NodeMountReport updated.

    .venv/bin/python bench/agent_latency.py [--mounts 40] [--lab-mounts 15] [--skip-lab]

Two real kernels, the agent as users run it (`mountwarden agent`, --interval 3600: only the
mount table's change can make it scan):

- local control plane: on this machine's kernel, the agent follows /proc and writes to a local
  API server; a tmpfs is mounted where the kubelet mounts a pod's NFS volume (the agent is told
  tmpfs is a network filesystem: there is no NFS server on the host). The time runs from
  mount(8) returning to a watch of NodeMountReports delivering the report that shows it;
- lab VM: a Debian kernel with its NFS client and server in QEMU (docs/kernel-lab.md). The VM
  has no network, so the agent runs with --dry-run inside it and bench/agent_latency_guest.py
  times the reports it prints: from mount(8) of a real NFS export returning to the printed
  report that shows it. Under TCG emulation (this machine) the guest runs several times slower
  than a real node.

Writes bench/results/agent_latency.json: agent_report_latency_ms, {median, p99} per place.
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "bench" / "results"

from bench.admission import percentile  # noqa: E402
from bench.agent_latency_guest import Arrivals  # noqa: E402


def spread(latencies: list[float]) -> dict:
    return {"median": round(statistics.median(latencies), 1), "p99": round(percentile(latencies, 0.99), 1),
            "samples": len(latencies)}


class ReportWatch(Arrivals):
    """Every NodeMountReport event of one node: when it arrived, and the mount points it shows."""

    def __init__(self, client, node: str) -> None:
        import kubernetes

        super().__init__()
        self.custom = kubernetes.client.CustomObjectsApi(client)
        self.node = node
        self.watch = kubernetes.watch.Watch()
        self.stopped = False
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        import urllib3

        try:
            for event in self.watch.stream(self.custom.list_cluster_custom_object, "mountwarden.io", "v1alpha1",
                                           "nodemountreports", field_selector=f"metadata.name={self.node}",
                                           timeout_seconds=3600):
                self.arrived({v["mountPoint"] for v in (event["object"].get("spec") or {}).get("volumes") or []})
        except urllib3.exceptions.ProtocolError:
            if not self.stopped:
                raise  # the stream ends early only when stop() closes it

    def stop(self) -> None:
        self.stopped = True
        self.watch.stop()


def on_the_control_plane(mounts: int, workdir: Path) -> dict:
    import kubernetes
    from bench.rollout import install_crds

    from mountwarden.devcluster import local_cluster

    kubelet = workdir / "kubelet"
    with local_cluster(workdir / "cluster", nodes=1) as info:
        client = kubernetes.config.new_client_from_config(config_file=str(info.kubeconfig))
        install_crds(client)
        node = kubernetes.client.CoreV1Api(client).list_node().items[0].metadata.name
        reports = ReportWatch(client, node)
        log = (workdir / "agent.log").open("w")
        agent = subprocess.Popen(
            [sys.executable, "-m", "mountwarden", "agent", "--node-name", node, "--proc-root", "/proc",
             "--kubelet-root", str(kubelet), "--network-fstypes", "tmpfs", "--interval", "3600",
             "--probe-timeout", "0", "--metrics-port", "0", "--kubeconfig", str(info.kubeconfig)],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        latencies, mounted_points = [], []
        try:
            reports.wait(0, lambda points: True, timeout=300)
            for _ in range(mounts):
                point = kubelet / "pods" / str(uuid.uuid4()) / "volumes" / "kubernetes.io~nfs" / "pv-latency"
                point.mkdir(parents=True)
                before = len(reports.seen)
                subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "nfs.bench:/export", str(point)], check=True)
                mounted_points.append(point)
                mounted = time.time()
                reported = reports.wait(before, lambda points, p=str(point): p in points)
                latencies.append((reported - mounted) * 1000)
                before = len(reports.seen)
                subprocess.run(["umount", str(point)], check=True)
                mounted_points.pop()
                reports.wait(before, lambda points, p=str(point): p not in points)
        finally:
            for point in mounted_points:
                subprocess.run(["umount", str(point)], capture_output=True)
            os.killpg(agent.pid, signal.SIGTERM)
            agent.wait(timeout=30)
            reports.stop()
            log.close()
    return spread(latencies)


def in_the_lab(mounts: int) -> dict:
    from mountwarden.lab.experiments import EXPORT, Lab
    from mountwarden.lab.image import build_image, find_image
    from mountwarden.lab.vm import LabVM

    image = find_image() or build_image()
    with LabVM(image) as vm:
        lab = Lab.start(vm)
        client = lab.client()
        script = (ROOT / "bench" / "agent_latency_guest.py").read_text()
        result = vm.python(script, client.namespace, client.server, EXPORT, str(mounts), timeout=3600).json()
        accelerator = vm.accelerator
    return {**spread(result["latencies_ms"]), "accelerator": accelerator}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mounts", type=int, default=40, help="mounts timed on the local control plane")
    parser.add_argument("--lab-mounts", type=int, default=15, help="mounts timed in the lab VM")
    parser.add_argument("--skip-lab", action="store_true")
    args = parser.parse_args()
    latency = {}
    with tempfile.TemporaryDirectory(prefix="mountwarden-agent-latency-") as scratch:
        latency["local_control_plane"] = on_the_control_plane(args.mounts, Path(scratch))
    if not args.skip_lab:
        latency["lab_vm"] = in_the_lab(args.lab_mounts)
    result = {
        "summary": {"agent_report_latency_ms": latency},
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "cpus": os.cpu_count(),
        "load_average": [round(value, 2) for value in os.getloadavg()],
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "agent_latency.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
