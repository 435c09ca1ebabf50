"""A counting TCP proxy in front of PostgreSQL: statements and round trips, seen on the wire.

The web server is pointed at this proxy (sslmode=disable so the protocol is readable); the proxy
forwards every byte unchanged and parses the frontend messages: a simple Query ('Q') or a Sync
('S') ends a round trip; a 'Q' or an Execute ('E') is one statement. BEGIN and COMMIT count too,
which Django's CaptureQueriesContext would not show.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from dataclasses import dataclass, field


@dataclass
class Counts:
    statements: int = 0
    round_trips: int = 0
    texts: list[str] = field(default_factory=list)


class CountingProxy:
    def __init__(self, listen_port: int, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.server = socket.create_server(("127.0.0.1", listen_port))
        self.port = listen_port
        self.lock = threading.Lock()
        self.counts = Counts()
        self._closed = False
        self._socks: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def snapshot(self) -> Counts:
        with self.lock:
            return Counts(self.counts.statements, self.counts.round_trips, list(self.counts.texts))

    def reset(self) -> None:
        with self.lock:
            self.counts = Counts()

    def close(self) -> None:
        self._closed = True
        self.server.close()
        for sock in self._socks:
            with contextlib.suppress(OSError):
                sock.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.upstream)
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._socks += [client, upstream]
            threading.Thread(target=self._pipe, args=(upstream, client), daemon=True).start()
            threading.Thread(target=self._frontend, args=(client, upstream), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def _frontend(self, client: socket.socket, upstream: socket.socket) -> None:
        buf = b""
        started = False

        def need(n: int) -> bool:
            nonlocal buf
            while len(buf) < n:
                data = client.recv(65536)
                if not data:
                    return False
                upstream.sendall(data)
                buf += data
            return True

        try:
            while True:
                if not started:
                    if not need(4):
                        return
                    (length,) = struct.unpack("!I", buf[:4])
                    if not need(length):
                        return
                    code = struct.unpack("!I", buf[4:8])[0] if length >= 8 else 0
                    buf = buf[length:]
                    if code not in (80877103, 80877104):  # SSLRequest, GSSENCRequest
                        started = True
                    continue
                if not need(5):
                    return
                kind = buf[:1]
                (length,) = struct.unpack("!I", buf[1:5])
                if not need(1 + length):
                    return
                body = buf[5 : 1 + length]
                buf = buf[1 + length :]
                with self.lock:
                    if kind == b"Q":
                        self.counts.statements += 1
                        self.counts.round_trips += 1
                        self.counts.texts.append(body.rstrip(b"\0").decode("utf-8", "replace"))
                    elif kind == b"P":
                        name_end = body.index(b"\0")
                        query_end = body.index(b"\0", name_end + 1)
                        self.counts.texts.append(
                            body[name_end + 1 : query_end].decode("utf-8", "replace")
                        )
                    elif kind == b"E":
                        self.counts.statements += 1
                    elif kind == b"S":
                        self.counts.round_trips += 1
        except OSError:
            return
