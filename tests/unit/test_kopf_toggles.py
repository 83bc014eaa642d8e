"""kopf's start-up barrier, patched to wake its waiters only when the barrier's state flips."""

import asyncio
import tomllib
from pathlib import Path

import kopf
from kopf._cogs.aiokits import aiotoggles

from mountwarden.handlers.kopfpatch import (
    KOPF_PINNED,
    TOGGLESET_METHODS,
    TOGGLESET_SOURCE_SHA256,
    toggleset_source_digest,
    wake_waiters_only_on_flips,
)


def test_waiters_wake_once_when_the_last_object_is_indexed_not_on_every_drop():
    wake_waiters_only_on_flips()

    async def scenario() -> tuple[int, bool]:
        barrier = aiotoggles.ToggleSet(all)
        toggles = [await barrier.make_toggle(name=f"object-{n}") for n in range(200)]
        notified = 0
        original = barrier._condition.notify_all

        def counting_notify_all() -> None:
            nonlocal notified
            notified += 1
            original()

        barrier._condition.notify_all = counting_notify_all
        waiters = [asyncio.create_task(barrier.wait_for(True)) for _ in range(50)]
        await asyncio.sleep(0)
        for toggle in toggles[:-1]:
            await barrier.drop_toggle(toggle)
        await asyncio.sleep(0)
        still_waiting = not any(waiter.done() for waiter in waiters)
        await barrier.drop_toggle(toggles[-1])
        await asyncio.wait_for(asyncio.gather(*waiters), timeout=5)
        return notified, still_waiting

    notified, still_waiting = asyncio.run(scenario())
    assert still_waiting, "the barrier opened before every object was indexed"
    assert notified == 1, f"waiters were woken {notified} times for one flip"


def test_adding_a_toggle_closes_an_open_barrier_and_dropping_twice_is_harmless():
    wake_waiters_only_on_flips()

    async def scenario() -> None:
        barrier = aiotoggles.ToggleSet(all)
        assert barrier.is_on()
        toggle = await barrier.make_toggle()
        assert barrier.is_off()
        closed = asyncio.create_task(barrier.wait_for(True))
        await barrier.drop_toggle(toggle)
        await barrier.drop_toggle(toggle)
        await asyncio.wait_for(closed, timeout=5)
        assert barrier.is_on()

    asyncio.run(scenario())


def test_the_patched_kopf_methods_are_the_ones_the_patch_was_written_for():
    """Fails when kopf's ToggleSet changes: re-read the patch against the new source (or drop it, if kopf
    fixed the wake-ups upstream: docs/upstream/kopf-toggleset.md), then update the digest and the pin."""
    assert kopf.__version__ == KOPF_PINNED, f"kopf {kopf.__version__} is installed, the patch was written for {KOPF_PINNED}"
    assert toggleset_source_digest() == TOGGLESET_SOURCE_SHA256, (
        f"kopf {kopf.__version__}'s ToggleSet methods {TOGGLESET_METHODS} differ from those the patch in "
        "mountwarden.handlers.kopfpatch was written for")


def test_the_pin_in_pyproject_is_exact_and_names_the_patched_release():
    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    pins = [d for d in pyproject["project"]["dependencies"] if d.split("=")[0].split(">")[0].strip() == "kopf"]
    assert pins == [f"kopf=={KOPF_PINNED}"], pins


def test_a_kopf_with_other_toggleset_source_is_left_unpatched(monkeypatch):
    from mountwarden.handlers import kopfpatch as runner

    monkeypatch.setattr(runner, "TOGGLESET_SOURCE_SHA256", "0" * 64)
    monkeypatch.delattr(aiotoggles.ToggleSet, "wakes_only_on_flips", raising=False)
    original = aiotoggles.ToggleSet.drop_toggle
    assert runner.wake_waiters_only_on_flips() is False
    assert aiotoggles.ToggleSet.drop_toggle is original
