"""The probe listener of every source (`agent run --listen`, `central run --listen`): `/metrics`,
`/healthz` and `/readyz` over plain HTTP (stdlib), from whatever provides `Probes`.

Off unless asked for. The host defaults to loopback (`--listen 9100` = `127.0.0.1:9100`); any
other address must be named (`--listen 0.0.0.0:9100`), e.g. for an Azure Load Balancer health
probe, which comes from 168.63.129.16 to the VM's own address; a command may ask for more
(`loopback_only`: `central run` wants `--listen-any` too). GET and HEAD only; nothing served
carries a secret. The answers come from a `Probes` provider (the agent's `AgentMetrics`, the
central handler's metrics).

Why one thread and a selector, not a thread per connection: the port may face a network, and the
process's real work (hooks, the state file) needs file descriptors. A thread per connection let 1,100
idle connections take every descriptor of a process at the usual limit of 1,024, so the drain hook
could not start. Here one thread serves every connection, at most `MAX_CONNECTIONS` are open at once,
each has `REQUEST_SECONDS` from accept to its answer sent (idle and slow clients are cut off), a
request is at most `MAX_REQUEST_BYTES`, and every answer closes the connection. A client that goes
away early is a debug line, never a traceback.

Who makes room when connections run out: the host that holds the most. One peer address may hold
`MAX_PER_PEER` connections; its next one closes one of its own, and when all `MAX_CONNECTIONS` are
taken the new connection closes one of the busiest peer's. Of that peer's connections an idle one
(nothing sent yet) goes first, then the oldest. So one host opening connections in a loop closes only
its own and cannot cut off the kubelet's or the load balancer's probe before it is read.
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import re
import selectors
import socket
import threading
import time
from collections import OrderedDict
from typing import Callable, Dict, Optional, Protocol, Tuple

from vmss_terminate.errors import UsageError
from vmss_terminate.net import is_loopback_host
from vmss_terminate.params import strict_whole

log = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
MAX_CONNECTIONS = 64         # open at once; then a new one closes one of the busiest peer's (docs/agent.md)
MAX_PER_PEER = 8             # open at once from one address; its 9th closes one of its own
REQUEST_SECONDS = 5.0        # from accept to the answer sent: idle and slow clients are closed
MAX_REQUEST_BYTES = 8192     # request line and headers; more is answered 431
_ACCEPT_PAUSE = 0.1          # after accept() failed for lack of descriptors or memory
_RESOURCE_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            431: "Request Header Fields Too Large", 500: "Internal Server Error", 503: "Service Unavailable"}

Route = Callable[[], Tuple[int, str, str]]


class Probes(Protocol):
    """What the listener serves: called from its thread for every request, so cheap and thread-safe."""

    def render(self) -> str:
        """`/metrics`: the Prometheus text format, version 0.0.4."""

    def health(self) -> Tuple[bool, str]:
        """`/healthz`: (healthy, reason) -- 200 or 503 with the reason as the body."""

    def readiness(self) -> Tuple[bool, str]:
        """`/readyz`: (ready, reason) -- 200 or 503 with the reason as the body."""


def parse_listen(value: str, *, any_port: bool = True, loopback_only: Optional[str] = None) -> Tuple[str, int]:
    """`HOST:PORT`, `[IP]:PORT`, `:PORT` or `PORT` -> (host, port); loopback when no host is named.

    Brackets hold an IP address of either family: required around IPv6 (`[fd00::1]:9102`), allowed
    around IPv4 (`[10.0.0.4]:9102`, as Go's SplitHostPort reads it), so one form -- the Kubernetes
    template's `[$(POD_IP)]:9102` -- works on IPv4 and IPv6 nodes. An unbracketed IPv6 address is
    refused, never guessed at: in `fd00::1:9102` the port could be part of the address.

    `any_port=False` (the CLI) refuses port 0, any free port: neither a load balancer nor
    Prometheus can be pointed at a port chosen at start. The Python API (and tests) may use it.
    `loopback_only="--listen-any"` refuses a named non-loopback host unless that option is given."""
    text = str(value)
    bracketed = re.fullmatch(r"\[([0-9A-Fa-f:.]+)\]:([0-9]{1,5})", text)
    if bracketed:
        host, port_text = bracketed.group(1), bracketed.group(2)
        if not _is_ip(host):
            port_text = ""
    else:
        host, colon, port_text = text.rpartition(":")
        if not colon and not re.fullmatch(r"[0-9]+", text):
            port_text = ""
        if ":" in host or re.search(r"[\s\[\]/]", host):
            port_text = ""
    low = 0 if any_port else 1
    port = strict_whole(port_text)  # ASCII digits only, the whole text (no trailing newline)
    if port is None or not low <= port <= 65535:
        hint = "; an IPv6 address goes in brackets" if text.count(":") > 1 and not bracketed else ""
        raise UsageError(f"invalid --listen {value!r}: expected HOST:PORT, [IP]:PORT or PORT "
                         f"(port {low}..65535){hint}")
    host = host or DEFAULT_HOST
    if loopback_only and not is_loopback_host(host):
        raise UsageError(f"invalid --listen {value!r}: not a loopback address (pass {loopback_only} to serve {host})")
    return host, port


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


class _Connection:
    """One accepted connection: what it sent so far, what is left to send, and when it must end."""

    __slots__ = ("sock", "peer", "deadline", "received", "outgoing")

    def started(self) -> bool:
        """The client sent something: read by us, or waiting in the socket (so a request that
        arrived in the same instant as a flood of connections counts as started)."""
        if self.received:
            return True
        try:
            return bool(self.sock.recv(1, socket.MSG_PEEK))  # b"": closed by the client, idle
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            return False  # reset: nothing to keep

    def __init__(self, sock: socket.socket, peer: str, deadline: float) -> None:
        self.sock = sock
        self.peer = peer
        self.deadline = deadline
        self.received = b""
        self.outgoing: Optional[memoryview] = None


class ProbeServer:
    """Serves a `Probes` provider in one daemon thread until `close()` (see the module doc)."""

    def __init__(self, metrics: Probes, host: str = DEFAULT_HOST, port: int = 0, *,
                 max_connections: int = MAX_CONNECTIONS, max_per_peer: int = MAX_PER_PEER,
                 request_seconds: float = REQUEST_SECONDS) -> None:
        self.metrics = metrics
        self.max_connections = max_connections
        self.max_per_peer = max_per_peer
        self.request_seconds = request_seconds
        self.routes: Dict[str, Route] = {
            "/metrics": lambda: (200, metrics.render(), METRICS_CONTENT_TYPE),
            "/healthz": lambda: _probe(metrics.health()),
            "/readyz": lambda: _probe(metrics.readiness()),
        }
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            self._listener = socket.socket(family, socket.SOCK_STREAM)
        except OSError as exc:
            raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
        try:
            self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._listener.bind((host, port))
            self._listener.listen(128)
            self._listener.setblocking(False)
        except OSError as exc:
            self._listener.close()
            raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
        self.server_address: Tuple[str, int] = self._listener.getsockname()[:2]
        self._open: "OrderedDict[int, _Connection]" = OrderedDict()  # by fd, oldest first
        self._per_peer: Dict[str, int] = {}  # open connections by peer address
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._closing = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._accept_paused_until = 0.0
        self.served = 0  # connections answered (for tests and benchmarks)

    @property
    def url(self) -> str:
        host, port = str(self.server_address[0]), int(self.server_address[1])
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    @property
    def open_connections(self) -> int:
        return len(self._open)

    def start(self) -> "ProbeServer":
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._thread = threading.Thread(target=self._serve, name="probes", daemon=True)
        self._thread.start()
        host = str(self.server_address[0])
        where = "" if is_loopback_host(host) else " (not loopback: reachable from the network)"
        log.info("serving /metrics, /healthz and /readyz on %s%s", self.url, where)
        return self

    def close(self) -> None:
        self._closing.set()
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass
        if self._thread is not None:
            self._thread.join(5)
        for conn in list(self._open.values()):
            self._drop(conn, None)
        for sock in (self._listener, self._wake_r, self._wake_w):
            sock.close()
        self._selector.close()

    # -- the loop (one thread) ------------------------------------------------------------------

    def _serve(self) -> None:
        listening = True
        while not self._closing.is_set():
            now = time.monotonic()
            if not listening and now >= self._accept_paused_until:
                self._selector.register(self._listener, selectors.EVENT_READ, None)
                listening = True
            self._expire(now)
            oldest = next(iter(self._open.values()), None)  # it ends first
            waits = [] if oldest is None else [oldest.deadline - now]
            if not listening:
                waits.append(self._accept_paused_until - now)
            timeout = max(0.0, min(waits + [1.0]))
            try:
                ready = self._selector.select(timeout)
            except OSError as exc:  # e.g. EINTR on old Pythons, ENOMEM
                log.debug("probe server: select failed: %s", exc)
                continue
            for key, mask in ready:
                if key.fileobj is self._listener:
                    if not self._accept():
                        self._selector.unregister(self._listener)
                        listening = False
                elif key.fileobj is self._wake_r:
                    try:
                        self._wake_r.recv(64)
                    except OSError:
                        pass
                else:
                    conn = key.data
                    if mask & selectors.EVENT_READ:
                        self._read(conn)
                    elif mask & selectors.EVENT_WRITE:
                        self._write(conn)

    def _accept(self) -> bool:
        """Accept what is waiting; False when out of descriptors or memory (accepting pauses briefly)."""
        for _ in range(self.max_connections):
            try:
                sock, address = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return True
            except OSError as exc:
                if exc.errno in _RESOURCE_ERRNOS:
                    log.debug("probe server: cannot accept (%s); pausing %.1fs", exc.strerror, _ACCEPT_PAUSE)
                    self._accept_paused_until = time.monotonic() + _ACCEPT_PAUSE
                    return False
                log.debug("probe server: accept failed: %s", exc)  # ECONNABORTED and the like
                return True
            sock.setblocking(False)
            peer = str(address[0]) if isinstance(address, tuple) else str(address)
            self._make_room(peer)
            conn = _Connection(sock, peer, time.monotonic() + self.request_seconds)
            self._open[sock.fileno()] = conn
            self._per_peer[peer] = self._per_peer.get(peer, 0) + 1
            self._selector.register(sock, selectors.EVENT_READ, conn)
        return True

    def _make_room(self, peer: str) -> None:
        """Before `peer`'s new connection: close one of its own when it holds `max_per_peer`, else one
        of the busiest peer's when `max_connections` are open -- an idle one first, then the oldest."""
        while self._open:
            if self._per_peer.get(peer, 0) >= self.max_per_peer:
                victim_peer, why = peer, f"closed: more than {self.max_per_peer} connections from one address"
            elif len(self._open) >= self.max_connections:
                victim_peer = max(self._per_peer, key=lambda p: self._per_peer[p])
                why = f"closed: more than {self.max_connections} connections open"
            else:
                return
            theirs = [c for c in self._open.values() if c.peer == victim_peer]  # oldest first
            victim = next((c for c in theirs if not c.started()), theirs[0])
            self._drop(victim, why)

    def _read(self, conn: _Connection) -> None:
        try:
            chunk = conn.sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._drop(conn, f"client went away: {exc.__class__.__name__}")
            return
        if not chunk:
            self._drop(conn, "client closed the connection before a request" if conn.received else None)
            return
        conn.received += chunk
        head, found, _ = conn.received.partition(b"\r\n\r\n")
        if not found:
            head, found, _ = conn.received.partition(b"\n\n")
        if found:
            self._respond(conn, *self._answer(head))
        elif len(conn.received) > MAX_REQUEST_BYTES:
            self._respond(conn, 431, "request too large\n", "text/plain; charset=utf-8", True)

    def _answer(self, head: bytes) -> Tuple[int, str, str, bool]:
        """(status, body, content type, with body) for a request's head."""
        text = "text/plain; charset=utf-8"
        line = head.split(b"\n", 1)[0].decode("latin-1").strip()
        parts = line.split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return 400, "bad request\n", text, True
        method, target = parts[0], parts[1]
        log.debug("probe request: %s %s", method, target[:200])
        if method not in ("GET", "HEAD"):
            return 405, "GET or HEAD only\n", text, method != "HEAD"
        route = self.routes.get(target.split("?", 1)[0])
        if route is None:
            return 404, "not found: /metrics, /healthz, /readyz\n", text, method == "GET"
        try:
            status, body, content_type = route()
        except Exception:  # a bug in the metrics must not end the server (or the agent)
            log.exception("probe server: %s failed", target[:200])
            return 500, "internal error\n", text, method == "GET"
        return status, body, content_type, method == "GET"

    def _respond(self, conn: _Connection, status: int, body: str, content_type: str, with_body: bool) -> None:
        data = body.encode("utf-8")
        head = (f"HTTP/1.1 {status} {_REASONS.get(status, '')}\r\nContent-Type: {content_type}\r\n"
                f"Content-Length: {len(data)}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n")
        conn.outgoing = memoryview(head.encode("ascii") + (data if with_body else b""))
        self.served += 1
        try:
            self._selector.modify(conn.sock, selectors.EVENT_WRITE, conn)
        except (KeyError, ValueError, OSError):
            self._drop(conn, None)
            return
        self._write(conn)

    def _write(self, conn: _Connection) -> None:
        assert conn.outgoing is not None
        try:
            sent = conn.sock.send(conn.outgoing)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._drop(conn, f"client went away: {exc.__class__.__name__}")
            return
        conn.outgoing = conn.outgoing[sent:]
        if not len(conn.outgoing):
            self._drop(conn, None)

    def _expire(self, now: float) -> None:
        for conn in list(self._open.values()):
            if conn.deadline > now:
                break  # oldest first: the rest end later
            self._drop(conn, f"closed: no complete request in {self.request_seconds:g}s")

    def _drop(self, conn: _Connection, why: Optional[str]) -> None:
        if why:
            log.debug("probe connection from %s %s", conn.peer, why)
        fd = conn.sock.fileno()
        if self._open.pop(fd, None) is not None:
            left = self._per_peer.pop(conn.peer) - 1
            if left:
                self._per_peer[conn.peer] = left
        try:
            self._selector.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        conn.sock.close()


def _probe(result: Tuple[bool, str]) -> Tuple[int, str, str]:
    ok, reason = result
    return (200 if ok else 503), reason + "\n", "text/plain; charset=utf-8"

