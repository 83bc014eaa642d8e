"""A replica stands down on its first pause after having been active, and only then (mountwarden.handlers.standby)."""

import asyncio
import logging

import pytest

from mountwarden.handlers.context import Shutdown
from mountwarden.handlers.standby import EXIT_STOOD_DOWN, stand_down_when_paused


class AskedTooOften(BaseException):
    """Not an Exception: the loop's guard against a failed check does not catch it."""


def answers(*said: bool | Exception):
    """replica_active() saying each of ``said`` in turn; asked once more, AskedTooOften."""
    asked = iter(said)

    def replica_active() -> bool:
        answer = next(asked, None)
        if answer is None:
            raise AskedTooOften
        if isinstance(answer, Exception):
            raise answer
        return answer
    return replica_active


def stood_down(*said: bool | Exception) -> Shutdown:
    loop = asyncio.new_event_loop()
    try:
        shutdown = Shutdown(loop=loop)
        stand_down_when_paused(answers(*said), shutdown, interval=0)
        loop.run_until_complete(asyncio.wait_for(shutdown.flag.wait(), timeout=5))
        return shutdown
    finally:
        loop.close()


def test_the_first_pause_after_being_active_ends_the_operator_with_its_exit_status(caplog):
    caplog.set_level(logging.INFO)
    shutdown = stood_down(False, False, True, True, False)  # a standby, active, then paused
    assert shutdown.exit_code == EXIT_STOOD_DOWN == 75
    assert "never active again on indexes that still hold what was deleted" in shutdown.reason
    assert "this replica is the active one" in caplog.text


def test_a_replica_never_active_is_never_stood_down():
    # Every answer is a no: the loop asks for more than it was given, so it never asked for a shutdown.
    loop = asyncio.new_event_loop()
    shutdown = Shutdown(loop=loop)
    with pytest.raises(AskedTooOften):
        stand_down_when_paused(answers(False, False, False), shutdown, interval=0)
    assert shutdown.reason is None and not shutdown.flag.is_set()
    loop.close()


def test_a_failed_check_keeps_the_last_answer_instead_of_standing_down(caplog):
    shutdown = stood_down(True, RuntimeError("the peering object unreadable"), True, False)
    assert shutdown.exit_code == EXIT_STOOD_DOWN
    assert "could not tell whether this replica is the active one" in caplog.text


def test_the_first_reason_given_stands():
    loop = asyncio.new_event_loop()
    shutdown = Shutdown(loop=loop)
    shutdown.request("first", 75)
    shutdown.request("second", 1)
    loop.run_until_complete(asyncio.wait_for(shutdown.flag.wait(), timeout=5))
    assert (shutdown.reason, shutdown.exit_code) == ("first", 75)
    loop.close()
