"""What a scale set looks like to the control plane, parsed from ARM's wire JSON.

Tolerant by design: a scale set created without the feature has no `scheduledEventsProfile` at
all (azure-cli#12692 crashed on exactly that), a disable can leave `{}` behind (azure-docs#41434),
and a profile may lack `enable`.

"Enabled" means `terminateNotificationProfile.enable` is literally `true`. A profile without
`enable` is reported as `enabled: false` with `enable_field: "missing"` — we cannot prove Azure
sends Terminate events for it, so `enable` writes `"enable": true` explicitly rather than trust it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional

from vmss_terminate.control.events_policy import PolicyState, parse_policy
from vmss_terminate.timeout import MIN_MINUTES, iso_to_minutes_lenient, to_iso

ABSENT = "absent"  # no scheduledEventsProfile key at all
EMPTY = "empty"  # scheduledEventsProfile without (or with an empty) terminateNotificationProfile
SET = "set"  # terminateNotificationProfile with at least one field

# Swagger (2019-03-01 on): notBeforeTimeout "the default value is 5 minutes (PT5M)".
AZURE_DEFAULT_TIMEOUT_MINUTES = MIN_MINUTES


@dataclass
class ProfileState:
    """The scale set model's terminateNotificationProfile as Azure reports it."""

    presence: str
    enabled: bool
    timeout: Optional[str] = None  # exactly as Azure returns it, e.g. "PT10M"
    enable_field: str = "missing"  # "true" | "false" | "missing"

    @property
    def timeout_minutes(self) -> Optional[int]:
        return iso_to_minutes_lenient(self.timeout) if self.timeout else None

    @property
    def effective_minutes(self) -> Optional[int]:
        """The notice Azure gives: notBeforeTimeout, or its documented PT5M default when unset;
        None when disabled (or the timeout is unreadable, so that `enable` rewrites it)."""
        if not self.enabled:
            return None
        return self.timeout_minutes if self.timeout else AZURE_DEFAULT_TIMEOUT_MINUTES

    def is_enabled_with(self, minutes: int) -> bool:
        """Already what `enable`/`retime` would write: an enabled profile without notBeforeTimeout
        already gives PT5M, so enabling it with 5 minutes is "no change" (no PATCH, no upgrade)."""
        return self.effective_minutes == minutes

    @property
    def is_off(self) -> bool:
        """No Terminate events: nothing configured, or `enable` explicitly false."""
        return self.presence in (ABSENT, EMPTY) or self.enable_field == "false"

    def describe(self) -> str:
        if self.presence == ABSENT:
            return "not configured (no scheduledEventsProfile)"
        if self.presence == EMPTY:
            return "disabled (empty scheduledEventsProfile)"
        state = {"true": "enabled", "false": "disabled", "missing": "enable not set (treated as disabled)"}
        text = state[self.enable_field]
        if self.timeout:
            text += f", notBeforeTimeout {self.timeout}"
        elif self.enabled:
            text += f", notBeforeTimeout not set (Azure default {to_iso(AZURE_DEFAULT_TIMEOUT_MINUTES)})"
        return text

    def to_dict(self) -> Dict[str, Any]:
        data = asdict(self)
        data["timeout_minutes"] = self.timeout_minutes
        return data

    @classmethod
    def desired(cls, enable: bool, minutes: Optional[int]) -> "ProfileState":
        return cls(SET, enable, to_iso(minutes) if minutes is not None else None, "true" if enable else "false")


def parse_profile(scale_set: Dict[str, Any]) -> ProfileState:
    vm_profile = _dict(_dict(scale_set.get("properties")).get("virtualMachineProfile"))
    return parse_scheduled_events_profile(vm_profile.get("scheduledEventsProfile"))


def parse_scheduled_events_profile(events: Any) -> ProfileState:
    """The same reading from the `scheduledEventsProfile` value alone (None when the key is absent)."""
    if not isinstance(events, dict):
        return ProfileState(ABSENT, False)
    terminate = events.get("terminateNotificationProfile")
    if not isinstance(terminate, dict) or not terminate:
        return ProfileState(EMPTY, False)
    enable = terminate.get("enable")
    enable_field = "true" if enable is True else "false" if enable is False else "missing"
    timeout = terminate.get("notBeforeTimeout")
    return ProfileState(SET, enable is True, str(timeout) if timeout else None, enable_field)


@dataclass
class InstanceState:
    instance_id: str
    name: Optional[str]
    latest_model_applied: Optional[bool]
    provisioning_state: Optional[str] = None

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


def parse_instance(vm: Dict[str, Any]) -> InstanceState:
    props = _dict(vm.get("properties"))
    latest = props.get("latestModelApplied")
    instance_id = vm.get("instanceId") or vm.get("name") or ""
    return InstanceState(
        instance_id=str(instance_id),
        name=vm.get("name"),
        latest_model_applied=latest if isinstance(latest, bool) else None,
        provisioning_state=props.get("provisioningState"),
    )


@dataclass
class ScaleSetState:
    """Model-level facts the commands decide on. Defaults follow ARM's: Uniform, Manual."""

    resource_id: Optional[str]
    orchestration_mode: str
    upgrade_mode: str
    profile: ProfileState
    notes: List[str] = field(default_factory=list)
    events_policy: PolicyState = field(default_factory=lambda: PolicyState(False))
    """The top-level scheduledEventsPolicy (control/events_policy.py)."""
    etag: Optional[str] = None
    """The model's etag as read (Compute reports it from api-version 2023-09-01): a write sends it
    as `If-Match`, so a change another writer made since the read is not overwritten."""
    max_batch_percent: Optional[int] = None
    """upgradePolicy.rollingUpgradePolicy.maxBatchInstancePercent (5..100) when the set declares it:
    how many instances its owner lets be upgraded at once (sizes `--batch-size auto`)."""


def max_batch_percent(upgrade_policy: Any) -> Optional[int]:
    """The policy's maxBatchInstancePercent when it is a whole number 1..100, else None."""
    value = _dict(_dict(upgrade_policy).get("rollingUpgradePolicy")).get("maxBatchInstancePercent")
    return value if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 100 else None


def parse_scale_set(scale_set: Dict[str, Any]) -> ScaleSetState:
    props = _dict(scale_set.get("properties"))
    raw_orch = props.get("orchestrationMode")
    raw_upgrade = _dict(props.get("upgradePolicy")).get("mode")
    notes = []
    if raw_orch is None:
        notes.append("orchestrationMode not reported (older api-version): Uniform assumed")
    if raw_upgrade is None:
        notes.append("upgradePolicy.mode not reported: Manual assumed")
    return ScaleSetState(
        resource_id=scale_set.get("id"),
        orchestration_mode=str(raw_orch or "Uniform"),
        upgrade_mode=str(raw_upgrade or "Manual"),
        profile=parse_profile(scale_set),
        notes=notes,
        events_policy=parse_policy(scale_set),
        etag=etag_of(scale_set),
        max_batch_percent=max_batch_percent(props.get("upgradePolicy")),
    )


def etag_of(scale_set: Any) -> Optional[str]:
    """The resource's `etag` when ARM reported one (a non-empty string), else None."""
    etag = scale_set.get("etag") if isinstance(scale_set, dict) else None
    return etag if isinstance(etag, str) and etag.strip() else None


def _dict(value: Any) -> Dict[str, Any]:
    return value if isinstance(value, dict) else {}
