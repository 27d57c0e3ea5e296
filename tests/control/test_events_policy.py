"""The scheduled-events policy through the control plane (issue 24): the Python API and the CLI
against the ARM emulator, through azure-mgmt-compute and the real DefaultAzureCredential."""

from __future__ import annotations

import json
from typing import Any, Dict

import pytest

from vmss_terminate.control import Connection, disable, enable, plan, status
from vmss_terminate.control.events_policy import PolicyChange, register_command
from vmss_terminate.errors import AzureError, UsageError, VmssTerminateError
from vmss_terminate_sim.emulator.arm.app import ArmServers, ArmState

from .conftest import RG, SUB, requests_seen, writes

ON = {"terminateNotificationProfile": {"enable": True, "notBeforeTimeout": "PT10M"}}


def _ss(state: ArmState, **kwargs: Any) -> Any:
    kwargs.setdefault("capacity", 2)
    return state.add_scale_set(SUB, RG, "web", **kwargs)


def _policy(state: ArmState) -> Dict[str, Any]:
    return dict(state.scale_sets()[0].extra_properties.get("scheduledEventsPolicy") or {})


def _patches(arm: ArmServers) -> list:  # type: ignore[type-arg]
    return [r for r in arm.arm_server.log.all() if r.method == "PATCH"]


def test_policy_alone_is_one_patch_carrying_only_the_policy_and_upgrades_nothing(
        arm: ArmServers, state: ArmState, conn: Connection) -> None:
    ss = _ss(state, scheduled_events_profile=ON, stale_instances=1)
    change = PolicyChange(event_grid=True, events_api_version="2020-07-01", auto_approve=("user-reboot",))
    result = enable(RG, "web", connection=conn, policy=change)
    assert result.changed
    assert writes(arm) == [f"PATCH /subscriptions/{SUB}/resourceGroups/{RG}/providers/Microsoft.Compute/"
                           "virtualMachineScaleSets/web"]
    sent = json.loads(_patches(arm)[0].body)
    assert sent == {"properties": {"scheduledEventsPolicy": {
        "scheduledEventsAdditionalPublishingTargets": {
            "eventGridAndResourceGraph": {"enable": True, "scheduledEventsApiVersion": "2020-07-01"}},
        "userInitiatedReboot": {"automaticallyApprove": True}}}}
    assert ss.publishes_to_event_grid and ss.auto_approves("userInitiatedReboot")
    assert result.upgrade is not None and result.upgrade.mode == "not-needed"
    assert [i.latest_model_applied for i in ss.instances.values()] == [True, False]  # left as it was
    assert result.policy_after is not None and result.policy_after.publishes


def test_timeout_and_policy_are_one_patch_and_a_second_run_is_no_change(
        arm: ArmServers, state: ArmState, conn: Connection) -> None:
    _ss(state)
    change = PolicyChange(event_grid=True, auto_approve=("user-redeploy", "all-instances-down"))
    first = enable(RG, "web", 10, connection=conn, policy=change)
    assert first.changed and len(_patches(arm)) == 1
    sent = json.loads(_patches(arm)[0].body)["properties"]
    assert set(sent) == {"virtualMachineProfile", "scheduledEventsPolicy"}
    again = enable(RG, "web", "10m", connection=conn, policy=change)
    assert not again.changed and len(_patches(arm)) == 1
    assert "events policy: no change" in again.message


def test_absent_options_leave_the_policy_alone(arm: ArmServers, state: ArmState, conn: Connection) -> None:
    _ss(state, scheduled_events_profile=ON,
        extra_properties={"scheduledEventsPolicy": {"userInitiatedReboot": {"automaticallyApprove": True}}})
    disable(RG, "web", connection=conn)
    sent = json.loads(_patches(arm)[0].body)["properties"]
    assert "scheduledEventsPolicy" not in sent
    assert _policy(state) == {"userInitiatedReboot": {"automaticallyApprove": True}}


def test_disable_with_a_policy_option_changes_both(arm: ArmServers, state: ArmState, conn: Connection) -> None:
    _ss(state, scheduled_events_profile=ON, extra_properties={"scheduledEventsPolicy": {
        "scheduledEventsAdditionalPublishingTargets": {"eventGridAndResourceGraph": {"enable": True}}}})
    result = disable(RG, "web", connection=conn, policy=PolicyChange(event_grid=False))
    assert result.changed and len(_patches(arm)) == 1
    assert not state.scale_sets()[0].publishes_to_event_grid


def test_enable_without_timeout_on_a_set_without_terminate_notification_is_refused_before_writing(
        arm: ArmServers, state: ArmState, conn: Connection) -> None:
    _ss(state)
    with pytest.raises(VmssTerminateError, match=r"enable without --timeout .* `vmss-terminate enable -g rg -n web "
                                                 r".*--timeout 10m --event-grid`"):
        enable(RG, "web", connection=conn, policy=PolicyChange(event_grid=True))
    assert writes(arm) == []


def test_event_grid_on_an_unregistered_subscription_exits_1_with_the_register_line(
        arm: ArmServers, state: ArmState, conn: Connection) -> None:
    _ss(state, scheduled_events_profile=ON)
    state.set_feature("Microsoft.Compute/SendScheduledEventsPolicy", False)
    with pytest.raises(AzureError) as caught:
        enable(RG, "web", connection=conn, policy=PolicyChange(event_grid=True))
    assert caught.value.exit_code == 1
    assert register_command(SUB) in str(caught.value)
    assert f"az feature register --namespace Microsoft.Compute --name SendScheduledEventsPolicy --subscription {SUB}" \
        in str(caught.value)
    assert "NotRegistered" in str(caught.value) and "nothing was changed" in str(caught.value)
    assert writes(arm) == []
    features = [r for r in arm.arm_server.log.all() if "Microsoft.Features" in r.path]
    assert len(features) == 1 and features[0].method == "GET"
    # --force skips the check (one PATCH, no Features GET)
    before = len(features)
    enable(RG, "web", connection=conn, policy=PolicyChange(event_grid=True, force=True))
    assert len([r for r in arm.arm_server.log.all() if "Microsoft.Features" in r.path]) == before
    assert state.scale_sets()[0].publishes_to_event_grid


def test_no_feature_read_when_nothing_turns_event_grid_on(arm: ArmServers, state: ArmState, conn: Connection) -> None:
    _ss(state, scheduled_events_profile=ON)
    state.set_feature("Microsoft.Compute/SendScheduledEventsPolicy", False)
    enable(RG, "web", connection=conn, policy=PolicyChange(auto_approve=("user-reboot",)))
    assert not [r for r in arm.arm_server.log.all() if "Microsoft.Features" in r.path]


@pytest.mark.parametrize("pinned, change, needed", [
    ("2023-09-01", PolicyChange(event_grid=True), "2024-03-01"),
    ("2024-11-01", PolicyChange(auto_approve=("all-instances-down",)), "2025-04-01"),
    ("2024-11-01", PolicyChange(events_api_version="2020-07-01"), "2025-04-01"),
])
def test_a_pinned_api_version_too_old_is_exit_2_before_any_request(
        arm: ArmServers, state: ArmState, pinned: str, change: PolicyChange, needed: str) -> None:
    _ss(state, scheduled_events_profile=ON)
    conn = Connection(subscription_id=SUB, arm_endpoint=arm.arm_url, api_version=pinned)
    seen = requests_seen(arm)
    with pytest.raises(UsageError, match=needed) as caught:
        enable(RG, "web", connection=conn, policy=change)
    assert caught.value.exit_code == 2 and pinned in str(caught.value)
    assert requests_seen(arm) == seen


def test_bad_combinations_are_usage_errors() -> None:
    with pytest.raises(UsageError, match="both name user-reboot"):
        PolicyChange(auto_approve=("user-reboot",), no_auto_approve=("user-reboot",))
    with pytest.raises(UsageError, match="event_grid=False"):
        PolicyChange(event_grid=False, events_api_version="2020-07-01")
    with pytest.raises(UsageError, match="user-shutdown"):
        PolicyChange(auto_approve=("user-shutdown",))
    with pytest.raises(UsageError, match="YYYY-MM-DD"):
        PolicyChange(events_api_version="latest")


def test_status_and_plan_show_the_policy(arm: ArmServers, state: ArmState, conn: Connection) -> None:
    _ss(state, scheduled_events_profile=ON, extra_properties={"scheduledEventsPolicy": {
        "userInitiatedReboot": {"automaticallyApprove": True}}})
    shown = status(RG, "web", connection=conn)
    assert shown.to_dict()["scheduled_events_policy"]["auto_approve"]["user-reboot"] is True
    assert "auto-approve: user-reboot" in "\n".join(shown.lines())
    state.set_feature("SendScheduledEventsPolicy", False)
    planned = plan(RG, "web", connection=conn, policy=PolicyChange(event_grid=True))
    assert planned.policy_change and planned.changes_pending and not planned.profile_change
    assert planned.feature_state == "NotRegistered"
    assert json.loads(planned.patch_body or "") == {"properties": {"scheduledEventsPolicy": {
        "scheduledEventsAdditionalPublishingTargets": {"eventGridAndResourceGraph": {"enable": True}}}}}
    assert "(enable would stop here)" in "\n".join(planned.lines())
    assert writes(arm) == []


def test_read_back_that_does_not_show_the_policy_is_an_error(arm: ArmServers, state: ArmState, conn: Connection,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    _ss(state, scheduled_events_profile=ON)
    from vmss_terminate_sim.emulator.arm import eventspolicy

    monkeypatch.setattr(eventspolicy, "shaped", lambda policy, api_version: None)  # GET never shows it
    with pytest.raises(AzureError, match="scheduled-events policy still reads: not configured"):
        enable(RG, "web", connection=conn, policy=PolicyChange(auto_approve=("user-redeploy",)))


def test_no_wait_says_which_change_was_accepted(arm: ArmServers, state: ArmState, conn: Connection) -> None:
    _ss(state, scheduled_events_profile=ON)
    result = enable(RG, "web", connection=conn, no_wait=True, policy=PolicyChange(auto_approve=("user-reboot",)))
    assert result.changed and len(_patches(arm)) == 1
    assert result.message.startswith("events policy change to Event Grid and Resource Graph not set; auto-approve: "
                                     "user-reboot accepted by ARM (not waited for)")


def test_a_plan_whose_feature_read_is_refused_still_plans(arm: ArmServers, state: ArmState, conn: Connection) -> None:
    _ss(state, scheduled_events_profile=ON)
    arm.arm_server.faults.add(status=403, path_contains="Microsoft.Features", times=5)
    planned = plan(RG, "web", connection=conn, policy=PolicyChange(event_grid=True))
    assert planned.policy_change and (planned.feature_state or "").startswith("unreadable (")
    with pytest.raises(AzureError, match=r"--force skips this check"):
        enable(RG, "web", connection=conn, policy=PolicyChange(event_grid=True))
    assert writes(arm) == []
