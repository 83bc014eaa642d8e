"""Output helpers shared by the subcommands: one JSON document on stdout, or rich text."""

import json
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from rich.console import Console
from rich.markup import escape

#: Human-readable output; tables and findings.
console = Console()
#: Progress, logs and errors, so that stdout stays machine-readable.
err_console = Console(stderr=True)


def progress(prefix: str) -> Callable[[str], None]:
    """Where a build says what it does: one dim line on stderr per step, ``prefix: step``."""
    return lambda message: err_console.print(f"[dim]{prefix}: {escape(message)}[/]", soft_wrap=True)


def print_json(document: Any) -> None:
    """Print one JSON document on stdout (the contract scripts rely on)."""
    sys.stdout.write(json.dumps(document, indent=2, default=str) + "\n")
    sys.stdout.flush()


def fail(message: str, code: int = 2) -> NoReturn:
    """Stop with a clear message on stderr and a non-zero exit code."""
    import typer

    # soft_wrap: a path in the message stays whole for copy and paste; the terminal wraps it.
    err_console.print(f"[bold red]error:[/] {message}", soft_wrap=True)
    raise typer.Exit(code)


def write_generated(files: dict, output_dir, *, check: bool, what: str, make_target: str) -> None:
    """Write generated files into ``output_dir``, or with ``check`` exit 1 when any there is stale."""
    import typer

    stale = [name for name, text in files.items()
             if not (output_dir / name).exists() or (output_dir / name).read_text() != text]
    if check:
        for name in stale:
            err_console.print(f"[red]{output_dir / name} differs from the code: run `make {make_target}`.[/]")
        raise typer.Exit(1 if stale else 0)
    output_dir.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (output_dir / name).write_text(text)
    err_console.print(f"wrote {len(files)} {what} to {output_dir}")
