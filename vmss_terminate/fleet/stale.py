"""How many instances of each enabled Uniform scale set run an older model, paid per page, not
per scale set: one Resource Graph summary over `computeresources` for the whole scope (1,000 sets
a page), ARM's instance list filtered to `properties/latestModelApplied eq false` for the sets it
does not answer for.

Why Resource Graph first: a fleet of 2,000 sets cost 1,200 instance lists (one SDK request and
~3 ms of client CPU each); the summary costs two pages. Why the evidence is checked per set: the
`computeresources` table holds the scale-set VMs' model view (Microsoft's Resource Graph samples;
docs/fleet.md cites them), where `latestModelApplied` lives, but no document shows the property in
that table by name. So the summary counts, per set, the VMs that *report* the property: a set is
taken from it only when every VM does (and the count matches); otherwise -- and when Resource Graph
answers 400 for the query (a cloud or an emulator without the table) -- that set's ARM list
decides. Unknown never reads as current.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List, Optional

from vmss_terminate.control.arm_errors import ArmRequestError
from vmss_terminate.control.profile import parse_instance
from vmss_terminate.errors import VmssTerminateError
from vmss_terminate.fleet.records import ScaleSetAudit
from vmss_terminate.fleet.scope import Scope
from vmss_terminate.fleet.session import FleetSession

FLEXIBLE_NOTE = ("Flexible orchestration: per-instance latestModelApplied is not reported; stale instances not "
                 "counted")


Summary = Optional[Dict[str, Dict[str, int]]]


def count_stale(session: FleetSession, scope: Scope, chunks: List[List[str]], records: List[ScaleSetAudit],
                concurrency: int, calls: Dict[str, int]) -> None:
    """Set `stale_instances` (or `unreadable`, or a note) on the enabled records."""
    uniform = [r for r in records if r.uniform]
    for record in records:
        if not record.uniform and record.instances == 0:
            record.stale_instances = 0  # no members, none stale: never `stale-unknown` for ever
        elif not record.uniform:
            record.instances_note = FLEXIBLE_NOTE
    if not uniform:
        return
    counts = stale_summary(session, scope, chunks, calls)
    rest = []
    for record in uniform:
        row = counts.get(record.id.lower()) if counts is not None else None
        # trusted only when the table holds every instance the set's capacity says it has and every
        # one reports the property; a lagging table (fewer rows) leaves the ARM list to decide
        if (row is not None and row["instances"] > 0 and row["instances"] == record.instances
                and row["reported"] == row["instances"]):
            record.stale_instances = row["stale"]
        elif counts is not None and row is None and record.instances == 0:
            record.stale_instances = 0  # no instances, none stale
        else:
            # some VMs do not report the property: the filtered list would leave them out (they are
            # not `eq false`), so that set's whole list is read and they count as stale
            rest.append((record, row is not None and row["reported"] < row["instances"]))
    calls["instance_lists"] = calls.get("instance_lists", 0) + len(rest)
    if rest:
        with ThreadPoolExecutor(max_workers=min(concurrency, len(rest)), thread_name_prefix="fleet-audit") as pool:
            list(pool.map(lambda item: _listed(session, *item), rest))


def stale_summary(session: FleetSession, scope: Scope, chunks: List[List[str]], calls: Dict[str, int]) -> Summary:
    """Scale set id (lower case) -> instances / reported / stale, from Resource Graph; None when
    it answers 400 for the query (the table is not there): the ARM lists decide then."""
    found: Dict[str, Dict[str, int]] = {}
    try:
        for chunk in chunks:
            result = session.query_rows(scope.stale_summary_query(), chunk, list(scope.management_groups))
            calls["graph_pages"] = calls.get("graph_pages", 0) + result.pages
            for row in result.rows:
                counts = _counts(row)
                if counts is not None:
                    found[str(row.get("id") or "").lower()] = counts
    except ArmRequestError as exc:
        if exc.status != 400:
            raise
        calls["graph_summary_refused"] = 1
        return None
    return found


def _counts(row: Dict[str, Any]) -> Optional[Dict[str, int]]:
    out = {}
    for key in ("instances", "reported", "stale"):
        value = row.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            return None  # not what the query asks for: that set's ARM list decides
        out[key] = value
    return out if out["stale"] <= out["reported"] <= out["instances"] else None


def _listed(session: FleetSession, record: ScaleSetAudit, unreported: bool = False) -> None:
    """One set's stale instances from ARM (`$filter=properties/latestModelApplied eq false`; the
    whole list when some VMs are known not to report the property: those count as stale too)."""
    with session.compute(record.subscription_id).scale_set(record.resource_group, record.name) as client:
        try:
            stale = [parse_instance(vm) for vm in client.list_instances(stale_only=not unreported)]
        except ArmRequestError as exc:
            if exc.status == 404:  # deleted since Resource Graph indexed it
                record.instances_note = f"not found when listing instances: {exc}"
                return
            record.unreadable = str(exc)  # this set only: the others are still audited
            return
        except VmssTerminateError as exc:
            record.unreadable = str(exc)
            return
    record.stale_ids = [i.instance_id for i in stale if i.latest_model_applied is not True]
    record.stale_instances = len(record.stale_ids)
