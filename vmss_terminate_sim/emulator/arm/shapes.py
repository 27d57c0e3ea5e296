"""JSON shapes the ARM emulator answers with (scale set, scale set VM, Flexible standalone VM, errors)
and the api-version rules, kept apart from routing so they can be read against the reference specs.
"""

from __future__ import annotations

import re
import time
from typing import Any, Dict, List, Optional, Tuple

from vmss_terminate_sim.emulator.arm import defaults, eventspolicy
from vmss_terminate_sim.emulator.arm.inventory import (
    InstanceRecord,
    ResourceGroupRecord,
    ScaleSetRecord,
    SubscriptionRecord,
)
from vmss_terminate_sim.emulator.server import Response

SCHEDULED_EVENTS_MIN_API = "2019-03-01"
ORCHESTRATION_MODE_MIN_API = "2020-12-01"
TIME_CREATED_MIN_API = "2021-11-01"
ETAG_MIN_API = "2023-09-01"
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
          headers: Optional[Dict[str, str]] = None, details: Optional[List[Dict[str, str]]] = None) -> Response:
    """ARM's error body: {"error": {"code": ..., "message": ...}} (+ target, details)."""
    body: Dict[str, Any] = {"code": code, "message": message}
    if target:
        body["target"] = target
    if details:
        body["details"] = details
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
    """A scale set as GET answers it: the stored model, the top-level fields every real scale set
    has (issue 18) and the other properties stored as sent."""
    # A shallow copy is enough: only a top-level key is dropped, and the state replaces
    # `vm_profile` on every change instead of editing it, so the nested dicts stay as rendered.
    vm_profile = dict(ss.vm_profile)
    if not supports_scheduled_events(api_version):
        vm_profile.pop("scheduledEventsProfile", None)
    properties: Dict[str, Any] = {
        "singlePlacementGroup": ss.single_placement_group,
        "upgradePolicy": dict(ss.upgrade_policy_extra, mode=ss.upgrade_policy),
        "virtualMachineProfile": vm_profile,
        "provisioningState": ss.provisioning_state,
        "overprovision": ss.overprovision,
        "uniqueId": ss.unique_id,
        "platformFaultDomainCount": ss.platform_fault_domain_count,
    }
    if ss.orchestration == "Flexible":
        del properties["overprovision"]  # Flexible sets do not overprovision; Azure omits it
    properties.update(ss.extra_properties)
    policy = eventspolicy.shaped(properties.pop(eventspolicy.POLICY, None), api_version)
    if policy is not None:
        properties[eventspolicy.POLICY] = policy
    if api_version[:10] >= ORCHESTRATION_MODE_MIN_API:
        properties["orchestrationMode"] = ss.orchestration
    if api_version[:10] >= TIME_CREATED_MIN_API:
        properties["timeCreated"] = iso_time(ss.time_created)
    out: Dict[str, Any] = {
        "name": ss.name,
        "id": ss.resource_id,
        "type": "Microsoft.Compute/virtualMachineScaleSets",
        "location": ss.location,
        "sku": {"name": ss.sku, "tier": ss.sku_tier, "capacity": ss.capacity},
    }
    if ss.zones:
        out["zones"] = list(ss.zones)
    if api_version[:10] >= ETAG_MIN_API:
        out["etag"] = f'"{ss.etag}"'
    out.update(ss.extra_resource)
    out["properties"] = properties
    if ss.tags:
        out["tags"] = dict(ss.tags)
    return out


def _computer_name(inst: InstanceRecord) -> str:
    if inst.scale_set.orchestration == "Flexible":
        return inst.name.replace("_", "")[:15]
    prefix = _dict(inst.model.get("osProfile")).get("computerNamePrefix") or inst.scale_set.name[:9]
    return prefix + computer_name_suffix(inst.instance_id)


def computer_name_suffix(instance_id: str) -> str:
    """What a Uniform scale set puts after the computer name prefix: the instance id in base 36 on
    six digits (3 -> `000003`, 36 -> `000010`)."""
    number, digits = int(instance_id), ""
    while True:
        number, rest = divmod(number, 36)
        digits = "0123456789abcdefghijklmnopqrstuvwxyz"[rest] + digits
        if not number:
            break
    return digits.zfill(6)


def _os_disk_name(inst: InstanceRecord) -> str:
    return f"{inst.scale_set.name}_{inst.name}_OsDisk_1_{inst.vm_id.replace('-', '')}"


def _vm_storage_profile(inst: InstanceRecord) -> Dict[str, Any]:
    """The instance's disks as Compute reports them: the model's image with `exactVersion`, the
    OS disk with its name, osType, size and managed disk id (2024-11-01 Get example)."""
    ss, storage = inst.scale_set, _dict(inst.model.get("storageProfile"))
    image = dict(_dict(storage.get("imageReference")))
    if image.get("version"):
        image["exactVersion"] = "1.0.20241101" if image["version"] == "latest" else image["version"]
    model_disk = _dict(storage.get("osDisk"))
    name = _os_disk_name(inst)
    os_disk = dict(model_disk, osType="Windows" if defaults.is_windows(inst.model) else "Linux", name=name,
                   managedDisk=dict(_dict(model_disk.get("managedDisk")),
                                    id=f"/subscriptions/{ss.subscription}/resourceGroups/{ss.resource_group}"
                                       f"/providers/Microsoft.Compute/disks/{name}"))
    os_disk.setdefault("diskSizeGB", 127 if os_disk["osType"] == "Windows" else 30)
    out: Dict[str, Any] = {}
    if image:
        out["imageReference"] = image
    out["osDisk"] = os_disk
    out["dataDisks"] = list(_list(storage.get("dataDisks")))
    return out


def _vm_os_profile(inst: InstanceRecord) -> Dict[str, Any]:
    model = _dict(inst.model.get("osProfile"))
    out: Dict[str, Any] = {"computerName": _computer_name(inst)}
    for key in ("adminUsername", "linuxConfiguration", "windowsConfiguration", "secrets"):
        if key in model:
            out[key] = model[key]
    out.update(allowExtensionOperations=model.get("allowExtensionOperations", True),
               requireGuestProvisionSignal=True)
    return out


def _nic_configurations(inst: InstanceRecord) -> List[Dict[str, Any]]:
    return [nic for nic in _list(_dict(inst.model.get("networkProfile")).get("networkInterfaceConfigurations"))
            if isinstance(nic, dict)]


def _vm(inst: InstanceRecord, properties: Dict[str, Any], **extra: Any) -> Dict[str, Any]:
    """What every VM shape shares: identity, type and location, then the shape's own properties
    (each carries vmId, osProfile and provisioningState)."""
    out: Dict[str, Any] = {
        "name": inst.name,
        "id": inst.resource_id,
        "type": "Microsoft.Compute/virtualMachines",
        "location": inst.scale_set.location,
    }
    out.update(extra)
    out["properties"] = dict(properties, vmId=inst.vm_id, osProfile=_vm_os_profile(inst),
                             provisioningState=inst.provisioning_state)
    return out


def scale_set_vm(inst: InstanceRecord, expand_instance_view: bool = False) -> Dict[str, Any]:
    """A Uniform scale set VM (VirtualMachineScaleSetVM) as in the 2024-11-01 Get example: model
    state, the NIC configurations of its model, hardware/storage/os/network profiles; the
    instance view with `$expand=instanceView`."""
    ss, nics = inst.scale_set, _nic_configurations(inst)
    properties: Dict[str, Any] = {
        **({"latestModelApplied": inst.latest_model_applied} if inst.model_reported else {}),
        "modelDefinitionApplied": "VirtualMachineScaleSet",
        "networkProfileConfiguration": {"networkInterfaceConfigurations": nics},
        "hardwareProfile": {},
        "storageProfile": _vm_storage_profile(inst),
        "networkProfile": {"networkInterfaces": [
            {"id": f"{inst.resource_id}/networkInterfaces/{nic.get('name')}"} for nic in nics]},
    }
    if expand_instance_view:
        properties["instanceView"] = instance_view(inst)
    extra: Dict[str, Any] = {"instanceId": inst.instance_id, "sku": {"name": ss.sku, "tier": ss.sku_tier}}
    if ss.zones:
        extra["zones"] = [ss.zones[_instance_number(inst) % len(ss.zones)]]
    return _vm(inst, properties, **extra)


def _instance_number(inst: InstanceRecord) -> int:
    return int(inst.instance_id) if inst.instance_id.isdigit() else inst.sequence


def _status(code: str, display: str, time_of: Optional[float]) -> Dict[str, Any]:
    out: Dict[str, Any] = {"code": code, "level": "Info", "displayStatus": display}
    if time_of is not None:
        out["time"] = iso_time(time_of)
    return out


def instance_view(inst: InstanceRecord) -> Dict[str, Any]:
    """`GET .../virtualMachines/{id}/instanceView` (2024-11-01 GetInstanceView example): update and
    fault domain, computer and OS name, agent, OS disk and the ProvisioningState/PowerState
    statuses. No latestModelApplied here (the example has none)."""
    ss, number = inst.scale_set, _instance_number(inst)
    state = inst.provisioning_state.lower()
    display = {"succeeded": "Provisioning succeeded", "deleting": "Deleting"}.get(state, inst.provisioning_state)
    out: Dict[str, Any] = {
        "platformUpdateDomain": number % 5,
        "platformFaultDomain": number % max(1, ss.platform_fault_domain_count),
        "computerName": _computer_name(inst),
    }
    name = defaults.os_name(inst.model)
    if name is not None:
        out["osName"] = name
    out["vmAgent"] = {"vmAgentVersion": "2.11.1.12", "statuses": [
        _status("ProvisioningState/succeeded", "Ready", inst.created_at)], "extensionHandlers": []}
    out["disks"] = [{"name": _os_disk_name(inst),
                     "statuses": [_status("ProvisioningState/succeeded", "Provisioning succeeded", inst.created_at)]}]
    out["statuses"] = [_status(f"ProvisioningState/{state}", display, inst.created_at),
                       _status("PowerState/running", "VM running", None)]
    return out


def scale_set_instance_view(ss: ScaleSetRecord) -> Dict[str, Any]:
    """`GET .../virtualMachineScaleSets/{name}/instanceView` (VirtualMachineScaleSetInstanceView):
    the set's provisioning status and how many instances are in each provisioning state."""
    counts: Dict[str, int] = {}
    for inst in ss.instances.values():
        code = f"ProvisioningState/{inst.provisioning_state.lower()}"
        counts[code] = counts.get(code, 0) + 1
    state = ss.provisioning_state.lower()
    display = "Provisioning succeeded" if state == "succeeded" else ss.provisioning_state
    out: Dict[str, Any] = {
        "virtualMachine": {"statusesSummary": [{"code": code, "count": n} for code, n in counts.items()]},
        "extensions": [],
        "statuses": [_status(f"ProvisioningState/{state}", display, ss.time_created)],
    }
    if _dict(ss.extra_properties.get("automaticRepairsPolicy")).get("enabled") is True:
        out["orchestrationServices"] = [{"serviceName": "AutomaticRepairs", "serviceState": "Running"}]
    return out


def standalone_vm(inst: InstanceRecord) -> Dict[str, Any]:
    """A Flexible scale set member, which ARM exposes as a plain Microsoft.Compute/virtualMachines."""
    ss = inst.scale_set
    nics = [{"id": f"/subscriptions/{ss.subscription}/resourceGroups/{ss.resource_group}/providers"
                   f"/Microsoft.Network/networkInterfaces/{inst.name}-{nic.get('name')}"}
            for nic in _nic_configurations(inst)]
    vm = _vm(inst, {"hardwareProfile": {"vmSize": ss.sku}, "virtualMachineScaleSet": {"id": ss.resource_id},
                    "storageProfile": _vm_storage_profile(inst), "networkProfile": {"networkInterfaces": nics}})
    vm["properties"]["timeCreated"] = iso_time(inst.created_at)
    return vm


def _dict(value: Any) -> Dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> List[Any]:
    return value if isinstance(value, list) else []


def feature(subscription: str, name: str, state: str) -> Dict[str, Any]:
    """A subscription feature as Microsoft.Features' Features_Get answers it (2021-07-01: name,
    properties.state, id, type; registerFeature.json's example shape)."""
    namespace, _, short = name.partition("/")
    return {
        "properties": {"state": state},
        "id": f"/subscriptions/{subscription}/providers/Microsoft.Features/providers/{namespace}/features/{short}",
        "type": "Microsoft.Features/providers/features",
        "name": f"{namespace}/{short}",
    }
