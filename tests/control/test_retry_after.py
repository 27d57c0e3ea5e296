"""A Retry-After is waited for only within bounds: the SDK's retry refuses one longer than
RETRY_AFTER_MAX at once (exit 1 naming it) instead of sleeping for a day in real time, and an
HTTP-date Retry-After is counted on the injected clock."""

from __future__ import annotations

import email.utils
import time

import pytest

from vmss_terminate import control
from vmss_terminate.clock import ManualClock
from vmss_terminate.control import Connection
from vmss_terminate.control.operations import retry_after_seconds
from vmss_terminate.control.pipeline import RETRY_AFTER_MAX
from vmss_terminate.control.upgrade import UpgradeOptions
from vmss_terminate_sim.emulator.arm.app import ArmServers, ArmState
from vmss_terminate_sim.emulator.faults import parse_fault_spec

from .conftest import RG, SUB, run


@pytest.mark.parametrize("value", ["86400", "inf"])
def test_a_day_long_retry_after_is_refused_at_once(arm: ArmServers, state: ArmState, value: str) -> None:
    state.add_scale_set(SUB, RG, "web", capacity=2)
    if value == "inf":  # the fault spec takes whole seconds only; a header the SDK reads as infinity
        arm.arm_server.faults.add(status=503, headers={"Retry-After": value}, method="GET", times=None)
    else:
        arm.arm_server.faults.add(parse_fault_spec(f"status=503,retry-after={value},method=GET,times=all"))
    started = time.monotonic()
    result = run("status", "-g", RG, "-n", "web")
    assert time.monotonic() - started < 60  # it slept for a day before
    assert result.exit_code == 1, result.output
    line = result.stderr.strip()
    assert "\n" not in line and "Traceback" not in result.output
    assert f"Retry-After: {value}" in line and f"longer than {RETRY_AFTER_MAX:g} s" in line, line
    assert arm.arm_server.log.count("GET", "/web") == 1  # no retry


def test_a_short_retry_after_is_still_retried(arm: ArmServers, state: ArmState) -> None:
    state.add_scale_set(SUB, RG, "web", capacity=2)
    arm.arm_server.faults.add(parse_fault_spec("status=503,retry-after=0,method=GET,path=/web,times=1"))
    result = run("status", "-g", RG, "-n", "web")
    assert result.exit_code == 0, result.output


def test_an_http_date_retry_after_is_counted_on_the_injected_clock() -> None:
    clock = ManualClock()  # 2023: far from the machine's time
    value = email.utils.formatdate(clock.now() + 120, usegmt=True)
    assert retry_after_seconds(value, clock.now) == pytest.approx(120)


def test_a_single_set_command_retries_a_429_without_retry_after(arm: ArmServers, state: ArmState,
                                                                conn: Connection) -> None:
    """Issue 28 item 11: azure-core resends a PATCH or POST only after 500/503/504, so `enable`
    failed on the first 429 that carried no Retry-After; a 429 was refused before anything was done."""
    state.add_scale_set(SUB, RG, "web", capacity=2)
    arm.arm_server.faults.add(parse_fault_spec("status=429,method=PATCH,times=1"))
    arm.arm_server.faults.add(parse_fault_spec("status=429,method=POST,path=/manualupgrade,times=1"))
    result = control.enable(RG, "web", 10, connection=conn)
    assert result.changed and result.upgrade is not None and result.upgrade.complete
    statuses = [(r.method, r.status) for r in arm.arm_server.log.all() if r.method in ("PATCH", "POST")]
    assert statuses[:2] == [("PATCH", 429), ("PATCH", 200)] and ("POST", 429) in statuses


def test_a_429_without_retry_after_waits_the_documented_backoff(arm: ArmServers, state: ArmState) -> None:
    """Issue 28 item 11: the resends of a 429 that names no Retry-After follow the SDK's documented
    exponential backoff (docs/control-plane.md "Retries": backoff factor x 2^(n-1) from the second
    failure in a row) -- checked as lower bounds on the emulator's arrival times, which a slow
    machine can only lengthen."""
    state.add_scale_set(SUB, RG, "web", capacity=2)
    arm.arm_server.faults.add(parse_fault_spec("status=429,method=PATCH,times=3"))
    factor = 0.05
    conn = Connection(subscription_id=SUB, arm_endpoint=arm.arm_url, retry_total=5, retry_backoff_factor=factor)
    assert control.enable(RG, "web", 10, connection=conn, options=UpgradeOptions(upgrade=False)).changed
    patches = [r for r in arm.arm_server.log.all() if r.method == "PATCH"]
    assert [r.status for r in patches] == [429, 429, 429, 200]
    gaps = [later.at - earlier.at for earlier, later in zip(patches, patches[1:])]
    assert gaps[1] >= factor * 2 and gaps[2] >= factor * 4, gaps
