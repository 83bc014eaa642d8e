"""A replica stands down on its first pause after having been active, and only then (mountwarden.handlers.standby)."""

import asyncio
import logging

import pytest

from mountwarden.handlers.context import Shutdown
from mountwarden.handlers.standby import EXIT_STOOD_DOWN, stand_down_when_paused


class AskedTooOften(BaseException):
    """Not an Exception: the loop's guard against a failed check does not catch it."""


class Answers:
    """replica_active() saying each of ``said`` in turn, counting the questions; asked once more, AskedTooOften."""

    def __init__(self, *said: bool | Exception) -> None:
        self.said = said
        self.asked = 0

    def __call__(self) -> bool:
        if self.asked == len(self.said):
            raise AskedTooOften
        answer = self.said[self.asked]
        self.asked += 1
        if isinstance(answer, Exception):
            raise answer
        return answer


def stood_down(*said: bool | Exception) -> Shutdown:
    """The shutdown the loop asked for, having asked every answer in ``said`` (and not one more)."""
    loop = asyncio.new_event_loop()
    try:
        shutdown = Shutdown(loop=loop)
        answers = Answers(*said)
        stand_down_when_paused(answers, shutdown, interval=0)
        assert answers.asked == len(said), f"stood down after {answers.asked} of {len(said)} answers"
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
        stand_down_when_paused(Answers(False, False, False), shutdown, interval=0)
    assert shutdown.reason is None and not shutdown.flag.is_set()
    loop.close()


def test_a_failed_check_keeps_the_last_answer_instead_of_standing_down(caplog):
    # Standing down at the failure would leave the last two answers unasked (stood_down checks).
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
