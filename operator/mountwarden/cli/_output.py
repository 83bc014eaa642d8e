"""Output helpers shared by the subcommands: one JSON document on stdout, or rich text."""

import json
import sys
from typing import Any, NoReturn

from rich.console import Console

#: Human-readable output; tables and findings.
console = Console()
#: Progress, logs and errors, so that stdout stays machine-readable.
err_console = Console(stderr=True)


def print_json(document: Any) -> None:
    """Print one JSON document on stdout (the contract scripts rely on)."""
    sys.stdout.write(json.dumps(document, indent=2, default=str) + "\n")
    sys.stdout.flush()


def fail(message: str, code: int = 2) -> NoReturn:
    """Stop with a clear message on stderr and a non-zero exit code."""
    import typer

    err_console.print(f"[bold red]error:[/] {message}")
    raise typer.Exit(code)
