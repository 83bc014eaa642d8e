"""The NULL call on a socket: is an NFS server answering at an address, asked as any uid may ask it.

Every wait is the socket's own timeout, one deadline for connecting, sending and reading, so a
server that is gone costs the caller ``timeout`` seconds and no thread: unlike a call on a hard
mount, a socket never waits in the kernel beyond what it was given.
"""

import os
import socket
import struct
import time
from dataclasses import dataclass

from mountwarden.core.node.rpcnull import (
    NFS_PORT,
    NotAnRpcReply,
    NullAnswer,
    null_call,
    read_null_reply,
    record_length,
)


@dataclass(frozen=True)
class Ping:
    """An answer, or why there was none (the error's words: timed out, refused, reset...)."""

    answer: NullAnswer | None
    error: str | None
    seconds: float


def ping(address: str, *, port: int = NFS_PORT, version: int = 4, timeout: float = 5.0) -> Ping:
    """One NULL call to the NFS program at ``address``:``port``, waited for at most ``timeout`` seconds in all."""
    started = time.monotonic()
    deadline = started + timeout
    xid = struct.unpack(">I", os.urandom(4))[0]
    try:
        with socket.create_connection((address, port), timeout=timeout) as connection:
            connection.settimeout(max(deadline - time.monotonic(), 0.001))
            connection.sendall(null_call(xid, version))
            length = record_length(_read(connection, 4, deadline))
            answer = read_null_reply(xid, _read(connection, length, deadline))
    except (OSError, NotAnRpcReply) as error:
        words = "timed out" if isinstance(error, TimeoutError) else str(error)
        return Ping(None, words, time.monotonic() - started)
    return Ping(answer, None, time.monotonic() - started)


def _read(connection: socket.socket, size: int, deadline: float) -> bytes:
    data = bytearray()
    while len(data) < size:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        connection.settimeout(left)
        chunk = connection.recv(size - len(data))
        if not chunk:
            raise ConnectionResetError("the server closed the connection before answering")
        data += chunk
    return bytes(data)
