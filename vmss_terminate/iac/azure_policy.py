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
from typing import Any, Dict, List, Optional

from vmss_terminate.control.events_policy import APPROVE, EVENT_GRID, KINDS, POLICY, TARGETS, PolicyChange
from vmss_terminate.timeout import MAX_MINUTES, MIN_MINUTES, to_iso

VMSS = "Microsoft.Compute/virtualMachineScaleSets"
ALIAS_PREFIX = f"{VMSS}/virtualMachineProfile.scheduledEventsProfile.terminateNotificationProfile"
ENABLE_ALIAS = f"{ALIAS_PREFIX}.enable"
TIMEOUT_ALIAS = f"{ALIAS_PREFIX}.notBeforeTimeout"
PRIORITY_ALIAS = f"{VMSS}/virtualMachineProfile.priority"
AKS_TAG = "aks-managed-poolName"
DEFAULT_TIMEOUT = to_iso(MIN_MINUTES)  # Azure's default when enabled without notBeforeTimeout
TIMEOUT_PARAMETER = "[parameters('notBeforeTimeout')]"

# The scheduled-events policy's aliases, spelled by the same rule (`<type>/<property path without
# "properties.">`). NOT CONFIRMED: no alias list we could read names them (docs/fleet.md says how to
# check: the `az provider show ... aliases` query above). Azure Policy refuses a definition naming an
# alias that does not exist, so they appear only when `render --format policy` is given a policy
# option, and the definition's metadata says they are unconfirmed. Audit only: whether Azure marks
# them modifiable (for the Modify effect) could not be confirmed either.
EVENT_GRID_ALIAS = f"{VMSS}/{POLICY}.{TARGETS}.{EVENT_GRID}.enable"
APPROVE_ALIASES = {kind: f"{VMSS}/{POLICY}.{member}.{APPROVE}" for kind, member in KINDS.items()}
_APPROVE_PARAMETERS = {"user-reboot": "autoApproveUserReboot", "user-redeploy": "autoApproveUserRedeploy",
                       "all-instances-down": "autoApproveAllInstancesDown"}


def definition(minutes: int, policy: Optional[PolicyChange] = None) -> Dict[str, Any]:
    """The policy definition (the `properties` ARM's policyDefinitions resource takes, wrapped as
    `az policy definition create --rules/--params` and the REST API accept it). With `policy`
    (render's --event-grid / --auto-approve KIND), it also audits the scheduled-events policy:
    parameters `requireEventGrid` and `autoApprove<Kind>` (Boolean, defaults from the options)."""
    base = _terminate_definition(minutes)
    if policy is not None and (policy.event_grid or policy.auto_approve):
        _add_events_policy(base["properties"], policy)
    return base


def _add_events_policy(properties: Dict[str, Any], policy: PolicyChange) -> None:
    parameters = properties["parameters"]
    rules: List[Dict[str, Any]] = properties["policyRule"]["if"]["allOf"][-1]["anyOf"]
    unconfirmed = []
    if policy.event_grid:
        parameters["requireEventGrid"] = {
            "type": "Boolean", "defaultValue": True,
            "metadata": {"displayName": "Require Event Grid and Resource Graph publishing",
                         "description": "Non-compliant unless scheduledEventsPolicy publishes the set's scheduled "
                                        "events to Event Grid and Resource Graph (preview)."}}
        rules.append(_required("requireEventGrid", EVENT_GRID_ALIAS))
        unconfirmed.append(EVENT_GRID_ALIAS)
    for kind in policy.auto_approve:
        name = _APPROVE_PARAMETERS[kind]
        parameters[name] = {
            "type": "Boolean", "defaultValue": True,
            "metadata": {"displayName": f"Require auto-approval: {kind}",
                         "description": f"Non-compliant unless scheduledEventsPolicy approves {kind} events by "
                                        "itself (automaticallyApprove)."}}
        rules.append(_required(name, APPROVE_ALIASES[kind]))
        unconfirmed.append(APPROVE_ALIASES[kind])
    properties["description"] += (" With the scheduled-events policy parameters it also audits "
                                  "properties.scheduledEventsPolicy; its aliases are not confirmed (check them with "
                                  "`az provider show --namespace Microsoft.Compute --expand resourceTypes/aliases`)"
                                  " and the definition is audit-only.")
    properties["metadata"]["unconfirmedAliases"] = unconfirmed


def _required(parameter: str, alias: str) -> Dict[str, Any]:
    """Non-compliant when the Boolean `parameter` is true and `alias` is not literally true."""
    return {"allOf": [{"value": f"[parameters('{parameter}')]", "equals": True},
                      {"anyOf": [{"field": alias, "exists": "false"}, {"field": alias, "notEquals": "true"}]}]}


def _terminate_definition(minutes: int) -> Dict[str, Any]:
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


def render_definition(minutes: int, policy: Optional[PolicyChange] = None) -> str:
    return json.dumps(definition(minutes, policy), indent=2) + "\n"
