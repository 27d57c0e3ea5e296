"""Fleet findings: stable codes with a one-line explanation each, decided from one scale set's
Resource Graph row (and, for `stale-model`, its instance list).

Codes are a contract (JSON output, `--include-skipped`, pipelines grep for them): add, never rename.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Mapping, Optional, Set

from vmss_terminate.errors import UsageError

DISABLED = "disabled"
TIMEOUT_DIFFERS = "timeout-differs"
STALE_MODEL = "stale-model"
STALE_UNKNOWN = "stale-unknown"
SPOT = "spot"
AKS_MANAGED = "aks-managed"
FORCE_DELETION = "force-deletion"
AUTOMATIC_REPAIRS = "automatic-repairs"
UNREADABLE = "unreadable"
EVENT_GRID_OFF = "event-grid-off"
AUTO_APPROVE_OFF = "auto-approve-off"

EXPLANATIONS: Dict[str, str] = {
    DISABLED: "terminate notification is not enabled: instances are deleted without a Terminate event",
    TIMEOUT_DIFFERS: "notBeforeTimeout differs from the --timeout wanted",
    STALE_MODEL: "instances run an older model and would get the old NotBefore (or no Terminate event)",
    STALE_UNKNOWN: "which instances run the latest model is unknown (Flexible orchestration, or the set was deleted "
                   "while it was read): not known to be compliant; rollout upgrades every member",
    SPOT: "Spot priority: terminate notification is not supported for Spot instances",
    AKS_MANAGED: "AKS-managed node pool (aks-managed-* tag): AKS reverts direct changes; configure it through AKS",
    FORCE_DELETION: "scaleInPolicy.forceDeletion: force-deleted instances may not wait for the Terminate event",
    AUTOMATIC_REPAIRS: "automatic repairs honour the delay but create the replacement instance at once",
    UNREADABLE: "the instance list could not be read (the error is in the record): the audit is incomplete and "
                "exits 1",
    EVENT_GRID_OFF: "--require-event-grid: the set does not publish its scheduled events to Event Grid and Resource "
                    "Graph (scheduledEventsPolicy, preview): a central handler never sees them",
    AUTO_APPROVE_OFF: "--require-auto-approve: Azure does not approve the required kind(s) of event by itself "
                      "(scheduledEventsPolicy automaticallyApprove; the record's auto_approve lists what it does)",
}
FINDINGS = tuple(EXPLANATIONS)

# Skipped by a rollout unless --include-skipped names them: changing these sets is wrong or futile.
SKIPPED_BY_DEFAULT = (SPOT, AKS_MANAGED)
# Findings that make a set non-compliant (the others are advice).
NON_COMPLIANT = (DISABLED, TIMEOUT_DIFFERS, STALE_MODEL, STALE_UNKNOWN, UNREADABLE, EVENT_GRID_OFF, AUTO_APPROVE_OFF)
# What `--ignore-finding` accepts: everything but `unreadable` (an incomplete audit is an error, exit 1,
# never a gate to pass).
IGNORABLE = tuple(code for code in FINDINGS if code != UNREADABLE)


def check_ignorable(codes: Iterable[str]) -> Set[str]:
    """The `--ignore-finding` codes, validated (UsageError, exit 2, for anything else)."""
    out = set()
    for code in codes:
        if code not in IGNORABLE:
            raise UsageError(f"invalid --ignore-finding {code!r}: one of {', '.join(IGNORABLE)}")
        out.add(code)
    return out


def fails_gate(found: Iterable[str], compliant: bool, ignored: Set[str]) -> bool:
    """Whether a set fails `--detailed-exitcode` when the `ignored` findings are accepted.

    A set carrying an ignored skip finding (spot, aks-managed) is out of the gate altogether: a
    Spot set is also `disabled`, and ignoring `spot` must excuse it. Otherwise the set fails while
    a non-compliance finding (NON_COMPLIANT) that is not ignored remains."""
    if compliant:
        return False
    found = set(found)
    if found & ignored & set(SKIPPED_BY_DEFAULT):
        return False
    return bool((found & set(NON_COMPLIANT)) - ignored)


def row_findings(row: Mapping[str, Any], tags: Mapping[str, Any]) -> List[str]:
    """Findings that follow from the set's configuration alone (not its terminate profile), read
    from its Resource Graph row (the columns of `scope.PROJECTION`)."""
    found = []
    if str(row.get("priority") or "").lower() == "spot":
        found.append(SPOT)
    if any(str(key).lower().startswith("aks-managed-") for key in tags):
        found.append(AKS_MANAGED)
    if row.get("forceDeletion") is True:
        found.append(FORCE_DELETION)
    if row.get("automaticRepairs") is True:
        found.append(AUTOMATIC_REPAIRS)
    return found


def profile_findings(enabled: bool, effective_minutes: Optional[int], wanted_minutes: Optional[int],
                     stale_instances: Optional[int]) -> List[str]:
    """disabled / timeout-differs / stale-model / stale-unknown (None: the stale count is unknown,
    which must never read as compliant)."""
    if not enabled:
        return [DISABLED]
    found = []
    if wanted_minutes is not None and effective_minutes != wanted_minutes:
        found.append(TIMEOUT_DIFFERS)
    if stale_instances is None:
        found.append(STALE_UNKNOWN)
    elif stale_instances:
        found.append(STALE_MODEL)
    return found


def order(codes: List[str]) -> List[str]:
    """Codes in their documented order, without duplicates."""
    return [code for code in FINDINGS if code in codes]


def policy_findings(publishes: bool, approved: Iterable[str], require_event_grid: bool,
                    require_auto_approve: Iterable[str]) -> List[str]:
    """event-grid-off / auto-approve-off, only for what the audit was asked to require."""
    found = []
    if require_event_grid and not publishes:
        found.append(EVENT_GRID_OFF)
    if set(require_auto_approve) - set(approved):
        found.append(AUTO_APPROVE_OFF)
    return found
