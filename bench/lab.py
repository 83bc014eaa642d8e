"""The kernel lab's own costs: building the image cold and warm, booting it, `lab try` with 4 mounts.

Cold means an empty cache (a temporary $MOUNTWARDEN_LAB_CACHE): kernel download, debootstrap,
modules, the guest's Python packages, the initramfs. Warm is finding the cached image. Boot is
QEMU start to the guest's command daemon answering (median of --boots). `lab try` is the whole
command as users run it (a fresh VM, the server, 4 mounts, the live scan, teardown).
Writes bench/results/lab.json.

    .venv/bin/python bench/lab.py [--boots 3] [--skip-cold]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"

from mountwarden.lab.image import CACHE_ENV, DIR_ENV, build_image, find_image  # noqa: E402
from mountwarden.lab.vm import LabVM, choose_accelerator  # noqa: E402


def timed(action) -> tuple[float, object]:
    started = time.monotonic()
    value = action()
    return time.monotonic() - started, value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--boots", type=int, default=3)
    parser.add_argument("--skip-cold", action="store_true", help="do not measure a cold build (about 4 minutes)")
    args = parser.parse_args()
    started = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    summary: dict = {"accelerator": choose_accelerator()}
    if not args.skip_cold:
        with tempfile.TemporaryDirectory(prefix="lab-cold-") as cache:
            saved = {name: os.environ.pop(name, None) for name in (CACHE_ENV, DIR_ENV)}
            os.environ[CACHE_ENV] = cache
            try:
                seconds, image = timed(build_image)
                summary["lab_build_cold_s"] = round(seconds, 1)
                summary["lab_build_cold_steps_s"] = image.manifest["step_seconds"]
            finally:
                os.environ.pop(CACHE_ENV)
                for name, value in saved.items():
                    if value is not None:
                        os.environ[name] = value
    seconds, image = timed(lambda: find_image() or build_image())
    summary["lab_build_warm_s"] = round(seconds, 2)
    summary["kernel"] = image.manifest["kernel_release"]
    summary["initrd_mib"] = round(image.manifest["initrd_bytes"] / 2**20, 1)
    boots = []
    for _ in range(args.boots):
        with LabVM(image) as vm:
            boots.append(vm.boot_seconds)
    summary["lab_boot_s_median"] = round(statistics.median(boots), 1)
    summary["lab_boot_s_all"] = [round(b, 1) for b in boots]
    seconds, done = timed(lambda: subprocess.run(
        [sys.executable, "-m", "mountwarden", "lab", "try", "vers=4.1,timeo=100", "vers=4.1,timeo=600",
         "vers=4.1,nconnect=4,nosharecache", "vers=4.1,wsize=516096", "--json"],
        capture_output=True, text=True, env=dict(os.environ, **{DIR_ENV: str(image.dir)})))
    if done.returncode not in (0, 1):
        raise SystemExit(f"lab try failed ({done.returncode}): {done.stderr[-2000:]}")
    summary["lab_try_4_mounts_s"] = round(seconds, 1)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "lab.json").write_text(json.dumps({"date": started, "summary": summary}, indent=2) + "\n")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
