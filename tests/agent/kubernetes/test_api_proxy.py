"""Which requests of the agent's Kubernetes client may go through an HTTP proxy (pipeline/kubernetes/api.py).

kubectl (Go's ProxyFromEnvironment) never proxies a loopback host, and the agent sends a bearer token
with every request: through an http proxy a plain-http request -- and its Authorization header --
would reach the proxy in clear. A recording "proxy" on 127.0.0.2 (loopback too) shows what reaches it."""

from __future__ import annotations

import socket
import ssl
import threading
from typing import Iterator, List

import pytest

from vmss_terminate.pipeline.kubernetes.api import KubeApi, KubeError
from vmss_terminate.pipeline.kubernetes.credentials import Access
from vmss_terminate_sim.emulator.kube import KubeServers, KubeState, start_kube

TOKEN = "secret-proxy-test-token"


class RecordingProxy:
    """Accepts connections on 127.0.0.2, records every byte received and answers each request head
    `502` (so a CONNECT never becomes a tunnel and nothing is forwarded anywhere)."""

    def __init__(self) -> None:
        self.received: List[bytes] = []
        self._lock = threading.Lock()
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.2", 0))
        self._listener.listen(16)
        self.url = f"http://127.0.0.2:{self._listener.getsockname()[1]}"
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # closed
            with conn:
                conn.settimeout(5)
                data = b""
                try:
                    while b"\r\n\r\n" not in data:
                        chunk = conn.recv(65536)
                        if not chunk:
                            break
                        data += chunk
                except OSError:
                    pass
                # Recorded before the answer: the client's error (and so the test's read of
                # `seen()`) can only come after the 502, which must find the request there.
                with self._lock:
                    self.received.append(data)
                try:
                    conn.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                except OSError:
                    pass

    def seen(self) -> bytes:
        with self._lock:
            return b"".join(self.received)

    def close(self) -> None:
        try:  # wakes the accept() blocked in the serving thread (close alone does not, on Linux)
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        self._thread.join(5)


@pytest.fixture
def proxy(monkeypatch: pytest.MonkeyPatch) -> Iterator[RecordingProxy]:
    """Every proxy variable of the environment points at the recording proxy; no NO_PROXY."""
    recorder = RecordingProxy()
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.setenv(name, recorder.url)
    yield recorder
    recorder.close()


@pytest.fixture(scope="module")
def plain_kube() -> Iterator[KubeServers]:
    with start_kube(KubeState()) as servers:
        servers.state.add_node("node-1")
        yield servers


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_a_plain_http_loopback_server_is_never_reached_through_a_proxy(
        proxy: RecordingProxy, plain_kube: KubeServers, host: str) -> None:
    """HTTP_PROXY set and no NO_PROXY: the request goes straight to the server; the proxy receives
    nothing (before: requests' environment lookup sent it, Authorization header included, to the proxy)."""
    api = KubeApi(Access(server=f"http://{host}:{plain_kube.server.port}", source="test", token=lambda: TOKEN))
    try:
        answer = api.request("GET", "/api/v1/nodes")
    finally:
        api.close()
    assert answer.status == 200 and [n["metadata"]["name"] for n in answer.body["items"]] == ["node-1"]
    assert plain_kube.server.log.all()[-1].headers.get("Authorization") == f"Bearer {TOKEN}"
    assert proxy.seen() == b""


def test_an_https_loopback_server_is_never_reached_through_a_proxy(proxy: RecordingProxy) -> None:
    trustme = pytest.importorskip("trustme")
    authority = trustme.CA()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    authority.issue_cert("127.0.0.1").configure_cert(context)
    with authority.cert_pem.tempfile() as ca_file, \
            start_kube(KubeState(), ssl_context=context, token=TOKEN) as kube:
        api = KubeApi(Access(server=kube.url, source="test", token=lambda: TOKEN, verify=ca_file))
        try:
            assert api.request("GET", "/api/v1/nodes").status == 200
        finally:
            api.close()
    assert proxy.seen() == b""


def test_an_https_server_elsewhere_still_goes_through_the_environment_proxy(proxy: RecordingProxy) -> None:
    """As kubectl does: a remote API server is reached through HTTPS_PROXY, as a CONNECT tunnel,
    so the proxy sees the host and port but never the token."""
    api = KubeApi(Access(server="https://kube.example.invalid:6443", source="test", token=lambda: TOKEN))
    try:
        with pytest.raises(KubeError):
            api.request("GET", "/api/v1/nodes")
    finally:
        api.close()
    seen = proxy.seen()
    assert seen.startswith(b"CONNECT kube.example.invalid:6443 ")
    assert TOKEN.encode() not in seen and b"authorization" not in seen.lower()
