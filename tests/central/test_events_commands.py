"""`events list` and `events approve` against the ARM emulator with the real credential chain."""

from __future__ import annotations

import json

from helpers import invoke_cli

from vmss_terminate import cli
from vmss_terminate.central.ops import list_events
from vmss_terminate.control import Connection
from vmss_terminate.fleet.scope import Scope
from vmss_terminate_sim.emulator.arm.app import ArmServers

from .conftest import SUB, Estate


def test_list_reads_the_scope_and_its_selectors(arm: ArmServers, conn: Connection, estate: Estate) -> None:
    now = estate.clock.now()
    win = estate.groups["win"].add_event("Terminate", ["win_0", "win_1"], not_before=now + 300)
    estate.groups["lin"].add_event("Reboot", ["lin_2"], not_before=now + 900)
    estate.groups["other-rg/lin"].add_event("Terminate", ["lin_0"])
    report = list_events(Scope.build(subscriptions=[SUB], tags=["team=web"]), connection=conn, clock=estate.clock)
    assert [(e.event.scale_set.name, e.event.event_type) for e in report.events] == [("win", "Terminate"),
                                                                                     ("lin", "Reboot")]
    first = report.events[0].to_dict()
    assert first["event_id"] == win and first["seconds_left"] == 300 and first["os_type"] == "Windows"
    assert first["vm_ids"][1].endswith("/virtualMachineScaleSets/win/virtualMachines/1")
    assert report.out_of_scope == 1  # the db team's set: its event is read, never listed
    everything = list_events(connection=conn, clock=estate.clock)
    assert len(everything.events) == 3  # the other subscription's set has no event


def test_list_cli_json_and_incomplete_answer(arm: ArmServers, estate: Estate) -> None:
    estate.groups["win"].add_event("Terminate", ["win_0"])
    result = invoke_cli(cli.main, ["events", "list", "--subscription", SUB, "-o", "json"])
    assert result.exit_code == 0, result.output
    assert [e["vms"] for e in json.loads(result.stdout)] == [["win_0"]]
    estate.state.rg_truncated, estate.state.rg_page_size = True, 0 + 1
    estate.groups["lin"].add_event("Terminate", ["lin_0"])
    result = invoke_cli(cli.main, ["events", "list", "--subscription", SUB])
    assert result.exit_code == 1 and "incomplete" in result.stderr


def test_approve_single_batch_and_refused(arm: ArmServers, estate: Estate) -> None:
    group = estate.groups["win"]
    one = group.add_event("Terminate", ["win_0"])
    two, three = group.add_event("Terminate", ["win_1"]), group.add_event("Terminate", ["win_2"])
    result = invoke_cli(cli.main, ["events", "approve", "--scale-set-id", estate.set_id("win"), one])
    assert result.exit_code == 0, result.output
    assert "acknowledged" in result.stdout and "Successfully Approved" in result.stdout
    missing = "00000000-0000-0000-0000-00000000dead"
    result = invoke_cli(cli.main, ["events", "approve", "--scale-set-id", estate.set_id("win"), two, missing,
                                   "-o", "json"])
    assert result.exit_code == 1
    answers = {a["event_id"]: (a["acknowledged"], a["batch"]) for a in json.loads(result.stdout)}
    assert answers == {two: (True, True), missing: (False, True)}
    assert {a.event_id for a in group.approvals if a.accepted} == {one, two}
    assert three not in {a.event_id for a in group.approvals}
    bad = invoke_cli(cli.main, ["events", "approve", "--scale-set-id", "web", one])
    assert bad.exit_code == 2 and "invalid --scale-set-id" in bad.stderr
    bad = invoke_cli(cli.main, ["events", "approve", "--scale-set-id", estate.set_id("win"), "x"])
    assert bad.exit_code == 2 and "GUID" in bad.stderr
