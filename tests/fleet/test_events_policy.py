"""The scheduled-events policy across an estate (issue 24): `fleet audit --require-event-grid /
--require-auto-approve KIND` read it from the same Resource Graph pages, `fleet rollout --event-grid
/ --auto-approve KIND` roll it out with the journal, the feature gate and resume."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any, Dict

import pytest

from vmss_terminate.control import Connection
from vmss_terminate.control.events_policy import PolicyChange
from vmss_terminate.errors import AzureError
from vmss_terminate.fleet import audit
from vmss_terminate.fleet.rollout import rollout
from vmss_terminate_sim.emulator.arm.app import ArmServers, ArmState

from .conftest import arm_writes, run

SUB = "22222222-0000-0000-0000-000000000001"
OTHER = "22222222-0000-0000-0000-000000000002"
ON = {"terminateNotificationProfile": {"enable": True, "notBeforeTimeout": "PT10M"}}
PUBLISHING = {"scheduledEventsAdditionalPublishingTargets": {"eventGridAndResourceGraph": {"enable": True}},
              "userInitiatedReboot": {"automaticallyApprove": True}}


@pytest.fixture
def state() -> ArmState:
    state = ArmState()
    state.add_scale_set(SUB, "rg", "publishing", capacity=2, scheduled_events_profile=ON,
                        extra_properties={"scheduledEventsPolicy": PUBLISHING})
    state.add_scale_set(SUB, "rg", "quiet", capacity=2, scheduled_events_profile=ON)
    state.add_scale_set(OTHER, "rg", "elsewhere", capacity=2, scheduled_events_profile=ON)
    return state


def _by_name(report: Any) -> Dict[str, Any]:
    return {r.name: r for r in report.scale_sets}


def test_audit_requires_the_policy_only_when_asked(arm: ArmServers, state: ArmState, conn: Connection) -> None:
    plain = _by_name(audit(connection=conn))
    assert all(r.compliant and r.findings == [] for r in plain.values())
    assert plain["publishing"].to_dict()["event_grid"] is True
    assert plain["publishing"].to_dict()["auto_approve"] == ["user-reboot"]
    required = _by_name(audit(connection=conn, require_event_grid=True,
                              require_auto_approve=("user-reboot", "user-redeploy")))
    assert required["quiet"].findings == ["event-grid-off", "auto-approve-off"] and not required["quiet"].compliant
    assert required["publishing"].findings == ["auto-approve-off"]  # reboot yes, redeploy no
    reboot_only = _by_name(audit(connection=conn, require_event_grid=True, require_auto_approve=("user-reboot",)))
    assert reboot_only["publishing"].compliant


def test_the_audit_reads_the_policy_in_the_same_pages(arm: ArmServers, state: ArmState, conn: Connection) -> None:
    plain = audit(connection=conn)
    before = len(arm.arm_server.log.all())
    required = audit(connection=conn, require_event_grid=True, require_auto_approve=("user-redeploy",))
    assert len(arm.arm_server.log.all()) - before == before  # exactly the requests of the plain audit
    assert required.calls == plain.calls
    assert not [r for r in arm.arm_server.log.all() if "virtualMachineScaleSets" in r.path and r.method == "GET"
                and "virtualMachines" not in r.path]  # no per-set GET


def test_audit_cli_detailed_exitcode_and_json(arm: ArmServers, state: ArmState) -> None:
    result = run("fleet", "audit", "--require-event-grid", "--detailed-exitcode", "-o", "json")
    assert result.exit_code == 2, result.output
    rows = {r["name"]: r for r in json.loads(result.stdout)}
    assert rows["quiet"]["findings"] == ["event-grid-off"] and rows["publishing"]["event_grid"] is True
    ok = run("fleet", "audit", "--require-event-grid", "--detailed-exitcode", "--ignore-finding", "event-grid-off")
    assert ok.exit_code == 0, ok.output
    bad = run("fleet", "audit", "--require-auto-approve", "user-shutdown")
    assert bad.exit_code == 2 and "user-shutdown" in bad.stderr


def test_rollout_rolls_the_policy_out_in_one_patch_per_set_and_resumes(
        arm: ArmServers, state: ArmState, conn: Connection, tmp_path: Path) -> None:
    journal = tmp_path / "rollout.journal"
    change = PolicyChange(event_grid=True, auto_approve=("user-reboot",))
    result = rollout(connection=conn, timeout=10, policy=change, journal=journal)
    assert result.ok
    assert all(w.startswith("PATCH ") for w in arm_writes(arm))
    assert sorted(w.rsplit("/", 1)[-1] for w in arm_writes(arm)) == ["elsewhere", "quiet"]
    assert all(ss.publishes_to_event_grid and ss.auto_approves("userInitiatedReboot") for ss in state.scale_sets())
    assert not [w for w in arm_writes(arm) if w.startswith("POST")]  # no upgrade for the policy alone
    header = json.loads(journal.read_text().splitlines()[0])
    assert header["policy"]["event_grid"] is True
    # the same run again: nothing to do
    again = rollout(connection=conn, timeout=10, policy=change, journal=journal)
    assert not again.plan.work
    # other policy options against the same journal: refused (exit 2)
    other = run("fleet", "rollout", "--timeout", "10", "--journal", str(journal), "--no-event-grid")
    assert other.exit_code == 2 and "scheduled-events policy options" in other.stderr


def test_rollout_gate_names_each_unregistered_subscription_before_any_write(
        arm: ArmServers, state: ArmState, conn: Connection) -> None:
    state.set_feature("Microsoft.Compute/SendScheduledEventsPolicy", False, OTHER)
    with pytest.raises(AzureError) as caught:
        rollout(connection=conn, timeout=10, policy=PolicyChange(event_grid=True))
    message = str(caught.value)
    assert f"az feature register --namespace Microsoft.Compute --name SendScheduledEventsPolicy --subscription {OTHER}" \
        in message and SUB not in message.split("Register it with:")[1]
    assert arm_writes(arm) == []
    features = [r for r in arm.arm_server.log.all() if "Microsoft.Features" in r.path]
    assert len(features) == 2  # one per subscription that turns publishing on, not one per set
    cli = run("fleet", "rollout", "--timeout", "10", "--event-grid")
    assert cli.exit_code == 1 and "--subscription " + OTHER in cli.stderr
    forced = rollout(connection=conn, timeout=10, policy=PolicyChange(event_grid=True, force=True))
    assert forced.ok and all(ss.publishes_to_event_grid for ss in state.scale_sets())


def test_rollout_cli_dry_run_shows_the_policy_and_writes_nothing(arm: ArmServers, state: ArmState) -> None:
    result = run("fleet", "rollout", "--timeout", "10", "--auto-approve", "user-redeploy", "--dry-run", "-o", "json")
    assert result.exit_code == 0, result.output
    plan = {p["name"]: p for p in json.loads(result.stdout)["plan"]["plan"]}
    assert plan["quiet"]["policy_change"] and plan["quiet"]["action"] == "enable"
    assert plan["quiet"]["writes"] == 1 and plan["quiet"]["instances"] == 0
    assert arm_writes(arm) == []


def test_rollout_bad_combinations_exit_2_before_any_request(arm: ArmServers, state: ArmState) -> None:
    seen = len(arm.arm_server.log.all())
    both = run("fleet", "rollout", "--timeout", "10", "--auto-approve", "user-reboot", "--no-auto-approve",
               "user-reboot")
    assert both.exit_code == 2 and "both name user-reboot" in both.stderr
    old = run("fleet", "rollout", "--timeout", "10", "--event-grid", "--api-version", "2023-09-01")
    assert old.exit_code == 2 and "2024-03-01" in old.stderr
    assert len(arm.arm_server.log.all()) == seen


def test_the_printed_resume_command_keeps_the_policy_options(arm: ArmServers, state: ArmState,
                                                             tmp_path: Path) -> None:
    for ss in state.scale_sets():
        ss.extra_properties["scheduledEventsPolicy"] = PUBLISHING
    state.fail_next_lro(kind="update")
    journal = tmp_path / "j"
    result = run("fleet", "rollout", "--timeout", "10", "--no-event-grid", "--auto-approve", "user-redeploy",
                 "--journal", str(journal), "--concurrency", "1", "-o", "json")
    assert result.exit_code == 1, result.output
    resume = json.loads(result.stdout)["resume"]
    assert "--no-event-grid" in resume and "--auto-approve user-redeploy" in resume and "--event-grid " not in resume
    again = run(*shlex.split(resume)[1:])  # as printed: finishes the failed set
    assert again.exit_code == 0, again.output
    assert not any(ss.publishes_to_event_grid for ss in state.scale_sets())
