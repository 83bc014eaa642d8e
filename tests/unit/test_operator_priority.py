"""kopf peering priorities: replicas of equal priority all freeze, so each replica derives its own."""

import logging
import zlib

import kopf
import pytest
from typer.testing import CliRunner

from mountwarden.cli import app
from mountwarden.cli import operator as operator_cli
from mountwarden.cli.operator import PRIORITY_RANGE, derived_priority, peering_priority


def test_a_derived_priority_is_the_pod_names_crc32_in_range():
    assert derived_priority("mountwarden-operator-7d9f8-abcde") == 1 + zlib.crc32(b"mountwarden-operator-7d9f8-abcde") % PRIORITY_RANGE
    assert derived_priority("pod") == derived_priority("pod")  # stable across restarts of the pod


def test_the_replicas_of_a_deployment_get_distinct_priorities():
    names = [f"mountwarden-operator-6c8d5b7f9-{suffix}" for suffix in ("x2kqp", "z7m4n", "b9w2c", "q4t8r", "h5j6k")]
    priorities = [derived_priority(name) for name in names]
    assert len(set(priorities)) == len(names)
    assert all(1 <= p <= PRIORITY_RANGE for p in priorities)


@pytest.mark.parametrize(("priority", "standalone", "environ", "expected"), [
    (42, False, {"POD_NAME": "pod-a"}, (42, None)),  # given: used as is
    (None, True, {"POD_NAME": "pod-a"}, (0, None)),  # standalone: peering is off, kopf's default
    (None, False, {"POD_NAME": "pod-a"}, (derived_priority("pod-a"), "derived from 'pod-a' (POD_NAME)")),
])
def test_the_priority_to_run_with(priority, standalone, environ, expected):
    assert peering_priority(priority, standalone=standalone, environ=environ) == expected


def test_without_pod_name_the_host_name_is_used(monkeypatch):
    monkeypatch.setattr(operator_cli.socket, "gethostname", lambda: "mountwarden-operator-abc")
    assert peering_priority(None, standalone=False, environ={}) == (
        derived_priority("mountwarden-operator-abc"), "derived from 'mountwarden-operator-abc' (the host name)")


def test_the_operator_command_runs_with_the_derived_priority_and_logs_it(monkeypatch, caplog):
    ran = {}
    monkeypatch.setattr("mountwarden.handlers.runner.run", lambda config, **kwargs: ran.update(kwargs))
    monkeypatch.setattr(kopf, "configure", lambda **_: None)  # it would reconfigure this process's root logger
    monkeypatch.setenv("POD_NAME", "mountwarden-operator-6c8d5b7f9-x2kqp")
    # The command writes these for the handlers: restored after the test.
    for name in ("MOUNTWARDEN_COLLECT_INTERVAL", "MOUNTWARDEN_CREDIT_INTERVAL"):
        monkeypatch.setenv(name, "60")
    for name in ("MOUNTWARDEN_AGENT_SERVICE_ACCOUNT", "MOUNTWARDEN_WEBHOOK_SERVICE",
                 "MOUNTWARDEN_ENFORCE_CONFIGURATION", "MOUNTWARDEN_ACTIVE_LABEL"):
        monkeypatch.delenv(name, raising=False)
    with caplog.at_level(logging.INFO, logger="mountwarden.operator"):
        result = CliRunner().invoke(app, ["operator", "--peering", "--peering-name", "mw", "--metrics-port", "0"])
    assert result.exit_code == 0, result.output
    expected = derived_priority("mountwarden-operator-6c8d5b7f9-x2kqp")
    assert ran["priority"] == expected and ran["peering_name"] == "mw" and ran["standalone"] is False
    assert f"peering priority {expected}, derived from 'mountwarden-operator-6c8d5b7f9-x2kqp' (POD_NAME)" in caplog.text


@pytest.mark.parametrize(("args", "message"), [
    (["--agent-service-account", "agent"], "NAMESPACE:NAME"),
    (["--webhook-service", "mw/mw-webhook"], "go together"),
    (["--webhook-service", "webhook", "--enforce-configuration", "x"], "NAMESPACE/NAME"),
    (["--active-label", "mountwarden.io/active"], "POD_NAME"),
])
def test_malformed_admission_flags_fail_before_anything_runs(monkeypatch, args, message):
    monkeypatch.setattr("mountwarden.handlers.runner.run", lambda *a, **k: pytest.fail("the operator ran"))
    monkeypatch.delenv("POD_NAME", raising=False)
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    result = CliRunner().invoke(app, ["operator", *args])
    assert result.exit_code != 0 and message in result.output
