"""Stopping a change part-way (Ctrl-C, SIGTERM), `--no-wait`, and upgrades Azure claims but does not
do: every case says what was done, what remains and how to resume, with the right exit code."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from typing import List

from helpers import poll_until

from vmss_terminate_sim.emulator.arm.app import ArmServers, ArmState

from .conftest import RG, SUB, run, writes


def _start(*args: str) -> "subprocess.Popen[str]":
    return subprocess.Popen([sys.executable, "-m", "vmss_terminate", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ))


def _stop_while_in_flight(arm: ArmServers, proc: "subprocess.Popen[str]", signum: int) -> List[str]:
    """Send `signum` once the delayed request has reached the emulator; return stdout+stderr lines."""
    assert poll_until(lambda: not arm.arm_server.faults.queued(), timeout=30), "the delayed request never came"
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=30)
    arm.arm_server.faults.clear()
    return [*out.splitlines(), "--", *err.splitlines()]


def test_ctrl_c_during_an_upgrade_reports_done_remaining_and_resume_exit_130(arm: ArmServers, state: ArmState) -> None:
    state.add_scale_set(SUB, RG, "web", capacity=6, stale_instances=6)
    arm.arm_server.faults.add(delay=60, method="POST", path_contains="manualupgrade")
    proc = _start("upgrade", "-g", RG, "-n", "web", "--batch-size", "2")
    lines = _stop_while_in_flight(arm, proc, signal.SIGINT)
    assert proc.returncode == 130, lines
    errors = lines[lines.index("--") + 1:]
    assert len(errors) == 1 and errors[0].startswith("error: upgrade incomplete: 0 done, 6 remaining"), lines
    assert "interrupted by Ctrl-C while batch 1 (2 instance(s)) was in flight" in errors[0]
    assert f"re-run `vmss-terminate upgrade -g rg -n web --subscription {SUB} --arm-endpoint " in errors[0]
    assert "Aborted" not in "\n".join(lines) and "Traceback" not in "\n".join(lines)


def test_sigterm_during_enable_reports_the_same_and_exits_143(arm: ArmServers, state: ArmState) -> None:
    state.add_scale_set(SUB, RG, "web", capacity=4)
    arm.arm_server.faults.add(delay=60, method="POST", path_contains="manualupgrade")
    proc = _start("enable", "-g", RG, "-n", "web", "--timeout", "10m", "--batch-size", "2", "-o", "json")
    lines = _stop_while_in_flight(arm, proc, signal.SIGTERM)
    assert proc.returncode == 143, lines
    line, obj = lines[lines.index("--") + 1:]
    assert line.startswith("error: profile changed; upgrade incomplete: 0 done, 4 remaining")
    error = json.loads(obj)["error"]
    assert error["type"] == "interrupted" and error["exit_code"] == 143
    assert error["upgrade"]["stopped_by"] == "SIGTERM" and len(error["upgrade"]["in_flight"]) == 2


def test_ctrl_c_during_the_patch_says_the_change_may_still_apply(arm: ArmServers, state: ArmState) -> None:
    state.add_scale_set(SUB, RG, "web", capacity=2)
    arm.arm_server.faults.add(delay=60, method="PATCH")
    proc = _start("enable", "-g", RG, "-n", "web", "--timeout", "10m")
    lines = _stop_while_in_flight(arm, proc, signal.SIGINT)
    assert proc.returncode == 130, lines
    errors = lines[lines.index("--") + 1:]
    assert len(errors) == 1 and "interrupted by Ctrl-C while the PATCH of rg/web was in flight" in errors[0]
    assert "vmss-terminate status -g rg -n web" in errors[0]


def test_ctrl_c_while_reading_exits_130_with_a_message(arm: ArmServers, state: ArmState) -> None:
    state.add_scale_set(SUB, RG, "web", capacity=2)
    arm.arm_server.faults.add(delay=60, method="GET", path_contains="/virtualMachineScaleSets/web")
    proc = _start("status", "-g", RG, "-n", "web")
    lines = _stop_while_in_flight(arm, proc, signal.SIGINT)
    assert proc.returncode == 130
    assert lines[lines.index("--") + 1:] == ["error: interrupted by Ctrl-C"]


def test_manualupgrade_success_that_changed_nothing_is_reported_with_the_stale_instances(
        arm: ArmServers, state: ArmState) -> None:
    ss = state.add_scale_set(SUB, RG, "web", capacity=4)
    arm.arm_server.faults.add(garbage=True, method="POST", path_contains="manualupgrade", times=None)
    result = run("enable", "-g", RG, "-n", "web", "--timeout", "10m", "--batch-size", "2")
    assert result.exit_code == 1, result.output
    error = result.stderr.strip().splitlines()
    assert len(error) == 1 and "upgrade incomplete: 0 done, 4 remaining" in error[0]
    assert "still run the old model when read back: 0, 1, 2, 3" in error[0]
    assert "reported upgraded but still on the old model: 0, 1, 2, 3" in result.stdout
    assert not any(inst.latest_model_applied for inst in ss.instances.values())


def test_no_wait_returns_after_the_patch_is_accepted_and_says_how_to_follow_up(
        arm: ArmServers, state: ArmState) -> None:
    state.add_scale_set(SUB, RG, "web", capacity=3)
    result = run("enable", "-g", RG, "-n", "web", "--timeout", "10m", "--no-wait", "-o", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["no_wait"] is True and data["changed"] is True and data["upgrade"] is None
    assert "vmss-terminate upgrade -g rg -n web" in data["message"]
    assert writes(arm) == [w for w in writes(arm) if w.startswith("PATCH")] and len(writes(arm)) == 1
    assert arm.arm_server.log.count("GET", "/operations/") == 0  # the LRO was not followed
    both = run("enable", "-g", RG, "-n", "web", "--timeout", "10m", "--no-wait", "--wait")
    assert both.exit_code == 2 and "--no-wait and --wait" in both.stderr
