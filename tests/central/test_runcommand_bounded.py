"""Run Command's polling ends even when the event gives no deadline (no NotBefore): after
`max_wait` (Run Command's documented 90 minutes by default) the step fails instead of polling forever."""

from __future__ import annotations

import pytest

from vmss_terminate.central.graph import ScaleSetInfo
from vmss_terminate.central.runcommand import MAX_WAIT, RunCommandClient
from vmss_terminate.central.source import ScaleSetRef
from vmss_terminate.clock import ManualClock
from vmss_terminate.control import Connection
from vmss_terminate.fleet.session import FleetSession
from vmss_terminate_sim.emulator.arm.app import ArmServers

from .conftest import Estate


@pytest.mark.timeout(120)
def test_a_run_command_that_never_finishes_is_given_up_without_a_deadline(arm: ArmServers, estate: Estate) -> None:
    estate.state.run_commands.polls = 10**9  # the operation stays InProgress
    clock = ManualClock()
    session = FleetSession(Connection(arm_endpoint=arm.arm_url, retry_total=1, retry_backoff_factor=0.0), clock)
    client = RunCommandClient(session, "echo draining", clock, poll_interval=2.0, max_wait=30.0)
    started = clock.monotonic()
    info = ScaleSetInfo(ScaleSetRef.parse(estate.set_id("lin")), os_type="Linux")
    output = client.run(info, "lin_1", lambda: None)
    assert not output.ok and "30 s" in output.detail
    assert 30.0 <= clock.monotonic() - started <= 32.0
    assert MAX_WAIT == 90 * 60.0  # the documented default
