"""An ONC RPC NULL call to an NFS server, and what its answer says: the bytes only (RFC 5531;
record marking is its section 11).

Procedure 0 of every RPC program does nothing and answers at once. Sent to the NFS program
(100003) over TCP, it asks "is the server there and serving NFS at this version?" without
touching a file, so it needs no right on the node: any uid may open a socket, unlike the
statvfs() probe, which must reach the pod volume's mount point through the kubelet's 0750
directories (tests/kernel/test_unprivileged_node_reading.py proves both, and that knfsd
answers a NULL from an unprivileged port). A socket that gets no answer times out; it never
waits in the kernel as a call on a hard mount does.

Over TCP each message is one record: a 4-byte mark, its top bit "last fragment", the rest its length.
"""

import struct
from dataclasses import dataclass
from enum import Enum

NFS_PROGRAM = 100003
NFS_PORT = 2049
_CALL, _REPLY = 0, 1
_RPC_VERSION = 2
_AUTH_NONE = 0
_LAST_FRAGMENT = 0x8000_0000
#: A reply's first fields: xid, REPLY, MSG_ACCEPTED or MSG_DENIED.
_HEAD = struct.Struct(">III")


class Verdict(Enum):
    """What a server said to a NULL call (accept_stat and reject_stat, RFC 5531 s9)."""

    ANSWERED = "answered"  # MSG_ACCEPTED, SUCCESS: the server serves this program and version
    VERSION_NOT_SERVED = "version not served"  # PROG_MISMATCH (low and high in the answer)
    PROGRAM_NOT_SERVED = "program not served"  # PROG_UNAVAIL: something else listens on the port
    REFUSED = "refused"  # MSG_DENIED (RPC_MISMATCH or AUTH_ERROR), or another accept_stat


@dataclass(frozen=True)
class NullAnswer:
    verdict: Verdict
    #: PROG_MISMATCH: the lowest and highest versions the server serves.
    versions: tuple[int, int] | None = None


class NotAnRpcReply(ValueError):
    """The bytes are not a reply to the call (another xid, a call, or cut short)."""


def null_call(xid: int, version: int, program: int = NFS_PROGRAM) -> bytes:
    """The record of a NULL call: xid, CALL, RPC version 2, the program and version, procedure 0, no credentials."""
    body = struct.pack(">IIIIIIIIII", xid, _CALL, _RPC_VERSION, program, version, 0, _AUTH_NONE, 0, _AUTH_NONE, 0)
    return struct.pack(">I", _LAST_FRAGMENT | len(body)) + body


def record_length(mark: bytes) -> int:
    """The length of a record from its 4-byte mark; a reply to a NULL call is one fragment."""
    (value,) = struct.unpack(">I", mark)
    if not value & _LAST_FRAGMENT:
        raise NotAnRpcReply("a NULL reply is one fragment; this record continues in another")
    return value & ~_LAST_FRAGMENT


def read_null_reply(xid: int, body: bytes) -> NullAnswer:
    """What a reply record's body (after the mark) says to the call ``xid``."""
    if len(body) < _HEAD.size:
        raise NotAnRpcReply(f"{len(body)} bytes is too short for an RPC reply")
    answered_xid, message_type, reply_stat = _HEAD.unpack_from(body)
    if answered_xid != xid or message_type != _REPLY:
        raise NotAnRpcReply(f"not the reply to call {xid:#x} (xid {answered_xid:#x}, message type {message_type})")
    if reply_stat != 0:
        return NullAnswer(Verdict.REFUSED)
    # MSG_ACCEPTED: the server's verifier (flavor, opaque body padded to 4 bytes), then accept_stat.
    offset = _HEAD.size
    _flavor, length = _unpack(">II", body, offset)
    offset += 8 + (length + 3) // 4 * 4
    (accept_stat,) = _unpack(">I", body, offset)
    if accept_stat == 0:
        return NullAnswer(Verdict.ANSWERED)
    if accept_stat == 2:
        return NullAnswer(Verdict.VERSION_NOT_SERVED, _unpack(">II", body, offset + 4))
    if accept_stat == 1:
        return NullAnswer(Verdict.PROGRAM_NOT_SERVED)
    return NullAnswer(Verdict.REFUSED)


def _unpack(layout: str, body: bytes, offset: int) -> tuple:
    try:
        return struct.unpack_from(layout, body, offset)
    except struct.error as error:
        raise NotAnRpcReply(f"the reply ends early: {error}") from None
