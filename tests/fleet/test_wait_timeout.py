"""`fleet rollout --wait-timeout S`: declared like the other write commands' option, it bounds each
set's waits for Azure, and the printed resume command carries it (even 0, which equals False)."""

from __future__ import annotations

import shlex

from vmss_terminate_sim.emulator.arm.app import ArmServers, ArmState

from .conftest import run


def test_wait_timeout_bounds_a_stuck_rollout_and_the_resume_carries_it(arm: ArmServers, state: ArmState) -> None:
    arm.arm_server.faults.add(method="GET", path_contains="/operations/", stuck=True, times=None)
    result = run("fleet", "rollout", "--timeout", "10", "--wait-timeout", "1")
    assert result.exit_code == 1, result.output
    assert "still running in Azure after 1 s" in result.output
    resume = result.stdout.split("resume with: ", 1)[1].splitlines()[0]
    assert "--wait-timeout 1" in resume, resume
    arm.arm_server.faults.clear()
    state.lro_polls = 0  # the resumed sets' operations are done at the first look: the resume's own 1 s
    again = run(*shlex.split(resume)[1:])  # bound then holds however slowly a loaded machine runs it
    assert again.exit_code == 0, again.output


def test_wait_timeout_0_is_carried_by_the_resume(arm: ArmServers, state: ArmState) -> None:
    arm.arm_server.faults.add(method="GET", path_contains="/operations/", stuck=True, times=None)
    result = run("fleet", "rollout", "--timeout", "10", "--wait-timeout", "0")
    assert result.exit_code == 1, result.output
    resume = result.stdout.split("resume with: ", 1)[1].splitlines()[0]
    assert shlex.split(resume)[-2:] == ["--wait-timeout", "0.0"], resume


def test_wait_timeout_is_refused_like_elsewhere() -> None:
    result = run("fleet", "rollout", "--timeout", "10", "--wait-timeout", "-1")
    assert result.exit_code == 2
    assert result.stderr.strip().endswith("invalid --wait-timeout '-1': a number of seconds >= 0")
