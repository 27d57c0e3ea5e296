"""Complete scale-set models: the profile a real Uniform scale set has, and the fields Compute
fills in when a body leaves them out.

Why: tools that GET the whole model and PUT it back (the Azure SDK's own clients, configuration
management) send every field they read, so a model missing `networkProfile` or `osProfile` is not
one Azure could have served. Two sources, kept apart:

* `default_vm_profile`: what the emulator gives a scale set whose seed names no profile -- the
  sections every Uniform scale set has (`osProfile`, `storageProfile`, `networkProfile`), shaped
  like `az vmss create`'s defaults (Ubuntu 22.04, `{name}Nic` / `{name}IPConfig`, a
  `{name}VNET/{name}Subnet` subnet).
* `fill_server_defaults`: what Compute adds to a body on create and update, read from the
  2024-11-01 CreateAScaleSetWithTerminateScheduledEventEnabled example (request -> 200 body):
  `osProfile.secrets: []`, `windowsConfiguration {provisionVMAgent, enableAutomaticUpdates}` (and
  `linuxConfiguration.provisionVMAgent` for Linux images), NIC `dnsSettings.dnsServers: []`,
  `enableAcceleratedNetworking: false`, IP configuration `privateIPAddressVersion: "IPv4"`;
  `adminPassword` is never returned. A seed profile that lacks a whole section gets the default's.

Top-level defaults (`platform_fault_domain_default`): a regional scale set's placement groups act
as an availability set with five fault domains; a zonal one spreads with one fault domain per zone
(Microsoft Learn, scale-set availability docs), Flexible sets default to 1.
"""

from __future__ import annotations

import copy
from typing import Any, Dict, List, Optional

DEFAULT_IMAGE = {
    "publisher": "Canonical",
    "offer": "0001-com-ubuntu-server-jammy",
    "sku": "22_04-lts-gen2",
    "version": "latest",
}
WINDOWS_PUBLISHERS = ("microsoftwindowsserver", "microsoftwindowsdesktop", "microsoftsqlserver")
SECTIONS = ("osProfile", "storageProfile", "networkProfile")


def default_vm_profile(subscription: str, resource_group: str, name: str) -> Dict[str, Any]:
    """The virtualMachineProfile of a scale set created with az's defaults (Linux, one NIC)."""
    prefix = name[:9]
    subnet = (f"/subscriptions/{subscription}/resourceGroups/{resource_group}/providers/Microsoft.Network"
              f"/virtualNetworks/{name}VNET/subnets/{name}Subnet")
    profile = {
        "osProfile": {
            "computerNamePrefix": prefix,
            "adminUsername": "azureuser",
            "linuxConfiguration": {
                "disablePasswordAuthentication": True,
                "ssh": {"publicKeys": [{"path": "/home/azureuser/.ssh/authorized_keys",
                                        "keyData": "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQC0emulator azureuser"}]},
            },
        },
        "storageProfile": {
            "imageReference": dict(DEFAULT_IMAGE),
            "osDisk": {"createOption": "FromImage", "caching": "ReadWrite",
                       "managedDisk": {"storageAccountType": "Standard_LRS"}},
        },
        "networkProfile": {
            "networkInterfaceConfigurations": [{
                "name": f"{prefix}Nic",
                "properties": {
                    "primary": True,
                    "enableIPForwarding": False,
                    "ipConfigurations": [{"name": f"{prefix}IPConfig", "properties": {"subnet": {"id": subnet}}}],
                },
            }],
        },
    }
    return fill_server_defaults(profile)


def complete_vm_profile(profile: Dict[str, Any], subscription: str, resource_group: str,
                        name: str) -> Dict[str, Any]:
    """A seed's profile with every missing section taken from `default_vm_profile`, then the
    server-filled fields (a copy; `profile` is not changed)."""
    out = copy.deepcopy(profile)
    defaults = default_vm_profile(subscription, resource_group, name)
    if not isinstance(out.get("osProfile"), dict) and is_windows(out):  # a Windows image: no Linux settings
        out["osProfile"] = {k: v for k, v in defaults["osProfile"].items() if k != "linuxConfiguration"}
    for section in SECTIONS:
        if not isinstance(out.get(section), dict):
            out[section] = defaults[section]
    storage = out["storageProfile"]
    for part in ("imageReference", "osDisk"):
        if not isinstance(storage.get(part), dict):
            storage[part] = defaults["storageProfile"][part]
    return fill_server_defaults(out)


def is_windows(profile: Dict[str, Any]) -> bool:
    os_profile = _dict(profile.get("osProfile"))
    if "windowsConfiguration" in os_profile:
        return True
    if "linuxConfiguration" in os_profile:
        return False
    storage = _dict(profile.get("storageProfile"))
    if str(_dict(storage.get("osDisk")).get("osType") or "").lower() == "windows":
        return True
    return str(_dict(storage.get("imageReference")).get("publisher") or "").lower() in WINDOWS_PUBLISHERS


def fill_server_defaults(profile: Dict[str, Any]) -> Dict[str, Any]:
    """Add in place what Compute adds to a stored model (module docstring); returns `profile`.
    Only keys that are absent are added; what a client sent is never changed."""
    os_profile = profile.get("osProfile")
    if isinstance(os_profile, dict):
        os_profile.pop("adminPassword", None)  # write-only: never in an answer
        os_profile.setdefault("secrets", [])
        if is_windows(profile):
            windows = os_profile.setdefault("windowsConfiguration", {})
            if isinstance(windows, dict):
                windows.setdefault("provisionVMAgent", True)
                windows.setdefault("enableAutomaticUpdates", True)
        else:
            linux = os_profile.setdefault("linuxConfiguration", {})
            if isinstance(linux, dict):
                linux.setdefault("provisionVMAgent", True)
    network = profile.get("networkProfile")
    for nic in _list(_dict(network).get("networkInterfaceConfigurations")):
        properties = _dict(_dict(nic).get("properties"))
        if not properties:
            continue
        properties.setdefault("dnsSettings", {"dnsServers": []})
        properties.setdefault("enableAcceleratedNetworking", False)
        for ip_config in _list(properties.get("ipConfigurations")):
            ip_properties = _dict(_dict(ip_config).get("properties"))
            if ip_properties:
                ip_properties.setdefault("privateIPAddressVersion", "IPv4")
    return profile


def platform_fault_domain_default(orchestration: str, zones: List[str]) -> int:
    if orchestration == "Flexible" or zones:
        return 1
    return 5


def os_name(profile: Dict[str, Any]) -> Optional[str]:
    """The guest OS name an instance view reports, where the image says it (None: unknown)."""
    image = _dict(_dict(profile.get("storageProfile")).get("imageReference"))
    publisher, sku = str(image.get("publisher") or "").lower(), str(image.get("sku") or "")
    if publisher == "canonical":
        return "ubuntu"
    if publisher == "microsoftwindowsserver" and sku:
        return "Windows Server " + sku.split("-gen")[0].replace("-", " ")
    return None


def _dict(value: Any) -> Dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> List[Any]:
    return value if isinstance(value, list) else []
