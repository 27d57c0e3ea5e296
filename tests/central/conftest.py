"""Fixtures for the central handler: the session's ARM emulator serving an estate whose scale sets'
placement groups are attached (maintenanceresources rows, acknowledge, Run Command), reached with
the real azure-identity chain (DefaultAzureCredential -> the emulator's token endpoint)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict

import pytest
from helpers import serve_arm_state

from vmss_terminate.clock import SYSTEM_CLOCK, Clock, ManualClock
from vmss_terminate.control import Connection
from vmss_terminate_sim.emulator.arm.app import ArmServers, ArmState
from vmss_terminate_sim.emulator.imds.events import PlacementGroup

pytest.importorskip("azure.mgmt.resourcegraph")

SUB = "22222222-0000-0000-0000-000000000001"
OTHER_SUB = "22222222-0000-0000-0000-000000000002"
POLICY = {"scheduledEventsAdditionalPublishingTargets": {"eventGridAndResourceGraph": {"enable": True}}}
WINDOWS = {"storageProfile": {"osDisk": {"osType": "Windows", "createOption": "FromImage"},
                              "imageReference": {"publisher": "MicrosoftWindowsServer", "offer": "WindowsServer",
                                                 "sku": "2022-datacenter", "version": "latest"}}}


@dataclass
class Estate:
    state: ArmState
    clock: Clock
    groups: Dict[str, PlacementGroup]  # scale set name -> its placement group

    def set_id(self, name: str, rg: str = "rg", sub: str = SUB) -> str:
        return (f"/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.Compute/"
                f"virtualMachineScaleSets/{name}")


def make_estate(clock: Clock) -> Estate:
    state = ArmState(clock=clock)
    groups: Dict[str, PlacementGroup] = {}
    for sub, rg, name, extra in ((SUB, "rg", "win", {"vm_profile": WINDOWS, "tags": {"team": "web"}}),
                                 (SUB, "rg", "lin", {"tags": {"team": "web"}}),
                                 (SUB, "other-rg", "lin", {"tags": {"team": "db"}}),
                                 (OTHER_SUB, "rg", "elsewhere", {})):
        ss = state.add_scale_set(sub, rg, name, capacity=3, extra_properties={"scheduledEventsPolicy": POLICY},
                                 **extra)  # type: ignore[arg-type]
        group = PlacementGroup(clock=clock, auto_start=True)
        state.maintenance.attach(ss, group)
        groups[f"{rg}/{name}" if rg != "rg" or sub != SUB else name] = group
    return Estate(state, clock, groups)


@pytest.fixture
def estate() -> Estate:
    return make_estate(ManualClock())


@pytest.fixture
def arm(shared_arm: ArmServers, estate: Estate, monkeypatch: pytest.MonkeyPatch) -> ArmServers:
    return serve_arm_state(shared_arm, estate.state, monkeypatch)


@pytest.fixture
def conn(arm: ArmServers) -> Connection:
    return Connection(arm_endpoint=arm.arm_url, retry_total=2, retry_backoff_factor=0.0)


@pytest.fixture
def live() -> Estate:
    """An estate on the real clock: for tests whose handler runs hooks and waits in real time."""
    return make_estate(SYSTEM_CLOCK)


@pytest.fixture
def live_arm(shared_arm: ArmServers, live: Estate, monkeypatch: pytest.MonkeyPatch) -> ArmServers:
    return serve_arm_state(shared_arm, live.state, monkeypatch)
