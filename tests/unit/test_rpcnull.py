"""The NULL call's bytes and the reading of its replies (RFC 5531); the socket side against a local listener.

Against a real NFS server (knfsd, from an unprivileged port, and one whose link is down) in the kernel
lab: tests/kernel/test_unprivileged_node_reading.py.
"""

import socket
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

from mountwarden.agent.probe import NullProbe, rpc_target
from mountwarden.agent.rpcping import ping
from mountwarden.core.node.failures import ProbeAnswer
from mountwarden.core.node.rpcnull import (
    NotAnRpcReply,
    NullAnswer,
    Verdict,
    null_call,
    read_null_reply,
    record_length,
)

XID = 0x1234ABCD


def reply(*words: int, xid: int = XID) -> bytes:
    return struct.pack(f">II{len(words)}I", xid, 1, *words)


def accepted(accept_stat: int, *more: int, verifier: bytes = b"") -> bytes:
    padded = verifier + b"\0" * (-len(verifier) % 4)
    return reply(0) + struct.pack(">II", 1 if verifier else 0, len(verifier)) + padded + struct.pack(
        f">I{len(more)}I", accept_stat, *more)


def test_the_call_is_one_record_of_ten_words_asking_procedure_zero_of_nfs_without_credentials():
    call = null_call(XID, 4)
    assert len(call) == 44
    assert struct.unpack(">I", call[:4])[0] == 0x8000_0000 | 40
    assert struct.unpack(">10I", call[4:]) == (XID, 0, 2, 100003, 4, 0, 0, 0, 0, 0)
    assert struct.unpack(">10I", null_call(7, 3)[4:])[4] == 3


def test_a_reply_record_is_one_fragment_and_its_mark_gives_its_length():
    assert record_length(struct.pack(">I", 0x8000_0018)) == 24
    with pytest.raises(NotAnRpcReply, match="one fragment"):
        record_length(struct.pack(">I", 24))


@pytest.mark.parametrize(("body", "expected"), [
    (accepted(0), NullAnswer(Verdict.ANSWERED)),
    (accepted(0, verifier=b"abcde"), NullAnswer(Verdict.ANSWERED)),  # an opaque verifier, padded to 8 bytes
    (accepted(2, 2, 3), NullAnswer(Verdict.VERSION_NOT_SERVED, (2, 3))),
    (accepted(1), NullAnswer(Verdict.PROGRAM_NOT_SERVED)),
    (accepted(3), NullAnswer(Verdict.REFUSED)),  # PROC_UNAVAIL
    (accepted(5), NullAnswer(Verdict.REFUSED)),  # SYSTEM_ERR
    (reply(1, 0, 2, 2), NullAnswer(Verdict.REFUSED)),  # MSG_DENIED, RPC_MISMATCH
    (reply(1, 1, 1), NullAnswer(Verdict.REFUSED)),  # MSG_DENIED, AUTH_ERROR
])
def test_each_kind_of_reply_says_what_the_server_serves(body, expected):
    assert read_null_reply(XID, body) == expected


@pytest.mark.parametrize(("body", "words"), [
    (accepted(0)[:8], "too short"),
    (reply(0, xid=XID + 1) + bytes(12), "not the reply"),
    (struct.pack(">III", XID, 0, 0), "not the reply"),  # a call, not a reply
    (reply(0) + struct.pack(">II", 0, 0), "ends early"),  # no accept_stat
    (accepted(2), "ends early"),  # PROG_MISMATCH without its versions
])
def test_bytes_that_are_not_the_reply_are_refused_with_the_reason(body, words):
    with pytest.raises(NotAnRpcReply, match=words):
        read_null_reply(XID, body)


@contextmanager
def listener(answer) -> Iterator[int]:
    """A local TCP listener that hands each connection's call to ``answer`` (which may send nothing)."""
    server = socket.create_server(("127.0.0.1", 0))
    done = threading.Event()

    def serve():
        server.settimeout(0.2)
        while not done.is_set():
            try:
                connection, _ = server.accept()
            except TimeoutError:
                continue
            with connection:
                call = connection.recv(44)
                answer(connection, struct.unpack(">I", call[4:8])[0])
                done.wait()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        done.set()
        thread.join()
        server.close()


def test_ping_reads_the_answer_of_the_server_at_the_port():
    with listener(answering) as port:
        result = ping("127.0.0.1", port=port, timeout=5)
    assert result.error is None and result.answer == NullAnswer(Verdict.ANSWERED)


def test_a_server_that_accepts_and_never_answers_ends_the_ping_at_its_timeout_with_that_said():
    with listener(lambda connection, xid: None) as port:
        result = ping("127.0.0.1", port=port, timeout=0.5)
    assert (result.answer, result.error) == (None, "timed out")
    assert result.seconds >= 0.5


def test_a_port_nobody_listens_on_is_refused_at_once():
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
    result = ping("127.0.0.1", port=port, timeout=5)
    assert result.answer is None and "refused" in result.error


@dataclass(frozen=True)
class Mounted:
    """What NullProbe needs of a scanned mount: its superblock, mount point and client key."""

    superblock: str
    mount_point: str
    client_key: tuple[str, ...]


def answering(connection, xid):
    body = accepted(0).replace(struct.pack(">I", XID), struct.pack(">I", xid), 1)
    connection.sendall(struct.pack(">I", 0x8000_0000 | len(body)) + body)


def test_the_null_probe_asks_each_server_once_at_its_mounts_address_and_port_and_answers_for_each_mount():
    with socket.create_server(("127.0.0.1", 0)) as taken:
        closed = taken.getsockname()[1]
    with listener(answering) as port:
        mounts = [Mounted("0:60", "/pods/a/vol", ("4.1", "tcp", "127.0.0.1", str(port), "")),
                  Mounted("0:60", "/pods/b/vol", ("4.1", "tcp", "127.0.0.1", str(port), "")),
                  Mounted("0:61", "/pods/c/vol", ("4.1", "tcp", "127.0.0.1", str(closed), "")),
                  Mounted("0:62", "/pods/d/vol", ("3", "udp", "127.0.0.1", "0", ""))]
        result = NullProbe(timeout=5).probe(mounts)
    assert result.asked_by == "RPC NULL call"
    assert result.responding == {"0:60": True, "0:61": False, "0:62": None}
    assert result.answers == {"/pods/a/vol": ProbeAnswer.ANSWERED, "/pods/b/vol": ProbeAnswer.ANSWERED,
                              "/pods/c/vol": ProbeAnswer.NO_ANSWER, "/pods/d/vol": ProbeAnswer.UNKNOWN}


@pytest.mark.parametrize(("client_key", "target"), [
    (("4.1", "tcp", "10.0.1.5", "0", ""), ("10.0.1.5", 2049, 4)),  # port 0: the default
    (("4.1", "tcp", "127.0.0.1", "20049", "tls"), ("127.0.0.1", 20049, 4)),  # EFS through its TLS tunnel
    (("3", "tcp", "fd00::5", "2049", ""), ("fd00::5", 2049, 3)),
    (("3", "udp", "10.0.1.5", "0", ""), None),  # the NULL call here speaks TCP only
    (("4.1", "tcp", "", "0", ""), None),  # no address known
])
def test_the_null_probe_asks_where_the_mounts_client_talks(client_key, target):
    assert rpc_target(client_key) == target
