"""A stop signal after the work is done changes nothing: the report is printed whole and the exit
code is the work's -- never 130/143 nor a kill by the raw signal after the report (real processes,
real signals)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from typing import Any, List

import pytest

from vmss_terminate_sim.emulator.arm.app import ArmServers, ArmState

from .conftest import RG, SUB

pytestmark = pytest.mark.skipif(os.name == "nt", reason="no SIGTERM on Windows")


def _start(arm: ArmServers, *args: str) -> "subprocess.Popen[bytes]":
    env = dict(os.environ, **arm.env, VMSS_TERMINATE_ARM_ENDPOINT=arm.arm_url, AZURE_SUBSCRIPTION_ID=SUB)
    return subprocess.Popen([sys.executable, "-m", "vmss_terminate", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, bufsize=0)


def _signal_all(proc: "subprocess.Popen[bytes]", signums: List[int]) -> None:
    for signum in signums:
        proc.send_signal(signum)


def _read_json(proc: "subprocess.Popen[bytes]") -> Any:
    assert proc.stdout is not None
    text = b""
    while True:
        line = proc.stdout.readline()
        assert line, text
        text += line
        try:
            return json.loads(text)
        except ValueError:
            continue


def test_signals_while_the_report_is_being_printed_change_nothing(arm: ArmServers, state: ArmState) -> None:
    """The report (1,000 instances, far more than a pipe holds) has started: the process is blocked
    writing the rest when SIGTERM and Ctrl-C arrive, and still prints every byte and exits 0."""
    state.page_size = 1000
    state.add_scale_set(SUB, RG, "big", capacity=1000)
    proc = _start(arm, "status", "-g", RG, "-n", "big", "-o", "json")
    try:
        assert proc.stdout is not None and proc.stderr is not None
        first = proc.stdout.read(1)  # the work is done: the report is being written
        _signal_all(proc, [signal.SIGTERM, signal.SIGINT, signal.SIGTERM])
        rest, errors = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, errors.decode()
    report = json.loads(first + rest)
    assert report["instance_count"] == 1000 and len(report["instances"]) == 1000
    assert errors == b""


def test_a_signal_after_the_rollout_report_keeps_its_exit_code(arm: ArmServers) -> None:
    state = ArmState()
    state.load_seed({"generate": {"scaleSets": 3, "subscriptions": 1, "capacity": 2, "special": False}})
    arm.reset(state)
    proc = _start(arm, "fleet", "rollout", "--timeout", "10", "-o", "json")
    try:
        assert proc.stdout is not None
        summary = _read_json(proc)  # the whole summary has been printed
        _signal_all(proc, [signal.SIGTERM, signal.SIGINT])
        _, errors = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert summary["ok"] is True
    assert proc.returncode == 0, (proc.returncode, errors.decode())
