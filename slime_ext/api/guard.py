"""Connection-level protection of the HTTP server: read timeouts, a cap on open connections, the
open-files limit, and log lines that cannot flood.

aiohttp waits for a request head as long as a client likes (its keep-alive timer, an hour by
default, is the only bound) and accepts connections until the process runs out of file
descriptors: 20,000 clients that send half a request line and nothing more take the server down.
``ConnectionGuard`` wraps aiohttp's protocol object of every connection and knows its phase:

  head     connected, or the first bytes of a next request arrived, and no complete request head
           yet: closed ``header_timeout_s`` after the phase began
  request  a request is being handled (the server reads a body with its own timeout, see
           ``ChatServer``; generating a reply takes as long as it takes)
  idle     keep-alive between requests: closed after ``keepalive_timeout_s``

A request head is complete when aiohttp calls the application: the guard's middleware (the first
one) marks the connection ``request``, and the request's task ending marks it ``idle``.

At ``max_connections`` a new connection evicts the connection that has waited longest in ``head``
or ``idle``; when every connection is busy with a request, the new one is refused (closed at
once). The guard accepts connections itself (``Listener``): asyncio's own accept loop takes up to
``backlog`` sockets at every wake-up however many are open or still closing, so a flood of
connects outran the evictions and ``accept()`` failed with "Too many open files". Ours stops
reading the listening socket while ``max_connections + ACCEPT_SLACK`` accepted sockets are open,
so the process never reaches its file-descriptor limit.

Requests aiohttp's parser refuses (a header line too long, a bare CR, a NUL, an obs-fold, bad
chunking, ``Content-Length`` with ``Transfer-Encoding``) never reach the application: aiohttp
answers them itself, in plain text, and logs a traceback at ERROR for each. Every connection's
protocol object is an ``ApiRequestHandler``, which answers them in the API's JSON error shape and
logs one line (through ``aiohttp.server``'s rate limit, ``install_log_limits``).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import re
import socket
import time
from collections import Counter
from typing import Any, Callable

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from slime_ext.api.errors import ApiError

log = logging.getLogger(__name__)

FD_RESERVE = 64  # descriptors kept for the store, model files, pipes and logs (a server uses ~15)
BACKLOG = 128  # connections the kernel queues while none is accepted (no descriptor of ours)
ACCEPT_SLACK = 64  # accepted sockets beyond the cap: new ones that evict a waiting one while it closes


class ConnectionGuard:
    """Tracks every open connection and closes the ones that stall (see the module docstring)."""

    def __init__(self, header_timeout_s: float = 10.0, keepalive_timeout_s: float = 75.0,
                 max_connections: int = 1000, clock: Callable[[], float] = time.monotonic) -> None:
        self.header_timeout_s = header_timeout_s
        self.keepalive_timeout_s = keepalive_timeout_s
        self.max_connections = max_connections
        self.clock = clock
        self.dropped: Counter[str] = Counter()  # reason -> connections closed by the guard
        self._conns: dict[Any, _Conn] = {}  # aiohttp's protocol object -> its wrapper
        self._waiting: dict[_Conn, None] = {}  # head / idle connections, oldest wait first
        self._sweeper: asyncio.Task | None = None
        self._reported: Counter[str] = Counter()

    @property
    def open_connections(self) -> int:
        return len(self._conns)

    # ------------------------------------------------------------------ serving
    async def listen(self, server: web.Server, host: str, port: int, backlog: int = BACKLOG) -> Listener:
        """Listen on ``host:port`` with aiohttp's ``server`` (``AppRunner.server``) behind the guard."""
        loop = asyncio.get_running_loop()
        try:  # the same one-line error as check_listen's before the model loaded (another process may have
            # taken the port since)
            infos = await loop.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
            socks = bind_sockets(infos, backlog)
        except OSError as e:
            raise ListenError(listen_error_text(host, port, e)) from None
        listener = Listener(socks, loop,
                            lambda release: _Conn(self, ApiRequestHandler.adopt(server()), release),
                            limit=self.max_connections + ACCEPT_SLACK)
        if self._sweeper is None:
            self._sweeper = asyncio.create_task(self._sweep_forever())
        return listener

    def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None

    @web.middleware
    async def middleware(self, request: web.Request, handler):
        """Marks the connection busy while its request is handled (a no-op outside ``listen``)."""
        conn = self._conns.get(request.protocol)
        if conn is not None:
            conn.request = request
            self._set_phase(conn, "request")
            task = asyncio.current_task()
            if task is not None:  # it ends after the response is written
                task.add_done_callback(lambda _t: self._request_done(conn, request))
        return await handler(request)

    # ------------------------------------------------------------------ connection events
    def opened(self, conn: _Conn) -> bool:
        """Admit a new connection (evicting the longest-waiting one at the cap), or refuse it."""
        if len(self._conns) >= self.max_connections:
            victim = next(iter(self._waiting), None)
            if victim is None:
                self.dropped["refused"] += 1
                return False
            self.drop(victim, "evicted")
        self._conns[conn.handler] = conn
        self._set_phase(conn, "head")
        return True

    def data(self, conn: _Conn) -> None:
        if conn.phase == "idle":  # the first bytes of a next request: its head must come in time
            self._set_phase(conn, "head")

    def closed(self, conn: _Conn) -> None:
        self._conns.pop(conn.handler, None)
        self._waiting.pop(conn, None)

    def drop(self, conn: _Conn, reason: str) -> None:
        self.closed(conn)
        self.dropped[reason] += 1
        if conn.transport is not None:
            conn.transport.close()

    def _request_done(self, conn: _Conn, request: web.Request) -> None:
        if conn.request is request and conn.handler in self._conns:
            conn.request = None
            self._set_phase(conn, "idle")

    def _set_phase(self, conn: _Conn, phase: str) -> None:
        conn.phase = phase
        conn.since = self.clock()
        self._waiting.pop(conn, None)
        if phase != "request":
            self._waiting[conn] = None  # re-inserted: the dict stays ordered by the start of the wait

    # ------------------------------------------------------------------ timeouts
    def sweep(self) -> int:
        """Close every connection past its phase's timeout; returns how many."""
        now = self.clock()
        expired = [(c, "header_timeout" if c.phase == "head" else "idle_timeout") for c in self._waiting
                   if now - c.since > (self.header_timeout_s if c.phase == "head" else self.keepalive_timeout_s)]
        for conn, reason in expired:
            self.drop(conn, reason)
        return len(expired)

    async def _sweep_forever(self) -> None:
        tick = max(0.05, min(0.5, self.header_timeout_s / 10))
        last_report = self.clock()
        while True:
            await asyncio.sleep(tick)
            self.sweep()
            if self.clock() - last_report >= 10.0:
                last_report = self.clock()
                self._report()

    def _report(self) -> None:
        """One log line for the connections closed since the last report (never one per connection)."""
        new = self.dropped - self._reported
        if not new:
            return
        self._reported = self.dropped.copy()
        level = logging.WARNING if new["evicted"] or new["refused"] else logging.INFO
        log.log(level, "closed %d connections in the last 10 s (%s); %d open, cap %d", sum(new.values()),
                ", ".join(f"{k}: {v}" for k, v in sorted(new.items())), len(self._conns), self.max_connections)


class ApiRequestHandler(RequestHandler):
    """aiohttp's protocol for one connection, but a request its parser refuses is answered in the API's JSON
    error shape and logged in one line (no traceback: the client sent it, nothing here failed)."""

    __slots__ = ()  # the same layout as RequestHandler's: an instance aiohttp made can become one (``adopt``)

    @classmethod
    def adopt(cls, handler: RequestHandler) -> ApiRequestHandler:
        """``handler`` (made by aiohttp's ``Server``, with its settings) as an ``ApiRequestHandler``."""
        handler.__class__ = cls
        return handler  # type: ignore[return-value]

    def handle_error(self, request, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        if request.writer.output_size > 0:  # a response was begun: the connection is broken, as aiohttp has it
            raise ConnectionError("a response was sent already; cannot send the error too")
        if status >= 500:  # a bug here, not the client's doing: the traceback is for the log, never the client
            self.logger.error("error handling a request from %s", request.remote, exc_info=exc)
            err = ApiError("internal server error", status=status, type="server_error", code="internal_error")
        else:
            what = (message or getattr(exc, "message", "") or str(exc or "")).strip().split("\n", 1)[0][:200]
            said = re.split(r"\s*b['\"]", what, maxsplit=1)[0]  # never the request's own bytes (a key) in the log
            self.logger.info("malformed HTTP request from %s answered %d: %s", request.remote, status, said)
            err = ApiError(f"malformed HTTP request: {what}", status=status, code="malformed_request")
        resp = web.json_response(err.body(), status=status)
        resp.force_close()
        return resp


class _Conn(asyncio.Protocol):
    """aiohttp's protocol object for one connection, with the guard told of every event."""

    def __init__(self, guard: ConnectionGuard, handler: Any, release: Callable[[], None] = lambda: None) -> None:
        self.guard = guard
        self.handler = handler
        self.release = release  # the acceptor's count of open sockets, told when this one closes
        self.transport: asyncio.Transport | None = None
        self.phase = "new"
        self.since = 0.0
        self.request: web.Request | None = None
        self.live = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        if not self.guard.opened(self):
            transport.abort()  # type: ignore[attr-defined]
            return
        self.live = True
        self.handler.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self.live:
            self.guard.data(self)
            self.handler.data_received(data)

    def eof_received(self) -> bool | None:
        return self.handler.eof_received() if self.live else None

    def connection_lost(self, exc: BaseException | None) -> None:
        self.guard.closed(self)
        self.transport = None
        self.release()  # the transport closes its socket right after this call
        self.release = lambda: None
        if self.live:
            self.live = False
            self.handler.connection_lost(exc)

    def pause_writing(self) -> None:
        if self.live:
            self.handler.pause_writing()

    def resume_writing(self) -> None:
        if self.live:
            self.handler.resume_writing()


def bind_sockets(infos: list, backlog: int) -> list[socket.socket]:
    """Non-blocking listening sockets, one per distinct address ``getaddrinfo`` gave, as asyncio's
    ``create_server`` makes them (SO_REUSEADDR, IPv6 sockets IPv6-only)."""
    socks: list[socket.socket] = []
    try:
        for family, type_, proto, _name, addr in dict.fromkeys((i[0], i[1], i[2], "", i[4]) for i in infos):
            sock = socket.socket(family, type_, proto)
            socks.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(addr)
            except OSError as e:
                raise OSError(e.errno, f"could not listen on {addr[0]}:{addr[1]}: {e.strerror}") from None
            sock.listen(backlog)
            sock.setblocking(False)
    except BaseException:
        for sock in socks:
            sock.close()
        raise
    return socks


class ListenError(RuntimeError):
    """The server cannot listen where it was told to; its text is one line that says what to do."""


def listen_error_text(host: str, port: int, error: OSError) -> str:
    """One line for a failed bind: which address, why, and what to do about it."""
    where = f"port {port} on {host or 'all addresses'}"
    if isinstance(error, socket.gaierror):
        return f"cannot listen on {host!r}: not an address or a name this machine resolves ({error.strerror}); " \
               "give --host an address of this machine, e.g. 127.0.0.1"
    if error.errno == errno.EADDRINUSE:
        return f"{where} is in use (another openclaw-rl serve, or another program, listens there): stop it, or " \
               "choose a free port with --port N"
    if error.errno == errno.EACCES:
        return f"{where}: permission denied (ports below 1024 need privileges): choose another with --port N"
    if error.errno == errno.EADDRNOTAVAIL:
        return f"cannot listen on {host}: not an address of this machine; give --host one of its addresses, e.g. " \
               "127.0.0.1"
    return f"cannot listen on {where}: {error.strerror or error}"


def check_listen(host: str, port: int) -> None:
    """Raise ``ListenError`` unless ``host:port`` can be listened on now: bound as ``listen`` binds it, then
    released at once, so a port in use is refused before the model loads, in one line. ``listen`` still
    reports the same error should another process take the port in between."""
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        for sock in bind_sockets(infos, 1):
            sock.close()
    except OSError as e:
        raise ListenError(listen_error_text(host, port, e)) from None


class Listener:
    """Accepts connections on ``sockets`` while fewer than ``limit`` accepted sockets are open; at
    ``limit`` it stops reading them (the kernel queues new connections) until one closes. Each
    accepted socket gets the protocol ``factory(release)`` makes; the protocol calls ``release()``
    once, when its connection is lost. Closing the listener stops accepting; open connections stay."""

    def __init__(self, sockets: list[socket.socket], loop: asyncio.AbstractEventLoop,
                 factory: Callable[[Callable[[], None]], asyncio.Protocol], limit: int) -> None:
        self.sockets = sockets
        self.loop = loop
        self.factory = factory
        self.limit = limit
        self.open = 0
        self._reading = False
        self._closed = False
        self._resume()

    def _resume(self) -> None:
        if not self._reading and not self._closed and self.open < self.limit:
            for sock in self.sockets:
                self.loop.add_reader(sock.fileno(), self._accept, sock)
            self._reading = True

    def _pause(self) -> None:
        if self._reading:
            for sock in self.sockets:
                self.loop.remove_reader(sock.fileno())
            self._reading = False

    def _accept(self, sock: socket.socket) -> None:
        while self.open < self.limit:
            try:
                conn, _addr = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:  # e.g. ECONNABORTED, or a limit outside this process: try again in a second
                log.warning("accept() failed: %s; retrying in 1 s", e)
                self._pause()
                self.loop.call_later(1.0, self._resume)
                return
            conn.setblocking(False)
            self.open += 1
            self.loop.create_task(self._serve(conn))
        self._pause()

    async def _serve(self, conn: socket.socket) -> None:
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self.open -= 1
                self._resume()

        try:
            await self.loop.connect_accepted_socket(lambda: self.factory(release), sock=conn)
        except Exception as e:  # the peer went away before the transport was made
            log.debug("connection dropped before it was set up: %s", e)
            conn.close()
            release()

    def close(self) -> None:
        self._pause()
        self._closed = True
        for sock in self.sockets:
            sock.close()


def raise_open_files_limit() -> tuple[int, int]:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit; returns (before, after), an
    unlimited value as 2**30, and (0, 0) where there are no such limits (not a POSIX system)."""
    try:
        import resource
    except ImportError:
        return 0, 0
    unlimited = 1 << 30
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    soft = unlimited if soft == resource.RLIM_INFINITY else soft
    want = min(hard, unlimited) if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft >= want:
        return soft, soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    except (ValueError, OSError):  # e.g. above the kernel's nr_open: keep what there is
        return soft, soft
    return soft, want


def connection_cap(wanted: int, open_files: int) -> int:
    """The connection cap under which the process never runs out of descriptors: the listener's
    ``ACCEPT_SLACK`` sockets beyond the cap and ``FD_RESERVE`` descriptors for everything else fit
    on top of it."""
    return max(16, min(wanted, open_files - ACCEPT_SLACK - FD_RESERVE))


class RateLimitFilter(logging.Filter):
    """Lets at most ``burst`` records of one kind (logger and message template) through per
    ``window_s``; the first record after a window with suppressed ones says how many were dropped.
    On a logger, it keeps a flood of identical errors (a failing ``accept()``, malformed requests)
    from filling the disk."""

    def __init__(self, burst: int = 5, window_s: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.burst = burst
        self.window_s = window_s
        self.clock = clock
        self._seen: dict[tuple[str, str], list] = {}  # kind -> [window start, passed, suppressed]

    def filter(self, record: logging.LogRecord) -> bool:
        kind = (record.name, str(record.msg)[:200])
        now = self.clock()
        state = self._seen.get(kind)
        if state is None or now - state[0] >= self.window_s:
            suppressed = state[2] if state else 0
            if len(self._seen) > 1000:
                self._seen.clear()
            self._seen[kind] = [now, 1, 0]
            if suppressed:
                record.msg = f"{record.getMessage()} (and {suppressed} more like it suppressed in the last {self.window_s:g} s)"
                record.args = None
            return True
        if state[1] < self.burst:
            state[1] += 1
            return True
        state[2] += 1
        return False


FLOOD_PRONE_LOGGERS = ("asyncio", "aiohttp.server", "aiohttp.web", "aiohttp.access", "slime_ext.api.server")


def install_log_limits(loggers: tuple[str, ...] = FLOOD_PRONE_LOGGERS) -> RateLimitFilter:
    """Put one ``RateLimitFilter`` on the loggers that can repeat a line per connection or request."""
    f = RateLimitFilter()
    for name in loggers:
        logging.getLogger(name).addFilter(f)
    return f
