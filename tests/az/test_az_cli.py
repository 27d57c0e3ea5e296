"""The real Azure CLI against `vmss-terminate emulator arm` (issue 12): the scenario a user runs to
check a pipeline locally, unchanged, with `vmss-terminate status` agreeing with `az vmss show`
after every step, and az contacting nothing but the emulator's two loopback ports.

Run: `python3 tests/az/install_az.py` once (installs azure-cli outside the repo), then
`pytest -m az`. Without az the tests skip with a one-line reason.
"""

from __future__ import annotations

import json
from typing import Any, Dict
from urllib.parse import urlsplit

import pytest
from helpers import invoke_cli

from vmss_terminate.cli import main
from vmss_terminate_sim.emulator.arm.inventory import DEFAULT_TENANT
from vmss_terminate_sim.emulator.arm.token import ARM_AUDIENCES

from .conftest import AzWorld

pytestmark = [pytest.mark.az, pytest.mark.slow, pytest.mark.timeout(600)]

SUB = "00000000-0000-0000-0000-000000000000"
DISPLAY_NAME = "Emulated production"  # examples/seed.json
CLOUD = "VmssTerminateLocal"


def _props(resource: Dict[str, Any]) -> Dict[str, Any]:
    """az flattens `properties` into the resource; accept both shapes."""
    return resource.get("properties", resource)


def _tnp(shown: Dict[str, Any]) -> Dict[str, Any]:
    profile = _props(shown).get("virtualMachineProfile") or {}
    return (profile.get("scheduledEventsProfile") or {}).get("terminateNotificationProfile") or {}


class Scenario:
    def __init__(self, world: AzWorld) -> None:
        self.world = world
        self.az = world.az

    def show(self, name: str) -> Dict[str, Any]:
        return self.az("vmss", "show", "-g", "rg", "-n", name)  # type: ignore[no-any-return]

    def status(self, name: str, subscription: str = SUB) -> Dict[str, Any]:
        result = invoke_cli(main, ["status", "-g", "rg", "-n", name, "-o", "json", "--subscription", subscription,
                                   "--arm-endpoint", self.world.arm_url])
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)  # type: ignore[no-any-return]

    def agree(self, name: str) -> Dict[str, Any]:
        """`vmss-terminate status` and `az vmss show` / `az vmss list-instances` say the same."""
        shown, mine = self.show(name), self.status(name)
        tnp, notification = _tnp(shown), mine["terminate_notification"]
        assert notification["enabled"] == (tnp.get("enable") is True), (notification, tnp)
        if notification["enabled"]:
            assert notification["timeout"] == tnp.get("notBeforeTimeout")
        listed = self.az("vmss", "list-instances", "-g", "rg", "-n", name)
        theirs = {vm["instanceId"]: _props(vm)["latestModelApplied"] for vm in listed}
        assert {i["instance_id"]: i["latest_model_applied"] for i in mine["instances"]} == theirs
        return shown


def test_az_cli_scenario_against_the_emulator(az_world: AzWorld, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("IDENTITY_ENDPOINT", "IDENTITY_HEADER"):  # our own CLI: the same managed identity
        monkeypatch.setenv(name, az_world.connect[name])
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(az_world.ca))
    az, run = az_world.az, Scenario(az_world)

    # 1. endpoint discovery: GET //metadata/endpoints, no token
    az("cloud", "register", "-n", CLOUD, "--endpoint-resource-manager", az_world.arm_url + "/")
    cloud = az("cloud", "show", "-n", CLOUD)
    assert cloud["endpoints"]["resourceManager"] == az_world.arm_url + "/"
    assert cloud["endpoints"]["activeDirectoryResourceId"].rstrip("/") in ARM_AUDIENCES
    az("cloud", "set", "-n", CLOUD)

    # 2. az login --identity: a JWT whose tid az reads, then GET /subscriptions
    accounts = az("login", "--identity")
    assert [(a["id"], a["name"], a["tenantId"]) for a in accounts] == [(SUB, DISPLAY_NAME, DEFAULT_TENANT)]
    account = az("account", "show")
    assert (account["id"], account["name"], account["environmentName"]) == (SUB, DISPLAY_NAME, CLOUD)
    assert run.status("myvmss", subscription=DISPLAY_NAME)["subscription_id"] == SUB  # by display name too

    # the resource group (Microsoft.Resources, as seeded)
    group = az("group", "show", "-n", "rg")
    assert (group["name"], group["location"], group["tags"]) == ("rg", "westus", {"env": "emulated"})
    assert group["properties"]["provisioningState"] == "Succeeded"
    assert az("group", "exists", "-n", "no-such-group") is False

    # list / show
    assert sorted(s["name"] for s in az("vmss", "list")) == ["flexvmss", "myvmss", "webvmss"]
    run.agree("webvmss")  # seeded enabled PT10M, 2 instances on an older model
    before = run.agree("myvmss")
    assert _tnp(before) == {}
    image = _props(before)["virtualMachineProfile"]["storageProfile"]["imageReference"]
    assert image["offer"]

    # 3. az vmss update: GET then a full PUT without imageReference
    updated = az("vmss", "update", "-g", "rg", "-n", "myvmss",
                 "--enable-terminate-notification", "true", "--terminate-notification-time", "10")
    assert _tnp(updated) == {"enable": True, "notBeforeTimeout": "PT10M"}
    shown = run.agree("myvmss")
    assert _props(shown)["virtualMachineProfile"]["storageProfile"]["imageReference"] == image
    assert run.status("myvmss")["stale_instances"] == ["0", "1", "2", "3"]

    # 4. a timeout-only update: {"notBeforeTimeout": "PT5M"} without enable reads back enabled
    az("vmss", "update", "-g", "rg", "-n", "myvmss", "--terminate-notification-time", "5")
    assert _tnp(run.agree("myvmss")) == {"enable": True, "notBeforeTimeout": "PT5M"}

    # 5. update-instances '*': every instance on the latest model
    az("vmss", "update-instances", "-g", "rg", "-n", "myvmss", "--instance-ids", "*")
    instances = az("vmss", "list-instances", "-g", "rg", "-n", "myvmss")
    assert len(instances) == 4 and all(_props(vm)["latestModelApplied"] for vm in instances)
    run.agree("myvmss")
    assert run.status("myvmss")["stale_instances"] == []

    # az reached only the emulator: ARM and its token endpoint, both on loopback
    arm, token = urlsplit(az_world.arm_url), urlsplit(az_world.connect["IDENTITY_ENDPOINT"])
    assert az.contacted() == {f"127.0.0.1:{arm.port}", f"127.0.0.1:{token.port}"}
