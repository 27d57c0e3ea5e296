"""Subscriptions: `GET /subscriptions` and `GET /subscriptions/{id}` in ARM's shapes, with the
display names a seed gives (az login and the fleet commands list them first)."""

from __future__ import annotations

from pathlib import Path

import pytest
import requests

from vmss_terminate_sim.emulator.arm.app import ArmServers, ArmState
from vmss_terminate_sim.emulator.arm.inventory import DEFAULT_TENANT, default_display_name

from .conftest import SUB

API = "2022-12-01"
OTHER = "22222222-2222-2222-2222-222222222222"
EXAMPLE_SEED = Path(__file__).resolve().parents[2] / "examples" / "seed.json"


def test_list_has_arms_shape_and_every_subscription_with_a_scale_set(arm: ArmServers,
                                                                     http: requests.Session) -> None:
    arm.state.add_scale_set(OTHER, "rg2", "other", capacity=1)
    arm.state.add_subscription(OTHER, display_name="Staging", tenant_id="33333333-3333-3333-3333-333333333333")
    answer = http.get(f"{arm.arm_url}/subscriptions", params={"api-version": API})
    assert answer.status_code == 200
    listed = {s["subscriptionId"]: s for s in answer.json()["value"]}
    assert set(listed) == {SUB, OTHER}
    assert listed[OTHER] == {
        "id": f"/subscriptions/{OTHER}",
        "authorizationSource": "RoleBased",
        "managedByTenants": [],
        "subscriptionId": OTHER,
        "tenantId": "33333333-3333-3333-3333-333333333333",
        "displayName": "Staging",
        "state": "Enabled",
        "subscriptionPolicies": {"locationPlacementId": "Public_2014-09-01", "quotaId": "PayAsYouGo_2014-09-01",
                                 "spendingLimit": "Off"},
    }
    assert listed[SUB]["displayName"] == default_display_name(SUB)
    assert listed[SUB]["tenantId"] == DEFAULT_TENANT


def test_get_one_subscription_and_404_for_an_unknown_one(arm: ArmServers, http: requests.Session) -> None:
    arm.state.add_subscription(SUB, display_name="Production")
    one = http.get(f"{arm.arm_url}/subscriptions/{SUB.upper()}", params={"api-version": API})
    assert one.status_code == 200
    assert (one.json()["id"], one.json()["displayName"]) == (f"/subscriptions/{SUB}", "Production")
    missing = http.get(f"{arm.arm_url}/subscriptions/{OTHER}", params={"api-version": API})
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "SubscriptionNotFound")


def test_subscription_list_pages_with_next_link(arm: ArmServers, http: requests.Session) -> None:
    arm.state.page_size = 2
    for n in range(3):
        arm.state.add_subscription(f"{n + 1}0000000-0000-0000-0000-00000000000{n + 1}")
    first = http.get(f"{arm.arm_url}/subscriptions", params={"api-version": API}).json()
    assert len(first["value"]) == 2
    second = http.get(first["nextLink"]).json()
    assert len(second["value"]) == 2 and "nextLink" not in second  # 4 = SUB + 3 added


def test_subscriptions_need_a_token(arm: ArmServers) -> None:
    answer = requests.get(f"{arm.arm_url}/subscriptions", params={"api-version": API})
    assert answer.status_code == 401


def test_seed_names_subscriptions_and_the_example_seed_has_a_display_name() -> None:
    state = ArmState()
    state.load_seed({"tenantId": "44444444-4444-4444-4444-444444444444",
                     "subscriptions": [{"subscriptionId": OTHER, "displayName": "Named only"}],
                     "scaleSets": [{"name": "a", "subscription": SUB}]})
    assert [(s.subscription_id, s.display_name, s.tenant_id) for s in state.subscriptions()] == [
        (OTHER, "Named only", "44444444-4444-4444-4444-444444444444"),
        (SUB, default_display_name(SUB), "44444444-4444-4444-4444-444444444444"),
    ]
    example = ArmState()
    example.load_seed(EXAMPLE_SEED)
    assert example.subscription(SUB).display_name == "Emulated production"  # type: ignore[union-attr]


@pytest.mark.parametrize("entry, message", [
    ({"displayName": "x"}, "subscriptions[0] needs a \"subscriptionId\""),
    ({"subscriptionId": OTHER, "state": "Sleeping"}, "subscription state must be one of"),
])
def test_bad_subscription_seed_entries_say_which(entry: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        ArmState().load_seed({"subscriptions": [entry]})


def test_unknown_method_on_a_served_path_is_405_and_unknown_paths_404(arm: ArmServers,
                                                                      http: requests.Session) -> None:
    assert http.delete(f"{arm.arm_url}/subscriptions/{SUB}", params={"api-version": API}).status_code == 405
    assert http.get(f"{arm.arm_url}/nowhere", params={"api-version": API}).status_code == 404
