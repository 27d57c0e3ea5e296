"""Fixtures for control-plane tests: a real ARM emulator + token endpoint on loopback, reached by
the real azure-mgmt-compute client and the real DefaultAzureCredential (managed identity env)."""

from __future__ import annotations

from typing import Iterator, List

import pytest
from helpers import CliResult, invoke_cli

from vmss_terminate import cli
from vmss_terminate.control import Connection
from vmss_terminate.emulator.arm.app import ArmServers, ArmState, start_arm

SUB = "00000000-0000-0000-0000-0000000000aa"
RG = "rg"
WRITE_METHODS = ("PATCH", "PUT", "POST", "DELETE")


@pytest.fixture
def state() -> ArmState:
    return ArmState()


@pytest.fixture(scope="session")
def _servers() -> Iterator[ArmServers]:
    """One ARM + token server pair for the session (stopping a server costs ~0.5 s); each test
    gets a fresh ArmState, an empty request log and no pending faults."""
    servers = start_arm(ArmState())
    try:
        yield servers
    finally:
        servers.stop()


@pytest.fixture
def arm(_servers: ArmServers, state: ArmState, monkeypatch: pytest.MonkeyPatch) -> ArmServers:
    _servers.reset(state)
    for key, value in _servers.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AZURE_SUBSCRIPTION_ID", SUB)
    monkeypatch.setenv("VMSS_TERMINATE_ARM_ENDPOINT", _servers.arm_url)
    return _servers


@pytest.fixture
def conn(arm: ArmServers) -> Connection:
    """Library connection; retries kept short so failure tests do not sit in backoff."""
    return Connection(subscription_id=SUB, arm_endpoint=arm.arm_url, retry_total=2, retry_backoff_factor=0.0)


def run(*args: str) -> CliResult:
    return invoke_cli(cli.main, args)


def writes(arm: ArmServers) -> List[str]:
    """Every write ARM saw, as 'METHOD path'."""
    return [f"{r.method} {r.path}" for r in arm.arm_server.log.all() if r.method in WRITE_METHODS]


def requests_seen(arm: ArmServers) -> int:
    return len(arm.arm_server.log.all()) + len(arm.token_server.log.all())
