"""`agent run --listen HOST:PORT`: `/metrics`, `/healthz` and `/readyz` over plain HTTP (stdlib).

Off unless asked for. The host defaults to loopback (`--listen 9100` = `127.0.0.1:9100`); any
other address must be named (`--listen 0.0.0.0:9100`), e.g. for an Azure Load Balancer health
probe, which comes from 168.63.129.16 to the VM's own address. GET and HEAD only; nothing served
carries a secret. The numbers come from `metrics.AgentMetrics`.
"""

from __future__ import annotations

import logging
import re
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Callable, Dict, Optional, Tuple

from vmss_terminate.agent.metrics import AgentMetrics
from vmss_terminate.errors import UsageError
from vmss_terminate.net import is_loopback_host

if TYPE_CHECKING:
    from vmss_terminate.agent.agent import Agent

log = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def parse_listen(value: str) -> Tuple[str, int]:
    """`HOST:PORT`, `[IPv6]:PORT`, `:PORT` or `PORT` -> (host, port); loopback when no host is named."""
    text = str(value).strip()
    bracketed = re.match(r"^\[([0-9A-Fa-f:.]+)\]:(\d{1,5})$", text)
    if bracketed:
        host, port_text = bracketed.group(1), bracketed.group(2)
    else:
        host, colon, port_text = text.rpartition(":")
        if not colon and not text.isdigit():
            port_text = ""
        if ":" in host or re.search(r"[\s\[\]/]", host):
            port_text = ""
    if not re.match(r"^\d{1,5}$", port_text) or int(port_text) > 65535:
        raise UsageError(f"invalid --listen {value!r}: expected HOST:PORT, [IPv6]:PORT or PORT (0..65535)")
    port = int(port_text)
    host = host or DEFAULT_HOST
    return host, port


class _Handler(BaseHTTPRequestHandler):
    server: "ProbeServer"
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._answer(with_body=True)

    def do_HEAD(self) -> None:  # noqa: N802
        self._answer(with_body=False)

    def _answer(self, with_body: bool) -> None:
        route = self.server.routes.get(self.path.split("?", 1)[0])
        if route is None:
            status, body, content_type = 404, "not found: /metrics, /healthz, /readyz\n", "text/plain; charset=utf-8"
        else:
            status, body, content_type = route()
        data = body.encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if with_body:
            self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - http.server's signature
        log.debug("probe %s - %s", self.address_string(), format % args)


class ProbeServer(ThreadingHTTPServer):
    """Serves an agent's metrics and probes in a daemon thread until `close()`."""

    daemon_threads = True

    def __init__(self, metrics: AgentMetrics, host: str = DEFAULT_HOST, port: int = 0) -> None:
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.metrics = metrics
        self.routes: Dict[str, Callable[[], Tuple[int, str, str]]] = {
            "/metrics": lambda: (200, metrics.render(), METRICS_CONTENT_TYPE),
            "/healthz": lambda: _probe(metrics.health()),
            "/readyz": lambda: _probe(metrics.readiness()),
        }
        try:
            super().__init__((host, port), _Handler)
        except OSError as exc:
            raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
        self._thread: Optional[threading.Thread] = None

    @property
    def url(self) -> str:
        host, port = str(self.server_address[0]), int(self.server_address[1])
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    def start(self) -> "ProbeServer":
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="probes", daemon=True)
        self._thread.start()
        host = str(self.server_address[0])
        where = "" if is_loopback_host(host) else " (not loopback: reachable from the network)"
        log.info("serving /metrics, /healthz and /readyz on %s%s", self.url, where)
        return self

    def close(self) -> None:
        if self._thread is not None:
            self.shutdown()
            self._thread.join(5)
        self.server_close()


def _probe(result: Tuple[bool, str]) -> Tuple[int, str, str]:
    ok, reason = result
    return (200 if ok else 503), reason + "\n", "text/plain; charset=utf-8"


def serve(agent: "Agent", listen: str) -> ProbeServer:
    """Start serving `agent`'s metrics and probes on `listen` (see `parse_listen`)."""
    host, port = parse_listen(listen)
    return ProbeServer(AgentMetrics(agent).attach(), host, port).start()
