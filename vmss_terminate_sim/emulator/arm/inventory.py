"""The data model behind the local ARM emulator: scale sets, their instances, model versions and
long-running operations. No HTTP here, so the sandbox can drive the same state directly.

Why a separate model: the sandbox links ARM to IMDS (a scale-in here becomes a Terminate event
there) and needs to know which `scheduledEventsProfile` each instance *runs* (its model), not just
what the scale set says. Everything is guarded by one re-entrant lock (`state.lock`); callbacks
(`deleter`, listeners) are called after the lock is released so they may call back into the state.

Time: every time-dependent behaviour (delayed Automatic/Rolling upgrades, LRO start/end times)
uses the injected clock; nothing runs in the background -- due work is applied by `tick()`,
which the HTTP layer calls before each request.

Seed format (JSON file or dict; see examples/seed.json)::

    {
      "pageSize": 100,                       # optional, list page size (VMs, subscriptions)
      "lroPolls": 1,                         # optional, status polls answered InProgress per LRO
      "tenantId": "...",                     # optional, the tenant of subscriptions that name none
      "unregisteredFeatures": ["Microsoft.Compute/SendScheduledEventsPolicy"],  # optional: these
                                             #   Microsoft.Features features read NotRegistered in every
                                             #   subscription (others: Registered); also per subscription
      "subscriptions": [                     # optional: display names (and tenants) of subscriptions;
        {"subscriptionId": "...",            #   every subscription a scale set names is known anyway,
         "displayName": "Production",        #   under a generated display name
         "tenantId": "...",                  # optional
         "state": "Enabled",                 # optional
         "unregisteredFeatures": [...]}      # optional: NotRegistered in this subscription
      ],
      "resourceGroups": [                    # optional: location and tags of resource groups; every
        {"subscription": "...", "name": "rg",  #   group a scale set names exists anyway, in the
         "location": "westus", "tags": {}}   #   location of its first scale set, without tags
      ],
      "scaleSets": [
        {
          "subscription": "00000000-0000-0000-0000-000000000000",
          "resourceGroup": "rg",
          "name": "myvmss",
          "orchestration": "Uniform",        # or "Flexible"
          "upgradePolicy": "Manual",         # or "Automatic" / "Rolling"
          "capacity": 4,                     # instances created running the current model
          "location": "westus",              # optional
          "sku": "Standard_D2s_v3",          # optional
          "tags": {},                        # optional
          "scheduledEventsProfile": {...},   # optional; absent = the key is absent on GET
          "automaticDelaySeconds": 0,        # optional (Automatic policy)
          "rollingDelaySeconds": 30,         # optional (Rolling policy)
          "staleInstances": 0,               # optional: this many of the instances run an older
                                             #   model (latestModelApplied false) ...
          "staleProfile": null,              # ... whose scheduledEventsProfile is this (null: absent)
          "priority": "Spot",                # optional: virtualMachineProfile.priority
          "virtualMachineProfile": {...},    # optional: the model; sections it lacks (osProfile,
                                             #   storageProfile, networkProfile) get defaults.py's
          "zones": ["1", "2"],               # optional top-level fields (defaults as Azure's):
          "platformFaultDomainCount": 5,     #   5 regional Uniform, 1 zonal or Flexible
          "singlePlacementGroup": true,      #   Uniform true, Flexible false
          "overprovision": true,             #   Uniform true, Flexible false
          "scaleInPolicy": {...},            # optional properties, served as given (e.g. forceDeletion)
          "automaticRepairsPolicy": {...},
          "scheduledEventsPolicy": {...}     # optional: properties.scheduledEventsPolicy (Event Grid and
                                             #   Resource Graph publishing, auto-approvals)
        }
      ],
      "managementGroups": {"mg-id": ["<subscription id>", ...]},   # optional (Resource Graph scope)
      "resourceGraphPageSize": 1000,         # optional: rows per Resource Graph page (max 1000)
      "resourceGraphTruncated": false,       # optional: true = a result over one page is cut off
                                             # (resultTruncated "true", no $skipToken)
      "resourceGraphComputeResources": true, # optional: false = the computeresources summary answers 400
      "resourceGraphModelReported": true,    # optional: false = its rows carry no latestModelApplied
      "quotas": {"writes": {"bucket": 40, "refillPerSecond": 20}},  # optional: see quota.py (also
                                             #   per subscription and Compute policies)
      "computeHeaders": "separate",          # optional: or "joined" (Compute policies in one header)
      "generate": {"scaleSets": 200, "subscriptions": 5, "capacity": 20}  # optional: see fleetgen.py
    }
"""

from __future__ import annotations

import copy
import dataclasses
import json
import random
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple, Union

from vmss_terminate.clock import SYSTEM_CLOCK, Clock
from vmss_terminate.scheduled_events import DEFAULT_SUBSCRIPTION
from vmss_terminate_sim.emulator.arm import defaults, fleetgen
from vmss_terminate_sim.emulator.arm.graphquota import GraphUserQuota
from vmss_terminate_sim.emulator.arm.maintenance import MaintenanceEvents
from vmss_terminate_sim.emulator.arm.quota import Quotas, parse_limits
from vmss_terminate_sim.emulator.arm.runcommand import RunCommands

ORCHESTRATIONS = ("Uniform", "Flexible")
DEFAULT_TENANT = "11111111-1111-1111-1111-111111111111"
SUBSCRIPTION_STATES = ("Enabled", "Warned", "PastDue", "Disabled", "Deleted")
UPGRADE_POLICIES = ("Manual", "Automatic", "Rolling")
EXTRA_PROPERTIES = ("scaleInPolicy", "automaticRepairsPolicy", "scheduledEventsPolicy")  # seed keys served
# inside `properties` as given
SEND_SCHEDULED_EVENTS_POLICY = "Microsoft.Compute/SendScheduledEventsPolicy"
"""The subscription feature publishing to Event Grid and Resource Graph needs (Microsoft.Features)."""

Deleter = Callable[["ScaleSetRecord", List["InstanceRecord"]], None]
Listener = Callable[[str, "ScaleSetRecord", List["InstanceRecord"]], None]


class ArmStateError(Exception):
    """A request the state refuses; the HTTP layer maps it to an ARM error body."""

    def __init__(self, status: int, code: str, message: str, target: Optional[str] = None,
                 details: Optional[List[Dict[str, str]]] = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.target = target
        self.details = details


@dataclass(eq=False)
class SubscriptionRecord:
    """A subscription as `GET /subscriptions` lists it. Why kept apart from scale sets: az and the
    fleet commands list subscriptions (with display names) before they touch any resource."""

    subscription_id: str
    display_name: str
    tenant_id: str
    state: str = "Enabled"


def default_display_name(subscription_id: str) -> str:
    """The display name of a subscription the seed names only through its scale sets."""
    return f"Emulated subscription {subscription_id[:8]}"


@dataclass(eq=False)
class ResourceGroupRecord:
    """A resource group as Microsoft.Resources serves it. Why kept: SDK-based tools read the group
    (location, tags) before they touch the scale sets in it."""

    subscription: str
    name: str
    location: str
    tags: Dict[str, str] = field(default_factory=dict)
    provisioning_state: str = "Succeeded"

    @property
    def resource_id(self) -> str:
        return f"/subscriptions/{self.subscription}/resourceGroups/{self.name}"


@dataclass(eq=False)
class InstanceRecord:
    """One VM of a scale set. `applied_profile` is the scheduledEventsProfile of the model it runs."""

    instance_id: str
    name: str
    scale_set: "ScaleSetRecord"
    model_version: int
    applied_profile: Optional[Dict[str, Any]]
    created_at: float
    sequence: int
    vm_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    provisioning_state: str = "Succeeded"
    # The virtualMachineProfile it runs, shared with the scale set (never edited in place: the
    # state replaces `vm_profile` on every change), for the VM's storage/os/network profiles.
    model: Dict[str, Any] = field(default_factory=dict)
    # False: its VM list entry leaves latestModelApplied out (Azure has not evaluated it) until an
    # upgrade evaluates it (tests set it on the state)
    model_reported: bool = True

    @property
    def latest_model_applied(self) -> bool:
        return self.model_version == self.scale_set.model_version

    @property
    def deleting(self) -> bool:
        return self.provisioning_state == "Deleting"

    @property
    def resource_id(self) -> str:
        if self.scale_set.orchestration == "Flexible":
            return (f"/subscriptions/{self.scale_set.subscription}/resourceGroups/{self.scale_set.resource_group}"
                    f"/providers/Microsoft.Compute/virtualMachines/{self.name}")
        return f"{self.scale_set.resource_id}/virtualMachines/{self.instance_id}"

    def __repr__(self) -> str:
        return (f"InstanceRecord({self.name!r}, model={self.model_version}, "
                f"latest={self.latest_model_applied}, state={self.provisioning_state})")


@dataclass(frozen=True)
class ScaleSetSpec:
    """What `ArmState.add_scale_set` creates besides its subscription, resource group and name
    (the seed's scale set entry, as Python): its orchestration and upgrade policy, `capacity`
    instances of which the last `stale_instances` run an older model (`stale_profile`), the model's
    profile (`vm_profile`, completed with Azure's defaults; `scheduled_events_profile` and
    `priority` set in it), how long Automatic / Rolling upgrades take to apply (seconds), and the
    top-level fields, which default as Azure's do (None: Azure's default)."""

    orchestration: str = "Uniform"
    upgrade_policy: str = "Manual"
    capacity: int = 4
    scheduled_events_profile: Optional[Dict[str, Any]] = None
    location: Optional[str] = None
    sku: str = "Standard_D2s_v3"
    tags: Optional[Dict[str, str]] = None
    automatic_delay: float = 0.0
    rolling_delay: float = 30.0
    vm_profile: Optional[Dict[str, Any]] = None
    stale_instances: int = 0
    stale_profile: Optional[Dict[str, Any]] = None
    priority: Optional[str] = None
    extra_properties: Optional[Dict[str, Any]] = None
    zones: Optional[List[str]] = None
    platform_fault_domain_count: Optional[int] = None
    single_placement_group: Optional[bool] = None
    overprovision: Optional[bool] = None


@dataclass(eq=False)
class ScaleSetRecord:
    """A scale set: its model (virtualMachineProfile incl. scheduledEventsProfile) and instances."""

    subscription: str
    resource_group: str
    name: str
    orchestration: str
    upgrade_policy: str
    location: str
    sku: str
    capacity: int
    vm_profile: Dict[str, Any]
    tags: Dict[str, str] = field(default_factory=dict)
    model_version: int = 1
    provisioning_state: str = "Succeeded"
    automatic_delay: float = 0.0
    rolling_delay: float = 30.0
    unique_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    instances: Dict[str, InstanceRecord] = field(default_factory=dict)
    was_disabled: bool = False  # enable:false was applied at some point (azure-docs#41434)
    # Other `properties` Compute stores as sent (scaleInPolicy, automaticRepairsPolicy, ...)
    extra_properties: Dict[str, Any] = field(default_factory=dict)
    # The top-level fields a GET returns (issue 18): create-time or change-restricted ones
    zones: List[str] = field(default_factory=list)
    platform_fault_domain_count: int = 5
    single_placement_group: bool = True
    overprovision: bool = True
    time_created: float = 0.0
    sku_tier: str = "Standard"
    upgrade_policy_extra: Dict[str, Any] = field(default_factory=dict)  # rollingUpgradePolicy, ...
    extra_resource: Dict[str, Any] = field(default_factory=dict)  # identity, plan, ... as sent
    etag: int = 1  # bumped by every accepted PUT/PATCH (If-Match checks it)
    next_instance_number: int = 0
    _rng: random.Random = field(default_factory=random.Random)

    @property
    def key(self) -> Tuple[str, str, str]:
        return (self.subscription.lower(), self.resource_group.lower(), self.name.lower())

    @property
    def resource_id(self) -> str:
        return (f"/subscriptions/{self.subscription}/resourceGroups/{self.resource_group}"
                f"/providers/Microsoft.Compute/virtualMachineScaleSets/{self.name}")

    @property
    def scheduled_events_profile(self) -> Optional[Dict[str, Any]]:
        """The model's scheduledEventsProfile; None when the key is absent."""
        return self.vm_profile.get("scheduledEventsProfile")

    @property
    def scheduled_events_policy(self) -> Optional[Dict[str, Any]]:
        """`properties.scheduledEventsPolicy` as stored (latest api-version); None when absent."""
        policy = self.extra_properties.get("scheduledEventsPolicy")
        return policy if isinstance(policy, dict) else None

    @property
    def publishes_to_event_grid(self) -> bool:
        """Does the set publish its scheduled events to Event Grid and Resource Graph
        (`scheduledEventsPolicy.scheduledEventsAdditionalPublishingTargets.eventGridAndResourceGraph
        .enable` true)? Only then do its events reach `maintenanceresources` and the system topic."""
        targets = (self.scheduled_events_policy or {}).get("scheduledEventsAdditionalPublishingTargets")
        grid = targets.get("eventGridAndResourceGraph") if isinstance(targets, dict) else None
        return isinstance(grid, dict) and grid.get("enable") is True

    def auto_approves(self, member: str) -> bool:
        """Does the policy approve this kind of user event by itself (`userInitiatedReboot`,
        `userInitiatedRedeploy`, `allInstancesDown`: `automaticallyApprove` true)? Such events skip
        `Scheduled` (only Started and Completed are created)."""
        value = (self.scheduled_events_policy or {}).get(member)
        return isinstance(value, dict) and value.get("automaticallyApprove") is True

    def live_instances(self) -> List[InstanceRecord]:
        return [i for i in self.instances.values() if not i.deleting]

    def instance(self, instance_id: str) -> Optional[InstanceRecord]:
        found = self.instances.get(instance_id)
        if found is None and self.orchestration == "Flexible":
            for inst in self.instances.values():
                if inst.name.lower() == instance_id.lower():
                    return inst
        return found


@dataclass(eq=False)
class Operation:
    """A long-running operation as seen through its Azure-AsyncOperation status URL."""

    op_id: str
    kind: str  # "update" | "create" | "manualupgrade" | "delete"
    scale_set: ScaleSetRecord
    polls_left: int
    started_at: float
    instance_ids: List[str] = field(default_factory=list)
    status: str = "InProgress"
    ended_at: Optional[float] = None
    error: Optional[Dict[str, str]] = None
    fail_with: Optional[Tuple[str, str]] = None
    wait_for_removal: bool = False

    def body(self, to_iso: Callable[[float], str]) -> Dict[str, Any]:
        out: Dict[str, Any] = {"startTime": to_iso(self.started_at), "status": self.status, "name": self.op_id}
        if self.ended_at is not None:
            out["endTime"] = to_iso(self.ended_at)
        if self.error is not None:
            out["error"] = dict(self.error)
        return out


@dataclass
class _LroFault:
    code: str
    message: str
    kind: Optional[str]
    countdown: int  # fail the countdown-th matching LRO from now (1 = the next one)


class ArmState:
    """All scale sets the emulator knows, plus the knobs tests and the sandbox turn.

    Knobs: `page_size` (VM list), `lro_polls` (status polls answered InProgress before an LRO ends),
    `deleter` (called with instances being deleted; None = delete immediately), `reenable_ignored`
    (reproduce the 2019 bug where re-enabling after a disable was ignored), `fail_next_lro`,
    `fail_manualupgrade`.
    """

    def __init__(self, clock: Clock = SYSTEM_CLOCK, page_size: int = 100, lro_polls: int = 1,
                 location: str = "westus", tenant_id: str = DEFAULT_TENANT) -> None:
        self.clock = clock
        self.tenant_id = tenant_id
        self.page_size = page_size
        self.lro_polls = lro_polls
        self.location = location
        self.deleter: Optional[Deleter] = None
        self.reenable_ignored = False
        self.lock = threading.RLock()
        self._subscriptions: Dict[str, SubscriptionRecord] = {}
        self._scale_sets: Dict[Tuple[str, str, str], ScaleSetRecord] = {}
        self._resource_groups: Dict[Tuple[str, str], ResourceGroupRecord] = {}
        self._operations: Dict[str, Operation] = {}
        self._pending_upgrades: List[Tuple[float, ScaleSetRecord, int]] = []
        self._lro_faults: List[_LroFault] = []
        self._listeners: List[Listener] = []
        self._sequence = 0
        # bumped by every change to the estate (changed()): Resource Graph serves the pages after the
        # first from the result it computed for the first while this is unchanged
        self.generation = 0
        self.rg_page_size = 1000  # Resource Graph rows per page
        # Resource Graph answers a result larger than a page with resultTruncated "true" and no
        # $skipToken (as it does for queries it cannot page): the client must fail, not under-count
        self.rg_truncated = False
        self.rg_compute_resources = True  # False: the computeresources summary answers 400 (no such table)
        self.rg_model_reported = True  # False: computeresources rows carry no latestModelApplied
        self.quotas = Quotas(clock)  # per-subscription read/write quotas (none configured: off)
        self.graph_quota: Optional[GraphUserQuota] = None  # Resource Graph's per-user quota (graphquota.py)
        self._management_groups: Dict[str, List[str]] = {}
        # Microsoft.Features: (subscription or "*", "namespace/name") -> registered; a feature set
        # nowhere reads Registered (the emulator's default: features the product gates on)
        self._features: Dict[Tuple[str, str], bool] = {}
        # scheduled events as ARM sees them (maintenanceresources rows, acknowledge) and Run Command
        self.maintenance = MaintenanceEvents(clock)
        self.run_commands = RunCommands(clock)

    # ---------------------------------------------------------------- setup

    def add_subscription(self, subscription_id: str, display_name: Optional[str] = None,
                         tenant_id: Optional[str] = None, state: Optional[str] = None) -> SubscriptionRecord:
        """Make a subscription known (idempotent; the fields given replace the stored ones).
        Unnamed subscriptions get `default_display_name` and the state's `tenant_id`."""
        with self.lock:
            record = self._subscriptions.get(subscription_id.lower())
            if record is None:
                record = SubscriptionRecord(subscription_id, default_display_name(subscription_id),
                                            self.tenant_id)
                self._subscriptions[subscription_id.lower()] = record
            if display_name is not None:
                record.display_name = str(display_name)
            if tenant_id is not None:
                record.tenant_id = str(tenant_id)
            if state is not None:
                record.state = _canonical(state, SUBSCRIPTION_STATES, "subscription state")
            return record

    def add_resource_group(self, subscription: str, resource_group: str, location: Optional[str] = None,
                           tags: Optional[Dict[str, str]] = None) -> ResourceGroupRecord:
        """Make a resource group known (idempotent: the first location given stays, like ARM's;
        tags given replace the stored ones). Without a location it gets the state's default."""
        with self.lock:
            self.add_subscription(subscription)
            key = (subscription.lower(), resource_group.lower())
            record = self._resource_groups.get(key)
            if record is None:
                record = ResourceGroupRecord(subscription, resource_group, location or self.location)
                self._resource_groups[key] = record
            if tags is not None:
                record.tags = {str(k): str(v) for k, v in tags.items()}
            return record

    def add_scale_set(self, subscription: str, resource_group: str, name: str,
                      spec: Optional[ScaleSetSpec] = None, **fields: Any) -> ScaleSetRecord:
        """Create a scale set as `spec` (a `ScaleSetSpec`, or its fields as keywords: `capacity=3`)
        says: `capacity` instances running its model (the last `stale_instances` of them run an
        older model whose profile is `stale_profile`). A profile missing sections gets the defaults
        a real scale set has (`defaults.py`); the top-level fields default as Azure's do."""
        spec = dataclasses.replace(spec, **fields) if spec is not None else ScaleSetSpec(**fields)
        orchestration = _canonical(spec.orchestration, ORCHESTRATIONS, "orchestration")
        upgrade_policy = _canonical(spec.upgrade_policy, UPGRADE_POLICIES, "upgrade_policy")
        profile = defaults.complete_vm_profile(spec.vm_profile or {}, subscription, resource_group, name)
        zones = [str(z) for z in spec.zones or []]
        platform_fault_domain_count = spec.platform_fault_domain_count
        if platform_fault_domain_count is None:
            platform_fault_domain_count = defaults.platform_fault_domain_default(orchestration, zones)
        if spec.scheduled_events_profile is not None:
            profile["scheduledEventsProfile"] = copy.deepcopy(spec.scheduled_events_profile)
        if spec.priority is not None:
            profile["priority"] = spec.priority
        ss = ScaleSetRecord(
            subscription=subscription, resource_group=resource_group, name=name,
            orchestration=orchestration, upgrade_policy=upgrade_policy,
            location=spec.location or self.location, sku=spec.sku, capacity=spec.capacity, vm_profile=profile,
            tags=dict(spec.tags or {}), automatic_delay=spec.automatic_delay, rolling_delay=spec.rolling_delay,
            extra_properties=copy.deepcopy(spec.extra_properties or {}), zones=zones,
            platform_fault_domain_count=int(platform_fault_domain_count),
            single_placement_group=(orchestration == "Uniform") if spec.single_placement_group is None
            else bool(spec.single_placement_group),
            overprovision=(orchestration == "Uniform") if spec.overprovision is None else bool(spec.overprovision),
            time_created=self.clock.now(),
        )
        ss._rng.seed(f"{subscription}/{resource_group}/{name}".lower())
        ss.vm_profile = self._normalise_profile(ss, profile)
        with self.lock:
            if ss.key in self._scale_sets:
                raise ValueError(f"scale set {name!r} already exists in {resource_group!r}")
            self.add_resource_group(subscription, resource_group, location=ss.location)
            self._scale_sets[ss.key] = ss
            self.generation += 1
            created = self._create_instances(ss, spec.capacity)
            for inst in created[len(created) - min(spec.stale_instances, len(created)):] if spec.stale_instances else []:
                inst.model_version = ss.model_version - 1
                inst.applied_profile = copy.deepcopy(spec.stale_profile)
        return ss

    def load_seed(self, seed: Union[str, Path, Dict[str, Any]]) -> List[ScaleSetRecord]:
        """Add the scale sets of a seed (file path or dict; format in the module docstring)."""
        if not isinstance(seed, dict):
            with open(seed, encoding="utf-8") as handle:
                try:
                    seed = json.load(handle)
                except RecursionError:  # a document nested deeper than the parser's stack
                    raise ValueError("JSON nested too deeply") from None
        if not isinstance(seed, dict):
            raise ValueError("seed must be a JSON object with a 'scaleSets' list")
        if "pageSize" in seed:
            self.page_size = int(seed["pageSize"])
        if "lroPolls" in seed:
            self.lro_polls = int(seed["lroPolls"])
        self._load_fleet_options(seed)
        if "generate" in seed:
            seed = dict(seed, **_merged(seed, fleetgen.generate(seed["generate"])))
        if "tenantId" in seed:
            self.tenant_id = str(seed["tenantId"])
        for index, entry in enumerate(seed.get("subscriptions", [])):
            if not isinstance(entry, dict) or not entry.get("subscriptionId"):
                raise ValueError(f"subscriptions[{index}] needs a \"subscriptionId\" "
                                 f"(and optionally displayName, tenantId, state)")
            try:
                self.add_subscription(entry["subscriptionId"], entry.get("displayName"), entry.get("tenantId"),
                                      entry.get("state"))
                for feature in _feature_list(entry.get("unregisteredFeatures", []), "unregisteredFeatures"):
                    self.set_feature(feature, False, entry["subscriptionId"])
            except ValueError as exc:
                raise ValueError(f"subscriptions[{index}] ({entry['subscriptionId']}): {exc}") from None
        for index, entry in enumerate(seed.get("resourceGroups", [])):
            if not isinstance(entry, dict) or not entry.get("name"):
                raise ValueError(f"resourceGroups[{index}] needs a \"name\" (and optionally subscription, "
                                 f"location, tags)")
            tags = entry.get("tags")
            if tags is not None and not isinstance(tags, dict):
                raise ValueError(f"resourceGroups[{index}] ({entry['name']}): tags must be an object")
            self.add_resource_group(entry.get("subscription", DEFAULT_SUBSCRIPTION), entry["name"],
                                    location=entry.get("location"), tags=tags)
        created = []
        for index, entry in enumerate(seed.get("scaleSets", [])):
            if not isinstance(entry, dict) or not entry.get("name"):
                raise ValueError(f"scaleSets[{index}] needs a \"name\" (an object like examples/seed.json's)")
            try:
                created.append(self._add_seed_entry(entry))
            except (TypeError, ValueError) as exc:  # a bad number, policy or profile: say which entry
                raise ValueError(f"scaleSets[{index}] ({entry['name']}): {exc}") from None
        return created

    def _add_seed_entry(self, entry: Dict[str, Any]) -> ScaleSetRecord:
        return self.add_scale_set(
            entry.get("subscription", DEFAULT_SUBSCRIPTION),
            entry.get("resourceGroup", "rg"),
            entry["name"],
            orchestration=entry.get("orchestration", "Uniform"),
            upgrade_policy=entry.get("upgradePolicy", "Manual"),
            capacity=int(entry.get("capacity", 4)),
            scheduled_events_profile=entry.get("scheduledEventsProfile"),
            location=entry.get("location"),
            sku=entry.get("sku", "Standard_D2s_v3"),
            tags=entry.get("tags"),
            automatic_delay=float(entry.get("automaticDelaySeconds", 0.0)),
            rolling_delay=float(entry.get("rollingDelaySeconds", 30.0)),
            vm_profile=entry.get("virtualMachineProfile"),
            stale_instances=int(entry.get("staleInstances", 0)),
            stale_profile=entry.get("staleProfile"),
            priority=entry.get("priority"),
            extra_properties={key: entry[key] for key in EXTRA_PROPERTIES if key in entry},
            zones=entry.get("zones"),
            platform_fault_domain_count=entry.get("platformFaultDomainCount"),
            single_placement_group=entry.get("singlePlacementGroup"),
            overprovision=entry.get("overprovision"),
        )

    def _load_fleet_options(self, seed: Dict[str, Any]) -> None:
        """Seed keys for estates: management groups, Resource Graph page size, quotas."""
        groups = seed.get("managementGroups", {})
        if not isinstance(groups, dict) or not all(isinstance(v, list) for v in groups.values()):
            raise ValueError('managementGroups must map a management group id to a list of subscription ids')
        for group, members in groups.items():
            self.add_management_group(group, [str(m) for m in members])
        if "resourceGraphPageSize" in seed:
            self.rg_page_size = max(1, min(1000, int(seed["resourceGraphPageSize"])))
        if "resourceGraphTruncated" in seed:
            self.rg_truncated = seed["resourceGraphTruncated"] is True
        if "resourceGraphComputeResources" in seed:
            self.rg_compute_resources = seed["resourceGraphComputeResources"] is not False
        if "resourceGraphModelReported" in seed:
            self.rg_model_reported = seed["resourceGraphModelReported"] is not False
        if "quotas" in seed:
            self.quotas.configure(parse_limits(seed["quotas"]))
        if "unregisteredFeatures" in seed:
            for feature in _feature_list(seed["unregisteredFeatures"], "unregisteredFeatures"):
                self.set_feature(feature, False)
        if "computeHeaders" in seed:
            if seed["computeHeaders"] not in ("separate", "joined"):
                raise ValueError('computeHeaders must be "separate" (one header per policy) or "joined"')
            self.quotas.joined = seed["computeHeaders"] == "joined"

    def add_management_group(self, group: str, subscriptions: List[str]) -> None:
        with self.lock:
            self._management_groups.setdefault(group.lower(), []).extend(subscriptions)

    def management_group_subscriptions(self, group: str) -> Optional[List[str]]:
        """Subscription ids under a management group (None: no such group)."""
        with self.lock:
            found = self._management_groups.get(group.lower())
            return list(found) if found is not None else None

    # ---------------------------------------------------------------- Microsoft.Features

    def set_feature(self, feature: str, registered: bool, subscription: Optional[str] = None) -> None:
        """Register or unregister a subscription feature (`Microsoft.Compute/SendScheduledEventsPolicy`,
        or just its name for Microsoft.Compute) in one subscription, or in all when None."""
        key = canonical_feature(feature)
        with self.lock:
            if subscription is None:
                self._features = {k: v for k, v in self._features.items() if k[1] != key}
            self._features[((subscription or "*").lower(), key)] = registered

    def feature_state(self, subscription: str, feature: str) -> str:
        """`Registered` or `NotRegistered` (Microsoft.Features' states) for this subscription: what
        was set for it, else for every subscription, else Registered."""
        key = canonical_feature(feature)
        with self.lock:
            registered = self._features.get((subscription.lower(), key), self._features.get(("*", key), True))
        return "Registered" if registered else "NotRegistered"

    def add_listener(self, listener: Listener) -> None:
        """`listener(kind, scale_set, instances)`; kinds: "added", "upgraded", "deleting", "removed",
        "model_changed". Called outside the lock, on the thread that made the change."""
        with self.lock:
            self._listeners.append(listener)

    # ---------------------------------------------------------------- queries

    def scale_set(self, subscription: str, resource_group: str, name: str) -> Optional[ScaleSetRecord]:
        """Case-insensitive lookup, like ARM."""
        with self.lock:
            return self._scale_sets.get((subscription.lower(), resource_group.lower(), name.lower()))

    def scale_sets(self, subscription: Optional[str] = None, resource_group: Optional[str] = None
                   ) -> List[ScaleSetRecord]:
        with self.lock:
            return [ss for ss in self._scale_sets.values()
                    if (subscription is None or ss.subscription.lower() == subscription.lower())
                    and (resource_group is None or ss.resource_group.lower() == resource_group.lower())]

    def subscription(self, subscription_id: str) -> Optional[SubscriptionRecord]:
        """Case-insensitive lookup, like ARM."""
        with self.lock:
            return self._subscriptions.get(subscription_id.lower())

    def subscriptions(self) -> List[SubscriptionRecord]:
        """Every known subscription, in the order they became known."""
        with self.lock:
            return list(self._subscriptions.values())

    def has_subscription(self, subscription: str) -> bool:
        return self.subscription(subscription) is not None

    def has_resource_group(self, subscription: str, resource_group: str) -> bool:
        return self.resource_group(subscription, resource_group) is not None

    def resource_group(self, subscription: str, resource_group: str) -> Optional[ResourceGroupRecord]:
        """Case-insensitive lookup, like ARM."""
        with self.lock:
            return self._resource_groups.get((subscription.lower(), resource_group.lower()))

    def resource_groups(self, subscription: str) -> List[ResourceGroupRecord]:
        """The subscription's resource groups, in the order they became known."""
        with self.lock:
            return [rg for key, rg in self._resource_groups.items() if key[0] == subscription.lower()]

    def operation(self, op_id: str) -> Optional[Operation]:
        with self.lock:
            return self._operations.get(op_id)

    # ---------------------------------------------------------------- faults

    def fail_next_lro(self, code: str = "InternalExecutionError",
                      message: str = "An internal execution error occurred.", kind: Optional[str] = None) -> None:
        """The next long-running operation (of `kind` if given: update/create/manualupgrade/delete)
        ends with status Failed and this error."""
        with self.lock:
            self._lro_faults.append(_LroFault(code, message, kind, 1))

    def fail_manualupgrade(self, nth: int = 1, code: str = "InternalExecutionError",
                           message: str = "An internal execution error occurred.") -> None:
        """The `nth` manualupgrade received from now (1 = the next one) ends Failed; its instances
        keep their old model."""
        with self.lock:
            self._lro_faults.append(_LroFault(code, message, "manualupgrade", nth))

    # ---------------------------------------------------------------- time

    def tick(self) -> None:
        """Apply upgrades (Automatic with delay, Rolling) that are due on the clock."""
        notes: List[Tuple[str, ScaleSetRecord, List[InstanceRecord]]] = []
        with self.lock:
            now = self.clock.now()
            due = [p for p in self._pending_upgrades if p[0] <= now]
            if due:
                self._pending_upgrades = [p for p in self._pending_upgrades if p[0] > now]
                for _, ss, version in due:
                    if version == ss.model_version:
                        upgraded = self._upgrade(ss, ss.live_instances())
                        if upgraded:
                            notes.append(("upgraded", ss, upgraded))
        self._notify(notes)

    # ---------------------------------------------------------------- mutations

    def apply_model(self, ss: ScaleSetRecord, new_profile: Dict[str, Any], capacity: Optional[int] = None,
                    upgrade_policy: Optional[str] = None, tags: Optional[Dict[str, str]] = None) -> None:
        """Replace the model (virtualMachineProfile) and/or capacity: what PUT and PATCH end in.

        A changed profile increments the model version; instances then go stale (Manual) or are
        upgraded (Automatic immediately or after `automatic_delay`; Rolling after `rolling_delay`).
        """
        notes: List[Tuple[str, ScaleSetRecord, List[InstanceRecord]]] = []
        deleting: List[InstanceRecord] = []
        with self.lock:
            self.generation += 1
            new_profile = self._normalise_profile(ss, new_profile)
            if tags is not None:
                ss.tags = dict(tags)
            if upgrade_policy is not None:
                ss.upgrade_policy = _canonical(upgrade_policy, UPGRADE_POLICIES, "upgradePolicy.mode")
            if new_profile != ss.vm_profile:
                ss.vm_profile = new_profile
                ss.model_version += 1
                notes.append(("model_changed", ss, []))
                notes.extend(self._schedule_upgrade(ss))
            if capacity is not None and capacity != ss.capacity:
                live = ss.live_instances()
                ss.capacity = capacity
                if capacity > len(live):
                    added = self._create_instances(ss, capacity - len(live))
                    notes.append(("added", ss, added))
                elif capacity < len(live):
                    deleting = self._pick_scale_in(ss, len(live) - capacity)
        self._notify(notes)
        if deleting:
            self._start_delete(ss, deleting)

    def manual_upgrade(self, ss: ScaleSetRecord, instance_ids: List[str]) -> Operation:
        """Start a manualupgrade LRO; the instances get the current model when it succeeds."""
        with self.lock:
            found = self._resolve(ss, instance_ids)
            return self._new_operation("manualupgrade", ss, [i.instance_id for i in found])

    def delete_instances(self, ss: ScaleSetRecord, instance_ids: List[str]) -> Operation:
        """Start deleting instances (POST .../delete, DELETE .../virtualMachines/{id}); capacity drops."""
        with self.lock:
            found = [i for i in self._resolve(ss, instance_ids) if not i.deleting]
            self.generation += 1
            ss.capacity = max(0, ss.capacity - len(found))
            op = self._new_operation("delete", ss, [i.instance_id for i in found])
            op.wait_for_removal = self.deleter is not None
        self._start_delete(ss, found)
        return op

    def remove_instances(self, ss: ScaleSetRecord, instance_ids: Iterable[str]) -> List[InstanceRecord]:
        """Complete a deletion: the instances disappear from the list."""
        with self.lock:
            removed = []
            for iid in instance_ids:
                inst = ss.instance(str(iid))
                if inst is not None:
                    del ss.instances[inst.instance_id]
                    removed.append(inst)
        self._notify([("removed", ss, removed)] if removed else [])
        return removed

    def begin_operation(self, kind: str, ss: ScaleSetRecord) -> Operation:
        """An LRO with no side effect of its own (PUT/PATCH apply their change synchronously)."""
        with self.lock:
            ss.provisioning_state = "Updating" if kind == "update" else "Creating"
            return self._new_operation(kind, ss, [])

    def poll(self, op_id: str) -> Optional[Operation]:
        """One status poll: counts down, then completes the operation (applying its effect)."""
        notes: List[Tuple[str, ScaleSetRecord, List[InstanceRecord]]] = []
        with self.lock:
            op = self._operations.get(op_id)
            if op is None or op.status != "InProgress":
                return op
            if op.polls_left > 0:
                op.polls_left -= 1
                return op
            if op.wait_for_removal and any(i in op.scale_set.instances for i in op.instance_ids):
                return op
            op.ended_at = self.clock.now()
            if op.fail_with is not None:
                op.status = "Failed"
                op.error = {"code": op.fail_with[0], "message": op.fail_with[1]}
                if op.kind in ("update", "create"):
                    op.scale_set.provisioning_state = "Failed"
                return op
            op.status = "Succeeded"
            if op.kind in ("update", "create"):
                op.scale_set.provisioning_state = "Succeeded"
            elif op.kind == "manualupgrade":
                targets = [op.scale_set.instances[i] for i in op.instance_ids if i in op.scale_set.instances]
                upgraded = self._upgrade(op.scale_set, [i for i in targets if not i.deleting])
                if upgraded:
                    notes.append(("upgraded", op.scale_set, upgraded))
        self._notify(notes)
        return op

    # ---------------------------------------------------------------- internals (lock held)

    def _normalise_profile(self, ss: ScaleSetRecord, profile: Dict[str, Any]) -> Dict[str, Any]:
        """enable:false is stored (and returned) as `{}`; the 2019 re-enable bug is applied here."""
        profile = copy.deepcopy(profile)
        sep = profile.get("scheduledEventsProfile")
        if isinstance(sep, dict):
            tnp = sep.get("terminateNotificationProfile")
            if isinstance(tnp, dict) and tnp.get("enable") is False:
                profile["scheduledEventsProfile"] = {}
                ss.was_disabled = True
            elif isinstance(tnp, dict) and self.reenable_ignored and ss.was_disabled:
                others_same = ({k: v for k, v in profile.items() if k != "scheduledEventsProfile"}
                               == {k: v for k, v in ss.vm_profile.items() if k != "scheduledEventsProfile"})
                if others_same:  # the reported workaround: change something else in the profile
                    profile["scheduledEventsProfile"] = copy.deepcopy(ss.vm_profile.get("scheduledEventsProfile"))
                    if profile["scheduledEventsProfile"] is None:
                        del profile["scheduledEventsProfile"]
                else:
                    ss.was_disabled = False
        return profile

    def _schedule_upgrade(self, ss: ScaleSetRecord) -> List[Tuple[str, ScaleSetRecord, List[InstanceRecord]]]:
        if ss.upgrade_policy == "Manual":
            return []
        delay = ss.automatic_delay if ss.upgrade_policy == "Automatic" else ss.rolling_delay
        if delay <= 0:
            upgraded = self._upgrade(ss, ss.live_instances())
            return [("upgraded", ss, upgraded)] if upgraded else []
        self._pending_upgrades.append((self.clock.now() + delay, ss, ss.model_version))
        return []

    def _upgrade(self, ss: ScaleSetRecord, instances: List[InstanceRecord]) -> List[InstanceRecord]:
        profile = ss.scheduled_events_profile
        upgraded = []
        for inst in instances:
            inst.model_reported = True  # an upgrade evaluates it
            if inst.model_version != ss.model_version:
                inst.model_version = ss.model_version
                inst.applied_profile = copy.deepcopy(profile)
                inst.model = ss.vm_profile
                upgraded.append(inst)
        return upgraded

    def _create_instances(self, ss: ScaleSetRecord, count: int) -> List[InstanceRecord]:
        created = []
        now = self.clock.now()
        for _ in range(count):
            if ss.orchestration == "Uniform":
                iid = str(ss.next_instance_number)
                ss.next_instance_number += 1
                name = f"{ss.name}_{iid}"
            else:
                while True:
                    name = f"{ss.name}_{ss._rng.getrandbits(32):08x}"
                    if name not in ss.instances:
                        break
                iid = name
            self._sequence += 1
            inst = InstanceRecord(iid, name, ss, ss.model_version, copy.deepcopy(ss.scheduled_events_profile),
                                  now, self._sequence, vm_id=str(uuid.UUID(int=ss._rng.getrandbits(128))),
                                  model=ss.vm_profile)
            ss.instances[iid] = inst
            created.append(inst)
        return created

    def _pick_scale_in(self, ss: ScaleSetRecord, count: int) -> List[InstanceRecord]:
        """Uniform: highest instance ids first; Flexible: newest first."""
        live = ss.live_instances()
        if ss.orchestration == "Uniform":
            live.sort(key=lambda i: int(i.instance_id) if i.instance_id.isdigit() else -1, reverse=True)
        else:
            live.sort(key=lambda i: (i.created_at, i.sequence), reverse=True)
        return live[:count]

    def _resolve(self, ss: ScaleSetRecord, instance_ids: List[str]) -> List[InstanceRecord]:
        """The instances named; `"*"` means all of them (what `az vmss update-instances
        --instance-ids '*'` sends)."""
        if "*" in instance_ids:
            return ss.live_instances()
        found, missing = [], []
        for iid in instance_ids:
            inst = ss.instance(str(iid))
            (found.append(inst) if inst is not None else missing.append(str(iid)))
        if missing:
            raise ArmStateError(400, "InvalidParameter",
                                f"The provided instanceId(s) {', '.join(missing)} are not active Virtual Machine "
                                f"Scale Set VMs of '{ss.name}'.", target="instanceIds")
        return found

    def _new_operation(self, kind: str, ss: ScaleSetRecord, instance_ids: List[str]) -> Operation:
        op = Operation(str(uuid.uuid4()), kind, ss, self.lro_polls, self.clock.now(), list(instance_ids))
        for fault in list(self._lro_faults):
            if fault.kind is None or fault.kind == kind:
                fault.countdown -= 1
                if fault.countdown <= 0:
                    op.fail_with = (fault.code, fault.message)
                    self._lro_faults.remove(fault)
                    break
        self._operations[op.op_id] = op
        return op

    def _start_delete(self, ss: ScaleSetRecord, instances: List[InstanceRecord]) -> None:
        if not instances:
            return
        with self.lock:
            deleter = self.deleter
            for inst in instances:
                inst.provisioning_state = "Deleting"
        self._notify([("deleting", ss, list(instances))])
        if deleter is None:
            self.remove_instances(ss, [i.instance_id for i in instances])
        else:
            deleter(ss, list(instances))

    def changed(self) -> None:
        """Record a change to the estate (a new generation): cached Resource Graph results go stale."""
        with self.lock:
            self.generation += 1

    def _notify(self, notes: List[Tuple[str, ScaleSetRecord, List[InstanceRecord]]]) -> None:
        if not notes:
            return
        self.changed()
        with self.lock:
            listeners = list(self._listeners)
        for kind, ss, instances in notes:
            for listener in listeners:
                listener(kind, ss, instances)


def _merged(seed: Dict[str, Any], generated: Dict[str, Any]) -> Dict[str, Any]:
    """A seed's own subscriptions and scale sets followed by the generated ones."""
    return {key: list(seed.get(key, [])) + generated[key] for key in ("subscriptions", "scaleSets")}


def _canonical(value: str, allowed: Tuple[str, ...], what: str) -> str:
    for option in allowed:
        if option.lower() == str(value).lower():
            return option
    raise ValueError(f"{what} must be one of {', '.join(allowed)}, not {value!r}")


def canonical_feature(feature: str) -> str:
    """`namespace/name` in lower case; a bare name is a Microsoft.Compute feature."""
    text = str(feature).strip()
    if not text or text.count("/") > 1 or text.startswith("/") or text.endswith("/"):
        raise ValueError(f"feature {feature!r}: expected NAMESPACE/NAME (e.g. {SEND_SCHEDULED_EVENTS_POLICY}) "
                         "or a Microsoft.Compute feature's NAME")
    return (text if "/" in text else f"Microsoft.Compute/{text}").lower()


def _feature_list(value: Any, key: str) -> List[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValueError(f"{key} must be a list of feature names (e.g. [\"{SEND_SCHEDULED_EVENTS_POLICY}\"])")
    for item in value:
        canonical_feature(item)
    return list(value)
