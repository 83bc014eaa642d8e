"""/dev/kmsg: the kernel log, one record per read, and the NFS client's lines about its servers.

    6,1234,187700320,-;nfs: server 10.77.1.1 OK
    5,1230,152413880,-;nfs: server 10.77.1.1 not responding, timed out

A record is ``PRIORITY,SEQUENCE,MICROSECONDS,FLAGS[,...];MESSAGE`` (Documentation/ABI/testing/
dev-kmsg), the microseconds counted from boot; continuation lines (`` KEY=value``) follow it.

The SUNRPC client says ``<program>: server <name> not responding, still trying`` when a request of a
hard mount (or any request of the client that retries forever) goes unanswered for timeo x retrans,
``..., timed out`` when a soft request gives up, and ``<program>: server <name> OK`` when a request that
had logged the first line is answered (net/sunrpc/clnt.c, rpc_check_timeout and call_decode). ``<name>``
is the server as the mount named it, without a port: every mount of 127.0.0.1 says 127.0.0.1. In the
kernel lab, with nfsd stopped, a hard mount's server was logged as "timed out" too (its lease renewals are
soft), and "OK" once nfsd was back; a soft mount's server is never said OK.
"""

import re
from dataclasses import dataclass
from enum import StrEnum

_RECORD = re.compile(r"([0-9]+),([0-9]+),([0-9]+),[^;]*;(.*)", re.ASCII | re.DOTALL)
_SERVER_LINE = re.compile(r"(?:nfs|NFS|lockd|nfs_acl|rpcbind): server (\S+) "
                          r"(not responding, still trying|not responding, timed out|OK)\s*")


@dataclass(frozen=True, slots=True)
class KmsgRecord:
    priority: int
    sequence: int
    #: Seconds since boot when the kernel logged it.
    seconds: float
    message: str


def parse_kmsg_record(text: str) -> KmsgRecord | None:
    """One record as a read() of /dev/kmsg returns it; None when it is not one."""
    match = _RECORD.match(text)
    if match is None:
        return None
    message = match.group(4).split("\n", 1)[0]  # continuation lines are the record's dictionary
    return KmsgRecord(int(match.group(1)), int(match.group(2)), int(match.group(3)) / 1e6, message)


class ServerWord(StrEnum):
    """What the NFS client said of a server."""

    STILL_TRYING = "not responding, still trying"
    TIMED_OUT = "not responding, timed out"
    OK = "OK"

    @property
    def not_responding(self) -> bool:
        return self is not ServerWord.OK


def server_word(message: str) -> tuple[str, ServerWord] | None:
    """(server, what was said) of an RPC client's line about a server; None for any other line."""
    match = _SERVER_LINE.fullmatch(message)
    return (match.group(1), ServerWord(match.group(2))) if match else None
