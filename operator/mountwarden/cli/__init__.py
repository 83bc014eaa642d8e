"""The `mountwarden` command line. Each module registers its subcommands on `app`."""

from mountwarden.cli import (  # noqa: F401  (imported for their registrations)
    agent,
    cleanup,
    cluster,
    credits,
    docs,
    image,
    inventory,
    lab,
    operator,
    options,
    plan,
    procfs,
    server,
    sqlite,
)
from mountwarden.cli._app import app


def main() -> None:
    app()
