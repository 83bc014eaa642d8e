"""The lock files (requirements/*.txt, written by `make lock`) agree with pyproject.toml: read, no network.

pyproject.toml says what the project accepts; the locks say what every install gets (the venv, CI and
the image), each with its hashes. A dependency added, dropped or re-bounded in pyproject.toml without
`make lock` fails here, naming the package.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
LOCKS = ROOT / "requirements"
#: How uv's "# via" notes name the inputs (hack/lock.sh): the project's tables, and the build-system list.
FROM_PROJECT = "mountwarden (pyproject.toml)"
FROM_BUILD_SYSTEM = "-r requirements/pyproject-build-system.in"
FROM_IMAGE_EXTRA = "-r requirements/pyproject-image-extra.in"
#: kopf is pinned exactly: mountwarden.handlers.kopfpatch patches its private ToggleSet.
EXACT = {"kopf"}


@dataclass
class Pin:
    version: Version
    marker: str
    hashes: list[str] = field(default_factory=list)
    via: set[str] = field(default_factory=set)


def read_lock(path: Path) -> dict[str, list[Pin]]:
    """name -> its pins (one per marker: uv may pin one package differently per Python version)."""
    pins: dict[str, list[Pin]] = {}
    current: Pin | None = None
    for line in path.read_text().splitlines():
        if match := re.match(r"^([A-Za-z0-9._-]+)==(\S+)(?:\s*;\s*(.*?))?\s*\\?$", line):
            current = Pin(Version(match[2]), (match[3] or "").strip())
            pins.setdefault(canonicalize_name(match[1]), []).append(current)
        elif current and (match := re.match(r"^\s+--hash=(sha256:[0-9a-f]{64})", line)):
            current.hashes.append(match[1])
        elif current and (match := re.match(r"^\s+#\s+(?:via\s+)?(\S.*)$", line)) and match[1] != "via":
            current.via.add(match[1].strip())
    return pins


def direct(lock: dict[str, list[Pin]], source: str) -> set[str]:
    return {name for name, pins in lock.items() if any(source in pin.via for pin in pins)}


def requirements(*tables: list[str]) -> list[Requirement]:
    return [Requirement(line) for table in tables for line in table]


RUNTIME = requirements(PYPROJECT["project"]["dependencies"])
EXTRAS = requirements(*(PYPROJECT["project"]["optional-dependencies"][extra] for extra in ("test", "bench", "image")))
BUILD = requirements(PYPROJECT["build-system"]["requires"])
#: What `make image` and the Dockerfile install the locked wheels with.
IMAGE_TOOLS = requirements(PYPROJECT["project"]["optional-dependencies"]["image"])


def names(reqs: list[Requirement]) -> set[str]:
    return {canonicalize_name(req.name) for req in reqs}


@pytest.fixture(scope="module")
def dev() -> dict[str, list[Pin]]:
    return read_lock(LOCKS / "dev.txt")


@pytest.mark.parametrize(("lock_name", "wanted"), [("dev.txt", RUNTIME + EXTRAS + BUILD), ("runtime.txt", RUNTIME),
                                                   ("build.txt", BUILD + IMAGE_TOOLS)])
def test_every_requirement_of_pyproject_is_locked_within_its_bounds(lock_name, wanted):
    lock = read_lock(LOCKS / lock_name)
    assert wanted and lock
    for req in wanted:
        pins = lock.get(canonicalize_name(req.name))
        assert pins, f"{req.name} is in pyproject.toml but not in requirements/{lock_name}: run `make lock`"
        for pin in pins:
            assert req.specifier.contains(pin.version, prereleases=True), (
                f"requirements/{lock_name} pins {req.name}=={pin.version}, outside pyproject.toml's "
                f"'{req.specifier}': run `make lock`")


def test_the_locks_hold_no_direct_dependency_that_pyproject_dropped(dev):
    locks = {name: read_lock(LOCKS / name) for name in ("runtime.txt", "build.txt")} | {"dev.txt": dev}
    for lock_name, source, wanted in [("dev.txt", FROM_PROJECT, RUNTIME + EXTRAS), ("dev.txt", FROM_BUILD_SYSTEM, BUILD),
                                      ("runtime.txt", FROM_PROJECT, RUNTIME), ("build.txt", FROM_BUILD_SYSTEM, BUILD),
                                      ("build.txt", FROM_IMAGE_EXTRA, IMAGE_TOOLS)]:
        dropped = direct(locks[lock_name], source) - names(wanted)
        assert not dropped, f"requirements/{lock_name} still locks {sorted(dropped)} for pyproject.toml: run `make lock`"


@pytest.mark.parametrize("lock_name", ["runtime.txt", "build.txt"])
def test_the_image_gets_the_versions_the_tests_ran(dev, lock_name):
    assert read_lock(LOCKS / lock_name), lock_name
    for name, pins in read_lock(LOCKS / lock_name).items():
        assert name in dev, f"requirements/{lock_name} has {name}, requirements/dev.txt does not: run `make lock`"
        tested = {(pin.version, pin.marker) for pin in dev[name]}
        assert {(pin.version, pin.marker) for pin in pins} <= tested, (
            f"{name}: requirements/{lock_name} and requirements/dev.txt pin different versions: run `make lock`")


@pytest.mark.parametrize("lock_name", ["dev.txt", "runtime.txt", "build.txt"])
def test_every_pin_carries_its_hashes(lock_name):
    lock = read_lock(LOCKS / lock_name)
    assert lock, f"requirements/{lock_name} pins nothing"
    unhashed = [name for name, pins in lock.items() for pin in pins if not pin.hashes]
    assert not unhashed, f"requirements/{lock_name}: no --hash for {unhashed}"


def test_kopf_is_pinned_exactly_because_a_private_class_is_patched(dev):
    for req in RUNTIME:
        if canonicalize_name(req.name) in EXACT:
            (spec,) = req.specifier
            assert spec.operator == "==", f"pyproject.toml: pin {req.name} exactly (==), not '{req.specifier}'"
            assert [pin.version for pin in dev[canonicalize_name(req.name)]] == [Version(spec.version)]
    assert "ToggleSet" in (ROOT / "operator/mountwarden/handlers/kopfpatch.py").read_text(), (
        "the private kopf class is no longer patched: drop the exact pin and this test")


def test_read_lock_reads_uvs_format_including_markers_and_multi_line_notes(tmp_path):
    lock = tmp_path / "lock.txt"
    lock.write_text(
        "# This file was autogenerated by uv via the following command:\n"
        "#    make lock\n"
        "networkx==3.6.1 ; python_full_version < '3.12' \\\n"
        f"    --hash=sha256:{'a' * 64} \\\n"
        f"    --hash=sha256:{'b' * 64}\n"
        "    # via grimp\n"
        "pyyaml==6.0.4 \\\n"
        f"    --hash=sha256:{'c' * 64}\n"
        "    # via\n"
        "    #   kubernetes\n"
        "    #   mountwarden (pyproject.toml)\n"
    )
    parsed = read_lock(lock)
    (networkx,) = parsed["networkx"]
    assert (str(networkx.version), networkx.marker, len(networkx.hashes)) == ("3.6.1", "python_full_version < '3.12'", 2)
    assert parsed["pyyaml"][0].via == {"kubernetes", FROM_PROJECT}
    assert direct(parsed, FROM_PROJECT) == {"pyyaml"}
