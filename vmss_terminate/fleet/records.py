"""Typed audit records: one per scale set, parsed from its Resource Graph row with the same parser
the single-set commands use (`control.profile.parse_scale_set`), so both read a profile alike."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

from vmss_terminate.control.events_policy import PolicyState, parse_policy_value
from vmss_terminate.control.profile import ProfileState, max_batch_percent, parse_scheduled_events_profile
from vmss_terminate.errors import AzureError
from vmss_terminate.fleet import findings as codes
from vmss_terminate.params import shown
from vmss_terminate.timeout import to_iso

# `-o table` / `-o csv` columns (JSON carries every field of `ScaleSetAudit.to_dict`).
COLUMNS = ("subscription", "resource_group", "name", "enabled", "not_before_timeout", "orchestration_mode",
           "upgrade_mode", "instances", "stale_instances", "compliant", "findings")


@dataclass
class ScaleSetAudit:
    """What a fleet audit knows about one scale set."""

    id: str
    subscription_id: str
    resource_group: str
    name: str
    location: str
    profile: ProfileState
    orchestration_mode: str
    upgrade_mode: str
    instances: int
    tags: Dict[str, str]
    config_findings: List[str]
    subscription_name: Optional[str] = None
    stale_instances: Optional[int] = None  # None: not read (disabled sets), not reported (Flexible) or unreadable
    stale_ids: List[str] = field(default_factory=list)
    instances_note: Optional[str] = None
    unreadable: Optional[str] = None  # why the instance list could not be read (finding `unreadable`)
    findings: List[str] = field(default_factory=list)
    compliant: bool = False
    events_policy: PolicyState = field(default_factory=lambda: PolicyState(False))
    source_read_at: Optional[str] = None  # when Resource Graph's answer (these facts) was read, ISO 8601 UTC
    """The set's scheduledEventsPolicy, read from the same Resource Graph row."""
    max_batch_percent: Optional[int] = None  # rollingUpgradePolicy.maxBatchInstancePercent (sizes `auto` batches)

    @property
    def enabled(self) -> bool:
        return self.profile.enabled

    @property
    def not_before_timeout(self) -> Optional[str]:
        """The notice in effect, ISO-8601: as Azure stores it, or its PT5M default when enabled without one."""
        if not self.enabled:
            return None
        minutes = self.profile.effective_minutes
        return self.profile.timeout or (to_iso(minutes) if minutes is not None else None)

    @property
    def stale_unknown(self) -> bool:
        """Enabled, but which instances run the latest model is not known (finding stale-unknown)."""
        return self.enabled and self.stale_instances is None

    @property
    def uniform(self) -> bool:
        return self.orchestration_mode.lower() == "uniform"

    def evaluate(self, wanted_minutes: Optional[int], require_event_grid: bool = False,
                 require_auto_approve: Sequence[str] = ()) -> None:
        """Findings and compliance for the `--timeout` wanted (None: any timeout is compliant) and
        the scheduled-events policy required (`--require-event-grid`, `--require-auto-approve`)."""
        policy = codes.policy_findings(self.events_policy.publishes, self.events_policy.approved_kinds,
                                       require_event_grid, require_auto_approve)
        found = self.config_findings + codes.profile_findings(
            self.enabled, self.profile.effective_minutes, wanted_minutes, self.stale_instances) + policy
        if self.unreadable is not None:  # the cause, not its consequence (an unknown stale count)
            found = [codes.UNREADABLE if code == codes.STALE_UNKNOWN else code for code in found]
        self.findings = codes.order(found)
        # an unknown stale count (None) is not compliant: unknown must never read as green
        self.compliant = (self.enabled and (wanted_minutes is None or self.profile.effective_minutes == wanted_minutes)
                          and self.stale_instances == 0 and not policy)

    def to_dict(self) -> Dict[str, Any]:
        return {
            "id": self.id,
            "subscription_id": self.subscription_id,
            "subscription_name": self.subscription_name,
            "resource_group": self.resource_group,
            "name": self.name,
            "location": self.location,
            "enabled": self.enabled,
            "not_before_timeout": self.not_before_timeout,
            "orchestration_mode": self.orchestration_mode,
            "upgrade_mode": self.upgrade_mode,
            "instances": self.instances,
            "stale_instances": self.stale_instances,
            "instances_note": self.instances_note,
            "error": self.unreadable,
            "findings": list(self.findings),
            "compliant": self.compliant,
            "event_grid": self.events_policy.publishes,
            "auto_approve": self.events_policy.approved_kinds,
            "tags": dict(self.tags),
            "source": "resource-graph",  # a verdict says where its facts came from (and as of when)
            "source_read_at": self.source_read_at,
        }

    def row(self) -> Dict[str, str]:
        """Text cells for table and csv output."""
        data = self.to_dict()
        cells = {key: _cell(data.get(key)) for key in COLUMNS}
        cells["subscription"] = self.subscription_name or self.subscription_id
        cells["findings"] = ",".join(self.findings) or "-"
        return cells


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


_SCALE_SET_ID = re.compile(r"^/subscriptions/[^/]+/resourceGroups/[^/]+/providers/[^/]+/[^/]+/[^/]+$", re.IGNORECASE)


def parse_row(row: Dict[str, Any], subscription_names: Optional[Dict[str, str]] = None) -> ScaleSetAudit:
    """A Resource Graph row (the columns of `scope.PROJECTION`) -> record. The resource group and
    name are taken from the id, which keeps ARM's casing (Resource Graph lower-cases `resourceGroup`)."""
    resource_id = str(row.get("id") or "")
    if not _SCALE_SET_ID.match(resource_id):
        # Azure's answer, not the user's input: an incomplete answer (exit 1), never a usage error
        raise AzureError(f"Azure Resource Graph answered a scale set row without a usable id "
                         f"({shown(row.get('id'))}, name {shown(row.get('name'))}): refusing an incomplete audit")
    parts = resource_id.split("/")
    subscription = str(row.get("subscriptionId") or parts[2])
    tags: Dict[str, Any] = row["tags"] if isinstance(row.get("tags"), dict) else {}
    capacity = row.get("capacity")
    orchestration, upgrade = row.get("orchestrationMode"), row.get("upgradeMode")
    return ScaleSetAudit(
        id=resource_id,
        subscription_id=subscription,
        subscription_name=(subscription_names or {}).get(subscription.lower()),
        resource_group=parts[4],
        name=str(row.get("name") or parts[-1]),
        location=str(row.get("location") or ""),
        profile=parse_scheduled_events_profile(row.get("scheduledEventsProfile")),
        orchestration_mode=str(orchestration or "Uniform"),  # ARM's defaults, as parse_scale_set
        upgrade_mode=str(upgrade or "Manual"),
        max_batch_percent=max_batch_percent({"rollingUpgradePolicy": {
            "maxBatchInstancePercent": row.get("maxBatchInstancePercent")}}),
        instances=capacity if isinstance(capacity, int) and not isinstance(capacity, bool) else 0,
        tags={str(k): str(v) for k, v in tags.items()},
        config_findings=codes.row_findings(row, tags),
        events_policy=parse_policy_value(row.get("scheduledEventsPolicy")),
    )
