"""The `mountwarden` command line. Each module registers its subcommands on `app`.

`main` imports only the module of the command it runs: every node runs `mountwarden agent`, and importing
every command's module put the operator's and the CLI's libraries (kopf, boto3, the dev cluster) in each
agent, 92 MiB resident against 51 MiB for the agent's module alone (python -c "import ...", 2026-12-05).
`--help`, and a command this does not know, load them all, so that help lists every command and typos
get Typer's own answer. ``app`` (for tests and docs) is the application with every command.
"""

import importlib
import sys

import typer

#: The module that registers each top-level command (tests/unit/test_cli_commands.py keeps this whole).
COMMANDS = {
    "agent": "agent", "audit": "agent", "cleanup": "cleanup", "crds": "operator", "credits": "credits",
    "dev-cluster": "cluster", "docs": "docs", "image": "image", "inventory": "inventory", "lab": "lab",
    "mounts": "procfs", "mountstats": "procfs", "operator": "operator", "options": "options", "plan": "plan",
    "ping-server": "server", "sqlite-scan": "sqlite",
}


def load(command: str | None = None) -> typer.Typer:
    """The application with ``command``'s module registered, or every module when ``command`` is None or unknown."""
    for module in [COMMANDS[command]] if command in COMMANDS else sorted(set(COMMANDS.values())):
        importlib.import_module(f"mountwarden.cli.{module}")
    from mountwarden.cli._app import app

    return app


def __getattr__(name: str):
    if name == "app":
        return load()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    arguments = sys.argv[1:]
    load(arguments[0] if arguments else None)()
