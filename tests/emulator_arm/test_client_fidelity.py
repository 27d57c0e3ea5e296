"""What the real Azure CLI sends, answered the way Azure does (issue 12's failures 1-5, each
reproduced here over HTTP without az; the az suite in tests/az runs the real thing)."""

from __future__ import annotations

import base64
import json
from typing import Any, Dict
from urllib.parse import urlsplit

import pytest
import requests

from vmss_terminate.clock import ManualClock
from vmss_terminate_sim.emulator.arm.app import ArmServers
from vmss_terminate_sim.emulator.arm.token import TokenEndpoint, decode_claims

from .conftest import API, vmss_url

TNP = ("properties", "virtualMachineProfile", "scheduledEventsProfile", "terminateNotificationProfile")


def _tnp(body: Dict[str, Any]) -> Any:
    for key in TNP:
        body = body.get(key) or {}
    return body


def _segment(data: Dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


# ---------------------------------------------------------------- 1. cloud metadata without a token


def test_cloud_metadata_is_public_and_names_only_the_emulators_own_endpoints(arm: ArmServers) -> None:
    answer = requests.get(f"{arm.arm_url}//metadata/endpoints", params={"api-version": "2022-09-01"})  # az's //
    assert answer.status_code == 200
    doc = answer.json()
    assert doc["resourceManager"] == arm.arm_url + "/"
    assert doc["authentication"]["loginEndpoint"] == arm.token_server.url + "/"
    assert "https://management.azure.com/" in doc["authentication"]["audiences"]
    assert isinstance(doc["suffixes"], dict) and doc["name"]
    for url in (doc["resourceManager"], doc["authentication"]["loginEndpoint"]):
        assert urlsplit(url).hostname == "127.0.0.1"


# ---------------------------------------------------------------- 2. JWT tokens ARM checks


def test_tokens_are_jwts_with_the_claims_az_reads(arm: ArmServers, http: requests.Session) -> None:
    token = http.headers["Authorization"].split(" ", 1)[1]
    header = json.loads(base64.urlsafe_b64decode(token.split(".")[0] + "=="))
    assert header["alg"] == "HS256" and header["typ"] == "JWT"
    claims = decode_claims(token)
    assert {"aud", "iss", "tid", "oid", "iat", "nbf", "exp"} <= set(claims)
    assert claims["tid"] == arm.state.tenant_id and claims["tid"] in claims["iss"]
    assert claims["aud"] == "https://management.azure.com"
    assert claims["nbf"] <= claims["iat"] < claims["exp"]
    subs = http.get(f"{arm.arm_url}/subscriptions", params={"api-version": "2022-12-01"}).json()["value"]
    assert [s["tenantId"] for s in subs] == [claims["tid"]]  # az login --identity then lists these


def test_arm_accepts_only_tokens_it_signed(arm: ArmServers, http: requests.Session) -> None:
    token = http.headers["Authorization"].split(" ", 1)[1]
    head, _, signature = token.split(".")
    forged_claims = dict(decode_claims(token), tid="99999999-9999-9999-9999-999999999999")
    forgeries = [
        f"{head}.{_segment(forged_claims)}.{signature}",  # claims changed, signature kept
        TokenEndpoint().issue(),  # well-formed, signed with another key
        f"{_segment({'alg': 'none', 'typ': 'JWT'})}.{_segment(forged_claims)}.",
        "not.a.jwt", "garbage",
    ]
    for forged in forgeries:
        answer = requests.get(vmss_url(arm), params={"api-version": API},
                              headers={"Authorization": f"Bearer {forged}"})
        assert (answer.status_code, answer.json()["error"]["code"]) == (401, "InvalidAuthenticationToken"), forged
    assert http.get(vmss_url(arm), params={"api-version": API}).status_code == 200


def test_expired_and_not_yet_valid_tokens_are_refused_on_the_injected_clock(
        arm: ArmServers, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = ManualClock(start=1_000_000.0)
    monkeypatch.setattr(arm.tokens, "clock", clock)
    token = arm.tokens.issue()
    headers = {"Authorization": f"Bearer {token}"}
    assert requests.get(vmss_url(arm), params={"api-version": API}, headers=headers).status_code == 200
    clock.advance(arm.tokens.lifetime)
    expired = requests.get(vmss_url(arm), params={"api-version": API}, headers=headers)
    assert (expired.status_code, expired.json()["error"]["code"]) == (401, "ExpiredAuthenticationToken")
    early = arm.tokens.issue()
    clock.advance(-60)
    answer = requests.get(vmss_url(arm), params={"api-version": API}, headers={"Authorization": f"Bearer {early}"})
    assert (answer.status_code, answer.json()["error"]["code"]) == (401, "InvalidAuthenticationToken")


# ---------------------------------------------------------------- 3. PUT keeps the image


def test_put_without_image_reference_keeps_the_stored_one(arm: ArmServers, http: requests.Session) -> None:
    body = http.get(vmss_url(arm), params={"api-version": API}).json()
    image = body["properties"]["virtualMachineProfile"]["storageProfile"]["imageReference"]
    body["properties"]["virtualMachineProfile"]["storageProfile"]["imageReference"] = None  # what az sends
    answer = http.put(vmss_url(arm), params={"api-version": API}, json=body)
    assert answer.status_code == 200
    assert answer.json()["properties"]["virtualMachineProfile"]["storageProfile"]["imageReference"] == image
    del body["properties"]["virtualMachineProfile"]["storageProfile"]
    http.put(vmss_url(arm), params={"api-version": API}, json=body)
    read = http.get(vmss_url(arm), params={"api-version": API}).json()
    assert read["properties"]["virtualMachineProfile"]["storageProfile"]["imageReference"] == image
    assert arm.state.scale_set("00000000-0000-0000-0000-000000000000", "rg", "myvmss").model_version == 1  # no change
    other = dict(image, sku="24_04-lts")
    body["properties"]["virtualMachineProfile"]["storageProfile"] = {"imageReference": other}
    http.put(vmss_url(arm), params={"api-version": API}, json=body)
    read = http.get(vmss_url(arm), params={"api-version": API}).json()
    assert read["properties"]["virtualMachineProfile"]["storageProfile"]["imageReference"] == other


# ---------------------------------------------------------------- 4. a timeout-only profile is enabled


@pytest.mark.parametrize("method", ["PATCH", "PUT"])
def test_timeout_only_profile_reads_back_enabled(arm: ArmServers, http: requests.Session, method: str) -> None:
    disable = {"properties": {"virtualMachineProfile": {"scheduledEventsProfile": {
        "terminateNotificationProfile": {"enable": False}}}}}
    assert http.patch(vmss_url(arm), params={"api-version": API}, json=disable).status_code == 200
    body = http.get(vmss_url(arm), params={"api-version": API}).json() if method == "PUT" else {}
    body.setdefault("properties", {}).setdefault("virtualMachineProfile", {})["scheduledEventsProfile"] = {
        "terminateNotificationProfile": {"notBeforeTimeout": "PT5M"}}  # az's --terminate-notification-time
    answer = http.request(method, vmss_url(arm), params={"api-version": API}, json=body)
    assert answer.status_code == 200
    assert _tnp(answer.json()) == {"notBeforeTimeout": "PT5M", "enable": True}
    assert _tnp(http.get(vmss_url(arm), params={"api-version": API}).json())["enable"] is True


# ---------------------------------------------------------------- 5. "*" means every instance


def test_manualupgrade_star_upgrades_every_instance(arm: ArmServers, http: requests.Session) -> None:
    patch = {"properties": {"virtualMachineProfile": {"scheduledEventsProfile": {
        "terminateNotificationProfile": {"enable": True, "notBeforeTimeout": "PT10M"}}}}}
    http.patch(vmss_url(arm), params={"api-version": API}, json=patch)
    answer = http.post(vmss_url(arm) + "/manualupgrade", params={"api-version": API}, json={"instanceIds": ["*"]})
    assert answer.status_code == 202
    for _ in range(5):
        if http.get(answer.headers["Azure-AsyncOperation"]).json()["status"] != "InProgress":
            break
    vms = http.get(vmss_url(arm) + "/virtualMachines", params={"api-version": API}).json()["value"]
    assert len(vms) == 4 and all(vm["properties"]["latestModelApplied"] for vm in vms)

