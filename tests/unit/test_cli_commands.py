"""`mountwarden` loads only the module of the command it runs (mountwarden.cli.main), so its map of commands to
modules must stay whole, and a command run alone must not bring in what it does not use."""

import subprocess
import sys

import typer

from mountwarden import cli
from mountwarden.cli._app import app


def test_every_command_is_mapped_to_the_module_that_registers_it():
    cli.load()  # every module
    modules = {info.name or info.callback.__name__.replace("_", "-"): info.callback.__module__
               for info in app.registered_commands}
    modules |= {group.name: next(c.callback.__module__ for c in group.typer_instance.registered_commands)
                for group in app.registered_groups}
    assert set(typer.main.get_command(app).commands) == set(modules)
    assert {name: f"mountwarden.cli.{module}" for name, module in cli.COMMANDS.items()} == modules


def test_the_agent_runs_without_the_operators_or_the_clis_libraries():
    probe = ("import sys; sys.argv = ['mountwarden', 'agent', '--help']\n"
             "from mountwarden.cli import main\n"
             "try:\n    main()\nexcept SystemExit as done:\n    assert not done.code, done.code\n"
             "print(sorted(m for m in ('kopf', 'boto3', 'botocore', 'mountwarden.devcluster', 'mountwarden.handlers')"
             " if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert "Run the node agent" in done.stdout
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout[-500:]


def test_help_and_an_unknown_command_load_every_command():
    probe = ("import sys; sys.argv = ['mountwarden', sys.argv[1]]\nfrom mountwarden.cli import main\nmain()")
    listed = subprocess.run([sys.executable, "-c", probe, "--help"], capture_output=True, text=True)
    assert listed.returncode == 0 and all(name in listed.stdout for name in cli.COMMANDS), listed.stdout
    typo = subprocess.run([sys.executable, "-c", probe, "agnet"], capture_output=True, text=True)
    assert typo.returncode == 2 and "No such command" in typo.stderr and "agnet" in typo.stderr
