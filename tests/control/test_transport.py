"""Transport rules of control/pipeline.py: https everywhere, plain http only to loopback."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from vmss_terminate.control import Connection, status
from vmss_terminate.control.pipeline import allow_loopback_http_policy
from vmss_terminate_sim.emulator.arm.app import ArmState, start_arm

from .conftest import RG, SUB


def _context_after_policy(url: str) -> dict:
    from azure.core.pipeline import PipelineContext, PipelineRequest
    from azure.core.rest import HttpRequest

    request = PipelineRequest(HttpRequest("GET", url), PipelineContext(None))
    allow_loopback_http_policy().on_request(request)
    return dict(request.context)


@pytest.mark.parametrize("url", ["http://127.0.0.1:1/x", "http://localhost/x", "http://[::1]:8/x", "http://127.9.9.9/"])
def test_policy_lifts_https_rule_for_loopback_http(url: str) -> None:
    assert _context_after_policy(url).get("enforce_https") is False


@pytest.mark.parametrize("url", ["http://10.1.2.3/x", "http://management.azure.com/x", "https://127.0.0.1/x"])
def test_policy_keeps_https_rule_elsewhere(url: str) -> None:
    assert "enforce_https" not in _context_after_policy(url)


def test_https_endpoint_with_local_ca(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A TLS endpoint needs no exception at all; the CA comes from REQUESTS_CA_BUNDLE."""
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_context)
    ca_path = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_path))
    state = ArmState()
    state.add_scale_set(SUB, RG, "web", capacity=2)
    with start_arm(state, ssl_context=server_context) as servers:
        for name, value in servers.env.items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(ca_path))
        result = status(RG, "web", connection=Connection(subscription_id=SUB, arm_endpoint=servers.arm_url))
        assert servers.arm_url.startswith("https://")
        assert result.instances is not None and len(result.instances) == 2


def test_the_environments_proxy_rules_still_apply_read_once_per_origin(monkeypatch: pytest.MonkeyPatch) -> None:
    """The transport reads HTTP_PROXY / NO_PROXY once per origin (requests' own rules) instead of
    scanning the environment on every request: NO_PROXY still bypasses, HTTP_PROXY still proxies."""
    import socket

    from vmss_terminate.errors import AzureError

    with socket.socket() as sock:  # a proxy nothing listens on: a request sent there fails
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    state = ArmState()
    state.add_scale_set(SUB, RG, "web", capacity=2)
    with start_arm(state) as servers:
        for name, value in servers.env.items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{closed}")
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        connection = Connection(subscription_id=SUB, arm_endpoint=servers.arm_url, retry_total=0)
        assert len(status(RG, "web", connection=connection).instances or []) == 2
        assert len(status(RG, "web", connection=connection).instances or []) == 2  # and again
        monkeypatch.delenv("NO_PROXY")
        before = len(servers.arm_server.log.all())
        with pytest.raises(AzureError):
            status(RG, "web", connection=connection)
        assert len(servers.arm_server.log.all()) == before  # sent to the proxy, never to ARM
