"""Instances over real HTTP: VM list paging and names, model versions per upgrade policy,
manualupgrade, deletions (deleter hook, scale-in choice) and Flexible scale sets."""

from __future__ import annotations

import re
import threading
from typing import Any, Dict, List

import requests

from vmss_terminate.clock import ManualClock
from vmss_terminate_sim.emulator.arm.app import ArmServers, ArmState, InstanceRecord, ScaleSetRecord

from .conftest import API, SUB, vmss_url

ENABLED = {"terminateNotificationProfile": {"enable": True, "notBeforeTimeout": "PT10M"}}


def _patch_profile(sep: Dict[str, Any]) -> Dict[str, Any]:
    return {"properties": {"virtualMachineProfile": {"scheduledEventsProfile": sep}}}


def _all_vms(http: requests.Session, url: str) -> List[List[Dict[str, Any]]]:
    """Every page of a VM list, following nextLink (bounded)."""
    pages, next_url, params = [], url, {"api-version": API}
    for _ in range(100):
        answer = http.get(next_url, params=params)
        assert answer.status_code == 200, answer.text
        pages.append(answer.json()["value"])
        next_url, params = answer.json().get("nextLink"), None
        if not next_url:
            return pages
    raise AssertionError("nextLink never ended")


def _run_lro(http: requests.Session, answer: requests.Response) -> str:
    assert answer.status_code == 202, answer.text
    for _ in range(20):
        status = http.get(answer.headers["Azure-AsyncOperation"]).json()["status"]
        if status != "InProgress":
            return status
    raise AssertionError("LRO never finished")


def test_thousand_instances_list_in_ten_pages(arm: ArmServers, http: requests.Session, state: ArmState) -> None:
    state.add_scale_set(SUB, "rg", "big", capacity=1000)
    pages = _all_vms(http, vmss_url(arm, "big") + "/virtualMachines")
    assert [len(p) for p in pages] == [100] * 10
    vms = [vm for page in pages for vm in page]
    assert [vm["instanceId"] for vm in vms] == [str(i) for i in range(1000)]
    assert all(vm["name"] == f"big_{vm['instanceId']}" for vm in vms)
    assert all(vm["properties"]["latestModelApplied"] is True for vm in vms)
    state.page_size = 7
    assert len(_all_vms(http, vmss_url(arm) + "/virtualMachines")) == 1


def test_manual_policy_leaves_instances_stale_until_manualupgrade(
        arm: ArmServers, http: requests.Session, state: ArmState) -> None:
    http.patch(vmss_url(arm), params={"api-version": API}, json=_patch_profile(ENABLED))
    ss = state.scale_set(SUB, "rg", "myvmss")
    assert ss is not None and ss.model_version == 2
    assert [i.applied_profile for i in ss.instances.values()] == [None] * 4  # still the old model
    vms = _all_vms(http, vmss_url(arm) + "/virtualMachines")[0]
    assert [vm["properties"]["latestModelApplied"] for vm in vms] == [False] * 4

    missing = http.post(vmss_url(arm) + "/manualupgrade", params={"api-version": API}, json={})
    assert (missing.status_code, missing.json()["error"]["code"]) == (400, "InvalidRequestContent")
    unknown = http.post(vmss_url(arm) + "/manualupgrade", params={"api-version": API}, json={"instanceIds": ["42"]})
    assert unknown.status_code == 400

    answer = http.post(vmss_url(arm) + "/manualupgrade", params={"api-version": API}, json={"instanceIds": ["1", "2"]})
    assert answer.status_code == 202 and "Location" in answer.headers
    assert not ss.instances["1"].latest_model_applied  # nothing happens before the LRO completes
    assert _run_lro(http, answer) == "Succeeded"
    assert {i.instance_id: i.latest_model_applied for i in ss.instances.values()} == {
        "0": False, "1": True, "2": True, "3": False}
    assert ss.instances["1"].applied_profile == ENABLED and ss.instances["0"].applied_profile is None
    location = http.get(answer.headers["Location"])
    assert location.status_code == 200


def test_location_polling_answers_202_while_in_progress(
        arm: ArmServers, http: requests.Session, state: ArmState) -> None:
    state.lro_polls = 1
    answer = http.post(vmss_url(arm) + "/manualupgrade", params={"api-version": API}, json={"instanceIds": ["0"]})
    assert http.get(answer.headers["Location"]).status_code == 202
    assert http.get(answer.headers["Location"]).status_code == 200


def test_fail_the_second_manualupgrade(arm: ArmServers, http: requests.Session, state: ArmState) -> None:
    http.patch(vmss_url(arm), params={"api-version": API}, json=_patch_profile(ENABLED))
    state.fail_manualupgrade(nth=2, code="VMExtensionProvisioningError", message="batch 2 broke")
    url = vmss_url(arm) + "/manualupgrade"
    first = http.post(url, params={"api-version": API}, json={"instanceIds": ["0", "1"]})
    second = http.post(url, params={"api-version": API}, json={"instanceIds": ["2", "3"]})
    assert _run_lro(http, first) == "Succeeded"
    assert _run_lro(http, second) == "Failed"
    error = http.get(second.headers["Azure-AsyncOperation"]).json()["error"]
    assert error == {"code": "VMExtensionProvisioningError", "message": "batch 2 broke"}
    ss = state.scale_set(SUB, "rg", "myvmss")
    assert [i.latest_model_applied for i in ss.instances.values()] == [True, True, False, False]


def test_automatic_policy_upgrades_immediately_or_after_its_delay(
        arm: ArmServers, http: requests.Session, state: ArmState, clock: ManualClock) -> None:
    now = state.add_scale_set(SUB, "rg", "auto", upgrade_policy="Automatic", capacity=2)
    later = state.add_scale_set(SUB, "rg", "autodelay", upgrade_policy="Automatic", capacity=2, automatic_delay=20)
    for ss in (now, later):
        http.patch(vmss_url(arm, ss.name), params={"api-version": API}, json=_patch_profile(ENABLED))
    assert all(i.latest_model_applied and i.applied_profile == ENABLED for i in now.instances.values())
    assert not any(i.latest_model_applied for i in later.instances.values())
    clock.advance(20)
    vms = _all_vms(http, vmss_url(arm, "autodelay") + "/virtualMachines")[0]
    assert [vm["properties"]["latestModelApplied"] for vm in vms] == [True, True]


def test_rolling_policy_upgrades_after_the_rolling_delay(
        arm: ArmServers, http: requests.Session, state: ArmState, clock: ManualClock) -> None:
    ss = state.add_scale_set(SUB, "rg", "roll", upgrade_policy="Rolling", capacity=3, rolling_delay=60,
                             scheduled_events_profile=ENABLED)
    http.patch(vmss_url(arm, "roll"), params={"api-version": API}, json=_patch_profile(
        {"terminateNotificationProfile": {"notBeforeTimeout": "PT5M"}}))
    clock.advance(59)
    state.tick()
    assert [i.applied_profile["terminateNotificationProfile"]["notBeforeTimeout"]
            for i in ss.instances.values()] == ["PT10M"] * 3  # stale instances keep the old timeout
    clock.advance(1)
    state.tick()
    assert [i.applied_profile["terminateNotificationProfile"] for i in ss.instances.values()] == [
        {"enable": True, "notBeforeTimeout": "PT5M"}] * 3


def test_delete_with_a_deleter_keeps_instances_listed_until_removed(
        arm: ArmServers, http: requests.Session, state: ArmState) -> None:
    calls: List[List[str]] = []

    def deleter(ss: ScaleSetRecord, instances: List[InstanceRecord]) -> None:
        calls.append([i.instance_id for i in instances])

    state.deleter = deleter
    answer = http.post(vmss_url(arm) + "/delete", params={"api-version": API}, json={"instanceIds": ["1", "3"]})
    assert answer.status_code == 202 and calls == [["1", "3"]]
    vms = {vm["instanceId"]: vm["properties"]["provisioningState"]
           for vm in _all_vms(http, vmss_url(arm) + "/virtualMachines")[0]}
    assert vms == {"0": "Succeeded", "1": "Deleting", "2": "Succeeded", "3": "Deleting"}
    status_url = answer.headers["Azure-AsyncOperation"]
    assert [http.get(status_url).json()["status"] for _ in range(3)] == ["InProgress"] * 3
    ss = state.scale_set(SUB, "rg", "myvmss")
    state.remove_instances(ss, ["1", "3"])
    assert http.get(status_url).json()["status"] == "Succeeded"
    assert [vm["instanceId"] for vm in _all_vms(http, vmss_url(arm) + "/virtualMachines")[0]] == ["0", "2"]
    assert http.get(vmss_url(arm), params={"api-version": API}).json()["sku"]["capacity"] == 2
    assert http.post(vmss_url(arm) + "/delete", params={"api-version": API}, json={}).status_code == 400


def test_delete_without_a_deleter_is_immediate(arm: ArmServers, http: requests.Session, state: ArmState) -> None:
    answer = http.delete(vmss_url(arm) + "/virtualMachines/2", params={"api-version": API})
    assert _run_lro(http, answer) == "Succeeded"
    assert http.get(vmss_url(arm) + "/virtualMachines/2", params={"api-version": API}).status_code == 404


def test_capacity_changes_scale_in_highest_ids_and_scale_out_on_the_current_model(
        arm: ArmServers, http: requests.Session, state: ArmState) -> None:
    seen: List[str] = []
    state.deleter = lambda ss, instances: seen.extend(i.name for i in instances)
    http.patch(vmss_url(arm), params={"api-version": API}, json={"sku": {"capacity": 2}})
    assert seen == ["myvmss_3", "myvmss_2"]
    ss = state.scale_set(SUB, "rg", "myvmss")
    state.remove_instances(ss, ["2", "3"])
    http.patch(vmss_url(arm), params={"api-version": API}, json=_patch_profile(ENABLED))
    http.patch(vmss_url(arm), params={"api-version": API}, json={"sku": {"capacity": 3}})
    new = [i for i in ss.instances.values() if i.instance_id not in ("0", "1")]
    assert len(new) == 1 and new[0].latest_model_applied and new[0].applied_profile == ENABLED
    assert len({i.instance_id for i in ss.instances.values()}) == 3


def test_flexible_scale_sets(arm: ArmServers, http: requests.Session, state: ArmState, clock: ManualClock) -> None:
    flex = state.add_scale_set(SUB, "rg", "flex", orchestration="Flexible", capacity=3)
    listed = http.get(vmss_url(arm, "flex") + "/virtualMachines", params={"api-version": API})
    assert (listed.status_code, listed.json()["error"]["code"]) == (409, "OperationNotAllowed")
    vms = http.get(f"{arm.arm_url}/subscriptions/{SUB}/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines",
                   params={"api-version": API}).json()["value"]
    assert len(vms) == 3
    assert all(re.fullmatch(r"flex_[0-9a-f]{8}", vm["name"]) for vm in vms)
    assert all(vm["properties"]["virtualMachineScaleSet"]["id"] == flex.resource_id for vm in vms)
    scaled_in: List[str] = []
    state.deleter = lambda ss, instances: scaled_in.extend(i.name for i in instances)
    clock.advance(10)
    http.patch(vmss_url(arm, "flex"), params={"api-version": API}, json={"sku": {"capacity": 4}})
    newest = [i.name for i in flex.instances.values()][-1]
    http.patch(vmss_url(arm, "flex"), params={"api-version": API}, json={"sku": {"capacity": 3}})
    assert scaled_in == [newest]
    upgrade = http.post(vmss_url(arm, "flex") + "/manualupgrade", params={"api-version": API},
                        json={"instanceIds": [vms[0]["name"]]})
    assert _run_lro(http, upgrade) == "Succeeded"


def test_concurrent_requests_keep_the_state_consistent(
        arm: ArmServers, http: requests.Session, state: ArmState) -> None:
    ss = state.add_scale_set(SUB, "rg", "busy", capacity=40)
    http.patch(vmss_url(arm, "busy"), params={"api-version": API}, json=_patch_profile(ENABLED))
    token = http.headers["Authorization"]
    errors: List[str] = []

    def upgrade(ids: List[str]) -> None:
        with requests.Session() as session:
            session.headers["Authorization"] = token
            answer = session.post(vmss_url(arm, "busy") + "/manualupgrade", params={"api-version": API},
                                  json={"instanceIds": ids})
            if _run_lro(session, answer) != "Succeeded":
                errors.append(str(ids))
            session.get(vmss_url(arm, "busy") + "/virtualMachines", params={"api-version": API})

    threads = [threading.Thread(target=upgrade, args=([str(i) for i in range(n, 40, 8)],)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
    assert not errors
    assert all(i.latest_model_applied for i in ss.instances.values())


def test_lro_answers_carry_retry_after_when_configured(arm: ArmServers, http: requests.Session) -> None:
    arm.arm.retry_after = 3
    try:
        answer = http.post(vmss_url(arm) + "/manualupgrade", params={"api-version": API}, json={"instanceIds": ["0"]})
        assert answer.headers["Retry-After"] == "3"
        assert http.get(answer.headers["Azure-AsyncOperation"]).headers["Retry-After"] == "3"  # InProgress
        assert "Retry-After" not in http.get(answer.headers["Azure-AsyncOperation"]).headers  # Succeeded
    finally:
        arm.arm.retry_after = None
