"""JSON shapes the ARM emulator answers with (scale set, scale set VM, Flexible standalone VM, errors)
and the api-version rules, kept apart from routing so they can be read against the reference specs.
"""

from __future__ import annotations

import re
import time
from typing import Any, Dict, Optional, Tuple

from vmss_terminate.emulator.arm.inventory import (
    InstanceRecord,
    ResourceGroupRecord,
    ScaleSetRecord,
    SubscriptionRecord,
)
from vmss_terminate.emulator.server import Response

SCHEDULED_EVENTS_MIN_API = "2019-03-01"
ORCHESTRATION_MODE_MIN_API = "2020-12-01"
_API_VERSION = re.compile(r"^\d{4}-\d{2}-\d{2}(-preview)?$")
CLOUD_NAME = "VmssTerminateEmulator"
MEMBER_NOT_FOUND = "Could not find member 'scheduledEventsProfile' on object of type 'VirtualMachineProfile'"


def valid_api_version(value: str) -> bool:
    return bool(_API_VERSION.match(value))


def supports_scheduled_events(api_version: str) -> bool:
    return api_version[:10] >= SCHEDULED_EVENTS_MIN_API


def iso_time(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch)) + f".{int((epoch % 1) * 1e7):07d}+00:00"


def error(status: int, code: str, message: str, target: Optional[str] = None,
          headers: Optional[Dict[str, str]] = None) -> Response:
    """ARM's error body: {"error": {"code": ..., "message": ...}}."""
    body: Dict[str, Any] = {"code": code, "message": message}
    if target:
        body["target"] = target
    return Response.json(status, {"error": body}, headers)


def cloud_metadata(resource_manager: str, login_endpoint: str, audiences: Tuple[str, ...]) -> Dict[str, Any]:
    """`GET /metadata/endpoints?api-version=2022-09-01`: what `az cloud register
    --endpoint-resource-manager URL` reads to discover a cloud. Only the emulator's own endpoints
    (ARM, its token endpoint as the login endpoint): services it does not emulate are left out, so
    no client is sent to a real Azure host. Audiences are Azure's ARM audiences: identifiers a token
    is minted for (by the emulator's token endpoint), never contacted."""
    return {
        "name": CLOUD_NAME,
        "resourceManager": resource_manager.rstrip("/") + "/",
        "authentication": {
            "loginEndpoint": login_endpoint.rstrip("/") + "/",
            "audiences": [a.rstrip("/") + "/" for a in audiences],
            "tenant": "common",
            "identityProvider": "AAD",
        },
        "suffixes": {},
    }


def subscription(sub: SubscriptionRecord) -> Dict[str, Any]:
    """A subscription as `GET /subscriptions[/{id}]` answers it (Microsoft.Resources, 2022-12-01)."""
    return {
        "id": f"/subscriptions/{sub.subscription_id}",
        "authorizationSource": "RoleBased",
        "managedByTenants": [],
        "subscriptionId": sub.subscription_id,
        "tenantId": sub.tenant_id,
        "displayName": sub.display_name,
        "state": sub.state,
        "subscriptionPolicies": {
            "locationPlacementId": "Public_2014-09-01",
            "quotaId": "PayAsYouGo_2014-09-01",
            "spendingLimit": "Off",
        },
    }


def resource_group(rg: ResourceGroupRecord) -> Dict[str, Any]:
    """A resource group as `GET /subscriptions/{id}/resourcegroups[/{name}]` answers it
    (Microsoft.Resources ResourceGroup: the CreateResourceGroup example's body plus the schema's
    `type` and `tags`; tags only when the group has some)."""
    out: Dict[str, Any] = {
        "id": rg.resource_id,
        "name": rg.name,
        "type": "Microsoft.Resources/resourceGroups",
        "location": rg.location,
    }
    if rg.tags:
        out["tags"] = dict(rg.tags)
    out["properties"] = {"provisioningState": rg.provisioning_state}
    return out


def scale_set(ss: ScaleSetRecord, api_version: str) -> Dict[str, Any]:
    # A shallow copy is enough: only a top-level key is dropped, and the state replaces
    # `vm_profile` on every change instead of editing it, so the nested dicts stay as rendered.
    vm_profile = dict(ss.vm_profile)
    if not supports_scheduled_events(api_version):
        vm_profile.pop("scheduledEventsProfile", None)
    properties: Dict[str, Any] = {
        "singlePlacementGroup": ss.orchestration == "Uniform",
        "upgradePolicy": {"mode": ss.upgrade_policy},
        "virtualMachineProfile": vm_profile,
        "provisioningState": ss.provisioning_state,
        "overprovision": False,
        "uniqueId": ss.unique_id,
    }
    properties.update(ss.extra_properties)
    if ss.orchestration == "Flexible":
        properties["platformFaultDomainCount"] = 1
    if api_version[:10] >= ORCHESTRATION_MODE_MIN_API:
        properties["orchestrationMode"] = ss.orchestration
    out: Dict[str, Any] = {
        "name": ss.name,
        "id": ss.resource_id,
        "type": "Microsoft.Compute/virtualMachineScaleSets",
        "location": ss.location,
        "sku": {"name": ss.sku, "tier": "Standard", "capacity": ss.capacity},
        "properties": properties,
    }
    if ss.tags:
        out["tags"] = dict(ss.tags)
    return out


def _computer_name(inst: InstanceRecord) -> str:
    if inst.scale_set.orchestration == "Flexible":
        return inst.name.replace("_", "")[:15]
    prefix = inst.scale_set.vm_profile.get("osProfile", {}).get("computerNamePrefix") or inst.scale_set.name[:9]
    number, digits = int(inst.instance_id), ""
    while True:
        number, rest = divmod(number, 36)
        digits = "0123456789abcdefghijklmnopqrstuvwxyz"[rest] + digits
        if not number:
            break
    return prefix + digits.zfill(6)


def _vm(inst: InstanceRecord, properties: Dict[str, Any], **extra: Any) -> Dict[str, Any]:
    """What every VM shape shares: identity, type and location, then the shape's own properties
    (each carries vmId, osProfile.computerName and provisioningState)."""
    out: Dict[str, Any] = {
        "name": inst.name,
        "id": inst.resource_id,
        "type": "Microsoft.Compute/virtualMachines",
        "location": inst.scale_set.location,
    }
    out.update(extra)
    out["properties"] = dict(properties, vmId=inst.vm_id, osProfile={"computerName": _computer_name(inst)},
                             provisioningState=inst.provisioning_state)
    return out


def scale_set_vm(inst: InstanceRecord) -> Dict[str, Any]:
    """A Uniform scale set VM (VirtualMachineScaleSetVM), as in the 2024-11-01 Get example."""
    return _vm(
        inst,
        {"latestModelApplied": inst.latest_model_applied, "modelDefinitionApplied": "VirtualMachineScaleSet"},
        instanceId=inst.instance_id,
        sku={"name": inst.scale_set.sku, "tier": "Standard"},
    )


def standalone_vm(inst: InstanceRecord) -> Dict[str, Any]:
    """A Flexible scale set member, which ARM exposes as a plain Microsoft.Compute/virtualMachines."""
    ss = inst.scale_set
    vm = _vm(inst, {"hardwareProfile": {"vmSize": ss.sku}, "virtualMachineScaleSet": {"id": ss.resource_id}})
    vm["properties"]["timeCreated"] = iso_time(inst.created_at)
    return vm
