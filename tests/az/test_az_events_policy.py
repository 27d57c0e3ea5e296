"""The real Azure CLI and the scheduled-events policy (issue 24), against `vmss-terminate emulator
arm`: az's own switches and `--set`, az's GET -> full PUT keeping a policy vmss-terminate set, and
the `az feature register` line `enable --event-grid` prints, run exactly as printed."""

from __future__ import annotations

import json
import shlex
from typing import Any, Dict
from urllib.parse import urlsplit

import pytest
from helpers import invoke_cli

from vmss_terminate.cli import main

from .conftest import AzWorld

pytestmark = [pytest.mark.az, pytest.mark.slow, pytest.mark.timeout(600)]

SUB = "00000000-0000-0000-0000-000000000000"
CLOUD = "VmssTerminateLocal"


def _policy(shown: Dict[str, Any]) -> Dict[str, Any]:
    return (shown.get("properties", shown).get("scheduledEventsPolicy") or {})  # az may flatten properties


def test_az_and_vmss_terminate_agree_on_the_scheduled_events_policy(az_world: AzWorld,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("IDENTITY_ENDPOINT", "IDENTITY_HEADER"):
        monkeypatch.setenv(name, az_world.connect[name])
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(az_world.ca))
    az = az_world.az
    az("cloud", "register", "-n", CLOUD, "--endpoint-resource-manager", az_world.arm_url + "/")
    az("cloud", "set", "-n", CLOUD)
    az("login", "--identity")

    def ours(*args: str) -> Any:
        return invoke_cli(main, [*args, "--subscription", SUB, "--arm-endpoint", az_world.arm_url])

    def status(name: str) -> Dict[str, Any]:
        result = ours("status", "-g", "rg", "-n", name, "-o", "json")
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)["scheduled_events_policy"]  # type: ignore[no-any-return]

    # 1. the feature is not registered: enable --event-grid stops before writing, printing the az line
    az("feature", "unregister", "--namespace", "Microsoft.Compute", "--name", "SendScheduledEventsPolicy")
    refused = ours("enable", "-g", "rg", "-n", "webvmss", "--event-grid")
    assert refused.exit_code == 1, refused.output
    line = next(part for part in refused.stderr.split(" -- ")[0].split("with: ") if part.startswith("az feature"))
    printed = shlex.split(line.strip())
    assert printed[:3] == ["az", "feature", "register"]
    registered = az(*printed[1:])  # exactly as printed (az, then its arguments)
    assert registered["properties"]["state"] == "Registered"
    done = ours("enable", "-g", "rg", "-n", "webvmss", "--event-grid", "--auto-approve", "user-reboot")
    assert done.exit_code == 0, done.output
    shown = az("vmss", "show", "-g", "rg", "-n", "webvmss")
    assert _policy(shown)["scheduledEventsAdditionalPublishingTargets"]["eventGridAndResourceGraph"]["enable"] is True
    assert _policy(shown)["userInitiatedReboot"]["automaticallyApprove"] is True

    # 2. az's GET -> full PUT of an unrelated change keeps the policy
    az("vmss", "update", "-g", "rg", "-n", "webvmss", "--terminate-notification-time", "12")
    kept = status("webvmss")
    assert kept["event_grid"] is True and kept["auto_approve"]["user-reboot"] is True

    # 3. az's own switches (min api 2024-03-01), read back by vmss-terminate
    az("vmss", "update", "-g", "rg", "-n", "myvmss", "--additional-scheduled-events", "true",
       "--enable-user-redeploy-scheduled-events", "true")
    mine = status("myvmss")
    assert mine["event_grid"] is True and mine["auto_approve"]["user-redeploy"] is True

    # 4. az vmss update --set on the policy
    az("vmss", "update", "-g", "rg", "-n", "myvmss", "--set",
       "scheduledEventsPolicy.userInitiatedRedeploy.automaticallyApprove=false")
    assert status("myvmss")["auto_approve"]["user-redeploy"] is False

    # az reached only the emulator
    arm, token = urlsplit(az_world.arm_url), urlsplit(az_world.connect["IDENTITY_ENDPOINT"])
    assert az.contacted() == {f"127.0.0.1:{arm.port}", f"127.0.0.1:{token.port}"}
