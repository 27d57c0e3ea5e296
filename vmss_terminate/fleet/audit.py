"""`audit`: every scale set in scope, its terminate-notification state and findings, read through
Azure Resource Graph plus one instance list per set where staleness matters.

ARM calls an audit costs (documented in docs/fleet.md): one `GET /subscriptions` when the scope
is not given as subscription ids (to find them, or to resolve display names); one Resource Graph
page per 1,000 scale sets (per 1,000 subscriptions); one instance-list page per enabled Uniform
scale set (instance lists are paged by ARM; big sets take more pages). Disabled sets are not
listed: enabling them makes every instance stale anyway, which `rollout` plans for.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Tuple

from vmss_terminate.clock import SYSTEM_CLOCK, Clock
from vmss_terminate.control.connection import Connection
from vmss_terminate.control.subscriptions import match_subscription
from vmss_terminate.errors import AzureError
from vmss_terminate.fleet import findings as codes
from vmss_terminate.fleet.options import AuditOptions, with_fields
from vmss_terminate.fleet.records import ScaleSetAudit, parse_row
from vmss_terminate.fleet.scope import Scope, is_subscription_id
from vmss_terminate.fleet.session import FleetSession
from vmss_terminate.fleet.stale import count_stale

log = logging.getLogger(__name__)

MAX_SUBSCRIPTIONS_PER_QUERY = 1000
_INACTIVE_STATES = ("disabled", "deleted")


@dataclass
class AuditReport:
    """The audit's records plus what it cost."""

    scope: Scope
    timeout_minutes: Optional[int]
    scale_sets: List[ScaleSetAudit]
    subscriptions: List[str]
    calls: Dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    ignore_findings: Tuple[str, ...] = ()  # accepted by the gate (`failing`), from AuditOptions
    graph_read_at: Optional[float] = None
    """When Resource Graph's answer was read (epoch seconds, on the audit's clock): the verdicts rest
    on it, and Resource Graph can lag ARM by minutes."""

    @property
    def source(self) -> str:
        """Where the verdicts' facts came from, said in words."""
        at = (time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.graph_read_at))
              if self.graph_read_at is not None else "an unknown time")
        repeats = self.calls.get("duplicate_rows", 0)
        said = f"; it answered {repeats} row(s) twice with the same contents, each counted once" if repeats else ""
        return f"facts from Azure Resource Graph as read at {at} (it can lag ARM by minutes){said}"

    @property
    def non_compliant(self) -> List[ScaleSetAudit]:
        return [s for s in self.scale_sets if not s.compliant]

    @property
    def unreadable(self) -> List[ScaleSetAudit]:
        """Sets whose instance list could not be read (finding `unreadable`): the audit is
        incomplete, and the CLI exits 1 after printing the others."""
        return [s for s in self.scale_sets if s.unreadable is not None]

    def failing(self, ignore: Optional[Iterable[str]] = None) -> List[ScaleSetAudit]:
        """Sets that fail a compliance gate (`--detailed-exitcode`) when the findings in `ignore`
        (default: the audit's `ignore_findings`, `--ignore-finding`) are accepted: see
        `findings.fails_gate`."""
        ignored = codes.check_ignorable(self.ignore_findings if ignore is None else ignore)
        return [s for s in self.scale_sets if codes.fails_gate(s.findings, s.compliant, ignored)]

    def to_dict(self) -> Dict[str, Any]:
        return {"scope": self.scope.describe(), "timeout_minutes": self.timeout_minutes,
                "subscriptions": list(self.subscriptions), "calls": dict(self.calls),
                "seconds": round(self.seconds, 3), "scale_sets": [s.to_dict() for s in self.scale_sets]}


def audit(
    scope: Optional[Scope] = None,
    options: Optional[AuditOptions] = None,
    *,
    connection: Optional[Connection] = None,
    clock: Clock = SYSTEM_CLOCK,
    session: Optional[FleetSession] = None,
    **fields: Any,
) -> AuditReport:
    """Audit every scale set in `scope` (default: every subscription the credential sees).

    `options` (`AuditOptions`, or its fields as keywords: `timeout=10, concurrency=8`): a
    `timeout` (5..15 minutes, like `enable`) makes a different notBeforeTimeout a finding and
    non-compliant; without it any enabled timeout is compliant. `connection` carries the ARM
    endpoint, cloud and credential (its subscription_id is ignored: the scope decides).
    """
    scope = scope or Scope()
    checked: AuditOptions = with_fields(AuditOptions, options, fields)
    wanted, concurrency = checked.timeout, checked.concurrency
    started = time.monotonic()
    owned = session is None
    session = session or FleetSession(connection, clock)
    try:
        calls = {"subscription_lists": 0, "graph_pages": 0, "instance_lists": 0}
        subscriptions, names = _subscriptions(session, scope, calls)
        records: List[ScaleSetAudit] = []
        chunks = [subscriptions[i:i + MAX_SUBSCRIPTIONS_PER_QUERY]
                  for i in range(0, len(subscriptions), MAX_SUBSCRIPTIONS_PER_QUERY)]
        if scope.management_groups and not scope.subscriptions:
            chunks = [[]]
        read_at = clock.now()
        for chunk in chunks:
            result = session.query_rows(scope.query(), chunk, list(scope.management_groups),
                                        on_row=lambda row: _keep(records, parse_row(row, names), scope))
            calls["graph_pages"] += result.pages
            calls["duplicate_rows"] = calls.get("duplicate_rows", 0) + result.duplicates
        count_stale(session, scope, chunks, [r for r in records if r.enabled], concurrency, calls)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(read_at))
        for record in records:
            record.source_read_at = stamp
            record.evaluate(wanted, checked.require_event_grid, tuple(checked.require_auto_approve))
        return AuditReport(scope, wanted, records, subscriptions, calls, time.monotonic() - started,
                           tuple(checked.ignore_findings), graph_read_at=read_at)
    finally:
        if owned:
            session.close()


def _keep(records: List[ScaleSetAudit], record: ScaleSetAudit, scope: Scope) -> None:
    """Each row becomes its record as its page is read (the rows themselves are not kept)."""
    if scope.selects_tags(record.tags):
        records.append(record)


def _subscriptions(session: FleetSession, scope: Scope, calls: Dict[str, int]) -> "tuple[List[str], Dict[str, str]]":
    """Subscription ids to query and their display names (lower-case id -> name)."""
    given = list(scope.subscriptions)
    if scope.management_groups and not given:  # Resource Graph resolves the groups; the list only names them
        calls["subscription_lists"] += 1
        try:
            return [], _names(session.list_subscriptions())
        except AzureError as exc:  # names are a courtesy: the audit goes on with ids
            log.warning("subscription names unavailable (%s); showing ids", exc)
            return [], {}
    calls["subscription_lists"] += 1
    visible = session.list_subscriptions()
    names = _names(visible)
    if not given:
        return [str(s["subscriptionId"]) for s in visible
                if s.get("subscriptionId") and str(s.get("state", "Enabled")).lower() not in _INACTIVE_STATES], names
    resolved = []
    for wanted in given:
        if is_subscription_id(wanted):
            resolved.append(wanted)
            continue
        resolved.append(match_subscription(visible, wanted))
    unseen = [sub for sub in _unique(resolved) if sub.lower() not in names]
    if unseen:
        # Resource Graph answers an unknown subscription with no rows: a green "0 scale sets"
        shown = ", ".join(f"{s.get('displayName')} ({s.get('subscriptionId')})" for s in visible[:10]) or "none"
        named = ", ".join(unseen[:5]) + (f" and {len(unseen) - 5} more" if len(unseen) > 5 else "")
        raise AzureError(f"subscription {named} is not visible to this credential (GET /subscriptions "
                         f"lists {len(visible)}: {shown}): refusing to report it as having no scale sets; check "
                         "the id and the credential's role assignments")
    return _unique(resolved), names


def _names(visible: List[Dict[str, Any]]) -> Dict[str, str]:
    """lower-case subscription id -> display name, from GET /subscriptions."""
    return {str(s.get("subscriptionId", "")).lower(): str(s.get("displayName") or "") for s in visible}


def _unique(items: List[str]) -> List[str]:
    seen, out = set(), []
    for item in items:
        if item.lower() not in seen:
            seen.add(item.lower())
            out.append(item)
    return out
