"""A loopback TCP proxy in front of the test S3 server that loses one acknowledgement, for real.

Every connection is relayed byte for byte to the server, except that the first request whose line
matches `drop_reply_to` (e.g. the conditional PUT of a manifest `_log/<version>.json`) is forwarded, the
server's reply is awaited (so the server has done the work), and then the client's connection is closed
without relaying it: what a connection reset or a timeout after the server acted looks like to a client.
Optionally, requests matching `refuse_after_drop` are then cut off before they reach the server.

HTTP/1.1 clients (obstore's hyper, pyarrow's AWS SDK) do not pipeline, so whatever the server sends after
that request was forwarded is its reply.
"""

from __future__ import annotations

import re
import socket
import threading
from dataclasses import dataclass, field

CHUNK = 65536
TAIL = 512  # bytes of the client stream kept to match a request line split across reads


@dataclass
class DroppedReply:
    """The request whose reply the proxy swallowed, and the first line of that reply."""

    request_line: str
    reply_status: str


@dataclass
class FaultProxy:
    """Relays 127.0.0.1:<port> to `upstream` (host, port); drops the reply to the first matching request."""

    upstream: tuple[str, int]
    drop_reply_to: re.Pattern | None  # None: relay everything
    refuse_after_drop: re.Pattern | None = None  # requests cut off unforwarded once a reply was dropped
    dropped: list[DroppedReply] = field(default_factory=list)
    _listener: socket.socket | None = None
    _sockets: list[socket.socket] = field(default_factory=list)
    _guard: threading.Lock = field(default_factory=threading.Lock)
    _armed: bool = True

    @property
    def endpoint(self) -> str:
        """The proxy's URL, for AWS_ENDPOINT_URL."""
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def start(self) -> FaultProxy:
        """Listen on a free loopback port and accept connections in a thread."""
        self._listener = socket.create_server(("127.0.0.1", 0))
        threading.Thread(target=self._accept, name="fault-proxy", daemon=True).start()
        return self

    def stop(self) -> None:
        """Close the listener and every relayed connection."""
        with self._guard:
            sockets, self._sockets = [self._listener, *self._sockets], []
        for sock in sockets:
            _close(sock)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # stopped
            server = socket.create_connection(self.upstream)
            with self._guard:
                self._sockets += [client, server]
            pending = threading.Event()  # set once the request to fail has been forwarded on this connection
            line: list[str] = []
            threading.Thread(target=self._requests, args=(client, server, pending, line), daemon=True).start()
            threading.Thread(target=self._replies, args=(server, client, pending, line), daemon=True).start()

    def _requests(
        self, client: socket.socket, server: socket.socket, pending: threading.Event, line: list[str]
    ) -> None:
        """Client to server; marks the connection once the matching request has gone through."""
        tail = b""
        while data := _receive(client):
            window = tail + data
            if self.dropped and self.refuse_after_drop is not None and self.refuse_after_drop.search(window):
                break  # the store goes dark for these requests: the client sees its connection closed
            found = None if self.drop_reply_to is None else self.drop_reply_to.search(window)
            if found is not None and self._take():  # marked before it is forwarded: the reply cannot overtake
                line.append(found.group(0).decode(errors="replace"))
                pending.set()
            tail = window[-TAIL:]
            try:
                server.sendall(data)
            except OSError:
                break
        _close(server)
        _close(client)

    def _take(self) -> bool:
        with self._guard:
            armed, self._armed = self._armed, False
            return armed

    def _replies(self, server: socket.socket, client: socket.socket, pending: threading.Event, line: list[str]) -> None:
        """Server to client, except the reply to the marked request: read, then the client is cut off."""
        while data := _receive(server):
            if pending.is_set():
                self.dropped.append(DroppedReply(line[0], data.split(b"\r\n", 1)[0].decode(errors="replace")))
                break
            try:
                client.sendall(data)
            except OSError:
                break
        _close(client)
        _close(server)


def _receive(sock: socket.socket) -> bytes:
    try:
        return sock.recv(CHUNK)
    except OSError:
        return b""


def _close(sock: socket.socket | None) -> None:
    if sock is None:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
