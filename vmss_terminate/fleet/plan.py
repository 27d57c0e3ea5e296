"""The rollout plan: for each audited scale set, what `rollout` will do and roughly what it costs.

Actions: `enable` (PATCH the profile, then upgrade every instance: the new model makes them all
stale), `upgrade` (profile already right; upgrade the stale instances -- every member when which
are stale is unknown, finding `stale-unknown`), `none` (compliant, or `stale-unknown` only and
finished by an earlier run of the same journal: Azure never reports per-member model state for
Flexible sets, so a re-run would otherwise upgrade them again and again),
`skip` (a finding that makes the change wrong or futile: Spot, AKS-managed, unless
`--include-skipped`). The writes estimate is one PATCH plus ceil(stale / batch) manualupgrade
calls for a Manual upgrade policy; Automatic / Rolling sets get the PATCH only (Azure upgrades).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Set

from vmss_terminate.control.events_policy import PolicyChange
from vmss_terminate.control.upgrade import BatchSize
from vmss_terminate.fleet import findings as codes
from vmss_terminate.fleet.records import ScaleSetAudit
from vmss_terminate.timeout import to_iso

ENABLE, UPGRADE, NONE, SKIP = "enable", "upgrade", "none", "skip"


@dataclass
class PlannedSet:
    record: ScaleSetAudit
    action: str
    timeout_minutes: int
    reasons: List[str] = field(default_factory=list)
    instances: int = 0  # instances the rollout will upgrade (estimate from the audit)
    writes: int = 0  # PATCH + manualupgrade calls (estimate)
    done_earlier: bool = False  # the journal says an earlier run finished it (and it is compliant now)
    note: Optional[str] = None
    policy_change: bool = False  # the scheduled-events policy differs from the one rolled out

    @property
    def works(self) -> bool:
        return self.action in (ENABLE, UPGRADE)

    def to_dict(self) -> Dict[str, Any]:
        return {"id": self.record.id, "subscription_id": self.record.subscription_id,
                "resource_group": self.record.resource_group, "name": self.record.name, "action": self.action,
                "reasons": list(self.reasons), "instances": self.instances, "writes": self.writes,
                "done_earlier": self.done_earlier, "findings": list(self.record.findings), "note": self.note,
                "policy_change": self.policy_change}

    def describe(self) -> str:
        # the subscription too: the same group and set names recur across subscriptions
        where = self.record.subscription_name or self.record.subscription_id
        target = f"{self.record.resource_group}/{self.record.name} ({where})"
        if self.action == SKIP:
            return f"skip     {target}: {', '.join(self.reasons)} ({codes.EXPLANATIONS[self.reasons[0]]})"
        if self.action == NONE:
            return f"ok       {target}{' (done by an earlier run)' if self.done_earlier else ''}"
        if self.action == ENABLE and not self.record.profile.is_enabled_with(self.timeout_minutes):
            what = (f"enable {self.record.not_before_timeout or 'off'} -> {to_iso(self.timeout_minutes)}, "
                    f"upgrade {self.instances} instance(s)")
            if self.policy_change:
                what += ", events policy"
        elif self.action == ENABLE:
            what = f"events policy ({self.record.events_policy.describe()}), upgrade {self.instances} instance(s)"
        elif self.record.stale_unknown:
            what = f"upgrade all {self.instances} member(s) (which run the latest model is unknown)"
        else:
            what = f"upgrade {self.instances} stale instance(s)"
        return f"{self.action:<8} {target}: {what} ({self.writes} write(s))"


@dataclass
class RolloutPlan:
    timeout_minutes: int
    batch_size: BatchSize
    sets: List[PlannedSet]

    @property
    def work(self) -> List[PlannedSet]:
        return [p for p in self.sets if p.works]

    @property
    def skipped(self) -> List[PlannedSet]:
        return [p for p in self.sets if p.action == SKIP]

    @property
    def writes(self) -> int:
        return sum(p.writes for p in self.sets)

    @property
    def instances(self) -> int:
        return sum(p.instances for p in self.work)

    def to_dict(self) -> Dict[str, Any]:
        return {"timeout": to_iso(self.timeout_minutes), "batch_size": str(self.batch_size),
                "sets": len(self.sets), "to_change": len(self.work), "skipped": len(self.skipped),
                "compliant": sum(1 for p in self.sets if p.action == NONE), "writes": self.writes,
                "instances": self.instances, "plan": [p.to_dict() for p in self.sets]}

    def lines(self) -> List[str]:
        out = [f"rollout plan: notBeforeTimeout {to_iso(self.timeout_minutes)}, batch size {self.batch_size}"]
        out += [f"  {p.describe()}" for p in self.sets if p.action != NONE]
        compliant = sum(1 for p in self.sets if p.action == NONE)
        out.append(f"{len(self.work)} to change ({self.instances} instances, ~{self.writes} writes), "
                   f"{len(self.skipped)} skipped, {compliant} already compliant, {len(self.sets)} in scope")
        return out


def make_plan(records: Iterable[ScaleSetAudit], timeout_minutes: int, batch_size: BatchSize,
              include_skipped: Iterable[str] = (), done_earlier: Optional[Set[str]] = None,
              policy: Optional[PolicyChange] = None) -> RolloutPlan:
    """Plan from audit records (evaluated for `timeout_minutes`); `policy`: the scheduled-events
    policy to roll out too (a set whose policy differs is changed: in the same PATCH, no upgrade
    for it alone)."""
    skip_codes = set(codes.SKIPPED_BY_DEFAULT) - set(include_skipped)
    done = {d.lower() for d in done_earlier or set()}
    planned = []
    for record in records:
        reasons = [c for c in record.findings if c in skip_codes]
        profile_change = not record.profile.is_enabled_with(timeout_minutes)
        policy_change = policy is not None and not policy.satisfied_by(record.events_policy)
        if record.compliant and not policy_change:
            planned.append(PlannedSet(record, NONE, timeout_minutes, done_earlier=record.id.lower() in done))
        elif reasons:
            planned.append(PlannedSet(record, SKIP, timeout_minutes, reasons))
        elif record.stale_unknown and record.unreadable is None and not profile_change and not policy_change \
                and record.id.lower() in done:
            planned.append(PlannedSet(record, NONE, timeout_minutes, done_earlier=True, note=(
                "every member was upgraded by an earlier run of this journal; Azure does not report which "
                "members run the latest model, so it is not upgraded again")))
        else:
            # unknown stale count: every member is upgraded (as `enable`/`upgrade` do for Flexible)
            stale = record.instances if record.stale_unknown else (record.stale_instances or 0)
            instances = record.instances if profile_change else stale
            manual = record.upgrade_mode.lower() == "manual"
            size = batch_size.for_total(record.instances, record.max_batch_percent)
            batches = math.ceil(instances / size) if manual and instances else 0
            patch = profile_change or policy_change
            planned.append(PlannedSet(record, ENABLE if patch else UPGRADE, timeout_minutes, [], instances,
                                      int(patch) + batches, policy_change=policy_change))
    return RolloutPlan(timeout_minutes, batch_size, planned)
