"""Ctrl-C during `vmss-terminate fleet rollout` (a real process, a real SIGINT): no new work
starts, calls in flight finish, the report says what is done and remains and how to resume,
exit 130; the resume finishes the job."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import interrupt

from vmss_terminate_sim.emulator.arm.app import ArmServers, ArmState
from vmss_terminate_sim.emulator.arm.quota import parse_spec

from .conftest import run


@pytest.mark.parametrize("signum, expected", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_stops_cleanly_and_the_journal_resumes(arm: ArmServers, tmp_path: Path, signum: int,
                                                       expected: int) -> None:
    state = ArmState()
    state.load_seed({"generate": {"scaleSets": 8, "subscriptions": 2, "capacity": 6, "special": False}})
    arm.reset(state)
    arm.arm_server.latency = 0.05  # slow enough that the run is mid-way when Ctrl-C arrives
    journal = tmp_path / "rollout.journal"
    args = ["fleet", "rollout", "--timeout", "10", "--journal", str(journal), "--concurrency", "2",
            "--batch-size", "1"]
    env = dict(os.environ, **arm.env, VMSS_TERMINATE_ARM_ENDPOINT=arm.arm_url)
    proc = subprocess.Popen([sys.executable, "-m", "vmss_terminate", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert arm.arm_server.log.wait_for(
            lambda log: sum(1 for r in log if r.path.endswith("/manualupgrade")) >= 2, timeout=30)
        if signum == signal.SIGINT:
            code = interrupt(proc, timeout=30)
        else:  # what systemd or a CI runner sends
            proc.send_signal(signum)
            code = proc.wait(timeout=30)
    finally:
        arm.arm_server.latency = 0.0
        if proc.poll() is None:
            proc.kill()
    out, err = proc.communicate(timeout=10)
    assert code == expected, (out, err)
    assert "stopping: no new work is started" in err
    assert "rollout stopped" in out and "remaining; resume with: vmss-terminate fleet rollout" in out
    assert "Traceback" not in err
    assert arm.arm_server.in_flight == 0
    statuses = [json.loads(line).get("status") for line in journal.read_text().splitlines()[1:]]
    assert "interrupted" in statuses
    # every started upgrade finished: nothing left half-sent, the LROs of the POSTs it made were awaited
    upgrades = [r for r in arm.arm_server.log.all() if r.path.endswith("/manualupgrade")]
    assert all(r.status == 202 for r in upgrades)

    resumed = run(*args, "-o", "json")
    assert resumed.exit_code == 0, resumed.output
    summary = json.loads(resumed.stdout)
    assert summary["ok"] and summary["resumed"] and summary["sets"]["remaining"] == 0


def test_sigterm_stops_a_throttled_rollout_promptly(arm: ArmServers, tmp_path: Path) -> None:
    """Writes throttled to 12 then one per 100 s: without the stop reaching the throttle's waits,
    SIGTERM left the rollout waiting for minutes. It ends within seconds, with the report."""
    state = ArmState()
    state.load_seed({"generate": {"scaleSets": 30, "subscriptions": 1, "capacity": 2, "special": False}})
    state.quotas.configure([parse_spec("writes=12/0.01")])
    arm.reset(state)
    journal = tmp_path / "rollout.journal"
    env = dict(os.environ, **arm.env, VMSS_TERMINATE_ARM_ENDPOINT=arm.arm_url)
    proc = subprocess.Popen([sys.executable, "-m", "vmss_terminate", "fleet", "rollout", "--timeout", "10m",
                             "--journal", str(journal)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    try:
        assert arm.arm_server.log.wait_for(lambda log: any(r.status == 429 for r in log), timeout=60)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)  # minutes before
    finally:
        if proc.poll() is None:
            proc.kill()
    out, err = proc.communicate(timeout=10)
    assert code == 143, (out, err)
    assert "Traceback" not in err
    assert "rollout stopped" in out and "remaining; resume with: vmss-terminate fleet rollout" in out
    statuses = [json.loads(line).get("status") for line in journal.read_text().splitlines()[1:]]
    assert "failed" not in statuses, statuses
