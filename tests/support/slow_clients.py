"""Raw-socket clients for the tests of slow and surplus connections (the daemon's, mcp-serve's
and the uvicorn guard's): read an answer to the end, drip header lines that never end, count a
server's open file descriptors."""

from __future__ import annotations

import contextlib
import os
import socket
import threading

DRIP_SECONDS = 0.2
"""How often a slow client sends one more header line (well under any timeout the tests set,
so it would be kept open for ever by a server that only has an idle timeout)."""


def read_all(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes (a generous timeout stops hangs)."""
    sock.settimeout(30)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def open_fds(pid: int) -> int:
    """How many file descriptors process `pid` has open (Linux: /proc/PID/fd)."""
    return len(os.listdir(f"/proc/{pid}/fd"))


class SlowClients:
    """Connections that send `start` (a request line and its first headers) and then one header
    line every `DRIP_SECONDS`, never the blank line that ends the headers."""

    def __init__(
        self,
        address: tuple[str, int],
        count: int,
        start: bytes = b"GET /v1/conversations HTTP/1.1\r\nHost: 127.0.0.1\r\n",
    ) -> None:
        self.sockets = [socket.create_connection(address, timeout=30) for _ in range(count)]
        for sock in self.sockets:
            sock.sendall(start)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._drip, daemon=True)
        self._thread.start()

    def _drip(self) -> None:
        n = 0
        while not self._stop.wait(DRIP_SECONDS):
            n += 1
            for sock in self.sockets:
                with contextlib.suppress(OSError):  # closed by the server: what the test wants
                    sock.sendall(f"X-Slow-{n}: still here\r\n".encode())

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        for sock in self.sockets:
            sock.close()
