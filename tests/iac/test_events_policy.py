"""`render` with the scheduled-events policy options (issue 24): every format carries the same
policy the control plane PATCHes; the Azure Policy definition audits it when asked."""

from __future__ import annotations

import json
import shlex
from typing import Any, Dict

import hcl2
import pytest
from helpers import invoke_cli

from vmss_terminate.cli import main
from vmss_terminate.control.body import patch_bytes
from vmss_terminate.control.events_policy import PolicyChange
from vmss_terminate.iac import azure_policy, render
from vmss_terminate_sim.emulator.arm import shapes
from vmss_terminate_sim.emulator.arm.app import ArmState

from .test_policy import _holds

CHANGE = PolicyChange(event_grid=True, auto_approve=("user-reboot", "all-instances-down"))


def _cli(*args: str) -> Any:
    return invoke_cli(main, ["render", *args])


def test_rest_is_the_enable_patch_body_with_the_policy() -> None:
    result = _cli("--format", "rest", "--timeout", "10", "--event-grid", "--auto-approve", "user-reboot",
                  "--auto-approve", "all-instances-down")
    assert result.exit_code == 0, result.output
    assert result.stdout.encode("utf-8") == patch_bytes(True, 10, CHANGE.fragment())
    alone = _cli("--format", "rest", "--event-grid")
    assert json.loads(alone.stdout) == {"properties": {"scheduledEventsPolicy": {
        "scheduledEventsAdditionalPublishingTargets": {"eventGridAndResourceGraph": {"enable": True}}}}}


def test_arm_and_bicep_put_the_policy_beside_virtual_machine_profile() -> None:
    arm = json.loads(render("arm", 10, policy=CHANGE))
    assert arm["properties"]["scheduledEventsPolicy"] == CHANGE.fragment()
    assert arm["properties"]["virtualMachineProfile"]["scheduledEventsProfile"]["terminateNotificationProfile"] == {
        "enable": True, "notBeforeTimeout": "PT10M"}
    bicep = render("bicep", 10, policy=CHANGE)
    assert "Microsoft.Compute/virtualMachineScaleSets@2025-04-01 or later" in bicep
    assert "\nscheduledEventsPolicy: {\n" in bicep and "  allInstancesDown: {\n    automaticallyApprove: true" in bicep


def test_terraform_sets_the_policy_with_azapi() -> None:
    text = render("terraform", 10, policy=CHANGE)
    parsed = hcl2.loads(text)
    blocks = {key.strip('"'): value for item in parsed.get("resource", []) for key, value in item.items()}
    update = {key.strip('"'): value for key, value in blocks["azapi_update_resource"].items()}["scheduled_events_policy"]
    assert update["type"].strip('"') == "Microsoft.Compute/virtualMachineScaleSets@2025-04-01"
    policy = update["body"]["properties"]["scheduledEventsPolicy"]
    assert policy["userInitiatedReboot"]["automaticallyApprove"] is True
    assert policy["scheduledEventsAdditionalPublishingTargets"]["eventGridAndResourceGraph"]["enable"] is True
    assert str(parsed["termination_notification"][0]["timeout"]).strip('"') == "PT10M"


def test_cli_format_uses_az_switches_and_our_command_runs_as_printed() -> None:
    text = render("cli", 10, policy=CHANGE, resource_group="rg", name="web")
    assert ("--additional-scheduled-events true --enable-user-reboot-scheduled-events true" in text)
    assert "# not said by az vmss update here (it sends api-version 2024-11-01): --auto-approve all-instances-down" \
        in text
    ours = [line for line in text.splitlines() if line.startswith("vmss-terminate ")][0]
    args = shlex.split(ours)[1:]
    assert args == ["enable", "-g", "rg", "-n", "web", "--timeout", "PT10M", "--event-grid", "--auto-approve",
                    "user-reboot", "--auto-approve", "all-instances-down"]
    parsed = invoke_cli(main, [*args, "--help"])  # every option of the printed line exists
    assert parsed.exit_code == 0


def test_kubernetes_and_bad_combinations_are_refused() -> None:
    assert _cli("--format", "kubernetes", "--event-grid").exit_code == 2
    both = _cli("--format", "rest", "--timeout", "10", "--auto-approve", "user-reboot", "--no-auto-approve",
                "user-reboot")
    assert both.exit_code == 2 and "both name user-reboot" in both.stderr
    assert _cli("--format", "policy", "--event-grid").exit_code == 2  # the definition needs the timeout


def _definition_params(definition: Dict[str, Any]) -> Dict[str, Any]:
    return {name: spec["defaultValue"] for name, spec in definition["properties"]["parameters"].items()}


def test_policy_definition_audits_the_policy_only_when_asked() -> None:
    plain = azure_policy.definition(10)
    assert "requireEventGrid" not in plain["properties"]["parameters"]
    assert "scheduledEventsPolicy" not in json.dumps(plain)  # no unconfirmed alias in the plain definition
    asked = azure_policy.definition(10, CHANGE)
    params = _definition_params(asked)
    assert params["requireEventGrid"] is True and params["autoApproveUserReboot"] is True
    assert asked["properties"]["metadata"]["unconfirmedAliases"] == [
        azure_policy.EVENT_GRID_ALIAS, azure_policy.APPROVE_ALIASES["user-reboot"],
        azure_policy.APPROVE_ALIASES["all-instances-down"]]
    state = ArmState()
    on = {"terminateNotificationProfile": {"enable": True, "notBeforeTimeout": "PT10M"}}
    good = state.add_scale_set("s", "rg", "good", scheduled_events_profile=on, extra_properties={
        "scheduledEventsPolicy": {**CHANGE.fragment()}})
    quiet = state.add_scale_set("s", "rg", "quiet", scheduled_events_profile=on)
    rule = asked["properties"]["policyRule"]["if"]
    values = {k: v for k, v in params.items()}
    assert not _holds(rule, shapes.scale_set(good, "2025-04-01"), values)
    assert _holds(rule, shapes.scale_set(quiet, "2025-04-01"), values)
    values["requireEventGrid"] = False
    values["autoApproveUserReboot"] = values["autoApproveAllInstancesDown"] = False
    assert not _holds(rule, shapes.scale_set(quiet, "2025-04-01"), values)  # parameters off: terminate only


@pytest.mark.parametrize("fmt", ["arm", "bicep", "terraform", "rest", "cli"])
def test_every_format_renders_the_policy_alone(fmt: str) -> None:
    text = render(fmt, None, policy=PolicyChange(auto_approve=("user-redeploy",)))
    assert "userInitiatedRedeploy" in text or "--enable-user-redeploy-scheduled-events true" in text
    assert "terminateNotificationProfile" not in text and "termination_notification" not in text


def test_the_events_policy_template_is_what_render_prints() -> None:
    from pathlib import Path

    template = Path(__file__).resolve().parents[2] / "templates" / "policy" / \
        "vmss-terminate-notification-events-policy.json"
    everything = PolicyChange(event_grid=True, auto_approve=("user-reboot", "user-redeploy", "all-instances-down"))
    assert template.read_text(encoding="utf-8") == azure_policy.render_definition(10, everything)
    assert json.loads(template.read_text())["properties"]["metadata"]["unconfirmedAliases"]
