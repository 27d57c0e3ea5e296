"""`410 Gone` said with its context and what to do (issue 28 item 9): what was being read or
written, ARM's answer in ARM's words (not azure-core's "Operation returned an invalid status
'Gone'"), and that running the command again reads everything afresh; after an applied PATCH, the
resume commands as well."""

from __future__ import annotations

import pytest

from vmss_terminate_sim.emulator.arm.app import ArmServers, ArmState

from .conftest import RG, SUB, run

AGAIN = "running the command again reads everything afresh"


@pytest.mark.parametrize("method, path, command, doing", [
    ("GET", "/web/virtualMachines", "status", "listing instances of rg/web"),
    ("PATCH", "/web", "enable", "updating scale set rg/web"),
    ("POST", "/manualupgrade", "upgrade", "upgrading instances 1,2 of rg/web"),
])
@pytest.mark.parametrize("body", [b"", b'{"error": {"code": "Gone", "message": "The resource is gone."}}'])
def test_a_gone_answer_says_what_was_done_and_what_to_do(arm: ArmServers, state: ArmState, method: str, path: str,
                                                         command: str, doing: str, body: bytes) -> None:
    state.add_scale_set(SUB, RG, "web", capacity=3, stale_instances=2)
    arm.arm_server.faults.add(method=method, path_contains=path, status=410, body=body, times=None)
    result = run(command, "-g", RG, "-n", "web", *(["--timeout", "10m"] if command == "enable" else []))
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    line = lines[0]
    assert doing in line and AGAIN in line and "HTTP 410" in line, line
    assert "invalid status" not in line  # azure-core's words
    if not body:
        assert "ARM answered HTTP 410 Gone with no error details" in line


def test_a_gone_poll_after_the_patch_says_the_profile_changed(arm: ArmServers, state: ArmState) -> None:
    state.add_scale_set(SUB, RG, "web", capacity=3, stale_instances=2)
    arm.arm_server.faults.add(method="GET", path_contains="/operations/", status=410, body=b"", times=None)
    result = run("enable", "-g", RG, "-n", "web", "--timeout", "10m")
    assert result.exit_code == 1, result.output
    line = result.stderr.strip()
    assert "the profile change was applied" in line and "ARM answered HTTP 410 Gone" in line, line
    assert "vmss-terminate upgrade -g rg -n web" in line
