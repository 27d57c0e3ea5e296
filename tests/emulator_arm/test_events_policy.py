"""The ARM emulator's properties.scheduledEventsPolicy (issue 24): stored, merged by PATCH, replaced by
a full PUT, gated and shaped by api-version; the Microsoft.Features GET; Resource Graph rows."""

from __future__ import annotations

from typing import Any, Dict

import pytest
import requests

from tests.emulator_arm.conftest import SUB, vmss_url
from vmss_terminate_sim.emulator.arm.app import ArmServers, ArmState

POLICY = {
    "scheduledEventsAdditionalPublishingTargets": {
        "eventGridAndResourceGraph": {"enable": True, "scheduledEventsApiVersion": "2020-07-01"}},
    "userInitiatedRedeploy": {"automaticallyApprove": True},
    "userInitiatedReboot": {"automaticallyApprove": True},
    "allInstancesDown": {"automaticallyApprove": True},
}


def _patch(http: requests.Session, arm: ArmServers, body: Dict[str, Any], api: str = "2025-04-01") -> Any:
    return http.patch(vmss_url(arm), params={"api-version": api}, json=body, timeout=5)


def _get(http: requests.Session, arm: ArmServers, api: str = "2025-04-01") -> Dict[str, Any]:
    answer = http.get(vmss_url(arm), params={"api-version": api}, timeout=5)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def test_patch_stores_the_policy_and_get_returns_it(arm: ArmServers, http: requests.Session, state: ArmState) -> None:
    answer = _patch(http, arm, {"properties": {"scheduledEventsPolicy": POLICY}})
    assert answer.status_code == 200, answer.text
    assert answer.json()["properties"]["scheduledEventsPolicy"] == POLICY
    assert _get(http, arm)["properties"]["scheduledEventsPolicy"] == POLICY
    ss = state.scale_sets()[0]
    assert ss.publishes_to_event_grid and ss.auto_approves("userInitiatedReboot")


def test_a_policy_change_is_not_a_model_change(arm: ArmServers, http: requests.Session, state: ArmState) -> None:
    ss = state.scale_sets()[0]
    version = ss.model_version
    assert _patch(http, arm, {"properties": {"scheduledEventsPolicy": POLICY}}).status_code == 200
    assert ss.model_version == version
    assert all(inst.latest_model_applied for inst in ss.instances.values())


def test_patch_merges_into_the_stored_policy(arm: ArmServers, http: requests.Session, state: ArmState) -> None:
    assert _patch(http, arm, {"properties": {"scheduledEventsPolicy": POLICY}}).status_code == 200
    change = {"scheduledEventsPolicy": {"userInitiatedReboot": {"automaticallyApprove": False}}}
    assert _patch(http, arm, {"properties": change}).status_code == 200
    policy = _get(http, arm)["properties"]["scheduledEventsPolicy"]
    assert policy["userInitiatedReboot"] == {"automaticallyApprove": False}
    assert policy["scheduledEventsAdditionalPublishingTargets"] == POLICY["scheduledEventsAdditionalPublishingTargets"]


@pytest.mark.parametrize("api, policy, member, owner", [
    ("2023-09-01", POLICY, "scheduledEventsPolicy", "VirtualMachineScaleSetProperties"),
    ("2024-11-01", {"allInstancesDown": {"automaticallyApprove": True}}, "allInstancesDown", "ScheduledEventsPolicy"),
    ("2024-11-01", {"scheduledEventsAdditionalPublishingTargets": POLICY["scheduledEventsAdditionalPublishingTargets"]},
     "scheduledEventsApiVersion", "EventGridAndResourceGraph"),
])
def test_an_older_api_version_carrying_it_is_refused_like_the_profile(
        arm: ArmServers, http: requests.Session, state: ArmState, api: str, policy: Dict[str, Any], member: str,
        owner: str) -> None:
    answer = _patch(http, arm, {"properties": {"scheduledEventsPolicy": policy}}, api=api)
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["code"] == "BadRequest"
    assert error["message"].startswith(f"Could not find member '{member}' on object of type '{owner}'. Path '")
    assert "scheduledEventsPolicy" not in state.scale_sets()[0].extra_properties


def test_the_2024_03_01_members_pass_at_2024_03_01(arm: ArmServers, http: requests.Session) -> None:
    body = {"scheduledEventsPolicy": {"userInitiatedReboot": {"automaticallyApprove": True},
                                      "scheduledEventsAdditionalPublishingTargets": {
                                          "eventGridAndResourceGraph": {"enable": True}}}}
    assert _patch(http, arm, {"properties": body}, api="2024-03-01").status_code == 200


def test_wrong_types_and_unknown_members_are_400(arm: ArmServers, http: requests.Session) -> None:
    bad_type = {"scheduledEventsPolicy": {"userInitiatedReboot": {"automaticallyApprove": "yes"}}}
    answer = _patch(http, arm, {"properties": bad_type})
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "InvalidParameter"
    unknown = {"scheduledEventsPolicy": {"userInitiatedShutdown": {"automaticallyApprove": True}}}
    answer = _patch(http, arm, {"properties": unknown})
    assert answer.status_code == 400 and "userInitiatedShutdown" in answer.json()["error"]["message"]


def test_get_at_older_api_versions_leaves_out_what_they_lack(arm: ArmServers, http: requests.Session) -> None:
    assert _patch(http, arm, {"properties": {"scheduledEventsPolicy": POLICY}}).status_code == 200
    assert "scheduledEventsPolicy" not in _get(http, arm, "2023-09-01")["properties"]
    older = _get(http, arm, "2024-11-01")["properties"]["scheduledEventsPolicy"]
    assert "allInstancesDown" not in older
    assert older["scheduledEventsAdditionalPublishingTargets"] == {"eventGridAndResourceGraph": {"enable": True}}


def test_full_put_round_trip_keeps_and_replaces_it(arm: ArmServers, http: requests.Session, state: ArmState) -> None:
    assert _patch(http, arm, {"properties": {"scheduledEventsPolicy": POLICY}}).status_code == 200
    model = _get(http, arm)
    answer = http.put(vmss_url(arm), params={"api-version": "2025-04-01"}, json=model, timeout=5)
    assert answer.status_code == 200, answer.text
    assert _get(http, arm)["properties"]["scheduledEventsPolicy"] == POLICY
    # a PUT at 2024-11-01 (az's version) cannot express allInstancesDown: kept, the rest as sent
    older = _get(http, arm, "2024-11-01")
    older["properties"]["scheduledEventsPolicy"]["userInitiatedRedeploy"] = {"automaticallyApprove": False}
    assert http.put(vmss_url(arm), params={"api-version": "2024-11-01"}, json=older, timeout=5).status_code == 200
    policy = _get(http, arm)["properties"]["scheduledEventsPolicy"]
    assert policy["allInstancesDown"] == {"automaticallyApprove": True}
    assert policy["userInitiatedRedeploy"] == {"automaticallyApprove": False}
    assert policy["scheduledEventsAdditionalPublishingTargets"]["eventGridAndResourceGraph"][
        "scheduledEventsApiVersion"] == "2020-07-01"
    # a PUT at 2025-04-01 without the policy resets it (PUT replaces)
    model = _get(http, arm)
    del model["properties"]["scheduledEventsPolicy"]
    assert http.put(vmss_url(arm), params={"api-version": "2025-04-01"}, json=model, timeout=5).status_code == 200
    assert "scheduledEventsPolicy" not in _get(http, arm)["properties"]
    assert not state.scale_sets()[0].publishes_to_event_grid


def _feature_url(arm: ArmServers, sub: str = SUB) -> str:
    return (f"{arm.arm_url}/subscriptions/{sub}/providers/Microsoft.Features/providers/Microsoft.Compute"
            "/features/SendScheduledEventsPolicy")


def test_features_get_is_registered_by_default_and_follows_set_feature(
        arm: ArmServers, http: requests.Session, state: ArmState) -> None:
    answer = http.get(_feature_url(arm), params={"api-version": "2021-07-01"}, timeout=5)
    assert answer.status_code == 200
    assert answer.json() == {
        "properties": {"state": "Registered"},
        "id": f"/subscriptions/{SUB}/providers/Microsoft.Features/providers/Microsoft.Compute/features/"
              "SendScheduledEventsPolicy",
        "type": "Microsoft.Features/providers/features",
        "name": "Microsoft.Compute/SendScheduledEventsPolicy",
    }
    state.set_feature("SendScheduledEventsPolicy", False)
    answer = http.get(_feature_url(arm), params={"api-version": "2021-07-01"}, timeout=5)
    assert answer.json()["properties"]["state"] == "NotRegistered"
    # az feature register POSTs .../register
    register = http.post(_feature_url(arm) + "/register", params={"api-version": "2021-07-01"}, timeout=5)
    assert register.status_code == 200 and register.json()["properties"]["state"] == "Registered"
    assert state.feature_state(SUB, "Microsoft.Compute/SendScheduledEventsPolicy") == "Registered"


def test_seed_fields_for_the_policy_and_unregistered_features() -> None:
    state = ArmState()
    state.load_seed({
        "unregisteredFeatures": ["Microsoft.Compute/SendScheduledEventsPolicy"],
        "subscriptions": [{"subscriptionId": "11111111-0000-0000-0000-000000000000",
                           "unregisteredFeatures": ["Microsoft.Compute/OtherFeature"]}],
        "scaleSets": [{"name": "a", "scheduledEventsPolicy": POLICY}],
    })
    assert state.feature_state(SUB, "microsoft.compute/sendscheduledeventspolicy") == "NotRegistered"
    assert state.feature_state("11111111-0000-0000-0000-000000000000", "OtherFeature") == "NotRegistered"
    assert state.feature_state(SUB, "OtherFeature") == "Registered"
    assert state.scale_sets()[0].publishes_to_event_grid
    with pytest.raises(ValueError, match="unregisteredFeatures"):
        ArmState().load_seed({"unregisteredFeatures": "SendScheduledEventsPolicy"})


def test_resource_graph_rows_carry_the_whole_policy(arm: ArmServers, http: requests.Session, state: ArmState) -> None:
    assert _patch(http, arm, {"properties": {"scheduledEventsPolicy": POLICY}}).status_code == 200
    from vmss_terminate.fleet.scope import Scope

    answer = http.post(f"{arm.arm_url}/providers/Microsoft.ResourceGraph/resources",
                       params={"api-version": "2021-03-01"}, json={"query": Scope().query()}, timeout=5)
    assert answer.status_code == 200, answer.text
    assert answer.json()["data"][0]["scheduledEventsPolicy"] == POLICY  # a column of fleet.scope.PROJECTION


def test_emulator_arm_unregistered_feature_option() -> None:
    from vmss_terminate.errors import UsageError
    from vmss_terminate_sim.commands.emulator_arm import _load_state

    state = _load_state(None, None, unregistered=("SendScheduledEventsPolicy",))
    assert state.feature_state(SUB, "Microsoft.Compute/SendScheduledEventsPolicy") == "NotRegistered"
    with pytest.raises(UsageError, match="invalid --unregistered-feature 'a/b/c'"):
        _load_state(None, None, unregistered=("a/b/c",))
