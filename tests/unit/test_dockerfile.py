"""The Dockerfile, read (no Docker engine here to build it): a thin wrapper over `make image` that cannot drift.

Its build stage runs the same build (mountwarden.lab.appimage) from the same locks, and its image is that build's
root with that build's configuration, nothing else. What the image runs is checked by running it from this
checkout (the console script the ENTRYPOINT names, with the subcommands the chart gives it), and as `make image`
builds it on the real node (tests/realnode).
"""

from __future__ import annotations

import fnmatch
import json
import shlex
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from mountwarden.lab import appimage

ROOT = Path(__file__).resolve().parents[2]
NON_ROOT_UID = 65532


@dataclass(frozen=True)
class Instruction:
    keyword: str
    arguments: str


def instructions(text: str) -> list[Instruction]:
    """The Dockerfile's instructions, continuation lines joined, comments dropped."""
    joined, parsed = "", []
    for line in text.splitlines():
        if not joined and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            joined += line.rstrip()[:-1] + " "
            continue
        joined += line
        keyword, _, arguments = joined.strip().partition(" ")
        parsed.append(Instruction(keyword.upper(), arguments.strip()))
        joined = ""
    return parsed


DOCKERFILE = instructions((ROOT / "Dockerfile").read_text())


def stages() -> list[list[Instruction]]:
    found: list[list[Instruction]] = []
    for instruction in DOCKERFILE:
        if instruction.keyword == "FROM":
            found.append([])
        if found:
            found[-1].append(instruction)
    return found


def test_the_build_stage_runs_make_images_build_from_the_same_locks():
    """A thin wrapper: the build stage runs mountwarden.lab.appimage, as `make image` does, from the same locks."""
    build, _ = stages()
    assert build[0].arguments.split()[-2:] == ["AS", "build"]
    runs = " && ".join(i.arguments for i in build if i.keyword == "RUN")
    # The wheels the build runs with are the locked ones, hash-checked, the lock taken as it is.
    assert "--require-hashes --no-deps -r requirements/runtime.txt -r requirements/build.txt" in runs
    assert "python -m mountwarden image build --rootfs /rootfs" in runs
    copied = " ".join(i.arguments for i in build if i.keyword == "COPY")
    assert "hack/image/debian.lock" in copied
    assert appimage.DEBIAN_LOCK.relative_to(ROOT) == Path("hack/image/debian.lock")
    assert appimage.RUNTIME_LOCK.relative_to(ROOT) == Path("requirements/runtime.txt")


def test_the_image_is_the_builds_root_with_the_builds_configuration_and_nothing_else():
    _, final = stages()
    assert final[0].arguments == "scratch"  # nothing from a base image: every file comes from the locks
    assert final[1] == Instruction("COPY", "--from=build /rootfs/ /")
    written = {i.keyword: i.arguments for i in final[2:]}
    assert len(written) == len(final) - 2, "an instruction twice in the final stage"
    assert set(written) == {"USER", "ENV", "WORKDIR", "LABEL", "ENTRYPOINT", "CMD"}, (
        "the final stage adds something `make image` does not")
    config = appimage.config()["config"]
    assert written["USER"] == config["User"] == f"{NON_ROOT_UID}:{NON_ROOT_UID}"
    assert shlex.split(written["ENV"]) == config["Env"]
    assert written["WORKDIR"] == config["WorkingDir"]
    assert dict(pair.split("=", 1) for pair in shlex.split(written["LABEL"])) == config["Labels"]
    assert json.loads(written["ENTRYPOINT"]) == config["Entrypoint"]
    assert json.loads(written["CMD"]) == config["Cmd"]


def test_the_image_runs_as_a_named_non_root_user():
    assert (appimage.USER, appimage.UID) == ("mountwarden", NON_ROOT_UID)
    # The chart runs the operator (and a non-root agent) as the same user.
    chart = (ROOT / "charts/mountwarden/templates/operator.yaml").read_text()
    assert f"runAsUser: {NON_ROOT_UID}" in chart


def test_the_entrypoint_is_the_projects_console_script():
    (entrypoint,) = [i.arguments for i in DOCKERFILE if i.keyword == "ENTRYPOINT"]
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    # exec form (signals reach the process), the console script installed for the image's python3
    assert yaml.safe_load(entrypoint) == ["/usr/local/bin/mountwarden"]
    assert "mountwarden" in scripts


def dockerignored(path: str, patterns: list[str]) -> bool:
    """Whether the build context leaves ``path`` out (the last matching pattern wins; ! re-includes)."""
    excluded = False
    parts = path.split("/")
    for pattern in patterns:
        negated = pattern.startswith("!")
        pattern = pattern.lstrip("!").rstrip("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        if any(fnmatch.fnmatch(prefix, pattern) or fnmatch.fnmatch(prefix, pattern.replace("**/", "*/"))
               for prefix in prefixes):
            excluded = not negated
    return excluded


def test_what_the_build_copies_is_in_the_context_and_is_what_the_wheel_needs():
    patterns = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    copied = [source for i in stages()[0] if i.keyword == "COPY" for source in i.arguments.split()[:-1]]
    for source in copied:
        assert (ROOT / source).exists(), f"COPY {source}: not in the repository"
        assert not dockerignored(source.rstrip("/"), patterns), f"COPY {source}: .dockerignore leaves it out"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    package_dir = project["tool"]["setuptools"]["packages"]["find"]["where"][0]
    needed = {"pyproject.toml", project["project"]["readme"], "LICENSE", f"{package_dir}/", "requirements/runtime.txt",
              "requirements/build.txt", "hack/image/debian.lock"}
    # Exactly what the build reads (appimage.WHEEL_SOURCES and the locks): nothing more goes to Docker.
    allowed = {line[1:] for line in patterns if line.startswith("!")}
    assert allowed == needed and {"pyproject.toml", "README.md", "LICENSE", "operator"} == set(appimage.WHEEL_SOURCES)
    assert needed <= set(copied)
    for kept_out in (".venv/bin/python", ".git/HEAD", "tests/conftest.py", "charts/mountwarden/Chart.yaml",
                     "requirements/dev.txt",
                     "operator/mountwarden/__pycache__/x.pyc"):
        assert dockerignored(kept_out, patterns), f"{kept_out} would be sent to the build"


@pytest.mark.parametrize("subcommand", ["operator", "agent"])
def test_the_commands_the_image_runs_exist_and_start(subcommand):
    script = shutil.which("mountwarden", path=str(Path(sys.executable).parent))
    assert script, "the mountwarden console script is not installed next to this Python"
    result = subprocess.run([script, subcommand, "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert f"Usage: mountwarden {subcommand}" in result.stdout
