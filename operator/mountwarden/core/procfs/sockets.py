"""/proc/<pid>/net/tcp and tcp6: the TCP sockets of that process's network namespace, here the listeners.

      sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
       1: 0100007F:4E51 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 15226 ...

The local address is printed as the kernel holds it, each 32-bit word in the host's byte order
(``0100007F`` is 127.0.0.1 on x86), the port in hex (``4E51`` is 20049); state ``0A`` is LISTEN
(include/net/tcp_states.h). Read through pid 1, they are the host's: where efs-utils' TLS tunnel
(stunnel or efs-proxy, in the host network) listens for the NFS client (kernel lab).
"""

import ipaddress
import sys
from dataclasses import dataclass

from mountwarden.core.procfs.lines import parse_lines

LISTEN = "0A"


@dataclass(frozen=True, slots=True)
class Listener:
    address: str
    port: int


def _address(text: str) -> str:
    words = [int(text[at:at + 8], 16).to_bytes(4, sys.byteorder) for at in range(0, len(text), 8)]
    return str(ipaddress.ip_address(b"".join(words)))


def _line(line: str, _: int) -> tuple[Listener, ...] | None:
    """() for a socket that is not listening, None for a line that is not a socket's."""
    fields = line.split()
    if len(fields) < 4 or not fields[0].endswith(":"):
        return None
    address, _, port = fields[1].partition(":")
    if len(address) not in (8, 32) or len(port) != 4:
        return None
    try:
        return (Listener(_address(address), int(port, 16)),) if fields[3] == LISTEN else ()
    except ValueError:
        return None


def parse_listeners(text: str) -> tuple[frozenset[Listener], int]:
    """The listening sockets of a net/tcp or net/tcp6 file, and how many lines could not be read."""
    header, _, body = text.partition("\n")
    parsed, skipped = parse_lines(body, _line)
    return frozenset(listener for found in parsed for listener in found), len(skipped)
