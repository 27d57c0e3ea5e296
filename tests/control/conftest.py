"""Fixtures for control-plane tests: a real ARM emulator + token endpoint on loopback, reached by
the real azure-mgmt-compute client and the real DefaultAzureCredential (managed identity env)."""

from __future__ import annotations

from typing import List

import pytest
from helpers import CliResult, invoke_cli, serve_arm_state

from vmss_terminate import cli
from vmss_terminate.control import Connection
from vmss_terminate_sim.emulator.arm.app import ArmServers, ArmState

SUB = "00000000-0000-0000-0000-0000000000aa"
RG = "rg"
WRITE_METHODS = ("PATCH", "PUT", "POST", "DELETE")


@pytest.fixture
def state() -> ArmState:
    return ArmState()


@pytest.fixture
def arm(shared_arm: ArmServers, state: ArmState, monkeypatch: pytest.MonkeyPatch) -> ArmServers:
    """The session's ARM servers serving this test's state (fresh log, no faults)."""
    monkeypatch.setenv("AZURE_SUBSCRIPTION_ID", SUB)
    return serve_arm_state(shared_arm, state, monkeypatch)


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
