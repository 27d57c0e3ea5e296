"""A managed-identity token endpoint that accepts the connection and never answers, or refuses it
(issue 28 items 4 and 9): the wait is bounded (per request, not azure-core's 300 s read timeout times
four attempts: 1,206 s) and the failure names the endpoint instead of "no usable Azure credential"."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Iterator

import pytest

from vmss_terminate.control import Connection, status
from vmss_terminate.control.pipeline import build_credential
from vmss_terminate.errors import AzureError

from .conftest import RG, SUB, run


@pytest.fixture
def silent_endpoint() -> Iterator[str]:
    """Accepts connections (the kernel's backlog) and never answers a byte."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/msi/token"
    finally:
        listener.close()


def _managed_identity(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, endpoint: str) -> None:
    for name in ("AZURE_CLIENT_ID", "AZURE_CLIENT_SECRET", "AZURE_TENANT_ID", "AZURE_FEDERATED_TOKEN_FILE",
                 "MSI_ENDPOINT", "MSI_SECRET", "IDENTITY_SERVER_THUMBPRINT", "IMDS_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("IDENTITY_ENDPOINT", endpoint)
    monkeypatch.setenv("IDENTITY_HEADER", "header")
    monkeypatch.setenv("AZURE_CONFIG_DIR", str(tmp_path))  # no az login


def test_a_token_endpoint_that_never_answers_is_bounded_and_named(silent_endpoint: str, monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    _managed_identity(monkeypatch, tmp_path, silent_endpoint)
    credential = build_credential(token_timeout=0.5)
    started = time.monotonic()
    with pytest.raises(AzureError) as caught:
        credential.get_token("https://management.azure.com/.default")
    elapsed = time.monotonic() - started
    message = str(caught.value)
    assert message.startswith(f"the managed identity token endpoint {silent_endpoint} accepted the connection but "
                              "did not answer within 0.5 s"), message
    assert "IDENTITY_ENDPOINT" in message
    assert elapsed < 60  # azure-identity's retries x 0.5 s and their backoff; was 4 x 300 s


def test_the_default_bound_is_seconds_not_minutes() -> None:
    from vmss_terminate.control.pipeline import TOKEN_ENDPOINT_TIMEOUT

    assert 1 <= TOKEN_ENDPOINT_TIMEOUT <= 30


def test_a_closed_token_endpoint_is_named_by_the_command(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}/msi/token"
    _managed_identity(monkeypatch, tmp_path, closed)
    with pytest.raises(AzureError) as caught:
        status(RG, "web", connection=Connection(subscription_id=SUB, arm_endpoint="http://127.0.0.1:9"))
    message = str(caught.value)
    assert f"the managed identity token endpoint {closed} refused the connection" in message, message
    result = run("status", "-g", RG, "-n", "web", "--subscription", SUB, "--arm-endpoint", "http://127.0.0.1:9")
    assert result.exit_code == 1 and closed in result.stderr and "\n" not in result.stderr.strip()
