"""The one Typer application that every subcommand module registers on."""

import typer

app = typer.Typer(
    name="mountwarden",
    help=(
        "Per-consumer NFS mount contracts for Kubernetes, proven on the nodes.\n\n"
        "Every read-only subcommand takes --json and then prints exactly one JSON "
        "document on stdout (logs and progress go to stderr)."
    ),
    no_args_is_help=True,
    rich_markup_mode="rich",
    pretty_exceptions_show_locals=False,
    add_completion=False,
)


@app.callback()
def _commands() -> None:
    """Always a group of commands, even when only the command run was loaded (mountwarden.cli.main): with one
    command and no callback, Typer would run that command bare and take its name for an argument."""
