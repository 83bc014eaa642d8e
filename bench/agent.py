"""The node agent's cost: one scan of a node with 250 network volumes, from real samples; and the whole scan as
`mountwarden agent` runs it on this machine's own /proc.

The proc root is assembled by tests/procroot.py from real mountstats captures
(the RDMA/nconnect=8 sample of the shared set when present, else the telegraf
one), 250 CSI pod volumes, 5 pods per PV sharing a superblock. Measured in this
process: CPU time per scan (median and p90 of --scans), wall time, and the peak
RSS of a separate `mountwarden agent --dry-run --once` process doing one scan as
users run it. Then the agent's whole step (its activity tracker, mount helpers, the failures' facts, the SQLite and
socket scans, the report handed to a sink) on the real /proc of this machine, whose processes are mostly the
kernel's threads as on any node: its CPU per scan (agent_real_proc_scan_cpu_ms). Writes bench/results/agent.json.

    .venv/bin/python bench/agent.py [--volumes 250] [--scans 20] [--profile]
"""

import argparse
import io
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.procroot import RDMA_NCONNECT, TELEGRAF, assemble_proc_root, scaled_mounts  # noqa: E402
from tests.samples import sample_path  # noqa: E402

from mountwarden.adapters.procreader import ProcRoot  # noqa: E402
from mountwarden.agent.loop import Agent, AgentSettings, PrintedReport  # noqa: E402
from mountwarden.agent.scan import scan_node_report  # noqa: E402
from mountwarden.agent.sqlitescan import report_findings  # noqa: E402
from mountwarden.agent.userspace import scan_nfs_sockets  # noqa: E402

RESULTS = ROOT / "bench" / "results"
DEFAULT_INTERVAL_SECONDS = 30


def pick_sample() -> str:
    try:
        sample_path(RDMA_NCONNECT)
        return RDMA_NCONNECT
    except BaseException:  # pytest.skip when the shared set is absent
        return TELEGRAF


def real_proc_scans(scans: int) -> dict:
    """CPU per step of the agent as the chart runs it (every scan on), on this machine's /proc."""
    settings = AgentSettings(node_name="bench", proc_root=Path("/proc"), kubelet_root="/var/lib/kubelet",
                             network_fstypes=("nfs", "nfs4"), interval_seconds=DEFAULT_INTERVAL_SECONDS,
                             metrics_port=0)
    agent = Agent(settings, PrintedReport(io.StringIO()), sqlite_scan=report_findings,
                  userspace_scan=scan_nfs_sockets)
    agent.step()  # the first step reads each process's cgroup once
    cpu_ms = []
    for _ in range(scans):
        cpu = time.process_time()
        agent.step()
        cpu_ms.append((time.process_time() - cpu) * 1000)
    processes, user_processes = len(agent.proc.pids()), len(agent.proc.user_processes())
    return {"agent_real_proc_scan_cpu_ms": round(statistics.median(cpu_ms), 2),
            "real_proc_processes": processes, "real_proc_kernel_threads": processes - user_processes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--volumes", type=int, default=250)
    parser.add_argument("--scans", type=int, default=20)
    parser.add_argument("--profile", action="store_true", help="print a pyinstrument profile of one scan")
    args = parser.parse_args()
    sample = pick_sample()
    with tempfile.TemporaryDirectory() as scratch:
        assembled = assemble_proc_root(Path(scratch) / "proc", scaled_mounts(args.volumes), sample=sample)
        proc = ProcRoot(assembled.path)
        scan = lambda: scan_node_report(proc, node_name="bench", kubelet_root="/var/lib/kubelet",  # noqa: E731
                                        network_fstypes=("nfs", "nfs4"), sqlite_scan=report_findings)
        volumes = len(scan().spec.volumes)
        cpu_ms, wall_ms = [], []
        for _ in range(args.scans):
            cpu, wall = time.process_time(), time.perf_counter()
            scan()
            cpu_ms.append((time.process_time() - cpu) * 1000)
            wall_ms.append((time.perf_counter() - wall) * 1000)
        if args.profile:
            from pyinstrument import Profiler

            with Profiler() as profiler:
                scan()
            profiler.print()
        agent = subprocess.run(
            [sys.executable, "-c",
             "import resource, sys; from mountwarden.cli import main; sys.argv = sys.argv[1:]\n"
             "try:\n    main()\nexcept SystemExit:\n    pass\n"
             "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)",
             "mountwarden", "agent", "--once", "--dry-run", "--node-name", "bench", "--proc-root",
             str(assembled.path)],
            capture_output=True, text=True, check=True,
        )
        agent_rss_kib = int(agent.stderr.strip().splitlines()[-1])
    median_cpu = statistics.median(cpu_ms)
    summary = {
        "volumes": volumes,
        "sample": sample,
        "agent_scan_cpu_ms": round(median_cpu, 2),
        "agent_scan_cpu_p90_ms": round(statistics.quantiles(cpu_ms, n=10)[-1], 2),
        "agent_scan_wall_ms": round(statistics.median(wall_ms), 2),
        "agent_peak_rss_mib": round(agent_rss_kib / 1024, 1),
        "agent_core_share_at_default_interval": round(median_cpu / (DEFAULT_INTERVAL_SECONDS * 1000), 5),
        **real_proc_scans(args.scans),
        "bench_process_peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "agent.json").write_text(json.dumps({"summary": summary, "cpu_ms": cpu_ms}, indent=2) + "\n")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
