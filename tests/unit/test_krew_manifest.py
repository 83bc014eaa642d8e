"""plugins/krew/mountwarden.yaml is a manifest krew accepts (its rules: krew's pkg/index/validation), its sha256 is
the archive `make krew` builds from this repository, and the launcher in that archive runs the plugin."""

import hashlib
import io
import os
import re
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
MANIFEST_PATH = ROOT / "plugins/krew/mountwarden.yaml"
MANIFEST = yaml.safe_load(MANIFEST_PATH.read_text())
sys.path.insert(0, str(ROOT / "hack/krew"))
from archive import archive_bytes  # noqa: E402


def archive_members() -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(archive_bytes()), mode="r:gz") as tar:
        return {member.name: member for member in tar.getmembers()}


def test_the_manifest_has_krews_shape():
    assert MANIFEST["apiVersion"] == "krew.googlecontainertools.github.com/v1alpha2"
    assert MANIFEST["kind"] == "Plugin"
    # krew: the name matches the file's, and is lowercase letters, digits and dashes.
    assert MANIFEST["metadata"]["name"] == MANIFEST_PATH.stem
    assert re.fullmatch(r"[a-z0-9][a-z0-9-]*", MANIFEST["metadata"]["name"])
    spec = MANIFEST["spec"]
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert spec["version"] == f"v{version}", "the manifest's version is the package's, with krew's leading v"
    assert spec["shortDescription"] and spec["description"] and spec["homepage"].startswith("https://")
    assert spec["platforms"], "krew needs at least one platform"


def test_each_platform_installs_the_archive_built_here():
    sha256 = hashlib.sha256(archive_bytes()).hexdigest()
    members = archive_members()
    platforms = MANIFEST["spec"]["platforms"]
    assert [p["selector"]["matchExpressions"][0]["values"] for p in platforms] == [["linux", "darwin"]]
    assert set(members) == {"kubectl-mountwarden", "LICENSE"}
    for platform in platforms:
        selector = platform["selector"]
        assert selector.get("matchLabels") or selector.get("matchExpressions")
        assert platform["uri"].startswith("https://") and platform["uri"].endswith(".tar.gz")
        assert platform["uri"].count(MANIFEST["spec"]["version"]) == 1, "the release's archive"
        assert platform["sha256"] == sha256, "the archive changed: run `make krew` and put its sha256 here"
        for entry in platform["files"]:
            assert entry["from"] in members, entry
        bin_name = platform["bin"]
        assert bin_name in members and members[bin_name].mode & 0o111, "the plugin's executable is in the archive"


def test_the_launcher_runs_the_plugin(tmp_path):
    launcher = tmp_path / "kubectl-mountwarden"
    with tarfile.open(fileobj=io.BytesIO(archive_bytes()), mode="r:gz") as tar:
        launcher.write_bytes(tar.extractfile("kubectl-mountwarden").read())
    launcher.chmod(0o755)
    result = subprocess.run([str(launcher), "--help"], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "MOUNTWARDEN_PYTHON": sys.executable})
    assert result.returncode == 0, result.stderr
    assert "Usage: kubectl mountwarden" in result.stdout and "why" in result.stdout and "who" in result.stdout
    # Without a python that has the package: a clear message, not a traceback.
    missing = subprocess.run([str(launcher), "--help"], capture_output=True, text=True, timeout=60,
                             env={"PATH": str(tmp_path), "MOUNTWARDEN_PYTHON": "/nonexistent/python"})
    assert missing.returncode == 1 and "pip install mountwarden" in missing.stderr
