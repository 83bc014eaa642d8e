"""The garbage collector kept out of the webhook's way (mountwarden.handlers.collector), on the real collector."""

import gc
import threading
from dataclasses import dataclass

import pytest

from mountwarden.handlers.collector import FreezeAfterFullCollections, during_burst


@dataclass(frozen=True, slots=True)
class Held:
    """Like a compliance Consumer: a tracked object with nothing pointing back at it."""

    index: int
    children: tuple


@pytest.fixture
def collections():
    """Every collection the collector runs while the test does, as (generation, objects collected)."""
    seen: list[tuple[int, int]] = []

    def record(phase: str, info: dict) -> None:
        if phase == "stop":
            seen.append((info["generation"], info["collected"]))

    was_enabled = gc.isenabled()
    gc.enable()
    gc.collect()
    gc.callbacks.append(record)
    yield seen
    gc.callbacks.remove(record)
    (gc.enable if was_enabled else gc.disable)()


def assess(count: int) -> int:
    """A burst as the compliance assessment makes one: many tracked objects, all held until the end."""
    held = [Held(index, ([index], {"i": index})) for index in range(count)]
    return len(held)


def test_a_burst_of_900_000_objects_sets_off_collections_unless_collections_are_paused(collections):
    assert assess(300_000) == 300_000
    assert collections, "the burst set off no collection even with collections on: this test proves nothing"
    collections.clear()
    assert during_burst(assess)(300_000) == 300_000
    assert collections == []
    assert gc.isenabled()


def test_what_a_paused_burst_made_is_freed_so_its_allocations_do_not_count_towards_the_next_collection(collections):
    before = gc.get_count()[0]
    during_burst(assess)(300_000)
    # 900,000 tracked objects were made and freed: the young generation's count is back where it was, give or take
    # the freed tuples, lists and dicts CPython keeps for reuse without counting them as freed (about 2,200).
    assert gc.get_count()[0] - before < 5_000
    assert collections == []


def test_collections_stay_paused_until_the_last_of_the_bursts_under_way_in_any_thread_ends(collections):
    first_started, second_done, states = threading.Event(), threading.Event(), {}

    @during_burst
    def first() -> None:
        first_started.set()
        assert second_done.wait(10)
        states["first, after the second ended"] = gc.isenabled()

    @during_burst
    def second() -> None:
        states["second"] = gc.isenabled()

    thread = threading.Thread(target=first)
    thread.start()
    assert first_started.wait(10)
    second()
    second_done.set()
    thread.join(10)
    assert states == {"second": False, "first, after the second ended": False}
    assert gc.isenabled()


def test_a_burst_that_fails_turns_collections_back_on(collections):
    @during_burst
    def failing() -> None:
        raise ValueError("no contract")

    with pytest.raises(ValueError, match="no contract"):
        failing()
    assert gc.isenabled()


def test_collections_turned_off_by_another_owner_stay_off_after_a_burst(collections):
    gc.disable()
    during_burst(assess)(10)
    assert not gc.isenabled()


@pytest.fixture
def keeper():
    """A FreezeAfterFullCollections on the real collector, its clock the test's; all thawed again afterwards."""
    now = [0.0]
    callback = FreezeAfterFullCollections(thaw_seconds=60.0, clock=lambda: now[0])
    callback.install()
    yield callback, now
    callback.uninstall()
    gc.unfreeze()


def test_what_lives_through_a_full_collection_is_frozen_and_the_next_one_walks_only_what_came_since(keeper):
    gc.unfreeze()
    held = [Held(index, ([index],)) for index in range(20_000)]
    gc.collect()
    frozen = gc.get_freeze_count()
    assert frozen >= 40_000  # each Held and its list
    more = [Held(index, ([index],)) for index in range(1_000)]
    walked = []

    def count(phase: str, info: dict) -> None:
        if phase == "start" and info["generation"] == 2:
            walked.append(len(gc.get_objects(generation=2)))

    gc.callbacks.insert(0, count)
    try:
        gc.collect()
    finally:
        gc.callbacks.remove(count)
    assert walked and walked[0] < frozen / 4  # the 1,000 new ones and what the test made, not the 20,000
    assert gc.get_freeze_count() >= frozen + 2_000
    assert len(held) + len(more) == 21_000


def test_once_the_thaw_interval_has_passed_a_full_collection_thaws_everything_and_the_next_one_freezes_again(keeper):
    callback, now = keeper
    gc.collect()
    assert gc.get_freeze_count() > 0
    now[0] += 60.0
    gc.collect()
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert gc.get_freeze_count() > 0


def test_a_reference_cycle_frozen_before_it_became_garbage_is_freed_after_the_thaw(keeper):
    import weakref

    callback, now = keeper

    class Node:
        pass

    first, second = Node(), Node()
    first.other, second.other = second, first
    alive = weakref.ref(first)
    gc.collect()  # the cycle is alive: frozen
    del first, second
    gc.collect()
    assert alive() is not None, "a frozen cycle was freed before the thaw: this test proves nothing"
    now[0] += 60.0
    gc.collect()  # the thaw
    gc.collect()  # walks the thawed objects
    assert alive() is None
