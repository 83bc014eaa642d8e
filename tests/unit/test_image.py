"""The image's one definition: the Dockerfile is a thin wrapper over `make image`'s build and cannot drift from it.

Both run mountwarden.lab.appimage from the same two locks (hack/image/debian.lock, requirements/runtime.txt); these
tests hold the Dockerfile to that build (its build stage runs it, its final stage is its root and configuration
and nothing else) and the Debian lock to what the build asks apt for. Read, no network: building the image twice
to the same digest is tests/integration/test_image_build.py.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from mountwarden.lab import appimage

ROOT = Path(__file__).resolve().parents[2]


def stages() -> list[list[tuple[str, str]]]:
    """The Dockerfile's stages, each a list of (instruction, arguments), continuation lines joined."""
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text())
    result: list[list[tuple[str, str]]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        instruction, _, arguments = line.partition(" ")
        if instruction.upper() == "FROM":
            result.append([])
        if result:
            result[-1].append((instruction.upper(), " ".join(arguments.split())))
    return result


def test_the_dockerfiles_build_stage_runs_the_same_build_from_the_same_locks():
    build, _ = stages()
    runs = " && ".join(arguments for instruction, arguments in build if instruction == "RUN")
    copied = " ".join(arguments for instruction, arguments in build if instruction == "COPY")
    # The wheels the build stage runs the build with are the locked ones, hash-checked.
    assert "--require-hashes --no-deps -r requirements/runtime.txt -r requirements/build.txt" in runs
    # The build itself: the same module, the same Debian lock, the same sources.
    assert "python -m mountwarden image build --rootfs /rootfs" in runs
    for path in ("requirements/runtime.txt", "requirements/build.txt", "hack/image/debian.lock", "pyproject.toml",
                 "README.md", "LICENSE", "operator/"):
        assert path in copied, f"the build stage does not copy {path}"
    assert appimage.DEBIAN_LOCK.relative_to(ROOT) == Path("hack/image/debian.lock")
    assert appimage.RUNTIME_LOCK.relative_to(ROOT) == Path("requirements/runtime.txt")
    assert set(appimage.WHEEL_SOURCES) == {"pyproject.toml", "README.md", "LICENSE", "operator"}
    # Docker sees exactly those files (and the build reads no other).
    allowed = [line[1:] for line in (ROOT / ".dockerignore").read_text().splitlines() if line.startswith("!")]
    assert sorted(allowed) == sorted(["pyproject.toml", "README.md", "LICENSE", "operator/", "requirements/runtime.txt",
                                      "requirements/build.txt", "hack/image/debian.lock"])


def test_the_dockerfiles_image_is_the_builds_root_with_the_builds_configuration():
    _, final = stages()
    assert final[0] == ("FROM", "scratch")
    assert final[1] == ("COPY", "--from=build /rootfs/ /")
    written = dict(final[2:])
    assert len(written) == len(final) - 2, "an instruction twice in the final stage"
    assert set(written) == {"USER", "ENV", "WORKDIR", "LABEL", "ENTRYPOINT", "CMD"}, (
        "the final stage adds something make image does not")
    config = appimage.config()["config"]
    assert written["USER"] == config["User"] == f"{appimage.UID}:{appimage.UID}"
    assert shlex.split(written["ENV"]) == config["Env"]
    assert written["WORKDIR"] == config["WorkingDir"]
    assert dict(pair.split("=", 1) for pair in shlex.split(written["LABEL"])) == config["Labels"]
    assert json.loads(written["ENTRYPOINT"]) == config["Entrypoint"]
    assert json.loads(written["CMD"]) == config["Cmd"]


def test_the_image_runs_as_a_named_user_that_is_not_root():
    assert appimage.UID not in (0,) and appimage.USER == "mountwarden"
    # The chart runs its pods as that user (the agent as root only for the capabilities it is given).
    chart = (ROOT / "charts/mountwarden/templates/operator.yaml").read_text()
    assert f"runAsUser: {appimage.UID}" in chart


def test_the_debian_lock_is_made_for_the_packages_the_image_asks_for():
    roots, packages = appimage.read_debian_lock()
    assert roots == appimage.ROOT_PACKAGES, "hack/image/debian.lock is stale: run `make image-lock`"
    names = [package.name for package in packages]
    assert names == sorted(set(names)), "one version per package, sorted"
    assert set(roots) <= set(names)
    assert {"python3.11", "libc6", "libssl3"} <= set(names)
    for package in packages:
        assert re.fullmatch(r"[0-9a-f]{64}", package.sha256), package
        assert package.architecture in ("amd64", "all"), package


def test_the_image_key_covers_every_input():
    """A change to a lock, the build's code or a source file of the wheel makes a new image; nothing else does."""
    inputs = {str(path.relative_to(ROOT)) for path in appimage.key_inputs()}
    assert {"hack/image/debian.lock", "requirements/runtime.txt", "requirements/build.txt",
            "operator/mountwarden/lab/appimage.py", "operator/mountwarden/lab/oci.py", "pyproject.toml", "README.md",
            "LICENSE", "operator/mountwarden/cli/__init__.py"} <= inputs
    assert not [path for path in inputs if "__pycache__" in path or ".egg-info" in path]
    assert appimage.input_key() == appimage.input_key()
