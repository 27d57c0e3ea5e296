"""`enable|disable|plan|status` with the scheduled-events policy options (issue 24), end to end:
CLI -> library -> azure-mgmt-compute + DefaultAzureCredential -> ARM emulator."""

from __future__ import annotations

import json

import pytest

from vmss_terminate_sim.emulator.arm.app import ArmServers, ArmState

from .conftest import RG, SUB, requests_seen, run, writes

ON = {"terminateNotificationProfile": {"enable": True, "notBeforeTimeout": "PT10M"}}
GRID_ON = {"scheduledEventsPolicy": {
    "scheduledEventsAdditionalPublishingTargets": {"eventGridAndResourceGraph": {"enable": True}}}}


def _ss(state: ArmState, **kwargs):  # type: ignore[no-untyped-def]
    kwargs.setdefault("capacity", 2)
    return state.add_scale_set(SUB, RG, "web", **kwargs)


def test_dry_run_prints_the_exact_patch_body_and_writes_nothing(arm: ArmServers, state: ArmState) -> None:
    _ss(state, scheduled_events_profile=ON)
    result = run("enable", "-g", RG, "-n", "web", "--event-grid", "--events-api-version", "2020-07-01",
                 "--auto-approve", "user-reboot", "--auto-approve", "all-instances-down", "--dry-run")
    assert result.exit_code == 0, result.output
    body = {"properties": {"scheduledEventsPolicy": {
        "scheduledEventsAdditionalPublishingTargets": {
            "eventGridAndResourceGraph": {"enable": True, "scheduledEventsApiVersion": "2020-07-01"}},
        "userInitiatedReboot": {"automaticallyApprove": True},
        "allInstancesDown": {"automaticallyApprove": True}}}}
    assert json.dumps(body, indent=2) in result.stdout
    assert "upgrade: not needed" in result.stdout
    assert "feature Microsoft.Compute/SendScheduledEventsPolicy: Registered" in result.stdout
    assert writes(arm) == []
    # the real run sends those bytes
    done = run("enable", "-g", RG, "-n", "web", "--event-grid", "--events-api-version", "2020-07-01",
               "--auto-approve", "user-reboot", "--auto-approve", "all-instances-down", "-o", "json")
    assert done.exit_code == 0, done.output
    patch = [r for r in arm.arm_server.log.all() if r.method == "PATCH"][0]
    assert json.loads(patch.body) == body
    data = json.loads(done.stdout)
    assert data["plan"]["patch_body"] == patch.body.decode("utf-8")
    assert data["policy_after"]["event_grid"] is True and data["upgrade"]["mode"] == "not-needed"


def test_status_shows_the_policy(arm: ArmServers, state: ArmState) -> None:
    _ss(state, scheduled_events_profile=ON, extra_properties=GRID_ON)
    table = run("status", "-g", RG, "-n", "web")
    assert "events policy:      Event Grid and Resource Graph on; auto-approve: none" in table.stdout
    data = json.loads(run("status", "-g", RG, "-n", "web", "-o", "json").stdout)
    assert data["scheduled_events_policy"]["event_grid"] is True


def test_disable_leaves_the_policy_alone_unless_asked(arm: ArmServers, state: ArmState) -> None:
    ss = _ss(state, scheduled_events_profile=ON, extra_properties=GRID_ON)
    assert run("disable", "-g", RG, "-n", "web").exit_code == 0
    assert ss.publishes_to_event_grid
    assert run("disable", "-g", RG, "-n", "web", "--no-event-grid").exit_code == 0
    assert not ss.publishes_to_event_grid


def test_unregistered_feature_exits_1_with_the_line_to_run_and_force_skips(arm: ArmServers, state: ArmState) -> None:
    _ss(state, scheduled_events_profile=ON)
    state.set_feature("Microsoft.Compute/SendScheduledEventsPolicy", False)
    result = run("enable", "-g", RG, "-n", "web", "--event-grid")
    assert result.exit_code == 1
    assert (f"az feature register --namespace Microsoft.Compute --name SendScheduledEventsPolicy "
            f"--subscription {SUB}") in result.stderr
    assert writes(arm) == []
    forced = run("enable", "-g", RG, "-n", "web", "--event-grid", "--force")
    assert forced.exit_code == 0, forced.output
    assert state.scale_sets()[0].publishes_to_event_grid


@pytest.mark.parametrize("args, said", [
    (["--auto-approve", "user-reboot", "--no-auto-approve", "user-reboot"], "both name user-reboot"),
    (["--no-event-grid", "--events-api-version", "2020-07-01"], "--no-event-grid"),
    (["--auto-approve", "reboot"], "'reboot' is not one of"),
    (["--events-api-version", "v1"], "invalid --events-api-version 'v1'"),
    (["--api-version", "2024-11-01", "--auto-approve", "all-instances-down"], "2025-04-01"),
    (["--api-version", "2023-09-01", "--event-grid"], "--api-version 2023-09-01 is too old for --event-grid"),
    ([], "needs --timeout"),
])
def test_bad_combinations_exit_2_before_any_request(arm: ArmServers, state: ArmState, args: list, said: str) -> None:
    _ss(state, scheduled_events_profile=ON)
    seen = requests_seen(arm)
    result = run("enable", "-g", RG, "-n", "web", *args)
    assert result.exit_code == 2, result.output
    assert said in result.stderr
    assert requests_seen(arm) == seen


def test_plan_detailed_exitcode_counts_a_pending_policy_change(arm: ArmServers, state: ArmState) -> None:
    _ss(state, scheduled_events_profile=ON, extra_properties=GRID_ON)
    same = run("plan", "-g", RG, "-n", "web", "--event-grid", "--detailed-exitcode")
    assert same.exit_code == 0, same.output
    assert "events policy: no change" in same.stdout
    pending = run("plan", "-g", RG, "-n", "web", "--timeout", "10m", "--auto-approve", "user-redeploy",
                  "--detailed-exitcode", "-o", "json")
    assert pending.exit_code == 2, pending.output
    data = json.loads(pending.stdout)
    assert data["policy_change"] and not data["profile_change"]
    assert json.loads(data["patch_body"]) == {"properties": {"scheduledEventsPolicy": {
        "userInitiatedRedeploy": {"automaticallyApprove": True}}}}
    assert writes(arm) == []
