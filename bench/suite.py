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

Each also records pytest's own time, the tests passed and failed, and the twenty slowest tests (`make
test`'s --durations=20). The shared fixtures are found where this checkout finds them
(MOUNTWARDEN_SHARED_FIXTURES, else ../shared/fixtures). The run's log is kept beside the clone and named
at the end; the clone is removed unless --keep. Figures, not assertions: a red run still writes its time.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

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
    with log_path.open("w") as log:
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
        "log": str(log_path),
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["summary"], indent=2))
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
