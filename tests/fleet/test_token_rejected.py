"""ARM rejecting the token (401) during a rollout (issue 28 item 9): the hint is about the token
(expired, audience, tenant), not "run az login", and no further set is started with it -- each would
be refused the same way."""

from __future__ import annotations

from vmss_terminate_sim.emulator.arm.app import ArmServers
from vmss_terminate_sim.emulator.faults import parse_fault_spec

from .conftest import arm_writes, run


def test_a_401_stops_the_rollout_starting_sets(arm: ArmServers) -> None:
    arm.arm_server.faults.add(parse_fault_spec("status=401,method=PATCH,times=all"))
    result = run("fleet", "rollout", "--timeout", "10", "--concurrency", "1")
    assert result.exit_code == 1, result.output
    assert len([w for w in arm_writes(arm) if w.startswith("PATCH")]) == 1  # the first one only
    assert "ARM rejected the token" in result.stdout and "another audience" in result.stdout
    assert "az login" not in result.stdout
    assert "set(s) not started: ARM rejected this run's token on " in result.stdout
