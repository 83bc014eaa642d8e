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
