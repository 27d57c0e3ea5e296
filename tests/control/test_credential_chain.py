"""The credential chain with no credential configured and a proxy in the environment: the
managed-identity probe never goes through the proxy, and "no credential" is quick and says what
was tried."""

from __future__ import annotations

import http.server
import threading
import time
from typing import Iterator, List

import pytest

from vmss_terminate.control import Connection, status
from vmss_terminate.errors import AzureError

from .conftest import RG, SUB


class _CountingProxy(http.server.BaseHTTPRequestHandler):
    seen: List[str] = []

    def _answer(self) -> None:
        self.seen.append(f"{self.command} {self.path}")
        self.send_response(502)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST = do_CONNECT = _answer

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def proxy(monkeypatch: pytest.MonkeyPatch, tmp_path) -> Iterator[List[str]]:  # type: ignore[no-untyped-def]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _CountingProxy)
    _CountingProxy.seen = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.setenv(name, url)
    monkeypatch.setenv("AZURE_CONFIG_DIR", str(tmp_path))  # no az login
    try:
        yield _CountingProxy.seen
    finally:
        server.shutdown()
        server.server_close()


def test_managed_identity_probe_bypasses_the_proxy_and_no_credential_fails_fast(proxy: List[str]) -> None:
    """The IMDS identity endpoint is link-local: its token request must not reach HTTP_PROXY (this
    suite's socket guard refuses the direct connection to 169.254.169.254, as an off-Azure host would).
    Through the proxy, azure-identity took the proxy's 502 for IMDS and retried for ~25 s."""
    started = time.monotonic()
    with pytest.raises(AzureError) as caught:
        status(RG, "web", connection=Connection(subscription_id=SUB, arm_endpoint="http://127.0.0.1:9"))
    elapsed = time.monotonic() - started
    assert proxy == [], "token requests for a local endpoint went through the proxy"
    message = str(caught.value)
    assert "no usable Azure credential (tried: " in message and "ManagedIdentityCredential" in message
    assert "EnvironmentCredential" in message and "\n" not in message
    assert elapsed < 15, f"no credential took {elapsed:.1f} s"
