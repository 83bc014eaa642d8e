"""/proc/net/tcp and /proc/net/tcp6: the TCP sockets of one network namespace.

      sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
       0: 0100007F:0801 0100007F:D6B4 01 00000000:00000000 00:00000000 00000000     0        0 31415 1 ...

Addresses are hex: an IPv4 address is one 32-bit word in the host's byte order (little-endian on x86_64 and
arm64, so 0100007F is 127.0.0.1), an IPv6 address four such words; the port is big-endian hex (0801 is 2049).
``st`` is the TCP state (01 ESTABLISHED, 0A LISTEN: include/net/tcp_states.h). ``inode`` is the socket's
inode, the number a process's /proc/<pid>/fd link names as ``socket:[31415]``; 0 for sockets no file holds
(the kernel NFS client's own transports, among others).
"""

import ipaddress
import sys
from dataclasses import dataclass

from mountwarden.core.procfs.lines import parse_lines

#: include/net/tcp_states.h, in order from 1.
TCP_STATES = ("ESTABLISHED", "SYN_SENT", "SYN_RECV", "FIN_WAIT1", "FIN_WAIT2", "TIME_WAIT", "CLOSE", "CLOSE_WAIT",
              "LAST_ACK", "LISTEN", "CLOSING", "NEW_SYN_RECV")


@dataclass(frozen=True, slots=True)
class TcpSocket:
    local_address: str
    local_port: int
    remote_address: str
    remote_port: int
    state: str
    inode: int

    @property
    def remote(self) -> str:
        host = f"[{self.remote_address}]" if ":" in self.remote_address else self.remote_address
        return f"{host}:{self.remote_port}"


@dataclass(frozen=True, slots=True)
class TcpResult:
    sockets: tuple[TcpSocket, ...]
    skipped_line_numbers: tuple[int, ...]

    @property
    def skipped_lines(self) -> int:
        return len(self.skipped_line_numbers)


def _address(text: str, byteorder: str) -> str:
    """A hex address of /proc/net/tcp{,6}, each 32-bit word in ``byteorder``, as text."""
    raw = bytes.fromhex(text)
    if len(raw) not in (4, 16):
        raise ValueError(text)
    ordered = b"".join(raw[i:i + 4][::-1] if byteorder == "little" else raw[i:i + 4] for i in range(0, len(raw), 4))
    return str(ipaddress.ip_address(ordered))


def _endpoint(text: str, byteorder: str) -> tuple[str, int]:
    address, _, port = text.partition(":")
    return _address(address, byteorder), int(port, 16)


#: The header line parses to this and is dropped: it is neither a socket nor a malformed line.
_HEADER = TcpSocket("", 0, "", 0, "", 0)


def parse_tcp(text: str, *, byteorder: str = sys.byteorder) -> TcpResult:
    """Both files share the format; ``byteorder`` is the kernel's (the machine the text was read on)."""

    def parse(line: str, _number: int) -> TcpSocket | None:
        fields = line.split()
        if not fields or fields[0] == "sl":
            return None if not fields else _HEADER
        try:
            local, remote = _endpoint(fields[1], byteorder), _endpoint(fields[2], byteorder)
            state = int(fields[3], 16)
            inode = int(fields[9])
        except (IndexError, ValueError):
            return None
        if not 1 <= state <= len(TCP_STATES):
            return None
        return TcpSocket(*local, *remote, TCP_STATES[state - 1], inode)

    sockets, skipped = parse_lines(text, parse)
    return TcpResult(tuple(s for s in sockets if s is not _HEADER), skipped)

