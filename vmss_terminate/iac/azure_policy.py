"""The Azure Policy definition that audits scale sets for terminate notification (Azure ships no
built-in policy for it): `render --format policy` and `templates/policy/` come from here.

Aliases: Azure Policy names a resource property `<type>/<property path without "properties.">`;
the two used here follow that rule for `properties.virtualMachineProfile.scheduledEventsProfile.
terminateNotificationProfile.{enable,notBeforeTimeout}` (see docs/fleet.md for where they were
checked and how to list them: `az provider show --namespace Microsoft.Compute --expand
"resourceTypes/aliases" --query "resourceTypes[?resourceType=='virtualMachineScaleSets'].aliases[].name"`).

Non-compliant: the profile is missing, `enable` is not true, or the effective notBeforeTimeout is
another than the `notBeforeTimeout` parameter (an enabled profile without a timeout is Azure's
PT5M default). Spot scale sets (not supported) and AKS node pools (AKS owns them) are not evaluated.
The comparison is textual: write the parameter as `enable`/`rollout` do (PT10M, not PT600S).
"""

from __future__ import annotations

import json
from typing import Any, Dict, List

from vmss_terminate.timeout import MAX_MINUTES, MIN_MINUTES, to_iso

VMSS = "Microsoft.Compute/virtualMachineScaleSets"
ALIAS_PREFIX = f"{VMSS}/virtualMachineProfile.scheduledEventsProfile.terminateNotificationProfile"
ENABLE_ALIAS = f"{ALIAS_PREFIX}.enable"
TIMEOUT_ALIAS = f"{ALIAS_PREFIX}.notBeforeTimeout"
PRIORITY_ALIAS = f"{VMSS}/virtualMachineProfile.priority"
AKS_TAG = "aks-managed-poolName"
DEFAULT_TIMEOUT = to_iso(MIN_MINUTES)  # Azure's default when enabled without notBeforeTimeout
TIMEOUT_PARAMETER = "[parameters('notBeforeTimeout')]"


def definition(minutes: int) -> Dict[str, Any]:
    """The policy definition (the `properties` ARM's policyDefinitions resource takes, wrapped as
    `az policy definition create --rules/--params` and the REST API accept it)."""
    return {
        "properties": {
            "displayName": "VM scale sets should have terminate notification enabled with the required delay",
            "policyType": "Custom",
            "mode": "Indexed",
            "description": (
                "Audits virtual machine scale sets whose scheduledEventsProfile.terminateNotificationProfile is "
                "missing, disabled, or has another notBeforeTimeout than the parameter. Without it instances are "
                "deleted on scale-in without a Terminate scheduled event to drain on. Spot scale sets (not "
                "supported) and AKS node pools (managed by AKS) are not evaluated. Fix with `vmss-terminate "
                "fleet rollout --timeout <minutes>`."
            ),
            "metadata": {"category": "Compute", "version": "1.0.0", "source": "vmss-terminate"},
            "parameters": {
                "notBeforeTimeout": {
                    "type": "String",
                    "defaultValue": to_iso(minutes),
                    "allowedValues": [to_iso(m) for m in range(MIN_MINUTES, MAX_MINUTES + 1)],
                    "metadata": {"displayName": "notBeforeTimeout",
                                 "description": "The delay Azure waits before deleting an instance (ISO 8601, "
                                                "PT5M..PT15M)."},
                },
                "effect": {
                    "type": "String",
                    "defaultValue": "Audit",
                    "allowedValues": ["Audit", "Disabled"],
                    "metadata": {"displayName": "Effect", "description": "Audit, or Disabled to switch it off."},
                },
            },
            "policyRule": {
                "if": {"allOf": [
                    {"field": "type", "equals": VMSS},
                    {"field": PRIORITY_ALIAS, "notEquals": "Spot"},
                    {"field": f"tags['{AKS_TAG}']", "exists": "false"},
                    {"anyOf": _non_compliant()},
                ]},
                "then": {"effect": "[parameters('effect')]"},
            },
        }
    }


def _non_compliant() -> List[Dict[str, Any]]:
    return [
        {"field": ENABLE_ALIAS, "exists": "false"},
        {"field": ENABLE_ALIAS, "notEquals": "true"},
        {"allOf": [{"field": TIMEOUT_ALIAS, "exists": "true"},
                   {"field": TIMEOUT_ALIAS, "notEquals": TIMEOUT_PARAMETER}]},
        {"allOf": [{"field": TIMEOUT_ALIAS, "exists": "false"},
                   {"value": TIMEOUT_PARAMETER, "notEquals": DEFAULT_TIMEOUT}]},
    ]


def assignment(minutes: int, scope: str = "/subscriptions/00000000-0000-0000-0000-000000000000") -> Dict[str, Any]:
    """An example assignment of the definition at `scope`."""
    return {
        "properties": {
            "displayName": "Scale sets: terminate notification " + to_iso(minutes),
            "policyDefinitionId": f"{scope}/providers/Microsoft.Authorization/policyDefinitions/"
                                  "vmss-terminate-notification",
            "scope": scope,
            "parameters": {"notBeforeTimeout": {"value": to_iso(minutes)}, "effect": {"value": "Audit"}},
            "enforcementMode": "Default",
        }
    }


def render_definition(minutes: int) -> str:
    return json.dumps(definition(minutes), indent=2) + "\n"
