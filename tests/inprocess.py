"""An emulator app served to a requests client in this process: no socket, no server thread
(import as `from inprocess import InProcessTransport`; tests/ is on sys.path).

What httpx's `WSGITransport` is for a WSGI app: `ImdsClient(url, transport=InProcessTransport(app))`
hands every request to `app.handle` and reads its `Response` back, in microseconds. The client's
own rules (headers, no redirects, the body cap, JSON reading, retries) all still run. What only
happens on a wire -- injected faults, slow or cut answers, TCP resets, real timeouts, proxies --
needs a real `EmulatorServer`; use this where a test only needs the app's answers. It lives with
the tests because the emulators themselves stay standard-library only.
"""

from __future__ import annotations

import http
import io
import time
from email.message import Message
from typing import Any, Mapping
from urllib.parse import parse_qs, urlsplit

import requests
import requests.adapters
from requests.structures import CaseInsensitiveDict
from requests.utils import get_encoding_from_headers

from vmss_terminate_sim.emulator.server import App, RecordedRequest, Request, RequestLog

__all__ = ["InProcessTransport"]


class InProcessTransport(requests.adapters.BaseAdapter):
    """A requests adapter that answers from `app`; `log` records every request as a server's does."""

    def __init__(self, app: App, client: str = "127.0.0.1") -> None:
        super().__init__()
        self.app = app
        self.client = client
        self.log = RequestLog()

    def send(self, request: requests.PreparedRequest, stream: bool = False, timeout: Any = None,
             verify: Any = True, cert: Any = None, proxies: Any = None) -> requests.Response:
        """Answer `request` from the app; stream, timeout, TLS and proxy settings have nothing to act on."""
        parts = urlsplit(request.url or "")
        headers = Message()
        for name, value in request.headers.items():
            headers[name] = value
        body = request.body or b""
        asked = Request(method=(request.method or "GET").upper(), path=parts.path,
                        query=parse_qs(parts.query, keep_blank_values=True), headers=headers,
                        body=body.encode("utf-8") if isinstance(body, str) else bytes(body), client=self.client)
        answer = self.app.handle(asked)
        self.log.append(RecordedRequest(asked.method, asked.path, asked.query, dict(headers.items()), asked.body,
                                        answer.status, time.time()))
        if answer.reset:
            raise requests.ConnectionError(ConnectionResetError("connection reset by the in-process app"),
                                           request=request)
        return _response(request, answer.status, answer.headers, b"" if asked.method == "HEAD" else answer.body)

    def close(self) -> None:
        """Nothing to release: no socket was ever opened."""


def _response(request: requests.PreparedRequest, status: int, headers: Mapping[str, str], body: bytes) -> requests.Response:
    response = requests.Response()
    response.status_code = status
    response.headers = CaseInsensitiveDict(dict(headers, **{"Content-Length": str(len(body))}))
    response.raw = io.BytesIO(body)
    response.encoding = get_encoding_from_headers(response.headers)
    response.reason = _reason(status)
    response.url = request.url or ""
    response.request = request
    return response


def _reason(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return ""
