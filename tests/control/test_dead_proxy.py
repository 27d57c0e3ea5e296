"""A proxy that cannot carry the request is named (issue 28 item 9): one line saying which proxy,
which variable set it and what went wrong -- not urllib3's nested repr ("('Unable to connect to
proxy', NewConnectionError(...))") -- and never the proxy's credentials."""

from __future__ import annotations

import socket
import ssl
from pathlib import Path
from typing import Iterator

import pytest

from vmss_terminate.control import Connection, status
from vmss_terminate.errors import AzureError
from vmss_terminate_sim.emulator.arm.app import ArmServers, ArmState, start_arm

from .conftest import RG, SUB


@pytest.fixture
def closed_port() -> int:
    with socket.socket() as sock:  # nothing listens there once closed
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def tls_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """An https ARM emulator on loopback trusted through REQUESTS_CA_BUNDLE: its URL."""
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    state = ArmState()
    state.add_scale_set(SUB, RG, "web", capacity=1)
    with start_arm(state, ssl_context=context) as servers:
        for name, value in servers.env.items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(tmp_path / "ca.pem"))
        yield servers.arm_url


def _message(arm_url: str) -> str:
    with pytest.raises(AzureError) as caught:
        status(RG, "web", connection=Connection(subscription_id=SUB, arm_endpoint=arm_url, retry_total=0))
    return str(caught.value)


def test_a_dead_https_proxy_is_named(tls_state: str, closed_port: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", f"http://ops:s3cret@127.0.0.1:{closed_port}")
    message = _message(tls_state)
    assert message == (f"reading scale set rg/web: cannot reach ARM through the proxy http://127.0.0.1:{closed_port} "
                       "(set by HTTPS_PROXY): connection refused (nothing listens there); check that the proxy runs, "
                       "or fix or unset HTTPS_PROXY (NO_PROXY lists hosts reached directly)"), message
    assert "s3cret" not in message and "NewConnectionError" not in message


def test_a_dead_http_proxy_is_named(arm: ArmServers, state: ArmState, closed_port: int,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    state.add_scale_set(SUB, RG, "web", capacity=1)
    monkeypatch.setenv("http_proxy", f"127.0.0.1:{closed_port}")  # no scheme: requests reads it as http://
    message = _message(arm.arm_url)
    assert f"cannot reach ARM through the proxy http://127.0.0.1:{closed_port} (set by http_proxy): connection " \
           "refused" in message, message
    assert "\n" not in message and "Unable to connect" not in message
