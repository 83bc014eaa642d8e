"""Run kubectl against one kubeconfig, with errors that carry kubectl's own message."""

from __future__ import annotations

import subprocess
from pathlib import Path


class KubectlError(subprocess.CalledProcessError):
    """kubectl exited non-zero; str() includes its stderr, which says what went wrong."""

    def __str__(self) -> str:
        command = " ".join(str(part) for part in self.cmd)
        detail = (self.stderr or self.output or "").strip()
        return f"`{command}` exited with {self.returncode}" + (f":\n{detail}" if detail else "")


def run_kubectl(
    kubectl: str | Path,
    kubeconfig: str | Path,
    *args: str,
    input: str | None = None,
    check: bool = True,
    timeout: float | None = 120.0,
) -> subprocess.CompletedProcess[str]:
    """`kubectl --kubeconfig KUBECONFIG ARGS...`, text in and out, output captured."""
    # --kubeconfig wins over a KUBECONFIG in the caller's environment: the target is explicit.
    command = [str(kubectl), f"--kubeconfig={kubeconfig}", *map(str, args)]
    result = subprocess.run(
        command,
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if check and result.returncode != 0:
        raise KubectlError(result.returncode, command, output=result.stdout, stderr=result.stderr)
    return result
