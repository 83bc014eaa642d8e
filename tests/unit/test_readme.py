"""README.md is true for a newcomer: the commands that are safe to run here run as written, the make targets
and paths it names exist, and the advice that went stale stays gone.

Safe: the `mountwarden` subcommands that read files or this machine's /proc and touch no cluster, no AWS
account, no NFS server, no Docker and no VM. The others (operator, agent, plan, credits forecast, ping-server,
dev-cluster, the kernel lab's, kind, docker, helm) are checked to exist (`--help`), not run; what it says
`make test` and the kernel lab need is read from the Makefile and hack/lab/.
"""

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
BIN = Path(sys.executable).parent
#: Subcommands that need a cluster, an AWS account, an NFS server, a long-running process or the kernel lab's VM.
NOT_RUN_HERE = ("plan", "inventory", "credits forecast", "credits watch", "dev-cluster", "dev-cluster up", "dev-cluster down",
                "operator", "agent", "cleanup", "lab build", "lab try", "lab measure", "ping-server")


def shell_blocks() -> list[str]:
    return re.findall(r"```sh\n(.*?)```", README, re.DOTALL)


def mountwarden_commands() -> list[str]:
    """Every `mountwarden ...` line of the README's shell blocks, without its trailing comment and pipe."""
    commands = []
    for block in shell_blocks():
        for line in block.splitlines():
            line = re.split(r"\s+#\s", line)[0].strip()
            if line.startswith("mountwarden "):
                commands.append(line.split(" | ")[0].split(" && ")[0].strip())
    return commands


def subcommand(command: str) -> str:
    words = shlex.split(command)[1:]
    two = " ".join(words[:2])
    return two if two in NOT_RUN_HERE or two.startswith(("options ", "credits ", "lab ", "dev-cluster ")) else words[0]


SAFE = [c for c in mountwarden_commands() if subcommand(c) not in NOT_RUN_HERE]
UNSAFE = [c for c in mountwarden_commands() if subcommand(c) in NOT_RUN_HERE]


def test_the_readme_shows_commands_of_both_kinds():
    assert len(SAFE) >= 8 and len(UNSAFE) >= 4, (SAFE, UNSAFE)


@pytest.mark.parametrize("command", SAFE)
def test_every_safe_command_runs_as_written(command):
    # As a newcomer types it, in the checkout, with the venv's mountwarden first on PATH.
    result = subprocess.run(["bash", "-c", command], cwd=ROOT, capture_output=True, text=True, timeout=120,
                            env={"PATH": f"{BIN}:/usr/bin:/bin", "HOME": str(ROOT)})
    assert result.returncode in (0, 1), f"`{command}` exited {result.returncode} (2: bad input):\n{result.stderr}"
    if "--json" in command:
        json.loads(result.stdout)
    elif subcommand(command) != "crds":
        assert result.stdout.strip(), f"`{command}` printed nothing"


@pytest.mark.parametrize("command", UNSAFE)
def test_every_other_command_exists_with_the_options_it_is_shown_with(command):
    words = shlex.split(command)
    sub = subcommand(command).split()
    result = subprocess.run([str(BIN / "mountwarden"), *sub, "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    for option in (word.split("=")[0] for word in words if word.startswith("--")):
        assert option in result.stdout, f"`{command}`: {' '.join(sub)} has no {option}"


def test_every_make_target_it_names_exists():
    named = set(re.findall(r"`make ([a-z-]+)`", README)) | {
        word for block in shell_blocks() for word in re.findall(r"\bmake ([a-z-]+)", block)}
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z-]+):", makefile, re.MULTILINE))
    assert named and named <= targets, f"README names make targets the Makefile lacks: {sorted(named - targets)}"


@pytest.mark.parametrize("test_cluster", ["", "existing"])
def test_make_test_builds_the_kernel_lab_and_a_control_plane_only_without_a_cluster(test_cluster):
    # The README: `make test` builds the lab either way, and against an existing cluster no control plane.
    dry = subprocess.run(["make", "-n", "test", f"MOUNTWARDEN_TEST_CLUSTER={test_cluster}"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert dry.returncode == 0, dry.stderr
    recipes = dry.stdout.splitlines()
    suite = next(line for line in recipes if "-m pytest" in line)
    assert "hack/lab/build.sh >/dev/null" in recipes and "MOUNTWARDEN_LAB_DIR=$(hack/lab/build.sh)" in suite
    local = test_cluster != "existing"
    assert ("hack/testbin/build.sh >/dev/null" in recipes) == local, recipes
    assert ("MOUNTWARDEN_TESTBIN_DIR=$(hack/testbin/build.sh)" in suite) == local, suite


def test_it_names_every_host_package_the_kernel_lab_installs():
    installed = set(re.findall(r"packages\+=\(([\w.+-]+)\)", (ROOT / "hack/lab/host-deps.sh").read_text()))
    assert installed, "hack/lab/host-deps.sh installs nothing the test can read"
    named = set(re.findall(r"`([\w.+-]+)`", README))
    assert installed <= named, f"README omits host packages the lab installs: {sorted(installed - named)}"


#: Paths the README names that a run makes, and one it names because it must never exist.
MADE_BY_A_RUN = {".state/dev-cluster/operator.log", ".state/lock-tools/"}
NEVER = {"operator/__init__.py"}
PACKAGE = ROOT / "operator" / "mountwarden"  # the Layout section names the package's folders from there


def test_every_repository_path_it_names_exists():
    paths = set(re.findall(r"\]\(([\w./-]+)\)", README))
    paths |= {p for p in re.findall(r"`([\w.-]+/[\w./-]*)`", README) if not p.startswith(("mountwarden.io/", "wgpolicyk8s", "openreports.io/"))}
    paths = {p for p in paths if not p.startswith(("http", "~", "/"))} - MADE_BY_A_RUN
    assert paths >= NEVER and not any((ROOT / p).exists() for p in NEVER)
    missing = sorted(p for p in paths - NEVER if not (ROOT / p).exists() and not (PACKAGE / p).exists())
    assert not missing, f"README names paths that do not exist: {missing}"


@pytest.mark.parametrize("stale", ["kubeconfig-path", "pytest-kind", "kind_cluster"])
def test_stale_advice_stays_gone(stale):
    assert stale not in README
