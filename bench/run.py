"""`make bench`: every benchmark in one run, their figures in bench/results/ and a short summary.

Each benchmark is a script of its own that writes bench/results/<name>.json; this
runs them one after another (they share two cores: running them at once would
measure each other), then gathers the headline figures into
bench/results/summary.json and bench/results/summary.md. Figures, not
assertions: a benchmark that fails is reported as failed, the others still run.

    .venv/bin/python bench/run.py [--only NAME ...] [--quick]
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"

#: name -> (script arguments, arguments for --quick)
BENCHMARKS: dict[str, tuple[list[str], list[str]]] = {
    "parsers": (["bench/parsers.py", "--seconds", "2"], ["bench/parsers.py", "--seconds", "0.3"]),
    "agent": (["bench/agent.py", "--scans", "20"], ["bench/agent.py", "--scans", "3"]),
    "cloudwatch": (["bench/cloudwatch.py"], ["bench/cloudwatch.py"]),
    "webhook": (["bench/webhook.py"], ["bench/webhook.py", "--profiles", "100", "--classes", "1000",
                                       "--samples", "2000", "--creates", "50", "--cluster-classes", "1000"]),
    "rollout": (["bench/rollout.py"], ["bench/rollout.py", "--deployments", "4", "--rounds", "1"]),
    "scale": (["bench/scale.py"], ["bench/scale.py", "--pvs", "500", "--pods", "2000", "--nodes", "10",
                                   "--touched", "100", "--creates", "50"]),
    # Bench only: five times scale's cluster, for the memory's growth (issue 29).
    "scale_100k": (["bench/scale_100k.py"], ["bench/scale_100k.py", "--pvs", "1000", "--pods", "4000", "--nodes", "20",
                                             "--touched", "100", "--creates", "50"]),
    "agent_latency": (["bench/agent_latency.py"], ["bench/agent_latency.py", "--mounts", "5", "--lab-mounts", "3"]),
    "lab": (["bench/lab.py"], ["bench/lab.py", "--boots", "1", "--skip-cold"]),
    "realnode": (["bench/realnode.py"], ["bench/realnode.py"]),
    "image": (["bench/image.py"], ["bench/image.py", "--skip-cold"]),
    "unit": (["bench/unit.py"], ["bench/unit.py"]),
    "indexes": (["bench/indexes.py"], ["bench/indexes.py", "--pods", "2000", "--pvs", "500"]),
    # Last: the whole suite on a fresh clone, with the caches as they are, then with none (an hour or more).
    "suite": (["bench/suite.py"], ["bench/suite.py", "--pytest-args", "tests/unit/test_policy.py"]),
    "suite_cold": (["bench/suite.py", "--cold"],
                   ["bench/suite.py", "--cold", "--pytest-args", "tests/unit/test_policy.py"]),
}

#: The figures a script can find by name, and the benchmark that measures each.
HEADLINE = {
    "rollout_overhead_ratio": "rollout",
    "operator_rss_mib": "scale",
    "operator_ready_s": "scale",
    "operator_rss_mib_100k": "scale_100k",
    "rss_growth_mib_per_1000_pods": "scale_100k",
    "scale_change_requests_ratio": "scale",
    "webhook_added_p50_vs_null": "webhook",
    "webhook_added_p99_vs_null": "webhook",
    "under_load_webhook_added_p50_vs_null": "scale",
    "under_load_webhook_added_p99_vs_null": "scale",
    # The same ratio for a do-nothing webhook in Python, in a process of its own (bench/pythonnull.py): the floor
    # the p50 goal meets when the webhook is answered in Python at all.
    "under_load_python_null_added_p50_vs_null": "scale",
    "under_load_python_null_added_p99_vs_null": "scale",
    "agent_report_latency_ms": "agent_latency",
    "parser_vs_procfs_ratio": "parsers",
    "agent_scan_cpu_ms": "agent",
    # The agent's whole step on this machine's own /proc (kernel threads and all), not an assembled one.
    "agent_real_proc_scan_cpu_ms": "agent",
    "cloudwatch_requests_per_interval": "cloudwatch",
    "lab_build_cold_s": "lab",
    "lab_boot_s_median": "lab",
    "lab_try_4_mounts_s": "lab",
    "real_node_ready_s": "realnode",
    "realnode_rollout_s": "realnode",
    "failover_gap_s": "realnode",
    "image_mib": "image",
    "image_gzip_mib": "image",
    "image_build_cold_s": "image",
    "image_build_warm_s": "image",
    "operator_start_s": "image",
    "make_unit_s": "unit",
    "make_test_warm_s": "suite",
    "make_test_cold_s": "suite_cold",
    "index_bytes_per_pod": "indexes",
    "index_bytes_per_pv": "indexes",
}
#: The upper bounds of issue 14's goals, tightened by issue 29's (memory, Ready, the webhook's p50 under load, the
#: unit suite, the whole suite warm and cold), for the figures that have one.
GOALS = {
    "rollout_overhead_ratio": 1.2,
    "operator_rss_mib": 150,
    "operator_rss_mib_100k": 400,
    "operator_ready_s": 10,
    "scale_change_requests_ratio": 1.1,
    "webhook_added_p50_vs_null": 1.5,
    "webhook_added_p99_vs_null": 1.5,
    "under_load_webhook_added_p50_vs_null": 1.2,
    "under_load_webhook_added_p99_vs_null": 1.5,
    "make_unit_s": 60,
    "make_test_warm_s": 1200,
    "make_test_cold_s": 2400,
}


def figures(name: str) -> dict:
    path = RESULTS / f"{name}.json"
    document = json.loads(path.read_text())
    flat = document.get("summary", document)
    return {key: value for key, value in flat.items() if isinstance(value, int | float | str | bool | dict)}


def verdict(key: str, value) -> str:
    """'met' or 'missed' against the goal, '' for a figure without one (or without a value)."""
    if key not in GOALS or not isinstance(value, int | float):
        return ""
    return "met" if value <= GOALS[key] else "missed"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="*", choices=sorted(BENCHMARKS), help="run only these")
    parser.add_argument("--quick", action="store_true", help="small sizes: check the benchmarks run, not the figures")
    parser.add_argument("--reuse", nargs="*", default=[], choices=sorted(BENCHMARKS),
                        help="don't run these: take their figures from bench/results/NAME.json of an earlier run "
                             "(marked 'reused' with that run's date in the summary)")
    args = parser.parse_args()
    RESULTS.mkdir(parents=True, exist_ok=True)
    runs: dict[str, dict] = {}
    for name in args.reuse:
        path = RESULTS / f"{name}.json"
        earlier = json.loads(path.read_text())
        runs[name] = {"status": "reused", "date": earlier.get("date") or earlier.get("started_at"),
                      "figures": figures(name)}
    load_before = [round(value, 2) for value in os.getloadavg()]
    for name in [name for name in args.only or BENCHMARKS if name not in args.reuse]:
        full, quick = BENCHMARKS[name]
        script = ROOT / (quick if args.quick else full)[0]
        if not script.exists():
            runs[name] = {"status": "missing", "script": str(script.relative_to(ROOT))}
            continue
        print(f"==> bench {name}", file=sys.stderr, flush=True)
        started = time.monotonic()
        done = subprocess.run([sys.executable, *(quick if args.quick else full)], cwd=ROOT, env=dict(os.environ),
                              capture_output=True, text=True)
        elapsed = round(time.monotonic() - started, 1)
        if done.returncode != 0:
            print(done.stderr[-3000:], file=sys.stderr)
            runs[name] = {"status": "failed", "seconds": elapsed, "error": done.stderr[-2000:]}
            continue
        runs[name] = {"status": "ok", "seconds": elapsed, "figures": figures(name)}
    date = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    headline = {"date": date, "cpus": os.cpu_count(),
                **{key: runs.get(name, {}).get("figures", {}).get(key) for key, name in HEADLINE.items()}}
    summary = {
        "date": date,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
                    # Shared by other work: the load says how noisy the figures are.
                    "load_average_before": load_before,
                    "load_average_after": [round(value, 2) for value in os.getloadavg()]},
        "quick": args.quick,
        "headline": headline,
        "goals": {key: {"at_most": bound, "verdict": verdict(key, headline.get(key))} for key, bound in GOALS.items()},
        "benchmarks": runs,
    }
    (RESULTS / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    machine = summary["machine"]
    lines = [f"# Benchmarks ({date}, {os.cpu_count()} CPUs{', quick' if args.quick else ''})", "",
             f"Load average before and after: {machine['load_average_before']} -> {machine['load_average_after']}.", "",
             "| figure | value | goal | from |", "|---|---|---|---|"]
    lines += [f"| `{key}` | {json.dumps(value) if value is not None else 'n/a'} | "
              f"{f'<= {GOALS[key]} ({verdict(key, value)})' if key in GOALS else ''} | {HEADLINE[key]} |"
              for key, value in headline.items() if key in HEADLINE]
    lines += ["", "| benchmark | status | seconds (or date, reused) |", "|---|---|---|"]
    lines += [f"| {name} | {run['status']} | {run.get('seconds', run.get('date', ''))} |" for name, run in runs.items()]
    (RESULTS / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    if any(run["status"] == "failed" for run in runs.values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
