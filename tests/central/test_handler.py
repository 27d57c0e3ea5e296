"""The central handler against the ARM emulator (real azure-identity chain): hooks and Run Command
for every listed VM, then one acknowledgement; scope; duplicates; restarts from the journal."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Iterator, List

from helpers import poll_until

from vmss_terminate.central.handler import HandlerConfig
from vmss_terminate.central.run import Central, build
from vmss_terminate.clock import SYSTEM_CLOCK
from vmss_terminate.control import Connection
from vmss_terminate.fleet.scope import Scope
from vmss_terminate_sim.emulator.arm.app import ArmServers

from .conftest import SUB, Estate

HOOK = ("import json, os, sys; e = json.load(sys.stdin); "
        "open(os.path.join(sys.argv[1], e['VmName'] + '-' + e['EventId']), 'w').write(json.dumps(e))")



def _central(arm: ArmServers, tmp_path: Path, scope: Scope, **config: object) -> Iterator[Central]:
    hook = f"{sys.executable} -c \"{HOOK}\" {tmp_path}"
    options = dict(hooks=(hook,), run_command="Write-Host draining", poll_interval=0.05)
    options.update(config)
    central = build(scope, HandlerConfig(**options),  # type: ignore[arg-type]
                    connection=Connection(arm_endpoint=arm.arm_url, retry_total=2, retry_backoff_factor=0.0),
                    state_file=str(tmp_path / "state.json"))
    try:
        yield central
    finally:
        central.close()


def _hooked(tmp_path: Path) -> List[str]:
    return sorted(p.name.split("-")[0] for p in tmp_path.iterdir() if "-" in p.name)


def test_windows_event_listing_three_vms_runs_everything_then_acknowledges_once(
        live_arm: ArmServers, live: Estate, tmp_path: Path) -> None:
    group = live.groups["win"]
    eid = group.add_event("Terminate", ["win_0", "win_1", "win_2"], not_before=SYSTEM_CLOCK.now() + 600)
    for central in _central(live_arm, tmp_path, Scope.build(subscriptions=[SUB])):
        started = central.handler.poll_once(wait=True)
        assert [e.event_id for e in started] == [eid]
        central.handler.poll_once(wait=True)  # the event is Started now: nothing runs again
    assert _hooked(tmp_path) == ["win_0", "win_1", "win_2"]
    stdin = json.loads((tmp_path / f"win_1-{eid}").read_text())
    assert stdin["VmId"].endswith("/virtualMachineScaleSets/win/virtualMachines/1")
    assert stdin["ScaleSetId"].endswith("/virtualMachineScaleSets/win") and len(stdin["VmIds"]) == 3
    commands = live.state.run_commands.records
    assert sorted(r.vm_name for r in commands) == ["win_0", "win_1", "win_2"]
    assert {r.command_id for r in commands} == {"RunPowerShellScript"}
    acks = live.state.maintenance.acknowledgements
    assert [(a.event_id, a.accepted) for a in acks] == [(eid, True)]
    assert max(r.at for r in commands) <= acks[0].at  # acknowledged after every VM's Run Command
    event = group.get(eid)
    assert event is not None and event.status == "Started"


def test_events_outside_the_scope_are_never_acknowledged(live_arm: ArmServers, live: Estate, tmp_path: Path) -> None:
    now = SYSTEM_CLOCK.now()
    inside = live.groups["lin"].add_event("Terminate", ["lin_1"], not_before=now + 600)
    live.groups["other-rg/lin"].add_event("Terminate", ["lin_0"], not_before=now + 600)  # team=db
    reboot = live.groups["win"].add_event("Reboot", ["win_0"], not_before=now + 900)  # not a handled type
    for central in _central(live_arm, tmp_path, Scope.build(tags=["team=web"]), run_command=None):
        central.handler.poll_once(wait=True)
        central.handler.poll_once(wait=True)
    assert [a.event_id for a in live.state.maintenance.acknowledgements] == [inside]
    assert _hooked(tmp_path) == ["lin_1"]
    assert reboot not in {a.event_id for a in live.groups["win"].approvals}
    assert live.state.maintenance.foreign_acknowledgements() == []


def test_a_restart_reruns_no_finished_step_and_acknowledges_once(live_arm: ArmServers, live: Estate,
                                                                 tmp_path: Path) -> None:
    group = live.groups["lin"]
    eid = group.add_event("Terminate", ["lin_0", "lin_1"], not_before=SYSTEM_CLOCK.now() + 600)
    live.state.maintenance.always_publish = False
    refuse = {"on": True}
    original = live.state.maintenance.acknowledge

    def flaky(scale_set, ids, by, batch=False):  # type: ignore[no-untyped-def]
        if refuse["on"]:
            raise RuntimeError("ARM down")  # the emulator answers 500: the handler's ack fails
        return original(scale_set, ids, by, batch)

    live.state.maintenance.acknowledge = flaky  # type: ignore[method-assign]
    for central in _central(live_arm, tmp_path, Scope.build(), run_command=None):
        central.handler.poll_once(wait=True)
    assert _hooked(tmp_path) == ["lin_0", "lin_1"]
    for path in tmp_path.iterdir():
        if "-" in path.name:
            path.unlink()
    refuse["on"] = False
    for central in _central(live_arm, tmp_path, Scope.build(), run_command=None):  # a new process, same journal
        central.handler.poll_once(wait=True)
    assert _hooked(tmp_path) == []  # the steps were recorded finished: not run again
    assert [a.event_id for a in live.state.maintenance.acknowledgements if a.accepted] == [eid]


def test_an_event_canceled_while_its_actions_run_is_never_acknowledged(live_arm: ArmServers, live: Estate,
                                                                     tmp_path: Path) -> None:
    eid = live.groups["lin"].add_event("Terminate", ["lin_1"], not_before=SYSTEM_CLOCK.now() + 600)
    started, go = tmp_path / "started", tmp_path / "go"
    script = tmp_path / "hold.py"
    script.write_text("import os, sys, time\nopen(sys.argv[1], 'w').close()\n"
                      "while not os.path.exists(sys.argv[2]):\n    time.sleep(0.01)\n")
    hook = f"{sys.executable} {script} {started} {go}"
    for central in _central(live_arm, tmp_path, Scope.build(subscriptions=[SUB]), hooks=(hook,), run_command=None):
        assert [e.event_id for e in central.handler.poll_once()] == [eid]
        assert poll_until(started.exists)
        live.groups["lin"].remove_event(eid)  # the scale-in is cancelled while the hook runs
        central.handler.poll_once()  # Resource Graph shows it Canceled now
        go.touch()
        central.handler.join()
        central.handler.poll_once(wait=True)
    assert [a.event_id for a in live.state.maintenance.acknowledgements] == []


def test_a_vm_added_to_the_event_while_its_actions_run_is_handled_before_the_acknowledgement(
        live_arm: ArmServers, live: Estate, tmp_path: Path) -> None:
    group = live.groups["lin"]
    eid = group.add_event("Terminate", ["lin_1"], not_before=SYSTEM_CLOCK.now() + 600)
    go = tmp_path / "go"
    script = tmp_path / "hold.py"
    script.write_text("import json, os, sys, time\nvm = json.load(sys.stdin)['VmName']\n"
                      "open(os.path.join(sys.argv[1], vm + '.started'), 'w').close()\n"
                      "while vm == 'lin_1' and not os.path.exists(sys.argv[2]):\n    time.sleep(0.01)\n"
                      "open(os.path.join(sys.argv[1], vm + '.done'), 'w').close()\n")
    hook = f"{sys.executable} {script} {tmp_path} {go}"
    for central in _central(live_arm, tmp_path, Scope.build(subscriptions=[SUB]), hooks=(hook,), run_command=None):
        assert [e.event_id for e in central.handler.poll_once()] == [eid]
        assert poll_until((tmp_path / "lin_1.started").exists)
        group.update_event(eid, resources=["lin_1", "lin_2"])  # Azure adds a VM to the event
        central.handler.poll_once()  # Resource Graph lists both now
        go.touch()
        central.handler.join(timeout=60)
        assert live.state.maintenance.acknowledgements == [] or (tmp_path / "lin_2.done").exists()
        central.handler.poll_once(wait=True)  # lin_2's actions run, then the one acknowledgement
    acks = live.state.maintenance.acknowledgements
    assert [a.event_id for a in acks] == [eid] and (tmp_path / "lin_2.done").exists()


def test_handle_event_is_the_python_api_for_one_event(live_arm: ArmServers, live: Estate, tmp_path: Path) -> None:
    from vmss_terminate.central import ScaleSetRef, event_from_fields
    from vmss_terminate.central.run import handle_event

    group = live.groups["win"]
    eid = group.add_event("Terminate", ["win_2"], not_before=SYSTEM_CLOCK.now() + 600)
    event = event_from_fields(ScaleSetRef.parse(live.set_id("win")), group.get(eid).to_imds())  # type: ignore[union-attr]
    outcome = handle_event(event, HandlerConfig(run_command="Write-Host bye"),
                           connection=Connection(arm_endpoint=live_arm.arm_url))
    assert outcome.acknowledged is not None and outcome.acknowledged.ok
    assert outcome.steps == {"run-command@win_2": "ok"}
    assert [r.vm_name for r in live.state.run_commands.records] == ["win_2"]


class SteppedClock:
    """Real time whose wall clock a test can step (NTP's makestep); monotonic time is untouched."""

    speed = 1.0

    def __init__(self) -> None:
        self.offset = 0.0

    def now(self) -> float:
        return SYSTEM_CLOCK.now() + self.offset

    def monotonic(self) -> float:
        return SYSTEM_CLOCK.monotonic()

    def sleep(self, seconds: float) -> None:
        SYSTEM_CLOCK.sleep(seconds)

    def wait(self, event: threading.Event, seconds: float) -> bool:
        return SYSTEM_CLOCK.wait(event, seconds)


def test_a_wall_clock_step_while_a_hook_runs_does_not_cut_it_short(live_arm: ArmServers, live: Estate,
                                                                    tmp_path: Path) -> None:
    """The deadline is anchored when the event is first seen and counted on the monotonic clock
    (as the agent's jobs): the wall clock jumping an hour ahead during the first hook leaves the
    second its 585 s (on the wall clock it would start past NotBefore and be stopped at once)."""
    eid = live.groups["lin"].add_event("Terminate", ["lin_1"], not_before=SYSTEM_CLOCK.now() + 600)
    started, go = tmp_path / "started", tmp_path / "go"
    script = tmp_path / "hold.py"
    script.write_text("import os, sys, time\nopen(sys.argv[1], 'w').close()\n"
                      "while not os.path.exists(sys.argv[2]):\n    time.sleep(0.01)\n")
    clock = SteppedClock()
    central = build(Scope.build(subscriptions=[SUB]),
                    HandlerConfig(hooks=(f"{sys.executable} {script} {started} {go}",
                                         f"{sys.executable} {script} {tmp_path / 'second'} {go}"), on_failure="wait",
                                  poll_interval=0.05),
                    connection=Connection(arm_endpoint=live_arm.arm_url, retry_total=2, retry_backoff_factor=0.0),
                    state_file=str(tmp_path / "state.json"), clock=clock)
    try:
        assert [e.event_id for e in central.handler.poll_once()] == [eid]
        assert poll_until(started.exists)
        clock.offset += 3600  # the VM's clock steps an hour ahead while the hook runs
        go.touch()
        central.handler.join(timeout=60)
    finally:
        central.close()
    assert [a.event_id for a in live.state.maintenance.acknowledgements] == [eid]
    assert (tmp_path / 'second').exists()


def test_a_spent_resource_graph_quota_delays_the_next_poll_instead_of_a_429(
        arm: ArmServers, estate: Estate, tmp_path: Path) -> None:
    """x-ms-user-quota-remaining: 0 -> the next poll waits x-ms-user-quota-resets-after on the
    handler's clock, and is answered (never 429); the wait is counted in the metrics."""
    from vmss_terminate.central.metrics import CentralMetrics
    from vmss_terminate_sim.emulator.arm.graphquota import GraphUserQuota

    clock = estate.clock
    quota = estate.state.graph_quota = GraphUserQuota(clock, limit=2, window=5.0)
    metrics = CentralMetrics(5.0)
    central = build(Scope.build(subscriptions=[SUB]), HandlerConfig(poll_interval=5.0),
                    connection=Connection(arm_endpoint=arm.arm_url, retry_total=2, retry_backoff_factor=0.0),
                    clock=clock, observe=metrics.observe)
    try:
        central.handler.poll_once()
        central.handler.poll_once()  # the window's last query: remaining 0, resets after 00:00:05
        before = clock.monotonic()
        central.handler.poll_once()
        waited = clock.monotonic() - before
        assert central.handler.last_batch is not None and central.handler.last_batch.complete
    finally:
        central.close()
    assert quota.refused == 0  # no query was sent to be answered 429
    assert 4.0 <= waited <= 6.0
    assert "vmss_terminate_central_source_quota_waits_total 1" in metrics.text()
    assert "vmss_terminate_central_source_throttled_total 0" in metrics.text()
