"""kopf's start-up barrier, patched to wake its waiters only when the barrier's state flips."""

import asyncio

from kopf._cogs.aiokits import aiotoggles

from mountwarden.handlers.runner import wake_waiters_only_on_flips


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
