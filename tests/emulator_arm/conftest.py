"""Fixtures: one running ARM emulator + token endpoint per module (fresh state, log and faults per
test), and a requests session holding a valid token."""

from __future__ import annotations

from typing import Iterator

import pytest
import requests

from vmss_terminate.clock import ManualClock
from vmss_terminate_sim.emulator.arm.app import ArmServers, ArmState, start_arm

SUB = "00000000-0000-0000-0000-000000000000"
API = "2024-11-01"


def vmss_url(servers: ArmServers, name: str = "myvmss", rg: str = "rg", sub: str = SUB) -> str:
    return (f"{servers.arm_url}/subscriptions/{sub}/resourceGroups/{rg}"
            f"/providers/Microsoft.Compute/virtualMachineScaleSets/{name}")


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def state(clock: ManualClock) -> ArmState:
    state = ArmState(clock=clock)
    state.add_scale_set(SUB, "rg", "myvmss", capacity=4)
    return state


@pytest.fixture(scope="module")
def _servers() -> Iterator[ArmServers]:
    with start_arm(ArmState()) as servers:
        yield servers


@pytest.fixture
def arm(_servers: ArmServers, state: ArmState) -> Iterator[ArmServers]:
    """The module's servers, serving this test's state with an empty log and no faults."""
    _servers.reset(state)
    yield _servers


@pytest.fixture
def token(arm: ArmServers) -> str:
    return arm.tokens.issue()


@pytest.fixture
def http(arm: ArmServers) -> Iterator[requests.Session]:
    """A session with a bearer token obtained from the emulator's token endpoint over HTTP."""
    session = requests.Session()
    session.trust_env = False
    answer = session.get(arm.token_url, params={"api-version": "2019-08-01", "resource": "https://management.azure.com"},
                         headers={"X-IDENTITY-HEADER": arm.env["IDENTITY_HEADER"]}, timeout=5)
    answer.raise_for_status()
    session.headers["Authorization"] = "Bearer " + answer.json()["access_token"]
    yield session
    session.close()
