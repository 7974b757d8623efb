"""A loopback TCP proxy that loses or holds a server's reply, for fault tests (stdlib only).

SPEC §20 promises that a write whose reply was lost can be sent again. To test that against
the real servers of tests/servers.py, a client talks to the server through this proxy, which
forwards bytes both ways and, once armed, acts on the n-th chunk the client sends that holds a
byte marker (``b"EVALSHA"``, a message id, an SQL fragment, ``b"COMMIT"``)::

    with FaultProxy(redis_server.port) as proxy:
        client = redis.Redis.from_url(proxy.url(redis_server.url))  # redis-py re-sends nothing
        proxy.drop_reply(b"order-1")  # a marker only that command holds (not b"SET": redis-py's
        with pytest.raises(redis.ConnectionError):  # handshake sends CLIENT SETINFO)
            client.set("order-1", "v")  # the server set it; the client lost the reply
        assert proxy.fired == 1

- `drop_reply`: the chunk goes to the server, the proxy waits until the server's reply starts
  coming back (so the server has acted), then closes both sockets of that connection without
  relaying it: the client sees a lost connection.
- `hold_reply`: the chunk goes to the server and the reply is kept back, once it starts coming,
  until `release` (to interleave another client's work with a write the server has done).

Either fires once (`fired` counts, `fired_event` is set when it happened), then the proxy is
unarmed until it is armed again. "The server has acted" means it answered: a Redis ``EVALSHA``
of a script the server does not know yet is answered ``NOSCRIPT`` without running it (the
stores then load it and send it again), so run one write of that script before arming a drop
on the next. There is no protocol parsing: the marker is searched in the bytes, a marker split
over two reads included. A Redis Cluster cannot be put behind it (its clients follow the
nodes' own addresses). PostgreSQL notes: psycopg sends a statement it
prepared (after ``prepare_threshold`` executions, 5 by default) without its SQL text, so a
marker in the SQL matches only with ``connect_args={"prepare_threshold": None}``; bound values
(a message id) are sent every time. SQLAlchemy's commit sends ``COMMIT`` as a query (the stores
write PostgreSQL single statements in autocommit, without one).

The proxy's threads are daemons; `close` (or leaving the ``with``) stops them and closes every
socket, and the proxy stops by itself after ``lifetime`` seconds, so a test that forgets it (or
a hold never released) cannot hang a run.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Self

__all__ = ["FaultProxy"]

HOST = "127.0.0.1"
_CHUNK = 65536
MAX_MARKER = 1024
"""The longest marker: a connection keeps that many bytes of the last chunk it read."""
_TICK = 0.05  # how often a connection's thread looks at the clock, a release and `close`


@dataclass(slots=True)
class _Arm:
    """What the proxy waits for: the ``nth`` client chunk holding ``marker``."""

    mode: str  # "drop" or "hold"
    marker: bytes
    nth: int
    seen: int = 0
    gate: threading.Event = field(default_factory=threading.Event)  # a hold's release


class FaultProxy:
    """A TCP proxy on 127.0.0.1 (a free port) in front of ``upstream_host:upstream_port``."""

    def __init__(
        self, upstream_port: int, *, upstream_host: str = HOST, lifetime: float = 300.0
    ) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.fired_event = threading.Event()
        self.connections = 0  # connections accepted so far
        self._deadline = time.monotonic() + lifetime
        self._lock = threading.Lock()
        self._arm: _Arm | None = None
        self._gate = threading.Event()  # the release of the last hold armed
        self._fired = 0
        self._stopping = threading.Event()
        self._sockets: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind((HOST, 0))
        self._listener.listen(64)
        self._listener.settimeout(_TICK)
        self.port: int = self._listener.getsockname()[1]
        self._start(self._accept)

    def url(self, server_url: str) -> str:
        """``server_url`` (a server's URL or DSN) pointed at this proxy instead."""
        port = f":{self.upstream[1]}/"
        if port not in server_url:
            raise ValueError(f"{server_url!r} does not name port {self.upstream[1]}")
        return server_url.replace(port, f":{self.port}/", 1)

    # -- arming ------------------------------------------------------------------------------

    def drop_reply(self, marker: bytes, nth: int = 1) -> None:
        """Lose the reply to the ``nth`` client chunk (from now on) holding ``marker``."""
        self._set(_Arm("drop", _check(marker), _check_nth(nth)))

    def hold_reply(self, marker: bytes, nth: int = 1) -> None:
        """Keep back the reply to the ``nth`` client chunk holding ``marker`` until `release`."""
        self._set(_Arm("hold", _check(marker), _check_nth(nth)))

    def release(self) -> None:
        """Let the held reply (of the last `hold_reply`) go on to its client."""
        with self._lock:
            self._gate.set()

    def disarm(self) -> None:
        """Forward everything from now on (a reply already held stays held until `release`)."""
        with self._lock:
            self._arm = None

    @property
    def fired(self) -> int:
        """How many times an armed fault happened."""
        with self._lock:
            return self._fired

    def wait_fired(self, timeout: float = 10.0) -> bool:
        """Whether the armed fault happened within ``timeout`` seconds."""
        return self.fired_event.wait(timeout)

    def _set(self, arm: _Arm) -> None:
        with self._lock:
            self._arm = arm
            self._gate = arm.gate
            self.fired_event.clear()

    def _match(self, tail: bytes, chunk: bytes) -> _Arm | None:
        """The arm that fires on ``chunk`` (read after ``tail``), disarmed then; None to
        forward it as it is. Only a marker ending in ``chunk`` counts: one wholly in the tail
        was counted with the chunk before."""
        with self._lock:
            arm = self._arm
            if arm is None:
                return None
            start = max(0, len(tail) - len(arm.marker) + 1)
            if (tail + chunk).find(arm.marker, start) < 0:
                return None
            arm.seen += 1
            if arm.seen < arm.nth:
                return None
            self._arm = None
            return arm

    def _fire(self) -> None:
        with self._lock:
            self._fired += 1
        self.fired_event.set()

    # -- life cycle --------------------------------------------------------------------------

    def close(self) -> None:
        """Stop accepting, close every connection, and wait for the threads."""
        self._stopping.set()
        with self._lock:
            sockets, self._sockets = list(self._sockets), set()
        for sock in [self._listener, *sockets]:
            with contextlib.suppress(OSError):
                sock.close()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(5)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _running(self) -> bool:
        return not self._stopping.is_set() and time.monotonic() < self._deadline

    def _start(self, target: Callable[..., None], *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        try:
            while self._running():
                try:
                    client, _ = self._listener.accept()
                except TimeoutError:
                    continue
                try:
                    server = socket.create_connection(self.upstream, timeout=5)
                except OSError:
                    client.close()  # the client sees the server refuse
                    continue
                with self._lock:
                    self.connections += 1
                    self._sockets.update((client, server))
                self._start(self._pipe, client, server)
        except OSError:
            pass  # the listener was closed
        finally:
            if not self._stopping.is_set():
                self.close_soon()

    def close_soon(self) -> None:
        """Close from a thread of the proxy (its lifetime is over)."""
        threading.Thread(target=self.close, daemon=True).start()

    # -- one connection ----------------------------------------------------------------------

    def _pipe(self, client: socket.socket, server: socket.socket) -> None:
        """Forward both ways until either side closes, the proxy closes or a drop fires."""
        for sock in (client, server):
            sock.setblocking(True)
            sock.settimeout(None)
        selector = selectors.DefaultSelector()
        selector.register(client, selectors.EVENT_READ, "up")
        selector.register(server, selectors.EVENT_READ, "down")
        tail = b""
        hold: _Arm | None = None
        held = bytearray()
        try:
            while self._running():
                if hold is not None and held and hold.gate.is_set():
                    client.sendall(held)
                    held.clear()
                    hold = None
                for key, _ in selector.select(_TICK):
                    data = (server if key.data == "down" else client).recv(_CHUNK)
                    if not data:
                        return
                    if key.data == "down":
                        if hold is None:
                            client.sendall(data)
                            continue
                        if not held:
                            self._fire()  # the server acted and began to answer
                        held += data
                        continue
                    arm = self._match(tail, data)
                    tail = (tail + data)[-MAX_MARKER:]
                    server.sendall(data)
                    if arm is not None and arm.mode == "drop":
                        self._await_reply(server)
                        self._fire()
                        return
                    if arm is not None:
                        hold = arm
        except OSError:
            pass  # a socket closed under us: the connection is over
        finally:
            selector.close()
            with self._lock:
                self._sockets.difference_update((client, server))
            for sock in (client, server):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    sock.close()

    def _await_reply(self, server: socket.socket) -> None:
        """Until the server's reply begins to arrive (not read: it is lost with the socket)."""
        with selectors.DefaultSelector() as selector:
            selector.register(server, selectors.EVENT_READ)
            while self._running() and not selector.select(_TICK):
                pass


def _check(marker: object) -> bytes:
    if not isinstance(marker, bytes) or not 0 < len(marker) <= MAX_MARKER:
        raise ValueError(f"the marker must be 1 to {MAX_MARKER} bytes, got {marker!r}")
    return marker


def _check_nth(nth: object) -> int:
    if isinstance(nth, bool) or not isinstance(nth, int) or nth < 1:
        raise ValueError(f"nth must be an int >= 1, got {nth!r}")
    return nth
