"""One meaning of a VM list entry without latestModelApplied (issue 28 item 6): not known to be
current, so stale -- to `fleet audit`, `status`, `plan` (--detailed-exitcode 2), `upgrade` and
`enable` alike -- and audit -> rollout -> audit converges; a Flexible set with no members has none
stale (it stayed `stale-unknown` for ever)."""

from __future__ import annotations

import json

from vmss_terminate import control
from vmss_terminate.control import Connection
from vmss_terminate_sim.emulator.arm.app import ArmServers, ArmState

from .conftest import arm_writes, run

SUB = "00000000-0000-0000-0000-0000000000bb"
ENABLED = {"terminateNotificationProfile": {"enable": True, "notBeforeTimeout": "PT10M"}}


def _estate(arm: ArmServers, unreported: int = 2) -> ArmState:
    state = ArmState()
    ss = state.add_scale_set(SUB, "rg", "web", capacity=4, scheduled_events_profile=ENABLED)
    for inst in ss.live_instances()[:unreported]:
        inst.model_reported = False  # current, but its entry says nothing
    arm.reset(state)
    return state


def test_plan_upgrade_and_status_count_an_unreported_instance_stale(arm: ArmServers) -> None:
    _estate(arm)
    base = ("-g", "rg", "-n", "web", "--subscription", SUB)
    plan = run("plan", *base, "--timeout", "10", "--detailed-exitcode")
    assert plan.exit_code == 2, plan.output  # was 0 while printing "2 instance(s) do not report ..."
    assert "counted stale" in plan.output
    status = json.loads(run("status", *base, "-o", "json").stdout)
    assert len(status["stale_instances"]) == 2
    audit = json.loads(run("fleet", "audit", "--subscription", SUB, "-o", "json").stdout)
    assert audit[0]["stale_instances"] == 2 and audit[0]["compliant"] is False
    upgraded = control.upgrade("rg", "web", connection=Connection(subscription_id=SUB, arm_endpoint=arm.arm_url))
    assert len(upgraded.upgraded) == 2


def test_audit_rollout_audit_converges(arm: ArmServers) -> None:
    _estate(arm)
    gate = ("fleet", "audit", "--subscription", SUB, "--timeout", "10", "--detailed-exitcode")
    assert run(*gate).exit_code == 2
    rolled = run("fleet", "rollout", "--subscription", SUB, "--timeout", "10")
    assert rolled.exit_code == 0, rolled.output
    assert [w for w in arm_writes(arm) if w.endswith("/manualupgrade")]
    again = run(*gate)
    assert again.exit_code == 0, again.output


def test_a_flexible_set_without_members_is_not_stale_unknown(arm: ArmServers) -> None:
    state = ArmState()
    state.add_scale_set(SUB, "rg", "flex", orchestration="Flexible", capacity=0, scheduled_events_profile=ENABLED)
    arm.reset(state)
    result = run("fleet", "audit", "--subscription", SUB, "--timeout", "10", "-o", "json", "--detailed-exitcode")
    assert result.exit_code == 0, result.output
    (record,) = json.loads(result.stdout)
    assert record["stale_instances"] == 0 and record["findings"] == []
