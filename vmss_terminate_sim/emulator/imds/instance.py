"""The instance metadata document of one emulated VM and IMDS route filtering over it.

Only what a scale-set agent needs is modelled (compute identity fields + a minimal network), with
plausible defaults derived from the VM name: Uniform scale sets name VMs `{scale-set}_{instance-id}`,
Flexible ones `{scale-set}_{8-char-id}` (reference: virtual-machine-scale-sets-instance-ids.md).
As the IMDS doc says, JSON primitives are strings and inapplicable values are "".
"""

from __future__ import annotations

import copy
import uuid
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

from vmss_terminate.scheduled_events import DEFAULT_SUBSCRIPTION

DEFAULT_RESOURCE_GROUP = "myresourcegroup"
DEFAULT_LOCATION = "westeurope"


def scale_set_of(vm_name: str) -> str:
    """`myvmss_3` -> `myvmss`; a name without `_` is a standalone VM ("")."""
    return vm_name.rsplit("_", 1)[0] if "_" in vm_name else ""


def default_resource_id(vm_name: str, vmss_name: str, subscription_id: str, resource_group: str) -> str:
    """Uniform instances live under the scale set (`.../virtualMachines/{instance-id}`); others are plain VMs."""
    prefix = f"/subscriptions/{subscription_id}/resourceGroups/{resource_group}/providers/Microsoft.Compute"
    suffix = vm_name.rsplit("_", 1)[-1]
    if vmss_name and vm_name.startswith(vmss_name + "_") and suffix.isdigit():
        return f"{prefix}/virtualMachineScaleSets/{vmss_name}/virtualMachines/{suffix}"
    return f"{prefix}/virtualMachines/{vm_name}"


@dataclass
class InstanceIdentity:
    vm_name: str
    vmss_name: str
    resource_id: str
    subscription_id: str = DEFAULT_SUBSCRIPTION
    resource_group: str = DEFAULT_RESOURCE_GROUP
    location: str = DEFAULT_LOCATION
    placement_group_id: str = ""
    private_ip: str = "10.0.0.4"
    extra_compute: Dict[str, Any] = field(default_factory=dict)

    def document(self) -> Dict[str, Any]:
        """The full `/metadata/instance` document in its newest shape."""
        vm_id = str(uuid.uuid5(uuid.NAMESPACE_URL, self.resource_id))
        compute: Dict[str, Any] = {
            "azEnvironment": "AzurePublicCloud",
            "location": self.location,
            "name": self.vm_name,
            "offer": "0001-com-ubuntu-server-jammy",
            "osProfile": {"adminUsername": "azureuser", "computerName": self.vm_name,
                          "disablePasswordAuthentication": "true"},
            "osType": "Linux",
            "placementGroupId": self.placement_group_id,
            "platformFaultDomain": "0",
            "platformUpdateDomain": "0",
            "provider": "Microsoft.Compute",
            "publisher": "canonical",
            "resourceGroupName": self.resource_group,
            "resourceId": self.resource_id,
            "sku": "22_04-lts-gen2",
            "subscriptionId": self.subscription_id,
            "tags": "",
            "tagsList": [],
            "version": "22.04.202401010",
            "vmId": vm_id,
            "vmScaleSetName": self.vmss_name,
            "vmSize": "Standard_D2s_v3",
            "zone": "",
        }
        compute.update(copy.deepcopy(self.extra_compute))
        last_octet = self.private_ip.rsplit(".", 1)[-1]
        network = {
            "interface": [{
                "ipv4": {
                    "ipAddress": [{"privateIpAddress": self.private_ip, "publicIpAddress": ""}],
                    "subnet": [{"address": self.private_ip.rsplit(".", 1)[0] + ".0", "prefix": "24"}],
                },
                "ipv6": {"ipAddress": []},
                "macAddress": "000D3A" + format(int(last_octet) if last_octet.isdigit() else 4, "06X"),
            }]
        }
        return {"compute": compute, "network": network}


class NotFound(Exception):
    """The route names an element that does not exist (IMDS answers 404)."""


def select(document: Any, segments: Sequence[str]) -> Any:
    """Follow route parameters (`compute/name`, `network/interface/0/ipv4`) into the document."""
    node = document
    for segment in segments:
        if isinstance(node, dict) and segment in node:
            node = node[segment]
        elif isinstance(node, list) and segment.isdigit() and int(segment) < len(node):
            node = node[int(segment)]
        else:
            raise NotFound(segment)
    return node


def is_leaf(node: Any) -> bool:
    return not isinstance(node, (dict, list))


def as_text(node: Any) -> str:
    """`format=text`: a leaf's value; for a dict or list, one child per line (`name`, `osProfile/`)."""
    if is_leaf(node):
        return str(node)
    keys: List[str] = list(node) if isinstance(node, dict) else [str(i) for i in range(len(node))]
    children = node.values() if isinstance(node, dict) else node
    return "\n".join(k + ("" if is_leaf(v) else "/") for k, v in zip(keys, children))


def make_identity(
    vm_name: str,
    vmss_name: Optional[str],
    resource_id: Optional[str],
    placement_group_id: str,
    subscription_id: str = DEFAULT_SUBSCRIPTION,
    resource_group: str = DEFAULT_RESOURCE_GROUP,
    location: str = DEFAULT_LOCATION,
    private_ip: str = "10.0.0.4",
    extra_compute: Optional[Dict[str, Any]] = None,
) -> InstanceIdentity:
    vmss = scale_set_of(vm_name) if vmss_name is None else vmss_name
    return InstanceIdentity(
        vm_name=vm_name,
        vmss_name=vmss,
        resource_id=resource_id or default_resource_id(vm_name, vmss, subscription_id, resource_group),
        subscription_id=subscription_id,
        resource_group=resource_group,
        location=location,
        placement_group_id=placement_group_id,
        private_ip=private_ip,
        extra_compute=dict(extra_compute or {}),
    )
