"""A TCP proxy on 127.0.0.1 whose connections a test can cut: bytes pass through
unread (TLS stays end to end between client and server), so that a test can break a
client's long-lived connections (a Kubernetes watch) the way a load balancer or a NAT
that loses its state does, without touching either end.

- `cut()`: every open connection is reset (RST on both sides), new ones pass;
- `down()`: the same, and every new connection is reset at once until `up()`.
"""

from __future__ import annotations

import socket
import struct
import threading
from typing import Optional

#: SO_LINGER on, timeout 0: close() sends RST instead of FIN.
_RESET = struct.pack("ii", 1, 0)


def _reset(sock: socket.socket) -> None:
    """Closes a socket no other thread uses with a RST."""
    for op in (lambda: sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET), sock.close):
        try:
            op()
        except OSError:
            pass


def _abort(sock: socket.socket) -> None:
    """Makes the pumps of a socket stop (SHUT_RD wakes a thread blocked reading it and
    sends nothing), and its close (by the last pump) send a RST. The socket is not closed
    here: a pump may be about to use its descriptor, which a new connection could reuse."""
    for op in (lambda: sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET),
               lambda: sock.shutdown(socket.SHUT_RD)):
        try:
            op()
        except OSError:
            pass


class _Pair:
    """A forwarded connection: the client's socket, the server's, and how many of its
    two pumps have ended."""

    def __init__(self, client: socket.socket, server: socket.socket):
        self.client, self.server, self.ended, self.cut = client, server, 0, False


class TcpProxy:
    """Listens on 127.0.0.1 (an ephemeral port) and forwards to `target` (host, port)."""

    def __init__(self, target: tuple[str, int]):
        self.target = target
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self._listener.settimeout(0.2)
        self._lock = threading.Lock()
        self._pairs: list[_Pair] = []
        self._down = False
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        #: Connections accepted and forwarded, and connections reset (cut, or refused while down).
        self.forwarded = 0
        self.reset = 0

    @property
    def port(self) -> int:
        return self._listener.getsockname()[1]

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> "TcpProxy":
        self._thread = threading.Thread(target=self._accept, name=f"tcpproxy-{self.port}", daemon=True)
        self._thread.start()
        return self

    def open_connections(self) -> int:
        with self._lock:
            return len(self._pairs)

    def cut(self) -> int:
        """Resets every open connection; returns how many."""
        with self._lock:
            pairs, self._pairs = self._pairs, []
            self.reset += len(pairs)
            for pair in pairs:
                pair.cut = True
        for pair in pairs:
            _abort(pair.client)
            _abort(pair.server)
        return len(pairs)

    def down(self) -> int:
        """Cuts every connection and resets new ones until `up()`; returns how many were cut."""
        with self._lock:
            self._down = True
        return self.cut()

    def up(self) -> None:
        with self._lock:
            self._down = False

    def close(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=5)
        self._listener.close()
        self.cut()

    # ------------------------------------------------------------ forwarding

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            with self._lock:
                down = self._down
            if down:
                self.reset += 1
                _reset(client)
                continue
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                _reset(client)  # the server is away: the client sees its connection fail
                continue
            server.settimeout(None)
            client.settimeout(None)
            pair = _Pair(client, server)
            with self._lock:
                self._pairs.append(pair)
                self.forwarded += 1
            for src, dst in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(pair, src, dst), daemon=True).start()

    def _pump(self, pair: _Pair, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        # This direction ended: pass the end on (a FIN), unless the pair was cut (then
        # both ends get a RST). The second pump to end closes the pair.
        with self._lock:
            cut = pair.cut
        if not cut:
            try:
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass
        with self._lock:
            pair.ended += 1
            last = pair.ended == 2
            if last and pair in self._pairs:
                self._pairs.remove(pair)
        if last:
            pair.client.close()
            pair.server.close()
