"""The whole suite's time, as CI runs it on a fresh clone: what a contributor waits for, and CI's 90 minutes.

    .venv/bin/python bench/suite.py [--cold] [--keep]

Clones the committed HEAD (uncommitted changes are not measured) into a new temporary directory, runs
`.ci/run` there as CI does, with no MOUNTWARDEN_*_DIR from this environment (the clone's `make test`
finds or builds everything itself), and writes the whole run's time:

- without --cold, make_test_warm_s to bench/results/suite.json: the caches as they are (the control
  plane, the lab images, the node binaries and the image in ~/.cache/mountwarden; Go's and pip's caches);
- with --cold, make_test_cold_s to bench/results/suite_cold.json: XDG_CACHE_HOME and GOMODCACHE point at
  empty directories, so the clone downloads and builds everything again, as on a fresh machine (only the
  Debian packages installed on this one stay). Expect an hour or more on 2 cores.

Each also records pytest's own time, the tests passed and failed, the twenty slowest tests (`make
test`'s --durations=20), and where the machine's CPU went: how busy its cores were over the run, and the
CPU seconds of each kind of process (the VMs' QEMU, the control planes, the pytest workers, what they
start), read every second from every process on the machine: run it on a quiet one. The shared fixtures
are found where this checkout finds them (MOUNTWARDEN_SHARED_FIXTURES, else ../shared/fixtures). The run's
log is kept beside the clone and named at the end; the clone is removed unless --keep. Figures, not
assertions: a red run still writes its time.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import psutil

from unit import read_pytest_output

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
SHARED_FIXTURES = ROOT.parent / "shared" / "fixtures"


def clone_environment(workspace: Path, *, cold: bool) -> dict[str, str]:
    """This environment, as a fresh machine's CI would have it: no prebuilt directories handed in; cold, no caches."""
    environ = {key: value for key, value in os.environ.items()
               if not (key.startswith("MOUNTWARDEN_") and key.endswith("_DIR")) and key != "VIRTUAL_ENV"}
    environ.setdefault("MOUNTWARDEN_SHARED_FIXTURES", str(SHARED_FIXTURES))
    if cold:
        environ["XDG_CACHE_HOME"] = str(workspace / "cache")
        environ["GOMODCACHE"] = str(workspace / "gomod")
        # Go writes its module cache read-only; writable, the workspace can be removed afterwards.
        environ["GOFLAGS"] = " ".join(filter(None, [environ.get("GOFLAGS", ""), "-modcacherw"]))
    return environ


#: How often every process's CPU time is read; what a process used in its last interval before it ended is lost.
SAMPLE_SECONDS = 1.0


def source_of(name: str, cmdline: list[str]) -> str:
    """The kind of process a CPU second is counted for."""
    if name.startswith("qemu-system"):
        # Each VM boots its image's initrd: hack/lab/build.sh names the real node's image directory node_*.
        initrd = cmdline[cmdline.index("-initrd") + 1] if "-initrd" in cmdline[:-1] else ""
        return "qemu: the real node's VM" if Path(initrd).parent.name.startswith("node") else "qemu: the kernel lab's VMs"
    if name in ("kube-apiserver", "etcd", "kwok"):
        return name
    if name.startswith("kube-controller"):  # cut to the kernel's 15 characters once its command line is gone
        return "kube-controller-manager"
    if name.startswith("python") or (cmdline and Path(cmdline[0]).name.startswith("python")):
        # pytest-xdist's workers are execnet's: python -c, reading their code from stdin.
        if "pytest" in " ".join(cmdline[1:3]) or any("sys.stdin.readline" in part for part in cmdline):
            return "pytest and its workers (the tests, and what they run in-process)"
        return "other python (pip, and the operators, agents, moto and webhooks the tests start)"
    if name in ("go", "compile", "link", "asm", "cgo", "gcc", "cc1", "ld"):
        return "go and C builds"
    return "other"


def _elapsed_core_seconds(times) -> float:
    # Linux counts a KVM guest's time in user and nice as well as in guest and guest_nice (proc(5)): summed whole, a
    # run with KVM guests would have more core seconds than the cores had. psutil's cpu_percent leaves them out too.
    return sum(times) - getattr(times, "guest", 0.0) - getattr(times, "guest_nice", 0.0)


class CpuBySource:
    """Every process's CPU seconds while the suite runs, added up by source_of, and the cores' busy fraction."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._seen: dict[tuple[int, float], float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-by-source", daemon=True)

    def __enter__(self) -> "CpuBySource":
        self._cores_before = psutil.cpu_times()
        self._sample(count=False)  # what ran before the suite is not the suite's
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join()
        self._sample(count=True)
        self._cores_after = psutil.cpu_times()

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_SECONDS):
            self._sample(count=True)

    def _sample(self, *, count: bool) -> None:
        seen: dict[tuple[int, float], float] = {}
        for process in psutil.process_iter(["name", "cmdline", "cpu_times", "create_time"]):
            info = process.info
            if info["cpu_times"] is None:  # gone, or not ours to read
                continue
            key = (process.pid, info["create_time"])
            used = info["cpu_times"].user + info["cpu_times"].system
            if count:
                source = source_of(info["name"] or "", info["cmdline"] or [])
                self.seconds[source] = self.seconds.get(source, 0.0) + used - self._seen.get(key, 0.0)
            seen[key] = used
        self._seen = seen  # only the living: a suite starts tens of thousands of short processes

    def figures(self) -> dict:
        before, after = self._cores_before, self._cores_after
        total = _elapsed_core_seconds(after) - _elapsed_core_seconds(before)
        idle = (after.idle - before.idle) + (after.iowait - before.iowait)
        busy = total - idle
        by_source = dict(sorted(self.seconds.items(), key=lambda item: -item[1]))
        # The cores' own count is exact; what no sample saw (processes shorter than a sample, a process's last
        # interval, the kernel's own work) is the difference.
        by_source["unattributed"] = busy - sum(by_source.values())
        return {"cores": psutil.cpu_count(), "busy_fraction": round(busy / total, 3) if total else None,
                "busy_cpu_s": round(busy, 1),
                "steal_fraction": round((after.steal - before.steal) / total, 3) if total else None,
                "sampled_every_s": SAMPLE_SECONDS,
                "seconds_by_source": {source: round(seconds, 1) for source, seconds in by_source.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cold", action="store_true", help="empty caches: everything downloaded and built again")
    parser.add_argument("--keep", action="store_true", help="keep the clone (its path is printed)")
    parser.add_argument("--pytest-args", default="",
                        help="make test's PYTEST_ARGS, e.g. one module (make bench --quick): checks the bench, "
                             "measures nothing worth keeping")
    args = parser.parse_args()
    workspace = Path(tempfile.mkdtemp(prefix="mountwarden-suite-"))
    clone, log_path = workspace / "mountwarden", workspace / "ci-run.log"
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, check=True, capture_output=True,
                          text=True).stdout.strip()
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
    subprocess.run(["git", "checkout", "--quiet", head], cwd=clone, check=True)
    print(f"suite: .ci/run in {clone} ({'cold' if args.cold else 'warm'} caches); its output: {log_path}",
          file=sys.stderr, flush=True)
    started = time.monotonic()
    with log_path.open("w") as log, CpuBySource() as cpu:
        environ = clone_environment(workspace, cold=args.cold)
        if args.pytest_args:
            environ["PYTEST_ARGS"] = args.pytest_args
        done = subprocess.run([str(clone / ".ci" / "run")], cwd=clone, env=environ, stdout=log,
                              stderr=subprocess.STDOUT)
    seconds = round(time.monotonic() - started, 1)
    found = read_pytest_output(log_path.read_text(errors="replace"))
    key, name = ("make_test_cold_s", "suite_cold") if args.cold else ("make_test_warm_s", "suite")
    result = {
        "summary": {key: seconds, "exit_code": done.returncode, "pytest_s": found["pytest_s"],
                    "tests_passed": found["tests_passed"], "tests_failed": found["tests_failed"],
                    "tests_skipped": found["tests_skipped"]},
        "commit": head,
        "pytest_args": args.pytest_args or None,
        "slowest": found["slowest"],
        "cpu": cpu.figures(),
        "log": str(log_path),
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({**result["summary"], "cpu": result["cpu"]}, indent=2))
    if args.keep:
        print(f"suite: the clone is kept in {clone}", file=sys.stderr)
    else:
        shutil.rmtree(clone, ignore_errors=True)
        shutil.rmtree(workspace / "cache", ignore_errors=True)
        shutil.rmtree(workspace / "gomod", ignore_errors=True)
    if done.returncode != 0:
        print(log_path.read_text(errors="replace")[-3000:], file=sys.stderr)


if __name__ == "__main__":
    main()
