"""Parser throughput: mountwarden's mountstats and mountinfo parsers against prometheus/procfs (Go).

Both read the same files in one run: every real mountstats sample of
shared/fixtures/procfs that the Go parser accepts, and this machine's own
mountinfo. The Go side is a small program in bench/goprocfs built through the
Go module proxy. Figures, not assertions: writes bench/results/parsers.json.

    .venv/bin/python bench/parsers.py [--seconds 2]
"""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mountwarden.core.procfs import parse_mountinfo, parse_mountstats

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT.parent / "shared" / "fixtures" / "procfs"
RESULTS = ROOT / "bench" / "results"


def build_go_parser(out_dir: Path) -> Path:
    binary = out_dir / "goprocfs"
    subprocess.run(["go", "build", "-o", str(binary), "."], cwd=ROOT / "bench" / "goprocfs", check=True)
    return binary


def python_throughput(parse, text: str, seconds: float) -> dict:
    lines = text.count("\n")
    iterations = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        parse(text)
        iterations += 1
    elapsed = time.perf_counter() - start
    return {"lines": lines, "iterations": iterations, "seconds": elapsed, "lines_per_second": lines * iterations / elapsed}


def go_throughput(binary: Path, mountstats: str, mountinfo: str, seconds: float) -> dict | None:
    with tempfile.TemporaryDirectory() as root:
        (Path(root) / "1").mkdir()
        (Path(root) / "1" / "mountstats").write_text(mountstats)
        (Path(root) / "1" / "mountinfo").write_text(mountinfo)
        done = subprocess.run([str(binary), "-root", root, "-pid", "1", "-seconds", str(seconds)],
                              capture_output=True, text=True)
    if done.returncode != 0:
        return None  # the Go parser refused the file (it is stricter than the kernel's formats allow)
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=1.0, help="time spent on each file, per parser")
    args = parser.parse_args()
    mountinfo = Path("/proc/self/mountinfo").read_text()
    rows, refused = [], []
    with tempfile.TemporaryDirectory() as build_dir:
        binary = build_go_parser(Path(build_dir))
        for sample in sorted(SAMPLES.glob("mountstats-*.txt")):
            text = sample.read_text()
            go = go_throughput(binary, text, mountinfo, args.seconds)
            if go is None:
                refused.append(sample.name)
                continue
            rows.append({
                "file": sample.name,
                "python": python_throughput(parse_mountstats, text, args.seconds),
                "go": go["mountstats"],
            })
        go_info = go_throughput(binary, text, mountinfo, args.seconds)
    info = {"python": python_throughput(parse_mountinfo, mountinfo, args.seconds), "go": go_info["mountinfo"]}

    def rate(side: str) -> float:  # total lines over total time, so big files weigh what they cost
        lines = sum(r[side]["lines"] * r[side]["iterations"] for r in rows)
        return lines / sum(r[side]["seconds"] for r in rows)

    summary = {
        "mountstats_python_lines_per_second": rate("python"),
        "mountstats_go_lines_per_second": rate("go"),
        "mountstats_vs_procfs_ratio": rate("python") / rate("go"),
        "mountinfo_python_lines_per_second": info["python"]["lines_per_second"],
        "mountinfo_go_lines_per_second": info["go"]["lines_per_second"],
        "mountinfo_vs_procfs_ratio": info["python"]["lines_per_second"] / info["go"]["lines_per_second"],
    }
    # The headline: the slower of the two, as a fraction of Go's speed (1.0 = as fast as procfs).
    summary["parser_vs_procfs_ratio"] = min(summary["mountstats_vs_procfs_ratio"], summary["mountinfo_vs_procfs_ratio"])
    document = {"summary": summary, "mountstats": rows, "mountinfo": info, "refused_by_go": refused,
                "python": sys.version.split()[0]}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "parsers.json").write_text(json.dumps(document, indent=2) + "\n")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
