"""A TCP proxy between a client (a fleet worker) and a server (PostgreSQL), for partitions.

The proxy listens on ``127.0.0.1`` at a free port and forwards every connection to the
server. :meth:`TcpProxy.partition` cuts the link: every live connection is dropped (``reset``:
both sides get a TCP reset, as a dead middlebox or a killed NAT entry gives) or frozen
(``blackhole``: bytes stop flowing and nobody is told, as a pulled cable gives), and new
connections are refused (``reset``) or accepted and left hanging (``blackhole``).
:meth:`TcpProxy.heal` restores the link for new connections; connections frozen by a
blackhole are reset at heal (their TCP state would have timed out in the meantime).

One selector thread serves everything; :meth:`TcpProxy.stop` (or the context manager) closes
every socket and joins the thread, so nothing leaks::

    with TcpProxy("127.0.0.1", pg.port) as proxy:
        dsn = proxy.dsn(pg.dsn("db"))          # the same DSN, through the proxy
        ...
        proxy.partition()                      # or partition("blackhole")
        proxy.heal()
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import struct
import threading
from dataclasses import dataclass, field
from types import TracebackType
from typing import Literal
from urllib.parse import urlsplit, urlunsplit

from crashpoint.errors import InvalidArgument

__all__ = ["PartitionMode", "TcpProxy"]

PartitionMode = Literal["reset", "blackhole"]
_CHUNK = 65536


def _reset(sock: socket.socket) -> None:
    """Close with a TCP reset (SO_LINGER 0), not a polite FIN."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()


@dataclass(eq=False)
class _Pair:
    client: socket.socket
    server: socket.socket | None
    frozen: bool = False
    out: dict[socket.socket, bytearray] = field(default_factory=dict)  # pending writes


class TcpProxy:
    """A loopback TCP proxy to ``host:port`` that can partition and heal; see the module doc."""

    def __init__(self, host: str, port: int, *, listen_host: str = "127.0.0.1") -> None:
        self.target = (host, port)
        self._listener = socket.create_server((listen_host, 0))
        self._listener.setblocking(False)
        self.host, self.port = self._listener.getsockname()[:2]
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._pairs: set[_Pair] = set()
        self._mode: PartitionMode | None = None
        self._lock = threading.Lock()
        self._todo: list[tuple[str, threading.Event]] = []
        self._stopping = False
        self._finished: list[threading.Event] = []
        self.connections = 0  # accepted so far (forwarded or not)
        self.dropped = 0  # connections reset by partitions or refused while partitioned
        self.cut = 0  # live connections a partition reset or froze when it began
        self.hung = 0  # connections accepted into a blackhole and left hanging
        self._thread = threading.Thread(
            target=self._serve, name=f"crashpoint-pgproxy-{self.port}", daemon=True
        )
        self._sel.register(self._listener, selectors.EVENT_READ, "accept")
        self._sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._thread.start()

    # -- control ---------------------------------------------------------------------------------

    def dsn(self, dsn: str) -> str:
        """``dsn`` (a ``postgresql://`` URI) with its host and port replaced by the proxy's."""
        parts = urlsplit(dsn)
        user = parts.netloc.rpartition("@")[0]
        netloc = (user + "@" if user else "") + f"{self.host}:{self.port}"
        return urlunsplit(parts._replace(netloc=netloc))

    @property
    def partitioned(self) -> bool:
        return self._mode is not None

    @property
    def live(self) -> int:
        """Connections being forwarded now."""
        with self._lock:
            return sum(1 for p in self._pairs if not p.frozen)

    def retarget(self, host: str, port: int) -> None:
        """Forward new connections to ``host:port`` (a server restarted at another port);
        live ones keep their link to the old address."""
        self.target = (host, port)

    def partition(self, mode: PartitionMode = "reset") -> None:
        """Cut the link (see the module doc); returns once live connections are cut."""
        if mode not in ("reset", "blackhole"):
            raise InvalidArgument(f"partition mode {mode!r}: use 'reset' or 'blackhole'")
        self._command(mode)

    def heal(self) -> None:
        """Forward new connections again; connections frozen by a blackhole are reset."""
        self._command("heal")

    def stop(self) -> None:
        """Close every socket and join the thread (idempotent)."""
        if not self._thread.is_alive():
            return
        self._command("stop")
        self._thread.join()

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _command(self, what: str) -> None:
        done = threading.Event()
        with self._lock:
            self._todo.append((what, done))
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        done.wait(10)

    # -- the loop --------------------------------------------------------------------------------

    def _serve(self) -> None:
        try:
            while not self._stopping:
                for key, events in self._sel.select(timeout=1.0):
                    tag = key.data
                    if tag == "accept":
                        self._accept()
                    elif tag == "wake":
                        self._control()
                    else:
                        self._pump(tag, key.fileobj, events)  # type: ignore[arg-type]
        finally:
            with self._lock:
                pairs = list(self._pairs)
                self._pairs.clear()
            for p in pairs:
                self._close(p, reset=True, count=False)
            for s in (self._listener, self._wake_r, self._wake_w):
                with contextlib.suppress(OSError):
                    s.close()
            self._sel.close()
            with self._lock:
                todo, self._todo = self._todo, []
            for done in [d for _, d in todo] + self._finished:
                done.set()

    def _control(self) -> None:
        with contextlib.suppress(OSError):
            self._wake_r.recv(4096)
        with self._lock:
            todo, self._todo = self._todo, []
        for what, done in todo:
            if what == "stop":
                self._stopping = True
                self._finished.append(done)
                continue
            elif what == "heal":
                self._mode = None
                for p in [p for p in list(self._pairs) if p.frozen]:
                    self._close(p, reset=True)
            else:
                self._mode = what  # type: ignore[assignment]
                for p in list(self._pairs):
                    self.cut += 0 if p.frozen else 1
                    if what == "reset":
                        self._close(p, reset=True)
                    else:
                        self._freeze(p)
            done.set()

    def _accept(self) -> None:
        try:
            client, _ = self._listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        self.connections += 1
        if self._mode == "reset":
            self.dropped += 1
            _reset(client)
            return
        client.setblocking(False)
        pair = _Pair(client, None)
        with self._lock:
            self._pairs.add(pair)
        if self._mode == "blackhole":
            pair.frozen = True  # accepted, never answered
            self.hung += 1
            return
        try:
            server = socket.create_connection(self.target, timeout=5)
        except OSError:
            self._close(pair, reset=True)
            return
        server.setblocking(False)
        pair.server = server
        pair.out = {client: bytearray(), server: bytearray()}
        self._sel.register(client, selectors.EVENT_READ, pair)
        self._sel.register(server, selectors.EVENT_READ, pair)

    def _pump(self, pair: _Pair, sock: socket.socket, events: int) -> None:
        if pair.frozen or pair.server is None:
            return
        other = pair.server if sock is pair.client else pair.client
        if events & selectors.EVENT_WRITE:
            buf = pair.out[sock]
            try:
                n = sock.send(buf)
            except (BlockingIOError, InterruptedError):
                n = 0
            except OSError:
                self._close(pair, reset=True, count=False)
                return
            del buf[:n]
            if not buf:
                self._watch(pair, sock, write=False)
        if events & selectors.EVENT_READ:
            try:
                data = sock.recv(_CHUNK)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                data = b""
            if not data:
                self._close(pair, reset=False, count=False)
                return
            pair.out[other] += data
            self._watch(pair, other, write=True)

    def _watch(self, pair: _Pair, sock: socket.socket, *, write: bool) -> None:
        with contextlib.suppress(KeyError, ValueError, OSError):
            self._sel.modify(
                sock, selectors.EVENT_READ | (selectors.EVENT_WRITE if write else 0), pair
            )

    def _freeze(self, pair: _Pair) -> None:
        pair.frozen = True
        for s in (pair.client, pair.server):
            if s is not None:
                with contextlib.suppress(KeyError, ValueError, OSError):
                    self._sel.unregister(s)

    def _close(self, pair: _Pair, *, reset: bool, count: bool = True) -> None:
        self._freeze(pair)
        with self._lock:
            self._pairs.discard(pair)
        if count and reset:
            self.dropped += 1
        for s in (pair.client, pair.server):
            if s is None:
                continue
            if reset:
                _reset(s)
            else:
                with contextlib.suppress(OSError):
                    s.close()
