"""Calls a dead server can hang: a timeout, one stuck call per server at most, a bounded number in all.

A hung server is stood in for by a call blocked on an Event; the real one (nfsd stopped under a hard
mount) is in tests/kernel/test_dead_server.py.
"""

import threading
import time

from mountwarden.adapters.bounded import BoundedCalls, Outcome


def test_a_call_that_returns_gives_its_value_and_an_os_error_is_a_failure():
    calls = BoundedCalls()
    assert calls.run("0:50", lambda: 42, timeout=5).value == 42

    def gone():
        raise FileNotFoundError(2, "gone")

    failed = calls.run("0:50", gone, timeout=5)
    assert failed.outcome == Outcome.FAILED and isinstance(failed.error, FileNotFoundError) and not failed.stalled


def test_a_hung_call_times_out_and_its_server_is_not_asked_again_until_it_returns():
    calls, server_back = BoundedCalls(), threading.Event()
    assert calls.run("0:50", server_back.wait, timeout=0.1).outcome == Outcome.TIMED_OUT
    # No second thread for the same server: refused at once, however often it is asked.
    for _ in range(100):
        assert calls.run("0:50", server_back.wait, timeout=5).outcome == Outcome.BUSY
    assert calls.stuck == 1
    # Another server is asked as usual.
    assert calls.run("0:51", lambda: "ok", timeout=5).value == "ok"
    server_back.set()
    deadline = time.monotonic() + 30
    while calls.stuck and time.monotonic() < deadline:  # the stuck thread returns once the server is back
        time.sleep(0.01)
    assert calls.run("0:50", lambda: "back", timeout=5).value == "back"


def test_past_the_limit_of_stuck_calls_nothing_new_is_started():
    calls, server_back = BoundedCalls(limit=3), threading.Event()
    before = threading.active_count()
    for server in range(3):
        assert calls.run(f"0:{server}", server_back.wait, timeout=0.05).outcome == Outcome.TIMED_OUT
    assert calls.run("0:99", lambda: "never run", timeout=5).outcome == Outcome.FULL
    assert threading.active_count() - before == 3
    server_back.set()


def test_calls_started_together_share_one_timeout():
    calls, server_back = BoundedCalls(), threading.Event()
    started = {key: calls.submit(key, server_back.wait, 10) for key in ("0:1", "0:2", "0:3")}
    results = calls.wait_all(started, 0.2)
    assert {result.outcome for result in results.values()} == {Outcome.TIMED_OUT}
    server_back.set()


def test_only_waits_in_vain_are_counted_and_calls_started_together_count_their_one_timeout():
    calls, server_back = BoundedCalls(), threading.Event()
    assert calls.run("0:1", lambda: "ok", timeout=5).value == "ok"
    assert calls.waited_in_vain == 0.0  # a call that returned is not a wait on a dead server
    started = {key: calls.submit(key, server_back.wait, 10) for key in ("0:2", "0:3", "0:4")}
    calls.wait_all(started, 0.5)
    assert calls.run("0:2", server_back.wait, timeout=5).outcome == Outcome.BUSY  # refused: no wait either
    # One timeout in all, not one per call: three in turn would be 1.5 s at least (Event.wait never returns early).
    assert 0.5 <= calls.waited_in_vain < 1.5, calls.waited_in_vain
    server_back.set()


def test_a_stuck_call_is_listed_with_what_it_is_and_for_how_long():
    calls, server_back = BoundedCalls(), threading.Event()

    def statvfs(path):
        server_back.wait()

    assert calls.run("0:53", statvfs, "/var/lib/kubelet/pods/p/volumes/v", timeout=0.05).outcome == Outcome.TIMED_OUT
    assert calls.run("0:54", lambda: "ok", timeout=5).value == "ok"  # returned: not listed
    (stuck,) = calls.stuck_calls()
    assert (stuck.key, stuck.what) == ("0:53", "statvfs(/var/lib/kubelet/pods/p/volumes/v)") and stuck.seconds > 0
    assert str(stuck).startswith("statvfs(/var/lib/kubelet/pods/p/volumes/v) on 0:53 for ")
    server_back.set()
