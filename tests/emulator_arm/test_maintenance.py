"""The ARM emulator's scheduled events: maintenanceresources rows of the events an IMDS placement
group serves (only while the set's policy publishes them), the Maintenance RP's acknowledge (single,
batch, 404, MultiStatusResponse) and Run Command (long-running, output in the answer), over HTTP."""

from __future__ import annotations

from typing import Any, Dict, List

import pytest
import requests

from vmss_terminate.clock import ManualClock
from vmss_terminate_sim.emulator.arm.app import ArmServers, ArmState
from vmss_terminate_sim.emulator.imds.events import PlacementGroup

from .conftest import SUB, vmss_url

GRAPH_API = {"api-version": "2022-10-01"}
ACK_API = {"api-version": "2023-10-01-preview"}
BATCH_API = {"api-version": "2025-10-01-preview"}
QUERY = ("maintenanceresources | where type =~ 'microsoft.maintenance/scheduledevents' "
         "| project id, name, type, subscriptionId, resourceGroup, location, properties | order by id asc")
POLICY = {"scheduledEventsAdditionalPublishingTargets": {"eventGridAndResourceGraph": {"enable": True}}}
WINDOWS = {"storageProfile": {"osDisk": {"osType": "Windows", "createOption": "FromImage"},
                              "imageReference": {"publisher": "MicrosoftWindowsServer", "offer": "WindowsServer",
                                                 "sku": "2022-datacenter", "version": "latest"}}}


@pytest.fixture
def group(state: ArmState, clock: ManualClock) -> PlacementGroup:
    group = PlacementGroup(clock=clock, auto_start=True)
    ss = state.scale_set(SUB, "rg", "myvmss")
    assert ss is not None
    ss.extra_properties["scheduledEventsPolicy"] = POLICY
    state.maintenance.attach(ss, group)
    return group


def _rows(arm: ArmServers, http: requests.Session) -> List[Dict[str, Any]]:
    answer = http.post(f"{arm.arm_url}/providers/Microsoft.ResourceGraph/resources", params=GRAPH_API,
                       json={"query": QUERY}, timeout=5)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["totalRecords"] == len(body["data"])
    return list(body["data"])


def test_rows_follow_the_group_and_the_policy(arm: ArmServers, http: requests.Session, state: ArmState,
                                              group: PlacementGroup, clock: ManualClock) -> None:
    assert _rows(arm, http) == []
    eid = group.add_event("Terminate", ["myvmss_1", "myvmss_2"], not_before=clock.now() + 300)
    (row,) = _rows(arm, http)
    assert row["id"].endswith(f"/virtualMachineScaleSets/myvmss/providers/Microsoft.Maintenance/scheduledevents/{eid}")
    assert row["type"] == "microsoft.maintenance/scheduledevents"
    assert row["properties"]["Resources"] == ["myvmss_1", "myvmss_2"]
    assert row["properties"]["EventStatus"] == "Scheduled" and row["properties"]["NotBefore"].endswith(" GMT")
    ss = state.scale_set(SUB, "rg", "myvmss")
    assert ss is not None
    ss.extra_properties["scheduledEventsPolicy"] = {}  # the policy no longer publishes: no rows
    assert _rows(arm, http) == []
    ss.extra_properties["scheduledEventsPolicy"] = POLICY
    group.start_event(eid)
    assert _rows(arm, http)[0]["properties"]["EventStatus"] == "Started"
    group.remove_event(eid)
    assert _rows(arm, http)[0]["properties"]["EventStatus"] == "Completed"
    other = group.add_event("Terminate", ["myvmss_3"])
    group.remove_event(other)
    statuses = {r["name"]: r["properties"]["EventStatus"] for r in _rows(arm, http)}
    assert statuses == {eid: "Completed", other: "Canceled"}
    clock.advance(state.maintenance.retention + 1)
    assert _rows(arm, http) == []


def test_acknowledge_starts_the_event_like_an_imds_approval(arm: ArmServers, http: requests.Session,
                                                            state: ArmState, group: PlacementGroup) -> None:
    eid = group.add_event("Terminate", ["myvmss_1"])
    url = f"{vmss_url(arm)}/providers/Microsoft.Maintenance/scheduledevents"
    answer = http.post(f"{url}/{eid}/acknowledge", params=ACK_API, timeout=5)
    assert answer.status_code == 200 and answer.json() == {"value": "Successfully Approved"}
    event = group.get(eid)
    assert event is not None and event.status == "Started"
    (approval,) = group.approvals
    assert approval.via == "arm" and not approval.foreign
    missing = http.post(f"{url}/00000000-0000-0000-0000-00000000dead/acknowledge", params=ACK_API, timeout=5)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "NotFound"
    assert [a.accepted for a in state.maintenance.acknowledgements] == [True, False]


def test_batch_acknowledge_answers_multistatus_for_a_partial_batch(arm: ArmServers, http: requests.Session,
                                                                  group: PlacementGroup) -> None:
    one, two = group.add_event("Terminate", ["myvmss_1"]), group.add_event("Terminate", ["myvmss_2"])
    url = f"{vmss_url(arm)}/providers/Microsoft.Maintenance/scheduledevents"
    assert http.post(url, params=ACK_API, json={"value": [one]}, timeout=5).status_code == 400  # batch: 2025-10-01
    answer = http.post(url, params=BATCH_API, json={"value": [one, "nope"]}, timeout=5)
    assert answer.status_code == 207
    error = answer.json()["error"]
    assert error["code"] == "MultiStatusResponse"
    assert {d["target"]: d["code"] for d in error["details"]} == {one: "200", "nope": "404"}
    whole = http.post(url, params=BATCH_API, json={"value": [two]}, timeout=5)
    assert whole.status_code == 200 and whole.json() == {"value": "Successfully Approved"}
    assert {a.event_id for a in group.approvals if a.accepted} == {one, two}


def test_run_command_is_long_running_with_output_by_os(arm: ArmServers, http: requests.Session,
                                                       state: ArmState) -> None:
    state.add_scale_set(SUB, "rg", "win", capacity=1, vm_profile=WINDOWS)
    state.run_commands.runner = lambda vm, command, script: (f"drained {vm}", "", 0)
    url = f"{vmss_url(arm, 'win')}/virtualMachines/0/runCommand"
    assert http.post(url, params={"api-version": "2024-11-01"}, json={"commandId": "RunShellScript"},
                     timeout=5).status_code == 400  # a Linux command on Windows
    answer = http.post(url, params={"api-version": "2024-11-01"},
                       json={"commandId": "RunPowerShellScript", "script": ["Write-Host hi"]}, timeout=5)
    assert answer.status_code == 202
    status = http.get(answer.headers["Azure-AsyncOperation"], timeout=5).json()
    assert status["status"] == "Succeeded"
    assert status["properties"]["output"]["value"][0] == {
        "code": "ComponentStatus/StdOut/succeeded", "level": "Info", "displayStatus": "Provisioning succeeded",
        "message": "drained win_0"}
    final = http.get(answer.headers["Location"], timeout=5)
    assert final.status_code == 200 and final.json()["value"][0]["message"] == "drained win_0"
    linux = http.post(f"{vmss_url(arm)}/virtualMachines/0/runCommand", params={"api-version": "2024-11-01"},
                      json={"commandId": "RunShellScript", "script": ["exit 3"]}, timeout=5)
    state.run_commands.runner = lambda vm, command, script: ("", "", 3)
    assert http.get(linux.headers["Location"], timeout=5).json()["value"][0]["message"].startswith("Enable succeeded")
    assert [r.command_id for r in state.run_commands.records] == ["RunPowerShellScript", "RunShellScript"]
