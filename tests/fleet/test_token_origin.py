"""The fleet's clients carry the same origin rule: the subscription list read through the Resource
Graph client, and the writes of a rollout, never follow a link to another origin."""

from __future__ import annotations

from typing import Iterator

import pytest
from helpers import RecordingServer

from vmss_terminate_sim.emulator.arm.app import ArmServers, ArmState

from .conftest import run


@pytest.fixture
def elsewhere() -> Iterator[RecordingServer]:
    with RecordingServer() as server:
        yield server


def test_a_subscriptions_next_link_elsewhere_fails_the_audit(arm: ArmServers, state: ArmState,
                                                             elsewhere: RecordingServer) -> None:
    state.page_size = 1
    arm.arm_server.faults.add(method="GET", path_contains="/subscriptions", foreign_link=elsewhere.origin)
    result = run("fleet", "audit")
    assert result.exit_code == 1, result.output
    line = result.stderr.strip()
    assert f"refused to follow a link to {elsewhere.origin}" in line and "the nextLink of the answer to GET " \
        "/subscriptions" in line and "\n" not in line
    assert elsewhere.requests == []


def test_a_rollout_write_whose_operation_points_elsewhere_fails_that_set(arm: ArmServers, state: ArmState,
                                                                         elsewhere: RecordingServer) -> None:
    arm.arm_server.faults.add(method="PATCH", foreign_link=elsewhere.origin, times=None)
    result = run("fleet", "rollout", "--timeout", "10m", "-o", "json")
    assert result.exit_code == 1, result.output
    assert f"refused to follow a link to {elsewhere.origin}" in result.stdout
    assert elsewhere.requests == []
