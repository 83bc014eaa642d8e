"""A local TCP forwarder, as efs-utils' TLS tunnel is to the NFS client: 127.0.0.1:PORT -> HOST:PORT.

Usage: tunnel.py LISTEN_PORT TARGET_HOST TARGET_PORT. efs-utils mounts 127.0.0.1:/ with port=<tunnel port>
(20049 and up) and its stunnel or efs-proxy carries each connection to the file system over TLS; this one
carries it in the clear, which is all the NFS client can tell apart. Killed, nothing listens on the port
any more (the tunnel is down); stopped (SIGSTOP), it holds its connections and forwards nothing (a server
that does not answer). Standard library only: it runs in the lab VM.
"""

import contextlib
import socket
import sys
import threading


def pipe(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for end in (source, sink):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)


def main() -> None:
    listen_port, target_host, target_port = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", listen_port))
    server.listen(64)
    print(f"listening on 127.0.0.1:{listen_port}", flush=True)
    while True:
        client, _ = server.accept()
        try:
            upstream = socket.create_connection((target_host, target_port))
        except OSError:
            client.close()
            continue
        for source, sink in ((client, upstream), (upstream, client)):
            threading.Thread(target=pipe, args=(source, sink), daemon=True).start()


if __name__ == "__main__":
    main()
