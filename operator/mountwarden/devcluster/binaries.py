"""Where the control-plane binaries come from.

In order: an explicit directory (`--binaries`), the environment variable
MOUNTWARDEN_TESTBIN_DIR, or the repository's `hack/testbin/build.sh`, which builds them
from source once into a cache and prints their directory on its last stdout line
(seconds when the cache is warm, 10-25 minutes cold).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ENV_VAR = "MOUNTWARDEN_TESTBIN_DIR"
BUILD_SCRIPT = Path("hack/testbin/build.sh")
#: The real node's kubelet and pause binary (hack/nodebin), built apart from the control plane.
NODE_ENV_VAR = "MOUNTWARDEN_NODEBIN_DIR"
NODE_BUILD_SCRIPT = Path("hack/nodebin/build.sh")
NODE_NAMES = ("kubelet", "pause")

#: Every binary the dev cluster and the tests use, by file name.
NAMES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kwok", "helm")


class BinariesError(RuntimeError):
    """The binaries cannot be found or built; the message says what to do."""


@dataclass(frozen=True)
class Binaries:
    """Paths of the control-plane binaries in one directory."""

    dir: Path

    def path(self, name: str) -> Path:
        return self.dir / name

    @property
    def etcd(self) -> Path:
        return self.path("etcd")

    @property
    def kube_apiserver(self) -> Path:
        return self.path("kube-apiserver")

    @property
    def kube_controller_manager(self) -> Path:
        return self.path("kube-controller-manager")

    @property
    def kube_scheduler(self) -> Path:
        return self.path("kube-scheduler")

    @property
    def kubectl(self) -> Path:
        return self.path("kubectl")

    @property
    def kwok(self) -> Path:
        return self.path("kwok")

    @property
    def helm(self) -> Path:
        return self.path("helm")

    def missing(self) -> list[str]:
        return [name for name in NAMES if not os.access(self.dir / name, os.X_OK)]

    def check(self, origin: str) -> Binaries:
        """Raise a BinariesError naming every missing binary and where the directory came from."""
        if not self.dir.is_dir():
            raise BinariesError(f"the binary directory {self.dir} (from {origin}) does not exist")
        missing = self.missing()
        if not missing:
            return self
        hint = ""
        if "etcd" in missing and os.access(self.dir / "server", os.X_OK):
            # `go build go.etcd.io/etcd/server/v3` names its output after the last path
            # element without the major-version suffix: 'server'.
            hint = (
                f"\n{self.dir}/server is etcd under the name its Go package gives it: "
                "hack/testbin/build.sh must rename it to 'etcd' (or link it: "
                f"ln -s server {self.dir}/etcd)."
            )
        raise BinariesError(
            f"the binary directory {self.dir} (from {origin}) lacks: {', '.join(missing)}.{hint}"
        )


def find_build_script(starts: list[Path] | None = None, script: Path = BUILD_SCRIPT) -> Path | None:
    """Find hack/testbin/build.sh (or ``script``) by walking up from this package and from the current directory."""
    if starts is None:
        starts = [Path(__file__).resolve().parent, Path.cwd().resolve()]
    for start in starts:
        for directory in (start, *start.parents):
            candidate = directory / script
            if candidate.is_file():
                return candidate
    return None


def build(script: Path, on_output: Callable[[str], None] | None = None) -> Path:
    """Run build.sh, streaming its progress (stderr) line by line; return the directory it prints."""
    emit = on_output or (lambda line: print(line, file=sys.stderr, flush=True))
    proc = subprocess.Popen(
        ["bash", str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        cwd=script.parent,
    )
    assert proc.stderr is not None and proc.stdout is not None
    for line in proc.stderr:
        emit(line.rstrip("\n"))
    stdout = proc.stdout.read()
    code = proc.wait()
    if code != 0:
        raise BinariesError(
            f"{script} failed with exit code {code}; its output is above. "
            f"Fix the build, or point --binaries / {ENV_VAR} at a directory holding {', '.join(NAMES)}."
        )
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    if not lines:
        raise BinariesError(f"{script} succeeded but printed no directory on its last line")
    return Path(lines[-1])


def resolve(explicit: str | Path | None = None, on_output: Callable[[str], None] | None = None) -> Binaries:
    """Find (or build) the binaries: `explicit`, then $MOUNTWARDEN_TESTBIN_DIR, then build.sh."""
    if explicit:
        return Binaries(Path(explicit).expanduser().resolve()).check("--binaries")
    from_env = os.environ.get(ENV_VAR)
    if from_env:
        return Binaries(Path(from_env).expanduser().resolve()).check(f"${ENV_VAR}")
    script = find_build_script()
    if script is None:
        raise BinariesError(
            "cannot find the control-plane binaries: pass --binaries DIR or set "
            f"{ENV_VAR}=DIR (a directory holding {', '.join(NAMES)}), or run from a checkout of "
            f"mountwarden, whose {BUILD_SCRIPT} builds them"
        )
    return Binaries(build(script, on_output).resolve()).check(str(script))


def resolve_node_binaries(on_output: Callable[[str], None] | None = None) -> Path:
    """The real node's binaries: $MOUNTWARDEN_NODEBIN_DIR, else hack/nodebin/build.sh (about 10 minutes cold)."""
    from_env = os.environ.get(NODE_ENV_VAR)
    if from_env:
        directory = Path(from_env).expanduser().resolve()
    else:
        script = find_build_script(script=NODE_BUILD_SCRIPT)
        if script is None:
            raise BinariesError(f"cannot find the real node's kubelet: set {NODE_ENV_VAR}=DIR (holding "
                                f"{', '.join(NODE_NAMES)}), or run from a checkout, whose {NODE_BUILD_SCRIPT} builds it")
        directory = build(script, on_output).resolve()
    missing = [name for name in NODE_NAMES if not os.access(directory / name, os.X_OK)]
    if missing:
        raise BinariesError(f"{directory} lacks {', '.join(missing)}: rebuild with {NODE_BUILD_SCRIPT}")
    return directory
