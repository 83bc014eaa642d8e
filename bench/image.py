"""mountwarden's image: its size, what building it costs cold and warm, and how long the operator takes to start.

Cold means empty caches: a temporary image cache and download directory, and no pip cache (the .debs from
Debian's archive, the wheels from PyPI). Warm is finding the cached image for the same inputs. The SBOM (syft) is
not part of either. The operator's start is the image's own `mountwarden operator`, run from the image's root
(unpacked, chroot, as the image's user 65532) against a throwaway local control plane: from its start to its
liveness endpoint answering, which is when kopf has logged in and started its watches, natively on this machine.
The same start on the real node under emulation is the chart's own (tests/realnode). Needs root (chroot).
Writes bench/results/image.json.

    .venv/bin/python bench/image.py [--skip-cold]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
sys.path.insert(0, str(ROOT))

from tests.support import free_port  # noqa: E402

from mountwarden.devcluster import local_cluster  # noqa: E402
from mountwarden.lab import appimage  # noqa: E402


def timed(action) -> tuple[float, object]:
    started = time.monotonic()
    value = action()
    return time.monotonic() - started, value


def unpack(image: appimage.BuiltImage, root: Path) -> None:
    with tarfile.open(image.archive) as archive:
        (entry,) = json.load(archive.extractfile("index.json"))["manifests"]
        manifest = json.load(archive.extractfile(f"blobs/sha256/{entry['digest'].split(':')[1]}"))
        for layer in manifest["layers"]:
            with tarfile.open(fileobj=archive.extractfile(f"blobs/sha256/{layer['digest'].split(':')[1]}")) as tar:
                tar.extractall(root, filter="fully_trusted")


def operator_start_seconds(image: appimage.BuiltImage, scratch: Path) -> float:
    """The image's operator, as the image runs it (its user, its environment), until /healthz answers."""
    root = scratch / "root"
    unpack(image, root)
    with local_cluster(scratch / "cluster", nodes=1) as cluster:
        for crd in sorted((ROOT / "crds").glob("*.yaml")):
            subprocess.run([str(cluster.binaries / "kubectl"), f"--kubeconfig={cluster.kubeconfig}", "apply",
                            "--server-side", "-f", str(crd)], check=True, capture_output=True)
        shutil.copy(cluster.kubeconfig, root / "tmp" / "kubeconfig")
        (root / "tmp" / "kubeconfig").chmod(0o644)
        port = free_port()
        config = appimage.config()["config"]
        env = dict(entry.split("=", 1) for entry in config["Env"])
        argv = ["chroot", f"--userspec={config['User']}", str(root), *config["Entrypoint"], "operator",
                "--kubeconfig", "/tmp/kubeconfig", "--liveness", f"http://127.0.0.1:{port}/healthz",
                "--metrics-port", "0", "--webhook-port", str(free_port())]
        subprocess.run(["mount", "-t", "proc", "proc", str(root / "proc")], check=True)
        subprocess.run(["mount", "--rbind", "/dev", str(root / "dev")], check=True)
        started = time.monotonic()
        with open(scratch / "operator.log", "w") as log:
            process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=log)
        try:
            while True:
                if process.poll() is not None:
                    raise RuntimeError(f"the operator exited {process.returncode}: "
                                       f"{(scratch / 'operator.log').read_text()[-3000:]}")
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as response:
                        if response.status == 200:
                            return time.monotonic() - started
                except OSError:
                    time.sleep(0.1)
        finally:
            process.terminate()
            process.wait(timeout=60)
            subprocess.run(["umount", "-R", str(root / "dev")], check=False)
            subprocess.run(["umount", str(root / "proc")], check=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--skip-cold", action="store_true", help="do not measure a cold build (about 2 minutes)")
    args = parser.parse_args()
    started = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    summary: dict = {}
    if not args.skip_cold:
        with tempfile.TemporaryDirectory(prefix="image-cold-") as cache:
            os.environ["PIP_NO_CACHE_DIR"] = "1"
            try:
                seconds, image = timed(lambda: appimage.build_image(root=Path(cache)))
            finally:
                os.environ.pop("PIP_NO_CACHE_DIR")
            summary["image_build_cold_s"] = round(seconds, 1)
            summary["image_build_cold_steps_s"] = image.manifest["step_seconds"]
    seconds, image = timed(lambda: appimage.find_image() or appimage.build_image())
    summary["image_build_warm_s"] = round(seconds, 2)
    manifest = image.manifest
    summary["image_digest"] = manifest["digest"]
    summary["image_mib"] = round(manifest["bytes"] / 2**20, 1)
    summary["image_gzip_mib"] = round(manifest["gzip_bytes"] / 2**20, 1)
    summary["image_layers_mib"] = [round(layer["bytes"] / 2**20, 1) for layer in manifest["layers"]]
    summary["image_debian_packages"] = len(manifest["debian"])
    summary["image_python_packages"] = len(manifest["python"])
    if image.sbom.exists():
        summary["sbom_packages"] = len(json.loads(image.sbom.read_text())["packages"])
    with tempfile.TemporaryDirectory(prefix="image-start-") as scratch:
        summary["operator_start_s"] = round(operator_start_seconds(image, Path(scratch)), 2)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "image.json").write_text(json.dumps({"date": started, "summary": summary}, indent=2) + "\n")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
