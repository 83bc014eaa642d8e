"""The Dockerfile, read (no Docker engine here to build it): pinned base, two stages, non-root, the entry point.

What the image runs is checked by running it from this checkout: the console script the
ENTRYPOINT names, with the subcommands the chart gives it.
"""

from __future__ import annotations

import fnmatch
import re
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
#: An exact release tag (major.minor.patch) of a named Debian release, or a digest: never a moving tag.
PINNED = re.compile(r"^[\w./-]+:\d+\.\d+\.\d+-slim-(bookworm|trixie)(@sha256:[0-9a-f]{64})?$|^[\w./-]+@sha256:[0-9a-f]{64}$")
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


def build_args() -> dict[str, str]:
    """ARGs declared before the first FROM, with their defaults: what FROM lines may use."""
    args = {}
    for instruction in DOCKERFILE:
        if instruction.keyword == "FROM":
            break
        if instruction.keyword == "ARG":
            name, _, default = instruction.arguments.partition("=")
            args[name] = default
    return args


def base_image(from_arguments: str) -> str:
    image = from_arguments.split()[0]
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: build_args()[m.group(1) or m.group(2)], image)


def test_every_stage_starts_from_a_pinned_image():
    images = [base_image(stage[0].arguments) for stage in stages()]
    assert len(images) == 2
    for image in images:
        assert PINNED.match(image), f"{image} is not pinned to an exact version (or a digest)"


def test_the_first_stage_builds_wheels_and_the_second_installs_only_those():
    build, final = stages()
    assert build[0].arguments.split()[-2:] == ["AS", "build"]
    assert any(i.keyword == "RUN" and "pip wheel" in i.arguments for i in build)
    installs = [i for i in final if i.keyword == "RUN" and "pip install" in i.arguments]
    assert len(installs) == 1
    install = installs[0].arguments
    assert "from=build" in install and "--no-index" in install  # nothing fetched in the final stage
    assert not any(i.keyword == "COPY" and "--from" not in i.arguments for i in final)  # no sources in the image


def test_the_image_installs_the_locked_dependencies_with_their_hashes():
    build, final = stages()
    build_runs = " ".join(i.arguments for i in build if i.keyword == "RUN")
    assert "--require-hashes" in build_runs and "-r requirements/runtime.txt" in build_runs
    assert "-r requirements/build.txt" in build_runs and "--no-build-isolation" in build_runs  # the locked backend
    (install,) = [i.arguments for i in final if i.keyword == "RUN" and "pip install" in i.arguments]
    assert "--require-hashes" in install and "runtime.txt" in install
    assert all("--no-deps" in command for command in install.split("&&")), "every install takes the lock as it is"


def test_the_image_runs_as_a_named_non_root_user():
    final = stages()[-1]
    users = [i.arguments for i in final if i.keyword == "USER"]
    assert users and users[-1] == f"{NON_ROOT_UID}:{NON_ROOT_UID}"
    created = " ".join(i.arguments for i in final if i.keyword == "RUN")
    assert f"--uid {NON_ROOT_UID}" in created and f"--gid {NON_ROOT_UID}" in created
    # The chart runs the operator (and a non-root agent) as the same user.
    chart = (ROOT / "charts/mountwarden/templates/operator.yaml").read_text()
    assert f"runAsUser: {NON_ROOT_UID}" in chart


def test_the_entrypoint_is_the_projects_console_script():
    (entrypoint,) = [i.arguments for i in DOCKERFILE if i.keyword == "ENTRYPOINT"]
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert yaml.safe_load(entrypoint) == ["mountwarden"]  # exec form: signals reach the process
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
              "requirements/build.txt"}
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
