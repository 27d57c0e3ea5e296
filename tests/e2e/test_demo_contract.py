"""`vmss-terminate demo` keeps its promises: it passes at every speed it accepts (the deadline
scales with the clock), checks its input before anything runs, and tells one consistent story
when hooks fail."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from clifork import run_forked
from helpers import invoke_cli

from vmss_terminate.cli import main
from vmss_terminate_sim.sandbox.demo import BASE_DEADLINE_S, DemoOptions, max_speed

pytestmark = pytest.mark.timeout(120)


@pytest.mark.slow  # ~33 real seconds by design
def test_demo_passes_at_the_slowest_speed_it_accepts() -> None:
    """Speed 1 needs ~33 real seconds (30 s of deletion alone): a fixed 30 s deadline always failed."""
    result = invoke_cli(main, ["demo", "--speed", "1", "--instances", "2", "--scale-in", "1", "-o", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["ok"] and data["options"]["deadline"] == BASE_DEADLINE_S + 330


def test_demo_passes_at_the_fastest_speed_it_accepts_and_refuses_a_faster_one() -> None:
    fastest = max_speed(5)
    result = invoke_cli(main, ["demo", "--speed", f"{fastest:g}", "--instances", "2", "--scale-in", "1", "-o", "json"])
    assert result.exit_code == 0, result.output
    faster = invoke_cli(main, ["demo", "--speed", f"{fastest * 2:g}"])
    assert faster.exit_code == 2
    assert faster.stderr.strip().startswith(f"error: invalid --speed {fastest * 2:g}: expected 1..{fastest:g} with "
                                            "a PT5M timeout")
    assert max_speed(15) == 3 * fastest  # a longer timeout allows a faster clock
    assert DemoOptions(speed=60).real_deadline < DemoOptions(speed=1).real_deadline


@pytest.mark.parametrize("hook, message", [
    ("./nonexistent.sh", "--hook program './nonexistent.sh' does not exist or is not executable"),
    ("no-such-program-xyz", "--hook program 'no-such-program-xyz' is not on PATH"),
    ("", "empty --hook command"),
])
def test_demo_checks_the_hook_before_anything_runs(hook: str, message: str) -> None:
    started = run_forked(["demo", "--hook", hook], os.environ, os.getcwd(), timeout=60)  # a process, forked warm
    assert started.returncode == 2
    assert started.stderr.strip().splitlines() == [f"error: {message}"]
    assert started.stdout == ""  # no header, no enable, no upgrade


@pytest.mark.slow  # a whole demo with failing hooks, on scaled real time
def test_failed_hooks_are_one_consistent_story() -> None:
    """`--hook false`: nobody drained, so nothing counts as "drained and approved"; the failure is said
    once (the error line); no raw agent log line reaches stderr."""
    proc = subprocess.run([sys.executable, "-m", "vmss_terminate", "demo", "--hook", "false", "--instances", "2",
                           "--scale-in", "1"], capture_output=True, text=True, timeout=90)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip().splitlines()[0]]
    assert proc.stderr.startswith("error: demo failed: myvmss_1's drain hook failed")
    assert "FAILED" not in proc.stdout
    assert "0 of them after their own agent drained and approved, 1 approved without draining, " \
           "0 drain hooks finished, 1 failed" in proc.stdout
    as_json = invoke_cli(main, ["demo", "--hook", "false", "--instances", "2", "--scale-in", "1", "-o", "json"])
    totals = json.loads(as_json.stdout)["totals"]
    assert totals["drained_and_approved"] == 0 and totals["approved_without_draining"] == 1
    assert totals["hooks_finished"] == 0 and totals["hooks_failed"] == 1
