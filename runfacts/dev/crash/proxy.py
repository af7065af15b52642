"""A TCP proxy in front of a broker whose answers can be held back: the network fault of the
`eos-lost-commit-answer` row (a request reaches the broker, its answer does not come back).

Every connection accepted on 127.0.0.1:`port` is piped to the broker by two threads, one per
direction. `hold()` stops delivering what the broker sends (it is buffered, not dropped), on
every connection, new ones included; `release()` delivers the buffered bytes and pipes on.
The broker must advertise the proxy's port, so that every client reaches it only through here.
"""

from __future__ import annotations

import contextlib
import socket
import threading


class HoldingProxy:
    """127.0.0.1:`port` -> 127.0.0.1:`upstream`; the broker -> client direction can be held."""

    def __init__(self, port: int, upstream: int) -> None:
        self.port, self.upstream = port, upstream
        self._open = threading.Event()
        self._open.set()
        self._closing = threading.Event()
        self._server = socket.create_server(("127.0.0.1", port), reuse_port=False)
        self._server.settimeout(0.2)
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._acceptor = threading.Thread(target=self._accept, name=f"proxy-{port}", daemon=True)

    def start(self) -> HoldingProxy:
        self._acceptor.start()
        return self

    def hold(self) -> None:
        """From now on the broker's answers wait here."""
        self._open.clear()

    def release(self) -> None:
        """Deliver what waited, and pipe on."""
        self._open.set()

    def close(self) -> None:
        self._closing.set()
        self._open.set()
        self._acceptor.join(5)
        self._server.close()
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.close()

    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                client, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                broker = socket.create_connection(("127.0.0.1", self.upstream), timeout=10)
            except OSError:
                client.close()
                continue
            broker.settimeout(None)
            with self._lock:
                self._sockets += [client, broker]
            threading.Thread(target=self._pipe, args=(client, broker, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(broker, client, True), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, answers: bool) -> None:
        held = bytearray()
        source.settimeout(0.1)
        try:
            while not self._closing.is_set():
                if held and (not answers or self._open.is_set()):
                    sink.sendall(held)
                    held.clear()
                try:
                    data = source.recv(65536)
                except TimeoutError:
                    continue
                if not data:
                    break
                if answers and not self._open.is_set():
                    held += data
                else:
                    if held:
                        sink.sendall(held)
                        held.clear()
                    sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
