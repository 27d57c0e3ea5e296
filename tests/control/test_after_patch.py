"""A failure after the PATCH was applied says that the profile changed, what was done and how to
resume (issue 28 item 9): the read-back, the instance list the upgrade is planned from, the
upgrade's read-back and the final re-read each used to fail with only their own error ("reading
scale set rg/web: ... (HTTP 500)"), as if nothing had been written."""

from __future__ import annotations

import pytest

from vmss_terminate import control
from vmss_terminate.control import Connection
from vmss_terminate.control.arm_errors import ArmRequestError
from vmss_terminate_sim.emulator.arm.app import ArmServers, ArmState

from .conftest import RG, SUB, run

UPGRADE = "vmss-terminate upgrade -g rg -n web"
STATUS = "vmss-terminate status -g rg -n web"


def _fail_get(arm: ArmServers, path: str, after: int) -> None:
    """Every GET whose path contains `path` fails with 500, after the first `after` of them."""
    if after:
        arm.arm_server.faults.add(method="GET", path_contains=path, delay=0.0001, times=after)  # answered normally
    arm.arm_server.faults.add(method="GET", path_contains=path, status=500, times=None)


@pytest.mark.parametrize("path, after, done, resume", [
    ("/web", 1, "no instances were upgraded, then reading scale set rg/web", UPGRADE),   # the read-back
    ("/virtualMachines", 0, "no instances were upgraded, then listing instances of rg/web", UPGRADE),  # the plan
    ("/web", 4, "3 instance(s) were upgraded, then reading scale set rg/web", STATUS),  # the last re-read
])
def test_a_read_failing_after_the_patch_says_the_profile_changed(arm: ArmServers, state: ArmState, conn: Connection,
                                                                 path: str, after: int, done: str,
                                                                 resume: str) -> None:
    ss = state.add_scale_set(SUB, RG, "web", capacity=3, stale_instances=2)
    _fail_get(arm, path, after)
    with pytest.raises(ArmRequestError) as caught:  # the class is kept (a rollout reads it)
        control.enable(RG, "web", 10, connection=conn)
    message = str(caught.value)
    assert message.startswith(f"enable: the profile change was applied (ARM confirmed the PATCH) and {done}: "), message
    assert f"; {'resume' if resume == UPGRADE else 'check'} with `{resume}" in message
    assert caught.value.status == 500
    assert ss.vm_profile["scheduledEventsProfile"]["terminateNotificationProfile"]["enable"] is True


def test_the_upgrades_read_back_failing_says_what_was_upgraded(arm: ArmServers, state: ArmState,
                                                               conn: Connection) -> None:
    state.add_scale_set(SUB, RG, "web", capacity=3, stale_instances=2)
    _fail_get(arm, "/virtualMachines", 1)
    with pytest.raises(ArmRequestError) as caught:
        control.enable(RG, "web", 10, connection=conn)
    message = str(caught.value)
    assert message.startswith("profile changed; 3 instance(s) were upgraded, then reading them back failed: listing "
                              "instances of rg/web"), message
    assert f"check with `{STATUS}" in message and f"re-run `{UPGRADE}" in message


def test_the_cli_says_it_in_one_line(arm: ArmServers, state: ArmState) -> None:
    state.add_scale_set(SUB, RG, "web", capacity=3, stale_instances=2)
    arm.arm_server.faults.add(method="GET", path_contains="/virtualMachines", status=404, times=None,
                              body=b'{"error": {"code": "NotFound", "message": "gone for now"}}')
    result = run("enable", "-g", RG, "-n", "web", "--timeout", "10m")
    assert result.exit_code == 1, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: enable: the profile change was applied (ARM confirmed the PATCH) and no instances "
                           "were upgraded, then listing instances of rg/web: "), line
    assert f"resume with `{UPGRADE}" in line
