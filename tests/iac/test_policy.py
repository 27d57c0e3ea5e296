"""templates/policy/: the Azure Policy definition's structure, its aliases, `render --format policy`,
and -- evaluated with a small interpreter of the conditions it uses -- that it flags exactly the
scale sets `fleet audit` calls non-compliant on the profile (Spot and AKS node pools excluded)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict

import pytest
from helpers import invoke_cli

from vmss_terminate.cli import main
from vmss_terminate.control.profile import parse_scale_set
from vmss_terminate.iac import azure_policy
from vmss_terminate_sim.emulator.arm import shapes
from vmss_terminate_sim.emulator.arm.app import ArmState

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "templates" / "policy" / "vmss-terminate-notification.json"
ASSIGNMENT = ROOT / "templates" / "policy" / "assignment.example.json"


def _definition() -> Dict[str, Any]:
    return json.loads(TEMPLATE.read_text(encoding="utf-8"))


def test_template_is_what_render_prints() -> None:
    assert TEMPLATE.read_text(encoding="utf-8") == azure_policy.render_definition(10)
    result = invoke_cli(main, ["render", "--format", "policy", "--timeout", "PT10M"])
    assert result.exit_code == 0 and result.stdout == azure_policy.render_definition(10)


def test_render_policy_refuses_disable() -> None:
    result = invoke_cli(main, ["render", "--format", "policy", "--disable"])
    assert result.exit_code == 2 and "policy" in result.stderr


def test_structure_and_aliases() -> None:
    props = _definition()["properties"]
    assert props["mode"] == "Indexed" and props["policyType"] == "Custom"
    assert set(props["parameters"]) == {"notBeforeTimeout", "effect"}
    assert props["parameters"]["notBeforeTimeout"]["allowedValues"] == [f"PT{m}M" for m in range(5, 16)]
    rule = props["policyRule"]
    assert rule["then"] == {"effect": "[parameters('effect')]"}
    fields = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if "field" in node:
                fields.add(node["field"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(rule)
    assert fields == {
        "type",
        "Microsoft.Compute/virtualMachineScaleSets/virtualMachineProfile.priority",
        "Microsoft.Compute/virtualMachineScaleSets/virtualMachineProfile.scheduledEventsProfile."
        "terminateNotificationProfile.enable",
        "Microsoft.Compute/virtualMachineScaleSets/virtualMachineProfile.scheduledEventsProfile."
        "terminateNotificationProfile.notBeforeTimeout",
        "tags['aks-managed-poolName']",
    }
    assignment = json.loads(ASSIGNMENT.read_text(encoding="utf-8"))["properties"]
    assert set(assignment["parameters"]) <= set(props["parameters"])


# ---------------------------------------------------------------- a tiny policy evaluator


def _field(resource: Dict[str, Any], name: str) -> Any:
    if name == "type":
        return resource["type"]
    if name.startswith("tags['"):
        return (resource.get("tags") or {}).get(name[6:-2])
    prefix = "Microsoft.Compute/virtualMachineScaleSets/"
    assert name.startswith(prefix), name
    node: Any = resource["properties"]
    for part in name[len(prefix):].split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _value(text: Any, params: Dict[str, str]) -> Any:
    if isinstance(text, str) and text.startswith("[parameters('"):
        return params[text[len("[parameters('"):-len("')]")]]
    return text


def _text(value: Any) -> str:
    return str(value).lower() if not isinstance(value, bool) else ("true" if value else "false")


def _holds(condition: Dict[str, Any], resource: Dict[str, Any], params: Dict[str, str]) -> bool:
    if "allOf" in condition:
        return all(_holds(c, resource, params) for c in condition["allOf"])
    if "anyOf" in condition:
        return any(_holds(c, resource, params) for c in condition["anyOf"])
    actual = _field(resource, condition["field"]) if "field" in condition else _value(condition["value"], params)
    if "exists" in condition:
        return (actual is not None) == (condition["exists"] == "true")
    if "equals" in condition:
        return actual is not None and _text(actual) == _text(_value(condition["equals"], params))
    if "notEquals" in condition:
        return actual is None or _text(actual) != _text(_value(condition["notEquals"], params))
    raise AssertionError(f"condition not understood by the test evaluator: {condition}")


@pytest.mark.parametrize("minutes", [5, 10])
def test_policy_agrees_with_the_fleet_audit_on_the_example_estate(minutes: int) -> None:
    state = ArmState()
    state.load_seed(ROOT / "examples" / "fleet-seed.json")
    rule = azure_policy.definition(minutes)["properties"]["policyRule"]
    params = {"notBeforeTimeout": f"PT{minutes}M", "effect": "Audit"}
    flagged, expected = set(), set()
    for ss in state.scale_sets():
        resource = shapes.scale_set(ss, "2024-11-01")
        if _holds(rule["if"], resource, params):
            flagged.add(ss.name)
        profile = parse_scale_set(resource).profile
        excluded = ss.vm_profile.get("priority") == "Spot" or "aks-managed-poolName" in ss.tags
        if not excluded and not profile.is_enabled_with(minutes):
            expected.add(ss.name)
    assert flagged == expected
    assert "web-disabled" in flagged and "batch-spot" not in flagged
    assert ("web-5m" in flagged) == (minutes != 5)
