"""Run inside the kernel lab VM by bench/agent_latency.py: how soon the agent reports a new NFS mount.

    python3 agent_latency_guest.py NETNS SERVER EXPORT MOUNTS

Starts `mountwarden agent --dry-run` (the VM has no network: the reports it would write are
printed, one JSON document each, and timestamped here as they arrive), then MOUNTS times:
mounts EXPORT of SERVER through the network namespace NETNS (an independent NFS client) where
the kubelet would mount a pod's NFS volume, and measures from the moment mount(8) returns to
the moment a printed report shows the mount; then unmounts it and waits for the report without
it. Prints one JSON document: the latencies in milliseconds. Standard library only (the guest
has mountwarden's dependencies on PYTHONPATH, this script needs none of them).
"""

import json
import os
import subprocess
import sys
import threading
import time
import uuid

KUBELET = "/var/lib/kubelet"


class Arrivals:
    """Reports as they arrive: when, and the mount points each shows (bench/agent_latency.py uses it too)."""

    def __init__(self) -> None:
        self.seen: list[tuple[float, set[str]]] = []
        self.changed = threading.Condition()

    def arrived(self, points: set[str]) -> None:
        with self.changed:
            self.seen.append((time.time(), points))
            self.changed.notify_all()

    def wait(self, after: int, condition, timeout: float = 300.0) -> float:
        """The arrival time of the first report at index >= ``after`` for which ``condition`` holds."""
        deadline = time.time() + timeout
        with self.changed:
            while True:
                for arrived, points in self.seen[after:]:
                    if condition(points):
                        return arrived
                if not self.changed.wait(max(0.0, deadline - time.time())):
                    raise TimeoutError("no such report came")


class Reports(Arrivals):
    """The agent's printed reports, each timed when its last line arrived."""

    def __init__(self, stream) -> None:
        super().__init__()
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream) -> None:
        decoder = json.JSONDecoder()
        buffer = ""
        for line in stream:
            buffer += line
            try:
                document, _ = decoder.raw_decode(buffer.strip())
            except json.JSONDecodeError:
                continue
            buffer = ""
            self.arrived({volume["mountPoint"] for volume in document["spec"]["volumes"]})


def main() -> None:
    netns, server, export, mounts = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    agent = subprocess.Popen(
        [sys.executable, "-m", "mountwarden", "agent", "--node-name", "lab", "--proc-root", "/proc",
         "--kubelet-root", KUBELET, "--interval", "3600", "--metrics-port", "0", "--dry-run"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    reports = Reports(agent.stdout)
    latencies = []
    try:
        reports.wait(0, lambda points: True, timeout=900)  # started (imports are slow under emulation)
        for _ in range(mounts):
            point = f"{KUBELET}/pods/{uuid.uuid4()}/volumes/kubernetes.io~nfs/pv-latency"
            os.makedirs(point)
            before = len(reports.seen)
            subprocess.run(["nsenter", f"--net=/run/netns/{netns}", "mount", "-t", "nfs", "-o", "vers=4.1,hard",
                            f"{server}:{export}", point], check=True)
            mounted = time.time()
            reported = reports.wait(before, lambda points, p=point: p in points)
            latencies.append(round((reported - mounted) * 1000, 1))
            before = len(reports.seen)
            subprocess.run(["umount", point], check=True)
            reports.wait(before, lambda points, p=point: p not in points)
    finally:
        agent.terminate()
        agent.wait(timeout=60)
    print(json.dumps({"latencies_ms": latencies}))


if __name__ == "__main__":
    main()
