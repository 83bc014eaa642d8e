"""kopf peering priorities: replicas of equal priority all freeze, so each replica derives its own, the earliest
started the highest (the active replica stays active when others join)."""

import logging
import zlib
from datetime import UTC, datetime

import kopf
import pytest
from typer.testing import CliRunner

from mountwarden.cli import app
from mountwarden.cli import operator as operator_cli
from mountwarden.cli.operator import (
    PRIORITY_EPOCH_END_MS,
    PRIORITY_MAX,
    TIE_BREAK_RANGE,
    derived_priority,
    peering_priority,
    tie_break,
)

#: 2026-12-04T03:15:04.250Z, when a replica of these tests started.
STARTED = datetime(2026, 12, 4, 3, 15, 4, 250000, tzinfo=UTC).timestamp()


def test_a_replica_started_earlier_has_the_higher_priority_whatever_the_names():
    names = [f"mountwarden-operator-6c8d5b7f9-{suffix}" for suffix in ("x2kqp", "z7m4n", "b9w2c", "q4t8r", "h5j6k")]
    # Started a millisecond apart, in that order.
    priorities = [derived_priority(STARTED + index / 1000, name) for index, name in enumerate(names)]
    assert priorities == sorted(priorities, reverse=True) and len(set(priorities)) == len(names)
    # The start decides, not the name: the one of the lower tie-break, started first, outranks the other.
    first, second = sorted(names, key=tie_break)[:2]
    assert derived_priority(STARTED, first) > derived_priority(STARTED + 0.001, second)
    # The standby that waited since yesterday outranks the active replica's replacement started today.
    assert derived_priority(STARTED - 86400, names[1]) > derived_priority(STARTED, names[0])


def test_replicas_started_in_the_same_millisecond_differ_by_name_and_stay_in_range():
    names = [f"mountwarden-operator-6c8d5b7f9-{suffix}" for suffix in ("x2kqp", "z7m4n", "b9w2c", "q4t8r", "h5j6k")]
    priorities = [derived_priority(STARTED, name) for name in names]
    assert len(set(priorities)) == len(names)
    assert all(1 <= p <= PRIORITY_MAX for p in priorities)
    # What a peering entry shows: the milliseconds before the end, then the name's part.
    assert divmod(derived_priority(STARTED, names[0]), TIE_BREAK_RANGE) == (
        PRIORITY_EPOCH_END_MS - 1796354104250, zlib.crc32(names[0].encode()) % TIE_BREAK_RANGE)
    assert tie_break(names[0]) == zlib.crc32(names[0].encode()) % TIE_BREAK_RANGE


@pytest.mark.parametrize(("priority", "standalone", "environ", "expected"), [
    (42, False, {"POD_NAME": "pod-a"}, (42, None)),  # given: used as is
    (None, True, {"POD_NAME": "pod-a"}, (0, None)),  # standalone: peering is off, kopf's default
    (None, False, {"POD_NAME": "pod-a"},
     (derived_priority(STARTED, "pod-a"), "derived from the start at 2026-12-04T03:15:04.250+00:00 and 'pod-a' (POD_NAME)")),
])
def test_the_priority_to_run_with(priority, standalone, environ, expected):
    assert peering_priority(priority, standalone=standalone, started_at=STARTED, environ=environ) == expected


def test_without_pod_name_the_host_name_is_used(monkeypatch):
    monkeypatch.setattr(operator_cli.socket, "gethostname", lambda: "mountwarden-operator-abc")
    priority, source = peering_priority(None, standalone=False, started_at=STARTED, environ={})
    assert priority == derived_priority(STARTED, "mountwarden-operator-abc")
    assert source.endswith("'mountwarden-operator-abc' (the host name)")


def test_the_operator_command_runs_with_the_derived_priority_and_logs_it(monkeypatch, caplog):
    ran = {}
    monkeypatch.setattr("mountwarden.handlers.runner.run", lambda config, **kwargs: ran.update(kwargs))
    monkeypatch.setattr(kopf, "configure", lambda **_: None)  # it would reconfigure this process's root logger
    monkeypatch.setenv("POD_NAME", "mountwarden-operator-6c8d5b7f9-x2kqp")
    monkeypatch.setattr(operator_cli.time, "time", lambda: STARTED)
    # The command writes these for the handlers: restored after the test.
    for name in ("MOUNTWARDEN_COLLECT_INTERVAL", "MOUNTWARDEN_CREDIT_INTERVAL"):
        monkeypatch.setenv(name, "60")
    for name in ("MOUNTWARDEN_AGENT_SERVICE_ACCOUNT", "MOUNTWARDEN_WEBHOOK_SERVICE",
                 "MOUNTWARDEN_ENFORCE_CONFIGURATION", "MOUNTWARDEN_ACTIVE_LABEL"):
        monkeypatch.delenv(name, raising=False)
    with caplog.at_level(logging.INFO, logger="mountwarden.operator"):
        result = CliRunner().invoke(app, ["operator", "--peering", "--peering-name", "mw", "--metrics-port", "0"])
    assert result.exit_code == 0, result.output
    expected = derived_priority(STARTED, "mountwarden-operator-6c8d5b7f9-x2kqp")
    assert ran["priority"] == expected and ran["peering_name"] == "mw" and ran["standalone"] is False
    assert (f"peering priority {expected}, derived from the start at 2026-12-04T03:15:04.250+00:00 and "
            "'mountwarden-operator-6c8d5b7f9-x2kqp' (POD_NAME)") in caplog.text


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
