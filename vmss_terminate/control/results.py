"""Result objects the control-plane API returns: `to_dict()` for `--output json`, `lines()` for people."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from vmss_terminate.control.events_policy import PolicyState
from vmss_terminate.control.profile import InstanceState, ProfileState
from vmss_terminate.control.upgrade import MANUAL, UNAVAILABLE, UpgradePlan, UpgradeResult


@dataclass
class StatusResult:
    subscription_id: str
    resource_group: str
    name: str
    resource_id: Optional[str]
    orchestration_mode: str
    upgrade_policy: str
    profile: ProfileState
    instances: Optional[List[InstanceState]]
    instances_note: Optional[str]
    api_version: str
    notes: List[str] = field(default_factory=list)
    events_policy: PolicyState = field(default_factory=lambda: PolicyState(False))

    @property
    def stale(self) -> Optional[List[str]]:
        if self.instances is None:
            return None
        return [i.instance_id for i in self.instances if i.latest_model_applied is not True]  # unknown is not current

    def to_dict(self) -> Dict[str, Any]:
        return {
            **_target(self),
            "resource_id": self.resource_id,
            "orchestration_mode": self.orchestration_mode,
            "upgrade_policy": self.upgrade_policy,
            "terminate_notification": self.profile.to_dict(),
            "scheduled_events_policy": self.events_policy.to_dict(),
            "instances": None if self.instances is None else [i.to_dict() for i in self.instances],
            "instance_count": None if self.instances is None else len(self.instances),
            "stale_instances": self.stale,
            "instances_note": self.instances_note,
            "api_version": self.api_version,
            "notes": list(self.notes),
        }

    def lines(self) -> List[str]:
        out = [
            f"scale set:          {self.resource_group}/{self.name}",
            f"orchestration mode: {self.orchestration_mode}",
            f"upgrade policy:     {self.upgrade_policy}",
            f"terminate notify:   {self.profile.describe()}",
            f"events policy:      {self.events_policy.describe()}",
        ]
        if self.instances is None:
            out.append(f"instances:          {self.instances_note or 'per-instance information not available'}")
        else:
            stale = self.stale or []
            out.append(f"instances:          {len(self.instances)}, {len(stale)} not on the latest model")
            if self.instances_note:
                out.append(f"                    {self.instances_note}")
            if self.instances:
                out.append("")
                out.append(f"{'INSTANCE':<10} {'NAME':<32} LATEST MODEL")
                for inst in self.instances:
                    latest = {True: "yes", False: "NO", None: "unknown"}[inst.latest_model_applied]
                    out.append(f"{inst.instance_id:<10} {inst.name or '-':<32} {latest}")
        out.extend(f"note: {n}" for n in self.notes)
        return out


@dataclass
class Plan:
    """What a change command would do now, computed from live state; nothing is written.

    `patch_body` is exactly `control.body.patch_bytes(...)` decoded: the bytes `enable` sends.
    """

    action: str
    subscription_id: str
    resource_group: str
    name: str
    before: ProfileState
    desired: ProfileState
    profile_change: bool
    request: Optional[str]
    patch_body: Optional[str]
    upgrade: UpgradePlan
    policy_before: Optional[PolicyState] = None
    policy_desired: Optional[PolicyState] = None
    """None: no scheduled-events policy option was given (the policy is left alone)."""
    policy_change: bool = False
    feature_state: Optional[str] = None
    """Microsoft.Compute/SendScheduledEventsPolicy's registration, when turning on Event Grid reads it."""

    @property
    def changes_pending(self) -> bool:
        """True when applying would write: a PATCH or at least one manualupgrade."""
        return (self.profile_change or self.policy_change
                or (self.upgrade.mode == MANUAL and bool(self.upgrade.stale)))

    @property
    def compliance_unknown(self) -> bool:
        """True when which instances run the latest model cannot be read (Flexible without
        latestModelApplied) and no change is planned: a drift check must not read that as compliant."""
        return not self.changes_pending and self.upgrade.mode == UNAVAILABLE and self.upgrade.total > 0

    def to_dict(self) -> Dict[str, Any]:
        return {
            "action": self.action,
            **_target(self),
            "changes_pending": self.changes_pending,
            "compliance_unknown": self.compliance_unknown,
            "profile_change": self.profile_change,
            "before": self.before.to_dict(),
            "desired": self.desired.to_dict(),
            "request": self.request,
            "patch_body": self.patch_body,
            "upgrade": self.upgrade.to_dict(),
            "policy_change": self.policy_change,
            "policy_before": self.policy_before.to_dict() if self.policy_before is not None else None,
            "policy_desired": self.policy_desired.to_dict() if self.policy_desired is not None else None,
            "feature_state": self.feature_state,
        }

    def lines(self) -> List[str]:
        out = [f"{self.action} {self.resource_group}/{self.name}"]
        out.append(f"  terminate notify now: {self.before.describe()}")
        if self.profile_change:
            out.append(f"  would change to:      {self.desired.describe()}")
        else:
            out.append("  profile: no change")
        if self.policy_desired is not None and self.policy_before is not None:
            out.append(f"  events policy now:    {self.policy_before.describe()}")
            out.append(f"  would change to:      {self.policy_desired.describe()}" if self.policy_change
                       else "  events policy: no change")
        if self.feature_state is not None:
            out.append(f"  feature Microsoft.Compute/SendScheduledEventsPolicy: {self.feature_state}"
                       + ("" if self.feature_state.lower() == "registered" else " (enable would stop here)"))
        if self.profile_change or self.policy_change:
            out.append("")
            out.append(str(self.request))
            out.append((self.patch_body or "").rstrip("\n"))
            out.append("")
        out.append(f"  {self.upgrade.describe()}")
        for number, batch in enumerate(self.upgrade.batches if self.upgrade.mode == MANUAL else [], start=1):
            out.append(f"    batch {number}: {_ids(batch)}")
        if self.upgrade.note and self.upgrade.mode != UNAVAILABLE:  # UNAVAILABLE's describe() is the note
            out.append(f"  note: {self.upgrade.note}")
        if self.compliance_unknown:
            out.append("no profile change; whether instances run the latest model is unknown")
        else:
            out.append("changes pending" if self.changes_pending else "no changes")
        return out


@dataclass
class ChangeResult:
    """Outcome of enable / disable / retime (or their --dry-run, which carries only the plan)."""

    action: str
    changed: bool
    dry_run: bool
    plan: Plan
    after: Optional[ProfileState] = None
    upgrade: Optional[UpgradeResult] = None
    no_wait: bool = False
    """`--no-wait`: the PATCH was accepted and not followed; nothing read back, nothing upgraded."""
    follow_up: Optional[str] = None
    policy_after: Optional[PolicyState] = None

    @property
    def message(self) -> str:
        if self.dry_run:
            return "dry run: nothing written"
        if self.no_wait:
            if not self.changed:  # nothing was sent: there is no change to follow
                return f"profile already matches ({self.plan.desired.describe()}): nothing sent; {self.follow_up}"
            changes = []
            if self.plan.profile_change:
                changes.append(f"profile change to {self.plan.desired.describe()}")
            if self.plan.policy_change and self.plan.policy_desired is not None:
                changes.append(f"events policy change to {self.plan.policy_desired.describe()}")
            done = f"{' and '.join(changes) or 'change'} accepted by ARM (not waited for)"
            return f"{done}; instances not upgraded; {self.follow_up}"
        if self.plan.profile_change and self.after:
            profile = f"profile {self.after.describe()}"
        else:
            profile = "profile: no change"
        if self.plan.policy_desired is not None:
            if self.plan.policy_change and self.policy_after is not None:
                profile += f"; events policy {self.policy_after.describe()}"
            else:
                profile += "; events policy: no change"
        if self.upgrade is not None:
            return f"{profile}; {self.upgrade.describe()}"
        return profile

    def to_dict(self) -> Dict[str, Any]:
        return {
            "action": self.action,
            "changed": self.changed,
            "dry_run": self.dry_run,
            "message": self.message,
            "plan": self.plan.to_dict(),
            "after": self.after.to_dict() if self.after else None,
            "policy_after": self.policy_after.to_dict() if self.policy_after else None,
            "upgrade": self.upgrade.to_dict() if self.upgrade else None,
            "no_wait": self.no_wait,
        }

    def lines(self) -> List[str]:
        if self.dry_run:
            return self.plan.lines() + [self.message]
        return [f"{self.action} {self.plan.resource_group}/{self.plan.name}: {self.message}"]


def _target(result: Any) -> Dict[str, Any]:
    """The scale set a result is about, as every JSON result names it."""
    return {"subscription_id": result.subscription_id, "resource_group": result.resource_group, "name": result.name}


def _ids(ids: List[str]) -> str:
    if len(ids) <= 8:
        return ", ".join(ids)
    return f"{', '.join(ids[:3])}, ... {ids[-1]} ({len(ids)} instances)"
