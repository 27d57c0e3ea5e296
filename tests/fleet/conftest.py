"""Fixtures for fleet tests: one ARM emulator (Resource Graph included) per session, reached by the
real azure-mgmt-resourcegraph / azure-mgmt-compute clients and DefaultAzureCredential; each test
gets a fresh estate (examples/fleet-seed.json unless it builds its own)."""

from __future__ import annotations

from pathlib import Path
from typing import List

import pytest
from helpers import CliResult, invoke_cli, serve_arm_state

from vmss_terminate import cli
from vmss_terminate.control import Connection
from vmss_terminate_sim.emulator.arm.app import ArmServers, ArmState

pytest.importorskip("azure.mgmt.resourcegraph")

ROOT = Path(__file__).resolve().parents[2]
FLEET_SEED = ROOT / "examples" / "fleet-seed.json"
PROD = "11111111-0000-0000-0000-000000000001"
STAGING = "11111111-0000-0000-0000-000000000002"
WRITE_METHODS = ("PATCH", "PUT", "POST", "DELETE")


@pytest.fixture
def state() -> ArmState:
    state = ArmState()
    state.load_seed(FLEET_SEED)
    return state


@pytest.fixture
def arm(shared_arm: ArmServers, state: ArmState, monkeypatch: pytest.MonkeyPatch) -> ArmServers:
    return serve_arm_state(shared_arm, state, monkeypatch)


@pytest.fixture
def conn(arm: ArmServers) -> Connection:
    return Connection(arm_endpoint=arm.arm_url, retry_total=2, retry_backoff_factor=0.0)


def run(*args: str) -> CliResult:
    return invoke_cli(cli.main, args)


def arm_writes(arm: ArmServers) -> List[str]:
    """Every write ARM saw (Resource Graph queries are reads), as 'METHOD path'."""
    return [f"{r.method} {r.path}" for r in arm.arm_server.log.all()
            if r.method in WRITE_METHODS and "resourcegraph" not in r.path.lower()]
