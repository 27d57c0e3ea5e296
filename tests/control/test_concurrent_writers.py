"""Another writer during a change (issue 28 item 2): the PATCH carries `If-Match` with the etag the
change was planned on, so a change made between our read and our PATCH is not overwritten (ARM
answers 412: nothing written, nothing upgraded, said so); and the profile is read again after the
upgrade, so a `disable` or another timeout applied meanwhile is a failure naming what it reads,
never "ok"."""

from __future__ import annotations

import threading
import time
from typing import Any, Dict, List

import pytest

from vmss_terminate import control
from vmss_terminate.control import Connection
from vmss_terminate.control.scaleset import ConcurrentWrite
from vmss_terminate.control.upgrade import BatchSize, UpgradeOptions
from vmss_terminate.errors import AzureError
from vmss_terminate_sim.emulator.arm.app import ArmServers, ArmState

from .conftest import RG, SUB, run

NO_UPGRADE = UpgradeOptions(upgrade=False)


def _patches(arm: ArmServers) -> List[Any]:
    return [r for r in arm.arm_server.log.all() if r.method == "PATCH"]


def _timeout(state: ArmState) -> Any:
    ss = state.scale_set(SUB, RG, "web")
    assert ss is not None
    return ss.vm_profile["scheduledEventsProfile"]["terminateNotificationProfile"]["notBeforeTimeout"]


def test_the_patch_carries_if_match_with_the_etag_it_was_planned_on(arm: ArmServers, state: ArmState,
                                                                    conn: Connection) -> None:
    ss = state.add_scale_set(SUB, RG, "web", capacity=2)
    etag = f'"{ss.etag}"'
    control.enable(RG, "web", 10, connection=conn)
    (patch,) = _patches(arm)
    headers = {k.lower(): v for k, v in patch.headers.items()}
    assert headers.get("if-match") == etag


def test_a_change_made_between_our_read_and_our_patch_is_not_overwritten(arm: ArmServers, state: ArmState,
                                                                         conn: Connection) -> None:
    state.add_scale_set(SUB, RG, "web", capacity=2)
    arm.arm_server.faults.add(method="PATCH", delay=120, times=1)  # our PATCH waits at ARM's door ...
    outcome: Dict[str, Any] = {}

    def ours() -> None:
        try:
            outcome["result"] = control.enable(RG, "web", 10, connection=conn)
        except AzureError as exc:
            outcome["error"] = exc

    worker = threading.Thread(target=ours, daemon=True)
    worker.start()
    deadline = time.monotonic() + 60
    while arm.arm_server.faults.pending() and time.monotonic() < deadline:  # until our PATCH took the fault
        threading.Event().wait(0.01)
    assert not arm.arm_server.faults.pending(), "our PATCH never arrived"
    # ... while another writer sets 7 minutes
    control.enable(RG, "web", 7, connection=conn, options=NO_UPGRADE)
    arm.arm_server.faults.clear()  # our PATCH goes on
    worker.join(60)
    assert not worker.is_alive()
    error = outcome.get("error")
    assert isinstance(error, ConcurrentWrite), outcome
    message = str(error)
    assert "changed by another writer after it was read" in message and "HTTP 412" in message
    assert "nothing was written and no instances were upgraded" in message
    assert "it now reads: enabled, notBeforeTimeout PT7M" in message
    assert _timeout(state) == "PT7M"  # the other writer's change stands
    assert [r.status for r in _patches(arm)] == [200, 412]
    assert not [r for r in arm.arm_server.log.all() if r.path.endswith("/manualupgrade")]


def test_a_change_made_right_after_our_patch_is_not_blamed_on_azure(arm: ArmServers, state: ArmState,
                                                                    conn: Connection) -> None:
    """Another writer between our PATCH and our read-back: the set's etag moved past our PATCH's
    answer, so the message names another writer -- not azure-docs#41434 (Azure ignoring a re-enable)."""
    state.add_scale_set(SUB, RG, "web", capacity=2)
    path = "/virtualMachineScaleSets/web"
    arm.arm_server.faults.add(method="GET", path_contains=path, delay=0.0001, times=2)  # the plan's reads
    arm.arm_server.faults.add(method="GET", path_contains=path, delay=120, times=1)  # the read-back waits ...
    outcome: Dict[str, Any] = {}

    def ours() -> None:
        try:
            outcome["result"] = control.enable(RG, "web", 10, connection=conn, options=NO_UPGRADE)
        except AzureError as exc:
            outcome["error"] = exc

    worker = threading.Thread(target=ours, daemon=True)
    worker.start()
    deadline = time.monotonic() + 60
    while arm.arm_server.faults.pending() and time.monotonic() < deadline:  # until the read-back took it
        threading.Event().wait(0.01)
    assert not arm.arm_server.faults.pending(), "our read-back never arrived"
    assert len(_patches(arm)) == 1  # ours, applied
    control.disable(RG, "web", connection=conn, options=NO_UPGRADE)  # ... while another writer disables it
    arm.arm_server.faults.clear()
    worker.join(60)
    assert not worker.is_alive()
    message = str(outcome.get("error"))
    assert "the PATCH was applied, but rg/web was changed again by another writer right after it" in message, outcome
    assert "it now reads: disabled" in message and "41434" not in message


def test_a_change_made_during_the_upgrade_fails_the_command_naming_what_it_reads(arm: ArmServers, state: ArmState,
                                                                                  conn: Connection) -> None:
    state.add_scale_set(SUB, RG, "web", capacity=4)
    other = Connection(subscription_id=SUB, arm_endpoint=arm.arm_url)
    changed = []

    def meanwhile(done: int, total: int) -> None:  # after the first batch: someone disables it
        if not changed:
            changed.append(control.disable(RG, "web", connection=other, options=NO_UPGRADE))

    with pytest.raises(AzureError) as caught:
        control.enable(RG, "web", 10, connection=conn, options=UpgradeOptions(batch_size=BatchSize(2, False)), progress=meanwhile)
    message = str(caught.value)
    assert "was changed by another writer while this command worked on it" in message, message
    assert "it now reads: disabled" in message and "(wanted: enabled, notBeforeTimeout PT10M)" in message
    assert "the PATCH was applied and" in message and "instance(s) were upgraded" in message
    assert "vmss-terminate status" in message


def test_options_the_command_line_makes_meaningless_are_refused(arm: ArmServers, state: ArmState) -> None:
    """Issue 28 item 10: `enable --no-upgrade --wait`, `--no-upgrade --batch-size`, `--dry-run --no-wait`
    were silently ignored; each is one line and exit 2, before any request."""
    state.add_scale_set(SUB, RG, "web", capacity=2)
    base = ("enable", "-g", RG, "-n", "web", "--timeout", "10")
    for extra, words in [(("--no-upgrade", "--wait"), "--wait waits for the upgrade --no-upgrade skips"),
                         (("--no-upgrade", "--batch-size", "2"), "--batch-size sizes the upgrade --no-upgrade skips"),
                         (("--dry-run", "--no-wait"), "--dry-run writes nothing and --no-wait")]:
        result = run(*base, *extra)
        assert result.exit_code == 2, (extra, result.output)
        assert words in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert arm.arm_server.log.count() == 0
