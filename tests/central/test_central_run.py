"""`vmss-terminate central run` as a process, against the ARM emulator with the real credential
chain: --once, probes, and kill -9 at random points with restarts (nothing lost, no event
acknowledged twice, none before its hooks finished)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List

from vmss_terminate.clock import SYSTEM_CLOCK
from vmss_terminate_sim.emulator.arm.app import ArmServers

from .conftest import SUB, Estate

HOOK = ("import os, sys, time; time.sleep(float(sys.argv[2])); "
        "open(os.path.join(sys.argv[1], os.environ['VMSS_TERMINATE_VM_NAME'] + '-' + str(time.time())), 'w').close()")



def _command(tmp_path: Path, *extra: str, sleep: float = 0.0) -> List[str]:
    hooks = tmp_path / "hooks"
    hooks.mkdir(exist_ok=True)
    hook = f"{sys.executable} -c \"{HOOK}\" {hooks} {sleep}"
    return [sys.executable, "-m", "vmss_terminate", "central", "run", "--subscription", SUB, "--hook", hook,
            "--state-file", str(tmp_path / "state.json"), *extra]


def _completed(tmp_path: Path) -> Dict[str, List[float]]:
    out: Dict[str, List[float]] = {}
    for path in (tmp_path / "hooks").iterdir():
        vm, _, at = path.name.rpartition("-")
        out.setdefault(vm, []).append(float(at))
    return out


def test_once_acts_on_pending_events_and_exits(live_arm: ArmServers, live: Estate, tmp_path: Path) -> None:
    eid = live.groups["lin"].add_event("Terminate", ["lin_0", "lin_1"], not_before=SYSTEM_CLOCK.now() + 600)
    result = subprocess.run(_command(tmp_path, "--once"), capture_output=True, text=True, timeout=120,
                            env=dict(os.environ))
    assert result.returncode == 0, result.stderr
    assert sorted(_completed(tmp_path)) == ["lin_0", "lin_1"]
    assert [(a.event_id, a.accepted) for a in live.state.maintenance.acknowledgements] == [(eid, True)]
    assert "acknowledged" in result.stderr


def test_kill_9_at_random_points_loses_and_duplicates_nothing(live_arm: ArmServers, live: Estate,
                                                              tmp_path: Path) -> None:
    rng = random.Random(25)
    now = SYSTEM_CLOCK.now()
    events = {live.groups["lin"].add_event("Terminate", [f"lin_{i}"], not_before=now + 900): f"lin_{i}"
              for i in range(3)}
    events[live.groups["win"].add_event("Terminate", ["win_0", "win_1"], not_before=now + 900)] = "win"
    command = _command(tmp_path, "--poll-interval", "0.5", sleep=0.3)
    for _ in range(6):  # kill -9 at a random point, then restart
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(os.environ))
        time.sleep(rng.uniform(0.5, 3.0))  # a random point in its life, not a synchronisation
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=dict(os.environ),
                            text=True)
    try:
        accepted = lambda: {a.event_id for a in live.state.maintenance.acknowledgements if a.accepted}  # noqa: E731
        deadline = time.monotonic() + 120
        while accepted() != set(events) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    acks = [a for a in live.state.maintenance.acknowledgements if a.accepted]
    assert sorted(a.event_id for a in acks) == sorted(events)  # every event, exactly once
    completed = _completed(tmp_path)
    assert sorted(completed) == ["lin_0", "lin_1", "lin_2", "win_0", "win_1"]  # every hook ran (at least once)
    for ack in acks:
        vms = ["win_0", "win_1"] if events[ack.event_id] == "win" else [events[ack.event_id]]
        assert all(min(completed[vm]) <= ack.at for vm in vms)  # never acknowledged before its hooks finished
    assert live.state.maintenance.foreign_acknowledgements() == []
