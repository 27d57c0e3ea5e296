"""Every control command end to end: CLI -> library -> azure-mgmt-compute -> ARM emulator."""

from __future__ import annotations

import io
import json
import threading
import time
from typing import Any, Dict, List

import pytest

from vmss_terminate.clock import ManualClock
from vmss_terminate.commands import control as commands
from vmss_terminate.commands.progress import terminal_progress
from vmss_terminate.control import UpgradeIncomplete, body
from vmss_terminate.control.connection import sdk_default_api_version
from vmss_terminate.control.upgrade import UpgradeResult
from vmss_terminate_sim.emulator.arm.app import ArmServers, ArmState

from .conftest import RG, SUB, run, writes


def _ss(state: ArmState, name: str = "web", **kwargs):  # type: ignore[no-untyped-def]
    return state.add_scale_set(SUB, RG, name, **kwargs)


def test_status_reports_modes_profile_and_instances(arm: ArmServers, state: ArmState) -> None:
    _ss(state, capacity=3, stale_instances=1)
    result = run("status", "-g", RG, "-n", "web", "--output", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["orchestration_mode"] == "Uniform"
    assert data["upgrade_policy"] == "Manual"
    assert data["terminate_notification"]["presence"] == "absent"
    assert data["terminate_notification"]["enabled"] is False
    assert [i["latest_model_applied"] for i in data["instances"]] == [True, True, False]
    assert data["stale_instances"] == ["2"]
    assert writes(arm) == []


def test_status_table_output(arm: ArmServers, state: ArmState) -> None:
    _ss(state, capacity=2, scheduled_events_profile={"terminateNotificationProfile": {"enable": True,
                                                                                       "notBeforeTimeout": "PT7M"}})
    result = run("status", "-g", RG, "-n", "web")
    assert result.exit_code == 0, result.output
    assert "enabled, notBeforeTimeout PT7M" in result.stdout
    assert "2, 0 not on the latest model" in result.stdout


def test_status_tsv_has_a_header_and_the_terminate_notification(arm: ArmServers, state: ArmState) -> None:
    """Issue 28 item 10: the tsv row dropped the notification's facts (an object) and had no header."""
    _ss(state, capacity=2, scheduled_events_profile={"terminateNotificationProfile": {"enable": True,
                                                                                       "notBeforeTimeout": "PT7M"}})
    result = run("status", "-g", RG, "-n", "web", "-o", "tsv")
    assert result.exit_code == 0, result.output
    header, row, *rest = result.stdout.splitlines()
    assert rest == []
    cells = dict(zip(header.split("\t"), row.split("\t")))
    assert len(header.split("\t")) == len(row.split("\t"))
    assert cells["terminate_notification.enabled"] == "True"
    assert cells["terminate_notification.timeout"] == "PT7M"
    assert cells["terminate_notification.timeout_minutes"] == "7"
    assert cells["orchestration_mode"] == "Uniform" and cells["instance_count"] == "2"


def test_status_pages_through_all_instances(arm: ArmServers, state: ArmState) -> None:
    state.page_size = 2
    _ss(state, capacity=5)
    data = json.loads(run("status", "-g", RG, "-n", "web", "-o", "json").stdout)
    assert data["instance_count"] == 5
    assert arm.arm_server.log.count("GET", "/virtualMachines") == 3


def test_status_flexible_says_not_available(arm: ArmServers, state: ArmState) -> None:
    _ss(state, "flex", orchestration="Flexible", capacity=2)
    result = run("status", "-g", RG, "-n", "flex", "-o", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["orchestration_mode"] == "Flexible"
    assert data["instances"] is None
    assert "not available" in data["instances_note"]
    assert "2 member VM(s)" in data["instances_note"]
    table = run("status", "-g", RG, "-n", "flex").stdout
    assert "instances:          per-instance latestModelApplied is not available for Flexible" in table


def test_flexible_enable_upgrades_every_member_by_name_never_half_silently(arm: ArmServers,
                                                                          state: ArmState) -> None:
    """Flexible members report no latestModelApplied, but right after our PATCH every one of them runs
    the old model: a Manual policy upgrades them all (by VM name, in batches). Without a change their
    model is unknown: "unavailable" with a note naming `upgrade`, which then upgrades them all."""
    ss = _ss(state, "flex", orchestration="Flexible", capacity=3)
    names = sorted(inst.name for inst in ss.instances.values())
    planned = run("plan", "-g", RG, "-n", "flex", "--timeout", "10m", "--detailed-exitcode", "-o", "json")
    assert planned.exit_code == 2, planned.output
    assert sorted(json.loads(planned.stdout)["upgrade"]["stale"]) == names

    result = run("enable", "-g", RG, "-n", "flex", "--timeout", "10m", "--batch-size", "2", "-o", "json")
    assert result.exit_code == 0, result.output
    upgrade = json.loads(result.stdout)["upgrade"]
    assert upgrade["mode"] == "manual" and upgrade["complete"] is True
    assert sorted(upgrade["upgraded"]) == names and upgrade["batches_done"] == 2
    assert all(inst.latest_model_applied for inst in ss.instances.values())
    sent = [json.loads(r.body)["instanceIds"] for r in arm.arm_server.log.find("POST", "/manualupgrade")]
    assert sorted(sum(sent, [])) == names

    again = run("enable", "-g", RG, "-n", "flex", "--timeout", "10m", "-o", "json")
    assert again.exit_code == 0, again.output
    assert arm.arm_server.log.count("POST", "/manualupgrade") == 2 and arm.arm_server.log.count("PATCH") == 1
    assert json.loads(again.stdout)["upgrade"]["mode"] == "unavailable"
    assert "`vmss-terminate upgrade` upgrades all 3" in json.loads(again.stdout)["upgrade"]["note"]
    # which members run the latest model is unknown: a drift check must not read that as compliant
    assert run("plan", "-g", RG, "-n", "flex", "--timeout", "10m", "--detailed-exitcode").exit_code == 2

    explicit = run("upgrade", "-g", RG, "-n", "flex", "-o", "json")
    assert explicit.exit_code == 0, explicit.output
    assert sorted(json.loads(explicit.stdout)["upgraded"]) == names


def test_enable_patches_once_and_upgrades_then_is_idempotent(arm: ArmServers, state: ArmState) -> None:
    ss = _ss(state, capacity=4)
    result = run("enable", "-g", RG, "-n", "web", "--timeout", "10m")
    assert result.exit_code == 0, result.output
    patches = arm.arm_server.log.find("PATCH")
    assert len(patches) == 1
    assert patches[0].body == body.patch_bytes(True, 10)  # byte-for-byte what render/dry-run print
    assert all(i.latest_model_applied for i in ss.instances.values())
    assert all(i.applied_profile == {"terminateNotificationProfile": {"enable": True, "notBeforeTimeout": "PT10M"}}
               for i in ss.instances.values())
    assert arm.arm_server.log.count("PUT") == 0

    before = len(writes(arm))
    again = run("enable", "-g", RG, "-n", "web", "--timeout", "PT600S", "-o", "json")
    assert again.exit_code == 0, again.output
    assert len(writes(arm)) == before  # no PATCH, no PUT, no POST
    data = json.loads(again.stdout)
    assert data["changed"] is False
    assert data["upgrade"]["upgraded"] == []


def test_enable_without_model_change_still_upgrades_stale_instances(arm: ArmServers, state: ArmState) -> None:
    profile = {"terminateNotificationProfile": {"enable": True, "notBeforeTimeout": "PT10M"}}
    ss = _ss(state, capacity=5, scheduled_events_profile=profile, stale_instances=2)
    result = run("enable", "-g", RG, "-n", "web", "--timeout", "10", "-o", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["changed"] is False
    assert sorted(data["upgrade"]["upgraded"]) == ["3", "4"]
    assert arm.arm_server.log.count("PATCH") == 0
    assert arm.arm_server.log.count("POST", "/manualupgrade") == 1  # auto, no rolling policy: one call
    assert all(i.latest_model_applied for i in ss.instances.values())


@pytest.mark.parametrize("policy, batch, calls", [
    ({}, [], 1),  # Manual, no bound declared: every instance in one call, as az's update-instances '*'
    ({"rollingUpgradePolicy": {"maxBatchInstancePercent": 40}}, [], 3),  # 40 % of 5 = 2 a call
    ({"rollingUpgradePolicy": {"maxBatchInstancePercent": 40}}, ["--batch-size", "1"], 5),  # asked: as asked
    ({"rollingUpgradePolicy": {"maxBatchInstancePercent": "40"}}, [], 1),  # not a number: not a bound
])
def test_auto_batches_follow_the_sets_upgrade_policy(arm: ArmServers, state: ArmState, policy: Dict[str, Any],
                                                     batch: List[str], calls: int) -> None:
    ss = _ss(state, capacity=5)
    ss.upgrade_policy_extra = dict(policy)
    result = run("enable", "-g", RG, "-n", "web", "--timeout", "10", "-o", "json", *batch)
    assert result.exit_code == 0, result.output
    assert arm.arm_server.log.count("POST", "/manualupgrade") == calls
    assert json.loads(result.stdout)["upgrade"]["batch_size"] == -(-5 // calls)
    assert all(i.latest_model_applied for i in ss.instances.values())


def test_disable_then_reenable_round_trip(arm: ArmServers, state: ArmState) -> None:
    _ss(state, capacity=2)
    assert run("enable", "-g", RG, "-n", "web", "--timeout", "5m").exit_code == 0
    disabled = run("disable", "-g", RG, "-n", "web")
    assert disabled.exit_code == 0, disabled.output
    assert "profile disabled (empty scheduledEventsProfile)" in disabled.stdout  # not "not configured"
    assert arm.arm_server.log.find("PATCH")[-1].body == body.patch_bytes(False, None)
    status = json.loads(run("status", "-g", RG, "-n", "web", "-o", "json").stdout)
    assert status["terminate_notification"]["presence"] == "empty"  # Azure stores enable:false as {}
    assert status["stale_instances"] == []

    before = arm.arm_server.log.count("PATCH")
    again = run("disable", "-g", RG, "-n", "web")
    assert again.exit_code == 0 and arm.arm_server.log.count("PATCH") == before  # already off

    reenabled = run("enable", "-g", RG, "-n", "web", "--timeout", "15m", "-o", "json")
    assert reenabled.exit_code == 0, reenabled.output
    assert json.loads(reenabled.stdout)["after"]["timeout"] == "PT15M"


def test_reenable_ignored_by_azure_is_reported_not_silent(arm: ArmServers, state: ArmState) -> None:
    _ss(state, capacity=2)
    state.reenable_ignored = True
    assert run("enable", "-g", RG, "-n", "web", "--timeout", "5m").exit_code == 0
    assert run("disable", "-g", RG, "-n", "web").exit_code == 0
    posts_before = arm.arm_server.log.count("POST")
    result = run("enable", "-g", RG, "-n", "web", "--timeout", "5m")
    assert result.exit_code == 1
    assert "azure-docs#41434" in result.stderr
    assert "still reads" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert arm.arm_server.log.count("POST") == posts_before  # no upgrade after a change that did not apply


def test_missing_empty_and_enable_less_profiles(arm: ArmServers, state: ArmState) -> None:
    _ss(state, "absent", capacity=1)
    _ss(state, "empty", capacity=1, scheduled_events_profile={})
    _ss(state, "noenable", capacity=1, scheduled_events_profile={"terminateNotificationProfile":
                                                                 {"notBeforeTimeout": "PT10M"}})
    seen = {}
    for name in ("absent", "empty", "noenable"):
        result = run("status", "-g", RG, "-n", name, "-o", "json")
        assert result.exit_code == 0, result.output
        seen[name] = json.loads(result.stdout)["terminate_notification"]
    assert seen["absent"]["presence"] == "absent" and seen["absent"]["enabled"] is False
    assert seen["empty"]["presence"] == "empty" and seen["empty"]["enabled"] is False
    assert seen["noenable"] == {"presence": "set", "enabled": False, "timeout": "PT10M",
                                "enable_field": "missing", "timeout_minutes": 10}

    # enable writes `"enable": true` explicitly for each of them
    for name in ("absent", "empty", "noenable"):
        result = run("enable", "-g", RG, "-n", name, "--timeout", "10m", "--no-upgrade")
        assert result.exit_code == 0, result.output
    assert arm.arm_server.log.count("PATCH") == 3
    assert arm.arm_server.log.count("POST") == 0  # --no-upgrade


def test_enabled_profile_without_timeout_already_gives_pt5m(arm: ArmServers, state: ArmState) -> None:
    """Swagger: notBeforeTimeout defaults to PT5M. Enabling such a scale set with 5 minutes is "no
    change" (no PATCH, and no needless upgrade of every instance); another timeout is a change."""
    _ss(state, capacity=2, scheduled_events_profile={"terminateNotificationProfile": {"enable": True}})
    shown = run("status", "-g", RG, "-n", "web")
    assert "enabled, notBeforeTimeout not set (Azure default PT5M)" in shown.stdout
    same = run("enable", "-g", RG, "-n", "web", "--timeout", "PT5M", "-o", "json")
    assert same.exit_code == 0, same.output
    assert json.loads(same.stdout)["changed"] is False
    assert writes(arm) == []
    other = run("enable", "-g", RG, "-n", "web", "--timeout", "6", "-o", "json")
    assert other.exit_code == 0, other.output
    assert json.loads(other.stdout)["after"]["timeout"] == "PT6M"
    assert arm.arm_server.log.count("PATCH") == 1


def test_retime_changes_timeout_and_refuses_when_disabled(arm: ArmServers, state: ArmState) -> None:
    ss = _ss(state, capacity=2, scheduled_events_profile={"terminateNotificationProfile":
                                                           {"enable": True, "notBeforeTimeout": "PT5M"}})
    result = run("retime", "-g", RG, "-n", "web", "--timeout", "PT12M")
    assert result.exit_code == 0, result.output
    assert ss.scheduled_events_profile == {"terminateNotificationProfile": {"enable": True,
                                                                             "notBeforeTimeout": "PT12M"}}
    _ss(state, "off", capacity=1)
    refused = run("retime", "-g", RG, "-n", "off", "--timeout", "10m")
    assert refused.exit_code == 1
    assert "not enabled" in refused.stderr and "vmss-terminate enable" in refused.stderr
    assert arm.arm_server.log.count("PATCH", "/off") == 0


def test_dry_run_prints_exact_body_and_plan_and_writes_nothing(arm: ArmServers, state: ArmState) -> None:
    _ss(state, capacity=10)
    result = run("enable", "-g", RG, "-n", "web", "--timeout", "10m", "--dry-run", "--batch-size", "4")
    assert result.exit_code == 0, result.output
    assert body.patch_bytes(True, 10).decode().rstrip("\n") in result.stdout
    assert "manualupgrade 10 of 10 instances in 3 batch(es) of up to 4" in result.stdout
    assert writes(arm) == []

    as_json = run("disable", "-g", RG, "-n", "web", "--dry-run", "-o", "json")
    data = json.loads(as_json.stdout)
    assert data["dry_run"] is True and data["plan"]["profile_change"] is False  # never enabled
    assert writes(arm) == []


def test_plan_detailed_exit_codes(arm: ArmServers, state: ArmState) -> None:
    _ss(state, capacity=3)
    pending = run("plan", "-g", RG, "-n", "web", "--timeout", "10m", "--detailed-exitcode", "-o", "json")
    assert pending.exit_code == 2, pending.output
    data = json.loads(pending.stdout)
    assert data["changes_pending"] is True
    assert data["patch_body"] == body.patch_bytes(True, 10).decode()
    assert data["upgrade"]["stale"] == ["0", "1", "2"]
    assert writes(arm) == []

    assert run("plan", "-g", RG, "-n", "web", "--timeout", "10m").exit_code == 0  # without the flag
    assert run("enable", "-g", RG, "-n", "web", "--timeout", "10m").exit_code == 0
    clean = run("plan", "-g", RG, "-n", "web", "--timeout", "10m", "--detailed-exitcode")
    assert clean.exit_code == 0, clean.output
    assert "no changes" in clean.stdout

    error = run("plan", "-g", RG, "-n", "nope", "--timeout", "10m", "--detailed-exitcode")
    assert error.exit_code == 1 and "not found" in error.stderr
    bad = run("plan", "-g", RG, "-n", "web", "--timeout", "30m", "--detailed-exitcode")
    assert bad.exit_code == 1  # Terraform semantics: 2 would read as "changes pending"
    assert " plan: invalid --timeout '30m'" in bad.stderr and len(bad.stderr.splitlines()) == 1
    assert run("plan", "-g", RG, "-n", "web", "--timeout", "30m").exit_code == 2


def test_upgrade_command_manual_and_noop(arm: ArmServers, state: ArmState) -> None:
    ss = _ss(state, capacity=6, stale_instances=3)
    result = run("upgrade", "-g", RG, "-n", "web", "--batch-size", "2", "-o", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert sorted(data["upgraded"]) == ["3", "4", "5"] and data["batches_done"] == 2
    assert all(i.latest_model_applied for i in ss.instances.values())
    posts = arm.arm_server.log.count("POST")
    assert run("upgrade", "-g", RG, "-n", "web").exit_code == 0
    assert arm.arm_server.log.count("POST") == posts


def test_automatic_policy_is_applied_by_the_platform(arm: ArmServers, state: ArmState) -> None:
    _ss(state, capacity=3, upgrade_policy="Automatic")
    result = run("enable", "-g", RG, "-n", "web", "--timeout", "10m", "-o", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["upgrade"]["mode"] == "platform" and data["upgrade"]["remaining"] == []
    assert arm.arm_server.log.count("POST") == 0  # Azure rolls the model out, not us


def test_api_version_default_and_pinned_on_the_wire(arm: ArmServers, state: ArmState) -> None:
    _ss(state, capacity=2)
    assert run("enable", "-g", RG, "-n", "web", "--timeout", "10m").exit_code == 0
    default = sdk_default_api_version()
    assert default >= "2019-03-01"
    assert {r.query["api-version"][0] for r in arm.arm_server.log.all()} == {default}

    arm.arm_server.log.clear()
    pinned = run("enable", "-g", RG, "-n", "web", "--timeout", "12m", "--api-version", "2019-03-01")
    assert pinned.exit_code == 0, pinned.output
    seen = arm.arm_server.log.all()
    assert {r.method for r in seen} >= {"GET", "PATCH", "POST"}
    assert {r.query["api-version"][0] for r in seen} == {"2019-03-01"}


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def _terminal(monkeypatch: pytest.MonkeyPatch) -> _Tty:
    """sys.stderr as a terminal, recording what is written. Called in the test body: pytest's own
    capture replaces sys.stderr again between fixture setup and the test."""
    stream = _Tty()
    monkeypatch.setattr("sys.stderr", stream)
    return stream


def test_progress_bar_shows_count_percent_elapsed_and_eta_on_a_terminal_only(monkeypatch: pytest.MonkeyPatch) -> None:
    tty = _terminal(monkeypatch)
    show = terminal_progress("table")
    assert show is not None
    ticks = iter([100.0, 110.0, 120.0])
    show.now = lambda: next(ticks)
    show(0, 4)
    show(2, 4)
    show(4, 4)
    lines = tty.getvalue().split("\r")[1:]
    assert lines[0].startswith("upgrading [--------------------] 0/4    0%  elapsed 0:00  ETA ?")
    assert lines[1].startswith("upgrading [##########----------] 2/4   50%  elapsed 0:10  ETA 0:10")
    assert lines[2].startswith("upgrading [####################] 4/4  100%  elapsed 0:20  ETA 0:00")
    assert tty.getvalue().endswith("\n")
    assert terminal_progress("json") is None and terminal_progress("tsv") is None
    monkeypatch.setattr("sys.stderr", io.StringIO())  # not a terminal: silent
    assert terminal_progress("table") is None


def test_progress_line_is_ended_before_a_failure_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch failure after "2/6" must not glue the error line onto the progress line."""
    tty = _terminal(monkeypatch)

    def fails_in_batch_2(progress):  # type: ignore[no-untyped-def]
        progress(0, 6)
        progress(2, 6)
        raise UpgradeIncomplete("upgrade incomplete", UpgradeResult("manual", "Manual", 6))

    with pytest.raises(UpgradeIncomplete):
        commands._reporting_partial("table", "rg/web", fails_in_batch_2)
    assert tty.getvalue().count("\r") == 2 and tty.getvalue().endswith("\n")


def test_enable_wait_on_rolling_policy_until_current(arm: ArmServers) -> None:
    # the emulator's rolling upgrade ends only when the test moves its clock, once the command is seen
    # waiting (a second instance list read): 0.6 real seconds of delay ran out before the wait began on
    # a loaded machine (issue 28), and then nothing was stale to wait for
    clock = ManualClock()
    state = ArmState(clock=clock)
    arm.reset(state)
    ss = _ss(state, capacity=3, upgrade_policy="Rolling", rolling_delay=60)

    def finish_when_waiting() -> None:
        deadline = time.monotonic() + 120
        while len(arm.arm_server.log.find("GET", "/virtualMachines")) < 2 and time.monotonic() < deadline:
            threading.Event().wait(0.02)
        clock.advance(61)

    helper = threading.Thread(target=finish_when_waiting, daemon=True)
    helper.start()
    result = run("enable", "-g", RG, "-n", "web", "--timeout", "10m", "--wait", "--poll-interval", "0.05",
                 "--wait-timeout", "300", "-o", "json")
    helper.join(5)
    assert result.exit_code == 0, result.output
    upgrade = json.loads(result.stdout)["upgrade"]
    assert upgrade["mode"] == "platform" and upgrade["waited"] and upgrade["complete"]
    assert all(i.latest_model_applied for i in ss.instances.values())
    assert arm.arm_server.log.count("POST") == 0
