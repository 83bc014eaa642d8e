"""The unit suite's time, as `make unit` runs it: what a contributor waits for before each commit.

    .venv/bin/python bench/unit.py [--lanes 2]

Runs tests/unit in --lanes pytest-xdist processes (`make unit`'s -n 2) and writes
bench/results/unit.json: make_unit_s (the whole run, start-up and collection included),
the number of tests, and the ten slowest with their time. Figures, not assertions:
a failed test is reported, the time still written.
"""

import argparse
import json
import re
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"

#: pytest's --durations lines: "0.52s call     tests/unit/test_x.py::test_y"
DURATION = re.compile(r"^(?P<seconds>\d+\.\d+)s (?P<phase>call|setup|teardown)\s+(?P<test>\S+)$")
#: pytest's summary line: "=== 1 failed, 1589 passed, 2 errors in 51.23s (0:00:51) ==="
SUMMARY = re.compile(r"^=+ (?P<outcomes>.*) in (?P<seconds>\d+\.\d+)s")
OUTCOME = re.compile(r"(\d+) (passed|failed|errors?|skipped)")


def read_pytest_output(text: str) -> dict:
    """Pytest's own time, its outcomes and the --durations lines, from what it printed (bench/suite.py reads the
    same)."""
    lines = [line.strip() for line in text.splitlines()]
    slowest = [{"seconds": float(match["seconds"]), "phase": match["phase"], "test": match["test"]}
               for line in lines if (match := DURATION.match(line))]
    summary = next((match for line in reversed(lines) if (match := SUMMARY.match(line))), None)
    counts = {kind.rstrip("s") if kind.startswith("error") else kind: int(count)
              for count, kind in OUTCOME.findall(summary["outcomes"])} if summary else {}
    return {"pytest_s": float(summary["seconds"]) if summary else None,
            "tests_passed": counts.get("passed", 0),
            "tests_failed": counts.get("failed", 0) + counts.get("error", 0),
            "tests_skipped": counts.get("skipped", 0),
            "slowest": slowest}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lanes", type=int, default=2, help="pytest-xdist processes (make unit's -n)")
    args = parser.parse_args()
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", "tests/unit", "-n", str(args.lanes), "-q",
                           "--durations=10", "-p", "no:cacheprovider"], cwd=ROOT, capture_output=True, text=True)
    seconds = round(time.monotonic() - started, 1)
    found = read_pytest_output(done.stdout)
    result = {
        "summary": {"make_unit_s": seconds, "lanes": args.lanes, "tests_passed": found["tests_passed"],
                    "tests_failed": found["tests_failed"]},
        "slowest": found["slowest"],
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "unit.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["summary"], indent=2))
    if done.returncode != 0:
        print(done.stdout[-3000:], file=sys.stderr)


if __name__ == "__main__":
    main()
