"""The rules a PUT of a whole scale set passes, as Compute applies them: unknown members are
refused, create-time properties cannot change, and an omitted property is kept or reset per
property (a PATCH passes the same member and create-time checks for what it carries, and
changes nothing it leaves out). Why its own module: a tool that GETs the model and PUTs it back whole is the riskiest
way to change terminate notifications (a missing field is a changed field), so these rules are
read against their sources, listed in docs/emulators.md.

* Unknown members -> 400. At the resource level ARM's front door answers `InvalidRequestContent`
  "... Could not find member 'X' on object of type 'ResourceDefinition'. Path 'X', ..."
  (azure-rest-api-specs#286); inside `properties` Compute answers `InvalidRequestFormat` "Cannot
  parse the request." with an `InvalidJson` detail "Could not find member 'X' on object of type
  '...'" (terraform-provider-azurerm#14437). Known members: the azure-mgmt-compute model's.
* Create-time properties -> 409 `PropertyChangeNotAllowed` "Changing property 'P' is not
  allowed." with target P (platformFaultDomainCount: azure-docs#108952, aks-engine#1530; zones:
  azure-powershell#4704; osDisk.createOption: azure-powershell#7621, 409 Conflict). The same code
  is used where only the restriction is documented (Microsoft Learn "Modify a scale set",
  properties with restrictions: zones, image publisher/offer, managed OS disk storage type,
  singlePlacementGroup false -> true; orchestrationMode is fixed at creation).
* Omitted -> kept: orchestrationMode, platformFaultDomainCount, singlePlacementGroup (aks-engine
  #2811: a PUT without it succeeds on a set with false), sku, upgradePolicy.mode,
  storageProfile / imageReference (az drops it on purpose), osProfile, networkProfile. Omitted ->
  reset: tags, overprovision (Azure's default), the other properties (scaleInPolicy, ...), the
  other virtualMachineProfile members (scheduledEventsProfile included). Omitted zones on a zonal
  set -> 409, not kept. Read-only values sent back (provisioningState, uniqueId, timeCreated, id,
  name, type, etag, systemData) are ignored.
* `If-Match` / `If-None-Match` (Compute since 2023-09-01): 412 PreconditionFailed
  (cloud-provider-azure#9728).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from vmss_terminate_sim.emulator.arm.inventory import ArmStateError, ScaleSetRecord

RESOURCE_MEMBERS = ("id", "name", "type", "systemData", "tags", "location", "sku", "plan", "properties",
                    "identity", "zones", "extendedLocation", "etag", "placement")
PROPERTY_MEMBERS = (
    "upgradePolicy", "scheduledEventsPolicy", "automaticRepairsPolicy", "virtualMachineProfile",
    "provisioningState", "overprovision", "doNotRunExtensionsOnOverprovisionedVMs", "uniqueId",
    "singlePlacementGroup", "zoneBalance", "platformFaultDomainCount", "proximityPlacementGroup", "hostGroup",
    "additionalCapabilities", "scaleInPolicy", "orchestrationMode", "spotRestorePolicy", "priorityMixPolicy",
    "timeCreated", "constrainedMaximumCapacity", "resiliencyPolicy", "zonalPlatformFaultDomainAlignMode",
    "skuProfile", "highSpeedInterconnectPlacement", "lifecycleHooksProfile", "externalHealthPolicy",
)
# Members the emulator models itself (or ignores as read-only); the others are stored as sent.
_MODELLED_RESOURCE = ("id", "name", "type", "systemData", "tags", "location", "sku", "properties", "zones", "etag")
_MODELLED_PROPERTIES = ("upgradePolicy", "virtualMachineProfile", "provisioningState", "overprovision", "uniqueId",
                        "singlePlacementGroup", "platformFaultDomainCount", "orchestrationMode", "timeCreated")
FAULT_DOMAINS = range(1, 6)


@dataclass
class TopLevel:
    """What a PUT body says about the top-level fields (None: not sent)."""

    orchestration: Optional[str] = None
    platform_fault_domain_count: Optional[int] = None
    single_placement_group: Optional[bool] = None
    overprovision: Optional[bool] = None
    zones: Optional[List[str]] = None
    sku_tier: Optional[str] = None
    upgrade_policy_extra: Dict[str, Any] = field(default_factory=dict)
    extra_properties: Dict[str, Any] = field(default_factory=dict)
    extra_resource: Dict[str, Any] = field(default_factory=dict)


def check_members(body: Dict[str, Any], raw: bytes) -> None:
    """400 for a member the resource or its `properties` does not have (names are matched
    case-insensitively, as Compute's JSON reader does)."""
    known = {m.lower() for m in RESOURCE_MEMBERS}
    for key in body:
        if key.lower() not in known:
            raise ArmStateError(400, "InvalidRequestContent",
                                f"The request content was invalid and could not be deserialized: 'Could not find "
                                f"member '{key}' on object of type 'ResourceDefinition'. Path '{key}', line 1, "
                                f"position {_position(raw, key)}.'.")
    properties = body.get("properties")
    if not isinstance(properties, dict):
        return
    known = {m.lower() for m in PROPERTY_MEMBERS}
    for key in properties:
        if key.lower() not in known:
            raise ArmStateError(400, "InvalidRequestFormat", "Cannot parse the request.", details=[{
                "code": "InvalidJson",
                "message": f"Could not find member '{key}' on object of type 'VirtualMachineScaleSetProperties'. "
                           f"Path 'properties.{key}', line 1, position {_position(raw, key)}.",
            }])


def _position(raw: bytes, key: str) -> int:
    """Where the reader stood after the member's name (1-based, as Json.NET reports it)."""
    found = raw.find(b'"' + key.encode("utf-8", "replace") + b'"')
    return found + len(key) + 2 if found >= 0 else 1


def top_level(body: Dict[str, Any], properties: Dict[str, Any]) -> TopLevel:
    """Read and type-check the top-level fields of a PUT body (400 InvalidParameter when a value
    has the wrong type or range)."""
    top = TopLevel()
    mode = properties.get("orchestrationMode")
    if mode is not None:
        if str(mode).lower() not in ("uniform", "flexible"):
            raise ArmStateError(400, "InvalidParameter", f"Orchestration mode '{mode}' is not valid.",
                                "orchestrationMode")
        top.orchestration = "Uniform" if str(mode).lower() == "uniform" else "Flexible"
    count = properties.get("platformFaultDomainCount")
    if count is not None:
        if isinstance(count, bool) or not isinstance(count, int):
            raise ArmStateError(400, "InvalidParameter",
                                f"The value '{count}' of parameter 'platformFaultDomainCount' is not valid.",
                                "platformFaultDomainCount")
        top.platform_fault_domain_count = count
    top.single_placement_group = _boolean(properties, "singlePlacementGroup")
    top.overprovision = _boolean(properties, "overprovision")
    zones = body.get("zones")
    if zones is not None:
        if not isinstance(zones, list) or not all(isinstance(z, (str, int)) and not isinstance(z, bool)
                                                  for z in zones):
            raise ArmStateError(400, "InvalidParameter", "zones must be a list of zone names.", "zones")
        top.zones = [str(z) for z in zones]
    sku = body.get("sku")
    if isinstance(sku, dict) and sku.get("tier") is not None:
        top.sku_tier = str(sku["tier"])
    policy = properties.get("upgradePolicy")
    if isinstance(policy, dict):
        top.upgrade_policy_extra = {k: v for k, v in policy.items() if k != "mode" and v is not None}
    top.extra_properties = {k: v for k, v in properties.items() if k not in _MODELLED_PROPERTIES and v is not None}
    top.extra_resource = {k: v for k, v in body.items() if k not in _MODELLED_RESOURCE and v is not None}
    return top


def check_create(top: TopLevel, orchestration: str) -> None:
    """A new scale set's fault domain count must be in range (a silently dropped 0 hid a bad body)."""
    count = top.platform_fault_domain_count
    if count is not None and count not in FAULT_DOMAINS:
        raise ArmStateError(400, "InvalidParameter",
                            f"The specified fault domain count {count} must fall in the range "
                            f"{FAULT_DOMAINS.start} to {FAULT_DOMAINS.stop - 1}.", "platformFaultDomainCount")
    if orchestration == "Flexible" and top.single_placement_group:
        raise ArmStateError(400, "InvalidParameter",
                            "The value 'True' of parameter 'singlePlacementGroup' is not allowed. Allowed values "
                            "are: False.", "singlePlacementGroup")


def check_preconditions(ss: Optional[ScaleSetRecord], if_match: Optional[str], if_none_match: Optional[str]) -> None:
    """Optimistic concurrency (Compute since 2023-09-01): `If-Match` must name the current etag
    (`*`: any existing set), `If-None-Match: *` refuses an existing one. 412 PreconditionFailed with
    the message quoted in cloud-provider-azure#9728 (the If-None-Match message is the emulator's)."""
    if if_match is not None and if_match.strip():
        wanted = if_match.strip()
        current = f'"{ss.etag}"' if ss is not None else None
        if current is None or (wanted != "*" and wanted != current):
            raise ArmStateError(412, "PreconditionFailed",
                                f"Etag provided in if-match header {wanted} does not match etag "
                                f"{current if current is not None else 'null'} of resource.")
    if ss is not None and (if_none_match or "").strip() == "*":
        raise ArmStateError(412, "PreconditionFailed",
                            f"If-None-Match '*' was provided but the resource '{ss.name}' already exists.")


def check_location(ss: ScaleSetRecord, location: Any) -> None:
    """ARM's answer to a PUT naming another location (message as quoted in azure-docs#70422; the
    409 status is the emulator's choice). Names compare as ARM normalises them ("West US" = westus)."""
    if location is None or _region(location) == _region(ss.location):
        return
    raise ArmStateError(409, "InvalidResourceLocation",
                        f"The resource '{ss.name}' already exists in location '{ss.location}' in resource group "
                        f"'{ss.resource_group}'. A resource with the same name cannot be created in location "
                        f"'{location}'. Please select a new resource name.")


def _region(location: Any) -> str:
    return str(location).replace(" ", "").lower()


def check_changes(ss: ScaleSetRecord, top: TopLevel, vm_profile: Dict[str, Any], patch: bool = False) -> None:
    """409 PropertyChangeNotAllowed for a create-time property the PUT (or PATCH: only what it
    carries) changes (module docstring)."""
    if top.orchestration is not None and top.orchestration != ss.orchestration:
        raise _not_allowed("orchestrationMode")
    if top.platform_fault_domain_count is not None and top.platform_fault_domain_count != ss.platform_fault_domain_count:
        raise _not_allowed("platformFaultDomainCount")
    if top.single_placement_group is True and not ss.single_placement_group:
        raise _not_allowed("singlePlacementGroup")
    if not (patch and top.zones is None):
        if ss.zones and not set(ss.zones) <= set(top.zones or []):
            raise _not_allowed("zones")
        if not ss.zones and top.zones:
            raise _not_allowed("zones")
    stored, sent = _storage(ss.vm_profile), _storage(vm_profile)
    for path in (("osDisk", "createOption"), ("osDisk", "managedDisk", "storageAccountType"),
                 ("imageReference", "publisher"), ("imageReference", "offer")):
        before, after = _at(stored, path), _at(sent, path)
        if before is not None and after is not None and str(before).lower() != str(after).lower():
            raise _not_allowed(".".join(path))


def apply(ss: ScaleSetRecord, top: TopLevel) -> None:
    """Store what the PUT says about the top-level fields: kept when omitted, or reset (module
    docstring). Call with the state's lock held, after `check_changes`."""
    if top.single_placement_group is not None:
        ss.single_placement_group = top.single_placement_group
    ss.overprovision = (ss.orchestration == "Uniform") if top.overprovision is None else top.overprovision
    if top.zones is not None:
        ss.zones = list(top.zones)
    if top.sku_tier is not None:
        ss.sku_tier = top.sku_tier
    ss.upgrade_policy_extra = dict(top.upgrade_policy_extra)
    ss.extra_properties = dict(top.extra_properties)
    ss.extra_resource = dict(top.extra_resource)


def apply_patch(ss: ScaleSetRecord, top: TopLevel) -> None:
    """Store what a PATCH carries: the top-level fields it names, the other properties merged
    (`merge_patch`); nothing it leaves out changes. Lock held, after `check_changes(patch=True)`."""
    if top.single_placement_group is not None:
        ss.single_placement_group = top.single_placement_group
    if top.overprovision is not None:
        ss.overprovision = top.overprovision
    if top.zones is not None:
        ss.zones = list(top.zones)
    if top.sku_tier is not None:
        ss.sku_tier = top.sku_tier
    ss.upgrade_policy_extra = merge_patch(ss.upgrade_policy_extra, top.upgrade_policy_extra)
    ss.extra_properties = merge_patch(ss.extra_properties, top.extra_properties)
    ss.extra_resource = merge_patch(ss.extra_resource, top.extra_resource)


def merge_patch(base: Dict[str, Any], patch: Dict[str, Any]) -> Dict[str, Any]:
    """PATCH semantics: objects merge recursively, other values replace, null leaves a value unchanged."""
    out = dict(base)
    for key, value in patch.items():
        if value is None:
            continue
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_patch(out[key], value)
        else:
            out[key] = value
    return out


def _not_allowed(target: str) -> ArmStateError:
    return ArmStateError(409, "PropertyChangeNotAllowed", f"Changing property '{target}' is not allowed.", target)


def _boolean(properties: Dict[str, Any], name: str) -> Optional[bool]:
    value = properties.get(name)
    if value is None or isinstance(value, bool):
        return value
    raise ArmStateError(400, "InvalidParameter", f"The value '{value}' of parameter '{name}' is not a boolean.", name)


def _storage(profile: Dict[str, Any]) -> Dict[str, Any]:
    storage = profile.get("storageProfile")
    return storage if isinstance(storage, dict) else {}


def _at(obj: Any, path: Tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj
