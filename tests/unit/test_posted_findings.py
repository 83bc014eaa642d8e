"""Findings already posted as Events: each posted once, in bounded memory that forgets after an hour."""

import threading

from mountwarden.handlers.posted import PostedFindings


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_finding_is_posted_once_until_it_expires():
    clock = Clock()
    posted = PostedFindings(maxsize=10, ttl=3600, timer=clock)
    assert posted.first_time("uid-1", "MountPolicyDrift", "acregmax differs")
    assert not posted.first_time("uid-1", "MountPolicyDrift", "acregmax differs")
    assert posted.first_time("uid-1", "MountPolicyDrift", "lookupcache differs")
    assert posted.first_time("uid-2", "MountPolicyDrift", "acregmax differs")
    clock.now = 3601
    assert len(posted) == 0
    assert posted.first_time("uid-1", "MountPolicyDrift", "acregmax differs")


def test_memory_is_bounded_however_many_findings_come():
    posted = PostedFindings(maxsize=100, ttl=3600, timer=Clock())
    for n in range(10_000):
        posted.first_time(f"uid-{n}", "SQLiteOnNFS", "x" * 1000)
    assert len(posted) == 100
    # The message is remembered as a digest, not as its text.
    assert len(PostedFindings.key("uid", "SQLiteOnNFS", "x" * 1000)[2]) == 16


def test_two_threads_never_both_post_the_same_finding():
    posted = PostedFindings(timer=Clock())
    winners: list[int] = []
    start = threading.Barrier(8)

    def race(n: int) -> None:
        start.wait()
        for _ in range(1000):
            if posted.first_time("uid", "MountPolicyDrift", "the same"):
                winners.append(n)

    threads = [threading.Thread(target=race, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(winners) == 1
