"""Which failures of the API are worth retrying: the statuses that pass, and answers that never came whole.

The rollout daemon retries a TransientApiError after a back-off and waits for the next event on anything else, so
a connection refused or cut short must count as transient (a loaded CI run's tick would otherwise have waited for
an event that never came). A conflict is retried at once, a few times in a row: reading again settles it.
"""

import socket
import threading

import kubernetes
import pytest
from kubernetes.client import ApiException

from mountwarden.adapters.kube import TransientApiError, transient_errors
from mountwarden.handlers.errors import CONFLICT_RETRIES, MAX_BACKOFF_SECONDS, Retries


def client_of(url: str) -> kubernetes.client.CoreV1Api:
    configuration = kubernetes.client.Configuration()
    configuration.host = url
    configuration.retries = False
    return kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(configuration))


def test_a_refused_connection_is_transient():
    with socket.socket() as closed:  # a port nobody listens on once closed
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    with pytest.raises(TransientApiError) as raised, transient_errors():
        client_of(f"http://127.0.0.1:{port}").list_namespace(_request_timeout=5)
    assert raised.value.status == 0 and "no whole answer" in str(raised.value)


def test_an_answer_cut_short_is_transient():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)

        def answer_half() -> None:
            connection, _ = server.accept()
            with connection:
                connection.recv(65536)
                connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 400\r\n\r\n"
                                   b'{"kind": "NamespaceList", "items": [')

        thread = threading.Thread(target=answer_half, daemon=True)
        thread.start()
        with pytest.raises(TransientApiError) as raised, transient_errors():
            client_of(f"http://127.0.0.1:{server.getsockname()[1]}").list_namespace(_request_timeout=5)
        thread.join(timeout=5)
    assert raised.value.status == 0


@pytest.mark.parametrize(("status", "transient"), [(409, True), (429, True), (500, True), (503, True), (404, False),
                                                   (403, False), (422, False)])
def test_statuses_that_pass_are_transient_and_the_others_go_through(status, transient):
    def refused() -> None:
        with transient_errors():
            raise ApiException(status=status, reason="because")

    with pytest.raises(TransientApiError if transient else ApiException) as raised:
        refused()
    assert getattr(raised.value, "status", None) == status


def test_conflicts_in_a_row_are_retried_at_once_five_times_then_back_off():
    conflict = TransientApiError(409, "Conflict")
    retries, delays = Retries(), []
    for _ in range(7):
        retries, delay = retries.after(conflict)
        delays.append(delay)
    assert delays == [0.0] * CONFLICT_RETRIES + [2.0, 4.0]
    assert retries == Retries(failures=2, conflicts=CONFLICT_RETRIES)


@pytest.mark.parametrize("status", [0, 429, 500, 503])
def test_other_transient_failures_back_off_from_the_first_and_up_to_the_cap(status):
    error, retries, delays = TransientApiError(status, "passing"), Retries(), []
    for _ in range(8):
        retries, delay = retries.after(error)
        delays.append(delay)
    assert delays == [2.0, 4.0, 8.0, 16.0, 32.0, MAX_BACKOFF_SECONDS, MAX_BACKOFF_SECONDS, MAX_BACKOFF_SECONDS]


def test_a_conflict_after_failures_is_still_retried_at_once_and_keeps_the_failures_count():
    retries, _ = Retries().after(TransientApiError(503, "Service Unavailable"))
    retries, delay = retries.after(TransientApiError(409, "Conflict"))
    assert delay == 0.0 and retries == Retries(failures=1, conflicts=1)
    _, delay = retries.after(TransientApiError(503, "Service Unavailable"))
    assert delay == 4.0


def test_a_conflict_after_writes_went_in_is_always_retried_at_once_and_starts_the_count_again():
    """Each such retry has fewer writes left, so retrying at once cannot loop."""
    retries = Retries(failures=3, conflicts=CONFLICT_RETRIES)
    progressed = TransientApiError(409, "Conflict")
    progressed.performed = 120
    for _ in range(20):
        retries, delay = retries.after(progressed)
        assert delay == 0.0
    assert retries == Retries(failures=3, conflicts=0)
    _, delay = retries.after(TransientApiError(409, "Conflict"))
    assert delay == 0.0


def test_a_bug_backs_off_as_a_failure_and_a_conflict_after_it_is_still_retried_at_once():
    retries, delay = Retries().after(KeyError("a bug"))
    assert delay == 2.0 and retries == Retries(failures=1)
    retries, delay = retries.after(TransientApiError(409, "Conflict"))
    assert delay == 0.0 and retries == Retries(failures=1, conflicts=1)
