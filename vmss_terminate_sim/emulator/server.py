"""Shared HTTP machinery for the emulators: a threaded stdlib server that runs in the background,
a tiny request/response model, fault injection and a request log tests can count.

An emulator is an *app*: any object with `handle(request: Request) -> Response`. The server does
everything else (parsing, faults, logging, writing the answer), so IMDS and ARM share it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import select
import socket
import ssl
import struct
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, Iterator, List, Optional, Protocol, Sequence, Set, TypeVar, Union
from urllib.parse import parse_qs, urlsplit

from vmss_terminate.clock import wait_until
from vmss_terminate_sim.emulator.faults import Fault, FaultInjector, fault_from_fields, fault_json

__all__ = ["EmulatorServer", "Fault", "FaultInjector", "Request", "RequestLog", "Response", "RunningServers"]

log = logging.getLogger(__name__)

FAULTS_ROUTE = "/emulator/faults"
# How often a background server looks for stop(): the stdlib's 0.5 s made every stop() wait that
# long (tests and the sandbox start and stop hundreds); an idle look costs microseconds.
STOP_POLL = 0.02
STREAM_SLICE = 0.5  # real seconds at most between a stream's items (how soon it ends on stop())

JsonValue = Union[Dict[str, Any], List[Any], str, int, float, bool, None]


@dataclass
class Request:
    method: str
    path: str
    query: Dict[str, List[str]]
    headers: Message
    body: bytes
    client: str = ""
    fault: Optional[Fault] = None  # the fault this request drew (apps act on answer faults)

    def param(self, name: str) -> Optional[str]:
        """The single value of a query parameter (case-insensitive name), or None."""
        for key, values in self.query.items():
            if key.lower() == name.lower() and values:
                return values[0]
        return None

    def header(self, name: str) -> Optional[str]:
        return self.headers.get(name)

    def json(self) -> Any:
        """Parsed body; raises ValueError when it is not JSON."""
        return json.loads(self.body.decode("utf-8"))


@dataclass
class Response:
    status: int
    body: bytes = b""
    headers: Dict[str, str] = field(default_factory=dict)
    drip: float = 0.0     # fault: seconds between the body's bytes
    reset: bool = False   # fault: reset the connection instead of answering
    # headers sent once per value (Compute sends one x-ms-ratelimit-remaining-resource per policy)
    repeated: List["tuple[str, str]"] = field(default_factory=list)
    # a streamed body (chunked), e.g. a Kubernetes watch: b"" items send nothing but let the server
    # end the stream on stop(), so the iterator must yield at least every STREAM_SLICE seconds
    stream: Optional[Iterator[bytes]] = None

    @classmethod
    def json(cls, status: int, payload: JsonValue, headers: Optional[Dict[str, str]] = None) -> "Response":
        merged = {"Content-Type": "application/json; charset=utf-8"}
        merged.update(headers or {})
        return cls(status, json.dumps(payload).encode("utf-8"), merged)

    @classmethod
    def text(cls, status: int, text: str, headers: Optional[Dict[str, str]] = None) -> "Response":
        merged = {"Content-Type": "text/plain; charset=utf-8"}
        merged.update(headers or {})
        return cls(status, text.encode("utf-8"), merged)


class App(Protocol):
    """An emulator. It may also define `admin_refusal(request) -> Optional[Response]`: the answer that
    refuses a request to the admin routes (`/emulator/faults`), e.g. the Kubernetes emulator's 401
    without its bearer token; None lets the request in (the default for an app without it)."""

    def handle(self, request: Request) -> Response: ...


@dataclass
class RecordedRequest:
    method: str
    path: str
    query: Dict[str, List[str]]
    headers: Dict[str, str]
    body: bytes
    status: int
    at: float


class RequestLog:
    """Every request an emulator answered, for tests to count and inspect."""

    def __init__(self) -> None:
        self._items: List[RecordedRequest] = []
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)

    def append(self, item: RecordedRequest) -> None:
        with self._changed:
            self._items.append(item)
            self._changed.notify_all()

    def all(self) -> List[RecordedRequest]:
        with self._lock:
            return list(self._items)

    def find(self, method: Optional[str] = None, path_contains: Optional[str] = None) -> List[RecordedRequest]:
        return [
            r
            for r in self.all()
            if (method is None or r.method == method.upper())
            and (path_contains is None or path_contains in r.path)
        ]

    def count(self, method: Optional[str] = None, path_contains: Optional[str] = None) -> int:
        return len(self.find(method, path_contains))

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def wait_for(self, predicate: Callable[[List[RecordedRequest]], bool], timeout: float) -> bool:
        """Block until `predicate(all requests)` holds or `timeout` real seconds pass."""
        return wait_until(self._changed, lambda: predicate(list(self._items)), timeout)


class _Handler(BaseHTTPRequestHandler):
    server: "_HTTPServer"
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes; with Nagle on, a keep-alive client waits ~40 ms
    # (delayed ACK) for every answer. TCP_NODELAY makes a loopback round trip take well under 1 ms.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # stdlib signature
        log.debug("%s %s", self.address_string(), format % args)

    def setup(self) -> None:
        super().setup()
        self.server.host.opened(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.host.closed(self.connection)

    def _dispatch(self) -> None:
        if self.server.host.stopping:  # a keep-alive connection outliving stop(): no answer, hang up
            self.close_connection = True
            return
        parts = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        request = Request(
            method=self.command,
            path=parts.path,
            query=parse_qs(parts.query, keep_blank_values=True),
            headers=self.headers,
            body=body,
            client=self.client_address[0],
        )
        host = self.server.host
        with host.handling():
            response = host.respond(request)
            # Logged before the answer goes out: once a client has its response, the log shows it
            # (counting right after a call, or clearing between tests, cannot race the handler thread).
            host.log.append(
                RecordedRequest(
                    request.method,
                    request.path,
                    request.query,
                    {k: v for k, v in request.headers.items()},
                    body,
                    response.status,
                    time.time(),
                )
            )
        if response.reset:
            self._reset_connection()
            return
        self.send_response(response.status)
        for name, value in [*response.headers.items(), *response.repeated]:
            self.send_header(name, value)
        if response.stream is not None:
            self._send_stream(response.stream)
            return
        self.send_header("Content-Length", str(len(response.body)))
        self.end_headers()
        if self.command == "HEAD":
            return
        if not response.drip:
            self.wfile.write(response.body)
            return
        for i in range(len(response.body)):  # a slow-drip answer; the fault queue's clear() ends it
            self.wfile.write(response.body[i:i + 1])
            self.wfile.flush()
            if self.server.host.faults.delay(response.drip):
                self.wfile.write(response.body[i + 1:])
                return

    def _send_stream(self, chunks: Iterator[bytes]) -> None:
        """A chunked body until the iterator ends or the server stops; then the closing chunk. A
        client that hangs up ends it at once (within STREAM_SLICE), as the API server's request
        context does: its thread and socket are not held until the stream's own end (a watch: minutes)."""
        host = self.server.host
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        host.stream_opened()
        try:
            for chunk in chunks:
                if chunk:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
                if self._client_gone():
                    self.close_connection = True
                    return
                if host.stopping:
                    break
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except ConnectionError:  # gone between two looks
            self.close_connection = True
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()
            host.stream_closed()

    def _client_gone(self) -> bool:
        """The client hung up on a streamed answer. HTTP/1.1 clients send nothing while an answer is
        being streamed to them (no client pipelines behind a watch), so a readable socket means the
        end of the connection: EOF, a reset, or a TLS close_notify before the FIN."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
        except (OSError, ValueError):  # closed under us
            return True
        return bool(readable)

    def _reset_connection(self) -> None:
        """Close with SO_LINGER 0: the client sees a TCP reset (ECONNRESET), not a clean close."""
        self.close_connection = True
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
        except OSError:
            pass

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _dispatch


class PortUnavailable(OSError):
    """The address an emulator was told to listen on cannot be bound (a busy port, an address this machine
    does not have): its message names host and port, the same for every emulator and the sandbox."""

    def __str__(self) -> str:
        return str(self.strerror)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    host: "EmulatorServer"

    def server_bind(self) -> None:
        try:
            super().server_bind()
        except OSError as exc:
            host, port = self.server_address[:2]
            host = host.decode() if isinstance(host, bytes) else host
            raise PortUnavailable(exc.errno, f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client hanging up before its answer is written (its read timeout during an injected delay
        or `first_call_delay`, Ctrl-C) is normal: a debug line, not a traceback on a foreground console."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            log.debug("client %s went away before its answer: %s", client_address, sys.exc_info()[1])
            return
        super().handle_error(request, client_address)


class EmulatorServer:
    """Serve an app on `host:port` (port 0 picks a free one) in a background thread.

    Use as a context manager, or `start()` / `stop()`; `serve_forever()` for a foreground CLI.
    `ssl_context` turns it into HTTPS (e.g. a `trustme` CA for the ARM emulator).
    """

    def __init__(
        self,
        app: App,
        host: str = "127.0.0.1",
        port: int = 0,
        ssl_context: Optional[ssl.SSLContext] = None,
        answer_faults: bool = False,
    ) -> None:
        self.app = app
        self.faults = FaultInjector(answer_faults)  # answer faults: only for an app that acts on them (ARM)
        self.latency = 0.0  # seconds added before every answer (`--latency`: a realistic round trip)
        self.log = RequestLog()
        self._httpd = _HTTPServer((host, port), _Handler)
        self._httpd.host = self
        if ssl_context is not None:
            self._httpd.socket = ssl_context.wrap_socket(self._httpd.socket, server_side=True)
        self._scheme = "https" if ssl_context is not None else "http"
        self._thread: Optional[threading.Thread] = None
        self._in_flight = 0
        self._idle = threading.Condition()
        self._connections: Set[socket.socket] = set()
        self._streams = 0  # streamed answers being sent (watches): stop() lets them end cleanly
        self.stopping = False

    @property
    def address(self) -> str:
        return str(self._httpd.server_address[0])

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"{self._scheme}://{self.address}:{self.port}"

    def respond(self, request: Request) -> Response:
        if request.path.rstrip("/") == FAULTS_ROUTE:
            guard = getattr(self.app, "admin_refusal", None)
            refusal: Optional[Response] = guard(request) if guard is not None else None
            return refusal if refusal is not None else self._faults_route(request)
        if self.latency:
            time.sleep(self.latency)  # simulated network/service latency (benchmarks), not synchronisation
        fault = request.fault = self.faults.take(request)
        if fault is not None:
            if fault.delay:
                self.faults.delay(fault.delay)
            if fault.garbage:
                return Response(200, b"<html>not json", {"Content-Type": "application/json"})
            if fault.reset:
                return Response(0, reset=True)
            if fault.status is not None:
                return Response(fault.status, fault.body or b"", dict(fault.headers), drip=fault.drip)
        try:
            response = self.app.handle(request)
        except Exception:  # an emulator bug must show up as a 500, not a dropped connection
            log.exception("emulator app failed on %s %s", request.method, request.path)
            return Response.json(500, {"error": "emulator internal error"})
        if fault is not None and fault.pad > len(response.body):
            response = replace(response, body=response.body + b" " * (fault.pad - len(response.body)))
        if fault is not None and fault.drip:
            response = replace(response, drip=fault.drip)
        return response

    @contextlib.contextmanager
    def handling(self) -> Iterator[None]:
        """Counts a request from its answer being computed to its log entry."""
        with self._idle:
            self._in_flight += 1
        try:
            yield
        finally:
            with self._idle:
                self._in_flight -= 1
                self._idle.notify_all()

    def opened(self, connection: socket.socket) -> None:
        with self._idle:
            self._connections.add(connection)

    def closed(self, connection: socket.socket) -> None:
        with self._idle:
            self._connections.discard(connection)
            self._idle.notify_all()

    def stream_opened(self) -> None:
        with self._idle:
            self._streams += 1
            self._idle.notify_all()

    def stream_closed(self) -> None:
        with self._idle:
            self._streams -= 1
            self._idle.notify_all()

    @property
    def open_streams(self) -> int:
        """Streamed answers (watches) being sent right now: each holds a thread and a socket."""
        with self._idle:
            return self._streams

    def wait_streams(self, count: int, timeout: float) -> bool:
        """Wait (bounded, real seconds) until exactly `count` streamed answers are open."""
        with self._idle:
            return self._idle.wait_for(lambda: self._streams == count, timeout)

    def wait_connections(self, count: int, timeout: float) -> bool:
        """Wait (bounded, real seconds) until exactly `count` client connections are open (each
        holds a handler thread)."""
        with self._idle:
            return self._idle.wait_for(lambda: len(self._connections) == count, timeout)

    @property
    def in_flight(self) -> int:
        """Requests being answered right now."""
        with self._idle:
            return self._in_flight

    def wait_idle(self, timeout: float) -> bool:
        """Wait (bounded) until no request is being answered."""
        with self._idle:
            return self._idle.wait_for(lambda: self._in_flight == 0, timeout)

    def reset(self, app: Optional[App] = None, timeout: float = 10.0) -> None:
        """Start a new scenario on this running server (test suites share servers: a stop costs
        ~0.5 s): no faults (injected delays end), no request of the old scenario still being
        answered -- a request its client gave up on must not land in the next one's app or log --
        then an empty log and, if given, the new app."""
        self.faults.clear()
        if not self.wait_idle(timeout):
            raise RuntimeError(f"emulator {self.url}: a request is still being answered after {timeout} s")
        self.log.clear()
        if app is not None:
            self.app = app

    def _faults_route(self, request: Request) -> Response:
        """The admin route every emulator has: GET lists the queued faults, POST adds one (JSON with
        the `--fault` fields), DELETE clears them. Never itself subject to faults or latency."""
        if request.method == "GET":
            return Response.json(200, {"faults": [fault_json(f) for f in self.faults.queued()]})
        if request.method == "DELETE":
            self.faults.clear()
            return Response.json(200, {"faults": []})
        if request.method != "POST":
            return Response.json(405, {"error": "use GET, POST or DELETE"}, {"Allow": "GET, POST, DELETE"})
        try:
            fault = self.faults.add(fault_from_fields(json.loads(request.body or b"null")))
        except ValueError as exc:  # a bad fault (FaultSpecError) or bad JSON (JSONDecodeError)
            return Response.json(400, {"error": str(exc)})
        return Response.json(201, fault_json(fault))

    def start(self) -> "EmulatorServer":
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": STOP_POLL},
                                        name=f"emulator:{self.port}", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self._httpd.serve_forever()

    def stop(self) -> None:
        """Stop listening and hang up every open connection: a keep-alive client must see the
        server gone (a deleted VM's IMDS), not keep getting answers on a connection made earlier."""
        self.stopping = True
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._httpd.server_close()
        with self._idle:  # streams see `stopping` within STREAM_SLICE and send their closing chunk
            self._idle.wait_for(lambda: self._streams == 0, STREAM_SLICE * 4)
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):  # already closed by the client or its handler
                connection.shutdown(socket.SHUT_RDWR)

    def __enter__(self) -> "EmulatorServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def stop_servers(servers: "Sequence[EmulatorServer]") -> None:
    """Stop several servers at once: each shutdown waits for its poll loop, so one after the
    other would add those waits up."""
    others = [threading.Thread(target=server.stop, daemon=True) for server in servers[1:]]
    for thread in others:
        thread.start()
    if servers:
        servers[0].stop()
    for thread in others:
        thread.join(timeout=10)


_Running = TypeVar("_Running", bound="RunningServers")


class RunningServers:
    """What `start_imds`, `start_arm` and `start_kube` return: servers started together that
    `stop()` ends; as a context manager they stop on exit, so each emulator only says how to stop."""

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self: _Running) -> _Running:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
