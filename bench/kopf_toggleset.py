"""kopf's start-up barrier with N objects, with and without mountwarden's ToggleSet patch.

    .venv/bin/python bench/kopf_toggleset.py [--objects 500 1000 2000 4000] [--patched-objects 20000]

What kopf does while it fills its indexes (kopf/_core/reactor/queueing.py): the watcher makes
a toggle in one ToggleSet(all) for each object as it arrives and starts its worker, which
indexes the object, drops its toggle, then waits until the whole set is on (every object
indexed) before any other handler runs. This script
runs exactly that with kopf's own ToggleSet and no API server, and times how long the last
waiter takes to pass the barrier, and counts the wake-ups of waiting tasks (each takes the
condition's lock, which every object's own make and drop also need). The figures are quoted in docs/upstream/kopf-toggleset.md.
"""

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "operator"))


async def barrier(objects: int) -> dict:
    from kopf._cogs.aiokits import aiotoggles

    indexed = aiotoggles.ToggleSet(all)
    notified = 0
    original = indexed._condition.notify_all

    def counting_notify_all() -> None:
        nonlocal notified
        notified += 1
        original()

    indexed._condition.notify_all = counting_notify_all
    wakeups = 0
    wait = indexed._condition.wait

    async def counting_wait() -> bool:
        nonlocal wakeups
        woken = await wait()
        wakeups += 1  # a waiter woke up, took the lock and will check the set's state
        return woken

    indexed._condition.wait = counting_wait
    blocker = await indexed.make_toggle(name="listing")  # kopf's "orchestration blocker" until listed

    async def worker(toggle) -> None:
        await asyncio.sleep(0)  # the object's index handlers run here
        await indexed.drop_toggle(toggle)
        await indexed.wait_for(True)

    started = time.perf_counter()
    workers = []
    for n in range(objects):
        # As the watcher does: an object arrives from the listing, gets its toggle and its worker.
        toggle = await indexed.make_toggle(name=f"object-{n}")
        workers.append(asyncio.create_task(worker(toggle)))
        await asyncio.sleep(0)  # the next object arrives from the API a moment later
    await indexed.drop_toggle(blocker)
    await asyncio.gather(*workers)
    return {"objects": objects, "seconds": round(time.perf_counter() - started, 3), "notify_all_calls": notified,
            "waiter_wakeups": wakeups}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--objects", type=int, nargs="*", default=[500, 1000, 2000])
    parser.add_argument("--patched-objects", type=int, nargs="*", default=[500, 1000, 2000, 20000])
    args = parser.parse_args()
    import kopf

    results = {"kopf": kopf.__version__, "unpatched": [asyncio.run(barrier(n)) for n in args.objects]}
    from mountwarden.handlers.kopfpatch import wake_waiters_only_on_flips

    assert wake_waiters_only_on_flips(), "kopf's ToggleSet is not the one the patch was written for"
    results["patched"] = [asyncio.run(barrier(n)) for n in args.patched_objects]
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
