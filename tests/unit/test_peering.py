"""The active-replica answer against kopf's own: the same peering objects through kopf's process_peering_event.

mountwarden reads kopf's peering object itself (kopf keeps its verdict in a toggle no handler can see):
these cases hold that reading to the function kopf runs on each change of the object.
"""

import asyncio
from datetime import UTC, datetime, timedelta

import kopf
import pytest
from kopf._cogs.aiokits.aiotoggles import Toggle
from kopf._core.engines.peering import Identity, Peer, process_peering_event

from mountwarden.adapters.peering import replica_active

NAME = "mountwarden"


def kopf_lets_it_work(status: dict, *, priority: int, identity: str) -> bool:
    """What kopf itself decides for the replica ``identity`` of ``priority`` on this peering object."""

    async def judge() -> bool:
        settings = kopf.OperatorSettings()
        settings.peering.name = NAME
        settings.peering.priority = priority
        paused = Toggle(False)
        woken = asyncio.Event()
        woken.set()  # kopf would then sleep until a peer expires: wake it at once
        await process_peering_event(
            raw_event={"type": "MODIFIED", "object": {"metadata": {"name": NAME}, "status": status}},
            namespace=None, resource=None, identity=Identity(identity), settings=settings, autoclean=False,
            stream_pressure=woken, conflicts_found=paused)
        return paused.is_off()

    return asyncio.run(judge())


def peer(priority: int, seen_ago: float = 5, lifetime: int = 60) -> dict:
    """A peer as kopf writes it (Peer.as_dict), seen ``seen_ago`` seconds ago."""
    seen = (datetime.now(UTC) - timedelta(seconds=seen_ago)).isoformat()
    return Peer(identity=Identity("x"), priority=priority, lifetime=lifetime, lastseen=seen).as_dict()


#: Each case builds its peering object when it runs: the peers' lastseen must be fresh then.
CASES = {
    "alone": lambda: ({"me": peer(500)}, 500),
    "higher than the other": lambda: ({"me": peer(900), "other": peer(500)}, 900),
    "lower than the other": lambda: ({"me": peer(500), "other": peer(900)}, 500),
    "equal to the other": lambda: ({"me": peer(500), "other": peer(500)}, 500),
    "the higher one is dead": lambda: ({"me": peer(500), "other": peer(900, seen_ago=120)}, 500),
    "the higher one left (lifetime 0)": lambda: ({"me": peer(500), "other": peer(900, lifetime=0)}, 500),
    "not in the object yet": lambda: ({"other": peer(100)}, 500),
    "not in the object yet, below another": lambda: ({"other": peer(900)}, 500),
    "three, the middle one": lambda: ({"low": peer(100), "me": peer(500), "high": peer(900)}, 500),
    "three, the highest": lambda: ({"low": peer(100), "mid": peer(500), "me": peer(900)}, 900),
}


@pytest.mark.parametrize("case", CASES)
def test_the_answer_is_kopfs_own(case):
    status, priority = CASES[case]()
    expected = kopf_lets_it_work(status, priority=priority, identity="me")
    assert replica_active(status, priority=priority, identity="me", now=datetime.now(UTC)) is expected


def test_the_cases_cover_both_answers():
    answers = {kopf_lets_it_work(status, priority=priority, identity="me")
               for status, priority in (case() for case in CASES.values())}
    assert answers == {True, False}
