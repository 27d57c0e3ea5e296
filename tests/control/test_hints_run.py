"""Every command the product prints for the user to run runs as printed and reaches the same scale
set: the hints are pasted into a shell (bash, the console script on PATH) whose AZURE_SUBSCRIPTION_ID
names another subscription with a same-named set, and VMSS_TERMINATE_ARM_ENDPOINT a dead port."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

from helpers import poll_until

from vmss_terminate.control.commandline import command
from vmss_terminate_sim.emulator.arm.app import ArmServers, ArmState

from .conftest import RG, SUB, run

OTHER = "00000000-0000-0000-0000-0000000000bb"  # where the command ran (--subscription)


def _shell_env() -> Dict[str, str]:
    """A shell in which a printed command must carry its own subscription and endpoint."""
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env["AZURE_SUBSCRIPTION_ID"] = SUB  # the *other* same-named set: a hint without --subscription hits it
    env["VMSS_TERMINATE_ARM_ENDPOINT"] = "http://127.0.0.1:9"  # nothing listens: the hint must name its own
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return env


def _commands(text: str) -> List[str]:
    found = re.findall(r"`(vmss-terminate [^`]+)`", text)
    assert found, text
    return found


def _paste(line: str) -> "subprocess.CompletedProcess[str]":
    assert shutil.which("vmss-terminate", path=str(Path(sys.executable).parent)), "console script missing"
    return subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=120, env=_shell_env())


def _two_sets(state: ArmState, **kwargs: object) -> None:
    state.add_subscription(SUB, "Prod")
    state.add_subscription(OTHER, "Staging")
    state.add_scale_set(SUB, RG, "web", capacity=2)
    state.add_scale_set(OTHER, RG, "web", capacity=2, **kwargs)  # type: ignore[arg-type]


def _profile(state: ArmState, subscription: str) -> object:
    ss = state.scale_set(subscription, RG, "web")
    assert ss is not None
    return ss.vm_profile.get("scheduledEventsProfile")


def _stale(state: ArmState, subscription: str) -> int:
    ss = state.scale_set(subscription, RG, "web")
    assert ss is not None
    return sum(not i.latest_model_applied for i in ss.instances.values())


def test_no_wait_follow_up_commands_run_as_printed(arm: ArmServers, state: ArmState) -> None:
    _two_sets(state)
    result = run("enable", "-g", RG, "-n", "web", "--timeout", "10m", "--no-wait", "--subscription", OTHER)
    assert result.exit_code == 0, result.output
    status, upgrade = _commands(result.output)
    assert status.startswith(f"vmss-terminate status -g rg -n web --subscription {OTHER} --arm-endpoint ")
    shown = _paste(status)
    assert shown.returncode == 0, shown.stderr
    assert "PT10M" in shown.stdout  # OTHER's set (the PATCH applied); SUB's has no profile
    done = _paste(upgrade)
    assert done.returncode == 0, done.stderr
    assert _stale(state, OTHER) == 0 and _profile(state, SUB) is None  # the same set, not the env's


def _start(*args: str) -> "subprocess.Popen[str]":
    return subprocess.Popen([sys.executable, "-m", "vmss_terminate", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ))


def _sigterm_when_delayed(arm: ArmServers, proc: "subprocess.Popen[str]") -> str:
    assert poll_until(lambda: not arm.arm_server.faults.queued(), timeout=30), "the delayed request never came"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    arm.arm_server.faults.clear()
    assert proc.returncode == 143, err
    return err


def test_sigterm_during_the_upgrade_prints_a_resume_command_that_finishes_it(arm: ArmServers, state: ArmState) -> None:
    _two_sets(state)
    arm.arm_server.faults.add(delay=60, method="POST", path_contains="manualupgrade")
    err = _sigterm_when_delayed(arm, _start("enable", "-g", RG, "-n", "web", "--timeout", "10m", "--batch-size", "1",
                                            "--subscription", OTHER))
    (rerun,) = _commands(err)
    assert rerun == command("upgrade", "-g", RG, "-n", "web", "--subscription", OTHER, "--arm-endpoint", arm.arm_url)
    done = _paste(rerun)
    assert done.returncode == 0, done.stderr
    assert _stale(state, OTHER) == 0 and _stale(state, SUB) == 0  # SUB's set was never stale: untouched


def test_sigterm_while_the_patch_is_in_flight_prints_commands_that_reach_the_set(arm: ArmServers,
                                                                               state: ArmState) -> None:
    _two_sets(state)
    arm.arm_server.faults.add(delay=60, method="PATCH")
    err = _sigterm_when_delayed(arm, _start("enable", "-g", RG, "-n", "web", "--timeout", "10m",
                                            "--subscription", OTHER))
    assert "while the PATCH of rg/web was in flight" in err
    for line in _commands(err):
        done = _paste(line)
        assert done.returncode == 0, (line, done.stderr)
    assert _profile(state, SUB) is None  # the env's subscription was never reached


def test_no_wait_on_a_set_that_already_matches_says_so(arm: ArmServers, state: ArmState) -> None:
    _two_sets(state)
    assert run("enable", "-g", RG, "-n", "web", "--timeout", "10m", "--subscription", OTHER).exit_code == 0
    again = run("enable", "-g", RG, "-n", "web", "--timeout", "10m", "--no-wait", "--subscription", OTHER)
    assert again.exit_code == 0, again.output
    assert "profile already matches (enabled, notBeforeTimeout PT10M): nothing sent" in again.output, again.output
    assert "until the profile shows the change" not in again.output
    (upgrade,) = _commands(again.output)
    done = _paste(upgrade)
    assert done.returncode == 0, done.stderr
