"""The ARM emulator over real HTTP: auth, api-version rules, scale set GET/PATCH/PUT semantics,
the scheduledEventsProfile quirks from the reference material, and LRO status polling."""

from __future__ import annotations

from typing import Any, Dict

import requests

from vmss_terminate_sim.emulator.arm.app import ArmServers, ArmState

from .conftest import API, SUB, vmss_url


def _profile(enable: bool = True, timeout: Any = "PT10M") -> Dict[str, Any]:
    tnp: Dict[str, Any] = {"enable": enable}
    if timeout is not None:
        tnp["notBeforeTimeout"] = timeout
    return {"properties": {"virtualMachineProfile": {"scheduledEventsProfile": {"terminateNotificationProfile": tnp}}}}


def _sep(answer: requests.Response) -> Any:
    return answer.json()["properties"]["virtualMachineProfile"].get("scheduledEventsProfile", "ABSENT")


def _finish(http: requests.Session, answer: requests.Response) -> Dict[str, Any]:
    """Poll an LRO's Azure-AsyncOperation URL until it leaves InProgress (bounded)."""
    url = answer.headers["Azure-AsyncOperation"]
    for _ in range(20):
        status = http.get(url).json()
        if status["status"] != "InProgress":
            return status
    raise AssertionError("LRO never finished")


# ---------------------------------------------------------------- auth and api-version


def test_requests_without_a_valid_bearer_token_get_401_in_arm_shape(arm: ArmServers) -> None:
    url = vmss_url(arm)
    missing = requests.get(url, params={"api-version": API})
    assert missing.status_code == 401
    assert missing.json()["error"]["code"] == "AuthenticationFailed"
    forged = requests.get(url, params={"api-version": API}, headers={"Authorization": "Bearer not-issued"})
    assert (forged.status_code, forged.json()["error"]["code"]) == (401, "InvalidAuthenticationToken")
    wrong_audience = arm.tokens.issue("https://vault.azure.net")
    answer = requests.get(url, params={"api-version": API}, headers={"Authorization": f"Bearer {wrong_audience}"})
    assert answer.json()["error"]["code"] == "InvalidAuthenticationTokenAudience"


def test_revoked_tokens_stop_working(arm: ArmServers, http: requests.Session) -> None:
    assert http.get(vmss_url(arm), params={"api-version": API}).status_code == 200
    arm.tokens.revoke_all()
    assert http.get(vmss_url(arm), params={"api-version": API}).status_code == 401


def test_token_endpoint_checks_the_identity_header(arm: ArmServers) -> None:
    params = {"api-version": "2019-08-01", "resource": "https://management.azure.com"}
    assert requests.get(arm.token_url, params=params, headers={"X-IDENTITY-HEADER": "wrong"}).status_code == 401
    good = {"X-IDENTITY-HEADER": arm.env["IDENTITY_HEADER"]}
    assert requests.get(arm.token_url, params={"api-version": "2019-08-01"}, headers=good).status_code == 400
    answer = requests.get(arm.token_url, params=params, headers=good).json()
    assert answer["token_type"] == "Bearer" and answer["resource"] == "https://management.azure.com"
    assert int(answer["expires_on"]) > 0 and arm.tokens.check(answer["access_token"]) is None


def test_api_version_is_required(arm: ArmServers, http: requests.Session) -> None:
    answer = http.get(vmss_url(arm))
    assert (answer.status_code, answer.json()["error"]["code"]) == (400, "MissingApiVersionParameter")
    answer = http.get(vmss_url(arm), params={"api-version": "yesterday"})
    assert answer.json()["error"]["code"] == "InvalidApiVersionParameter"


# ---------------------------------------------------------------- GET


def test_names_are_case_insensitive_and_missing_resources_are_404(arm: ArmServers, http: requests.Session) -> None:
    answer = http.get(vmss_url(arm, name="MYVMSS", rg="RG"), params={"api-version": API})
    assert answer.status_code == 200 and answer.json()["name"] == "myvmss"
    assert _sep(answer) == "ABSENT"  # never had the feature: no key at all
    cases = [
        (vmss_url(arm, name="nope"), "ResourceNotFound"),
        (vmss_url(arm, rg="other"), "ResourceGroupNotFound"),
        (vmss_url(arm, sub="11111111-1111-1111-1111-111111111111"), "SubscriptionNotFound"),
        (vmss_url(arm, name="nope") + "/virtualMachines", "ParentResourceNotFound"),
        (vmss_url(arm) + "/virtualMachines/99", "NotFound"),
    ]
    for url, code in cases:
        answer = http.get(url, params={"api-version": API})
        assert (answer.status_code, answer.json()["error"]["code"]) == (404, code), url


def test_scale_set_lists(arm: ArmServers, http: requests.Session, state: ArmState) -> None:
    state.add_scale_set(SUB, "rg", "second", capacity=1)
    rg_list = http.get(f"{arm.arm_url}/subscriptions/{SUB}/resourceGroups/rg/providers/Microsoft.Compute/"
                       f"virtualMachineScaleSets", params={"api-version": API}).json()
    assert sorted(v["name"] for v in rg_list["value"]) == ["myvmss", "second"]


# ---------------------------------------------------------------- PATCH and LRO


def test_patch_answers_updating_with_an_async_operation_that_succeeds(
        arm: ArmServers, http: requests.Session, state: ArmState) -> None:
    state.lro_polls = 2
    answer = http.patch(vmss_url(arm), params={"api-version": API}, json=_profile())
    assert answer.status_code == 200
    assert answer.json()["properties"]["provisioningState"] == "Updating"
    assert _sep(answer) == {"terminateNotificationProfile": {"enable": True, "notBeforeTimeout": "PT10M"}}
    status_url = answer.headers["Azure-AsyncOperation"]
    assert "/providers/Microsoft.Compute/locations/westus/operations/" in status_url
    assert [http.get(status_url).json()["status"] for _ in range(4)] == [
        "InProgress", "InProgress", "Succeeded", "Succeeded"]
    after = http.get(vmss_url(arm), params={"api-version": API})
    assert after.json()["properties"]["provisioningState"] == "Succeeded"


def test_patch_merges_and_a_timeout_only_patch_keeps_enable(arm: ArmServers, http: requests.Session) -> None:
    http.patch(vmss_url(arm), params={"api-version": API}, json=_profile(True, "PT10M"))
    body = {"properties": {"virtualMachineProfile": {"scheduledEventsProfile": {
        "terminateNotificationProfile": {"notBeforeTimeout": "PT15M"}}}}}
    answer = http.patch(vmss_url(arm), params={"api-version": API}, json=body)
    assert _sep(answer) == {"terminateNotificationProfile": {"enable": True, "notBeforeTimeout": "PT15M"}}
    profile = answer.json()["properties"]["virtualMachineProfile"]
    assert profile["osProfile"]["computerNamePrefix"] == "myvmss"  # untouched parts survive
    tags = http.patch(vmss_url(arm), params={"api-version": API}, json={"tags": {"team": "a"}})
    assert _sep(tags)["terminateNotificationProfile"]["notBeforeTimeout"] == "PT15M"
    assert tags.json()["tags"] == {"team": "a"}


def test_disable_returns_an_empty_profile_and_re_enable_is_visible(arm: ArmServers, http: requests.Session) -> None:
    http.patch(vmss_url(arm), params={"api-version": API}, json=_profile(True))
    disabled = http.patch(vmss_url(arm), params={"api-version": API}, json=_profile(False))
    assert _sep(disabled) == {}
    assert _sep(http.get(vmss_url(arm), params={"api-version": API})) == {}
    http.patch(vmss_url(arm), params={"api-version": API}, json=_profile(True, "PT5M"))
    assert _sep(http.get(vmss_url(arm), params={"api-version": API})) == {
        "terminateNotificationProfile": {"enable": True, "notBeforeTimeout": "PT5M"}}


def test_reenable_ignored_fault_reproduces_the_2019_bug(
        arm: ArmServers, http: requests.Session, state: ArmState) -> None:
    state.reenable_ignored = True
    http.patch(vmss_url(arm), params={"api-version": API}, json=_profile(True))
    http.patch(vmss_url(arm), params={"api-version": API}, json=_profile(False))
    answer = http.patch(vmss_url(arm), params={"api-version": API}, json=_profile(True))
    assert answer.status_code == 200 and _finish(http, answer)["status"] == "Succeeded"
    assert _sep(http.get(vmss_url(arm), params={"api-version": API})) == {}  # accepted, ignored
    # the maintainer's workaround: change something else inside virtualMachineProfile as well
    body = _profile(True)
    body["properties"]["virtualMachineProfile"]["osProfile"] = {"adminUsername": "other"}
    http.patch(vmss_url(arm), params={"api-version": API}, json=body)
    assert _sep(http.get(vmss_url(arm), params={"api-version": API}))["terminateNotificationProfile"]["enable"]


def test_old_api_versions_do_not_know_scheduled_events_profile(arm: ArmServers, http: requests.Session) -> None:
    answer = http.patch(vmss_url(arm), params={"api-version": "2018-10-01"}, json=_profile())
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "BadRequest"
    assert answer.json()["error"]["message"].startswith(
        "Could not find member 'scheduledEventsProfile' on object of type 'VirtualMachineProfile'")
    assert http.put(vmss_url(arm), params={"api-version": "2018-06-01"}, json=_profile()).status_code == 400
    http.patch(vmss_url(arm), params={"api-version": "2019-03-01"}, json=_profile())
    assert _sep(http.get(vmss_url(arm), params={"api-version": "2018-10-01"})) == "ABSENT"
    assert _sep(http.get(vmss_url(arm), params={"api-version": "2019-03-01"})) != "ABSENT"


def test_not_before_timeout_must_be_5_to_15_minutes(arm: ArmServers, http: requests.Session) -> None:
    for bad in ("PT4M", "PT16M", "PT20M", "10 minutes", "PT90S", 10):
        answer = http.patch(vmss_url(arm), params={"api-version": API}, json=_profile(True, bad))
        assert (answer.status_code, answer.json()["error"]["code"]) == (400, "InvalidParameter"), bad
    assert _sep(http.get(vmss_url(arm), params={"api-version": API})) == "ABSENT"  # nothing applied
    for good in ("PT5M", "PT15M", "PT600S", "PT0H7M"):
        answer = http.patch(vmss_url(arm), params={"api-version": API}, json=_profile(True, good))
        assert answer.status_code == 200, good


def test_bad_bodies_are_400(arm: ArmServers, http: requests.Session) -> None:
    answer = http.patch(vmss_url(arm), params={"api-version": API}, data=b"{not json",
                        headers={"Content-Type": "application/json"})
    assert answer.json()["error"]["code"] == "InvalidRequestContent"
    answer = http.patch(vmss_url(arm), params={"api-version": API}, json=_profile(enable="maybe"))  # type: ignore[arg-type]
    assert answer.json()["error"]["code"] == "InvalidParameter"
    answer = http.patch(vmss_url(arm), params={"api-version": API}, json={"sku": {"capacity": -1}})
    assert answer.status_code == 400


def test_put_creates_a_scale_set_and_replaces_the_profile(arm: ArmServers, http: requests.Session,
                                                         state: ArmState) -> None:
    body = {"location": "westus", "sku": {"name": "Standard_D1_v2", "capacity": 3},
            "properties": {"upgradePolicy": {"mode": "Automatic"}, "virtualMachineProfile": {
                "scheduledEventsProfile": {"terminateNotificationProfile": {"enable": True, "notBeforeTimeout": "PT5M"}}}}}
    created = http.put(vmss_url(arm, name="fresh"), params={"api-version": "2019-03-01"}, json=body)
    assert created.status_code == 201 and created.json()["properties"]["provisioningState"] == "Creating"
    assert _finish(http, created)["status"] == "Succeeded"
    ss = state.scale_set(SUB, "rg", "fresh")
    assert ss is not None and len(ss.instances) == 3 and ss.upgrade_policy == "Automatic"
    body["properties"]["virtualMachineProfile"] = {"osProfile": {"computerNamePrefix": "x"}}
    replaced = http.put(vmss_url(arm, name="fresh"), params={"api-version": API}, json=body)
    assert replaced.status_code == 200 and _sep(replaced) == "ABSENT"
    missing_location = http.put(vmss_url(arm, name="other"), params={"api-version": API}, json={})
    assert missing_location.json()["error"]["code"] == "LocationRequired"


def test_failed_patch_lro_reports_the_error(arm: ArmServers, http: requests.Session, state: ArmState) -> None:
    state.fail_next_lro("InternalExecutionError", "disk on fire", kind="update")
    answer = http.patch(vmss_url(arm), params={"api-version": API}, json=_profile())
    final = _finish(http, answer)
    assert final["status"] == "Failed" and final["error"] == {"code": "InternalExecutionError",
                                                              "message": "disk on fire"}
    assert http.get(vmss_url(arm), params={"api-version": API}).json()["properties"]["provisioningState"] == "Failed"


def test_faults_and_request_log_are_available(arm: ArmServers, http: requests.Session) -> None:
    arm.arm_server.faults.add(status=500, method="PATCH")
    assert http.patch(vmss_url(arm), params={"api-version": API}, json=_profile()).status_code == 500
    assert http.patch(vmss_url(arm), params={"api-version": API}, json=_profile()).status_code == 200
    assert arm.arm_server.log.count("PATCH") == 2


def test_percent_encoded_names_reach_the_emulator_decoded(arm: ArmServers, state: ArmState,
                                                           http: requests.Session) -> None:
    """The Azure SDK quotes path segments (`rg_(prod)` -> `rg_%28prod%29`); a valid Azure name must
    be found, not answered 404."""
    state.add_scale_set(SUB, "rg_(prod)", "web.1", capacity=1)
    answer = http.get(vmss_url(arm, name="web.1", rg="rg_%28prod%29"), params={"api-version": API})
    assert answer.status_code == 200, answer.text
    assert "/resourceGroups/rg_(prod)/" in answer.json()["id"]
