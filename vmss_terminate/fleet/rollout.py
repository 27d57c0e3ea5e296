"""`rollout`: audit, plan, then enable/retime and upgrade every non-compliant scale set through
`vmss_terminate.control.enable` -- the code `vmss-terminate enable` runs: one PATCH carrying only
scheduledEventsProfile (never a PUT) plus ceil(stale / batch) manualupgrade calls per set.

Concurrency: up to `concurrency` scale sets at once, across subscriptions; each subscription is
throttled on its own by the session's SubscriptionThrottle (429 + Retry-After and the remaining
headers slow that subscription only).

Stopping: setting `stop` (the CLI does on Ctrl-C) starts no new scale set and no new upgrade
batch; calls in flight finish. The result names what was done and what remains, and the journal
lets a re-run continue: it re-audits everything, so a set finished earlier is verified, not redone.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from queue import Empty, SimpleQueue
from typing import Any, Callable, Dict, List, Optional, Set

from vmss_terminate import control
from vmss_terminate.clock import SYSTEM_CLOCK, Clock
from vmss_terminate.control.arm_errors import CredentialRejected
from vmss_terminate.control.connection import Connection
from vmss_terminate.control.events_policy import FEATURE_NAME, FEATURE_NAMESPACE, PolicyChange, register_command
from vmss_terminate.control.upgrade import UpgradeIncomplete, UpgradeOptions, UpgradeResult
from vmss_terminate.errors import AzureError, VmssTerminateError
from vmss_terminate.fleet.audit import AuditReport, audit
from vmss_terminate.fleet.journal import DONE, FAILED, INTERRUPTED, STARTED, Journal
from vmss_terminate.fleet.options import AuditOptions, RolloutOptions, with_fields
from vmss_terminate.fleet.plan import UPGRADE, PlannedSet, RolloutPlan, make_plan
from vmss_terminate.fleet.scope import Scope
from vmss_terminate.fleet.session import FleetSession
from vmss_terminate.fleet.throttle import ThrottleStopped
from vmss_terminate.timeout import to_iso

# Outcome statuses of a planned set after the run.
CHANGED, SKIPPED, COMPLIANT, NOT_STARTED = "changed", "skipped", "compliant", "not-started"


class _Stopped(Exception):
    """Raised from the upgrade progress callback to start no further batch after a stop."""


@dataclass
class SetOutcome:
    planned: PlannedSet
    status: str
    upgraded: int = 0
    error: Optional[str] = None
    note: Optional[str] = None

    def to_dict(self) -> Dict[str, Any]:
        record = self.planned.record
        return {"id": record.id, "resource_group": record.resource_group, "name": record.name,
                "action": self.planned.action, "status": self.status, "upgraded": self.upgraded,
                "error": self.error, "reasons": list(self.planned.reasons), "note": self.note}


@dataclass
class RolloutProgress:
    """A snapshot for progress displays."""

    sets_done: int
    sets_total: int
    instances_upgraded: int
    instances_total: int
    writes_done: int
    writes_total: int
    elapsed: float

    @property
    def fraction(self) -> float:
        if self.writes_total:
            return min(1.0, self.writes_done / self.writes_total)
        return self.sets_done / self.sets_total if self.sets_total else 1.0

    @property
    def eta(self) -> Optional[float]:
        """Seconds left at the rate so far (None until something is done)."""
        if self.fraction <= 0:
            return None
        return self.elapsed * (1 - self.fraction) / self.fraction


@dataclass
class RolloutResult:
    plan: RolloutPlan
    outcomes: List[SetOutcome]
    dry_run: bool = False
    interrupted: bool = False
    seconds: float = 0.0
    journal: Optional[str] = None
    resumed: bool = False
    throttling: Dict[str, Any] = field(default_factory=dict)
    audit_seconds: float = 0.0  # the audit the plan came from (part of `seconds`)
    source: str = ""  # where the audit's facts came from (AuditReport.source): what "compliant_before" rests on

    def by_status(self, *statuses: str) -> List[SetOutcome]:
        return [o for o in self.outcomes if o.status in statuses]

    @property
    def failed(self) -> List[SetOutcome]:
        return self.by_status(FAILED)

    @property
    def remaining(self) -> List[SetOutcome]:
        """Sets the rollout meant to change and did not finish (failed, interrupted, not started)."""
        return self.by_status(FAILED, INTERRUPTED, NOT_STARTED, STARTED)

    @property
    def ok(self) -> bool:
        """Every set not skipped is compliant now."""
        return not self.dry_run and not self.remaining

    def to_dict(self) -> Dict[str, Any]:
        return {
            "timeout": to_iso(self.plan.timeout_minutes),
            "dry_run": self.dry_run,
            "interrupted": self.interrupted,
            "ok": self.ok,
            "seconds": round(self.seconds, 3),
            "audit_seconds": round(self.audit_seconds, 3),
            # sets compliant before were never read from ARM by this run: their verdict is Resource Graph's
            "compliant_before_source": self.source,
            "journal": self.journal,
            "resumed": self.resumed,
            "sets": {
                "in_scope": len(self.outcomes),
                "changed": len(self.by_status(CHANGED)),
                "compliant_before": len(self.by_status(COMPLIANT)),
                "skipped": len(self.by_status(SKIPPED)),
                "failed": len(self.failed),
                "remaining": len(self.remaining),
            },
            "instances_upgraded": sum(o.upgraded for o in self.outcomes),
            "writes_planned": self.plan.writes,
            "failed": [o.to_dict() for o in self.failed],
            "remaining": [o.planned.record.id for o in self.remaining],
            "skipped": [o.to_dict() for o in self.by_status(SKIPPED)],
            "notes": {o.planned.record.id: o.note for o in self.outcomes if o.note},
            "throttling": dict(self.throttling),
            "plan": self.plan.to_dict() if self.dry_run else None,
        }

    def lines(self) -> List[str]:
        data = self.to_dict()["sets"]
        upgraded = sum(o.upgraded for o in self.outcomes)
        out = [f"rollout {'stopped' if self.interrupted else 'finished'} in {self.seconds:.1f}s: "
               f"{data['changed']} changed ({upgraded} instances upgraded), {data['compliant_before']} already "
               f"compliant per Resource Graph, {data['skipped']} skipped, {data['failed']} failed, "
               f"{data['remaining']} remaining"]
        if data["compliant_before"] and self.source:
            out.append(f"  already compliant: {self.source}; not re-read from ARM by this run "
                       "(`fleet audit` again, or `status` for one set, to confirm)")
        for outcome in self.failed:
            record = outcome.planned.record
            out.append(f"  failed {record.resource_group}/{record.name}: {outcome.error}")
        held_back = [o for o in self.by_status(NOT_STARTED) if o.error]
        if held_back:
            out.append(f"  {len(held_back)} set(s) {held_back[0].error}")
        for outcome in self.by_status(SKIPPED):
            record = outcome.planned.record
            out.append(f"  skipped {record.resource_group}/{record.name}: {', '.join(outcome.planned.reasons)}")
        for outcome in self.outcomes:
            if outcome.note and outcome.status in (CHANGED, COMPLIANT):
                record = outcome.planned.record
                out.append(f"  note {record.resource_group}/{record.name}: {outcome.note}")
        if self.throttling.get("throttled"):
            out.append(f"  throttled {self.throttling['throttled']} time(s), every one retried "
                       f"({self.throttling['gave_up']} given up)")
        return out


class _Tracker:
    """Thread-safe progress counters that call the display callback."""

    def __init__(self, plan: RolloutPlan, progress: Optional[Callable[[RolloutProgress], None]]) -> None:
        self.plan = plan
        # once: each of these is a pass over every set, and `update` runs for every write and set
        # done (a pass per update made a 2,000-set rollout quadratic: ~10 % of its client CPU)
        self.sets_total = len(plan.work)
        self.instances_total = plan.instances
        self.writes_total = plan.writes
        self.callback = progress
        self.started = time.monotonic()
        self.sets_done = 0
        self.upgraded: Dict[str, int] = {}
        self.upgraded_total = 0  # sum(self.upgraded.values()), kept as they change
        self.writes = 0
        self.lock = threading.Lock()

    def update(self, key: Optional[str] = None, upgraded: Optional[int] = None, writes: int = 0,
               set_done: bool = False) -> None:
        with self.lock:
            if key is not None and upgraded is not None:
                self.upgraded_total += upgraded - self.upgraded.get(key, 0)
                self.upgraded[key] = upgraded
            self.writes += writes
            self.sets_done += int(set_done)
            snapshot = RolloutProgress(self.sets_done, self.sets_total, self.upgraded_total,
                                       self.instances_total, self.writes, self.writes_total,
                                       time.monotonic() - self.started)
        if self.callback is not None:
            self.callback(snapshot)


def rollout(
    scope: Optional[Scope] = None,
    options: Optional[RolloutOptions] = None,
    *,
    connection: Optional[Connection] = None,
    progress: Optional[Callable[[RolloutProgress], None]] = None,
    on_plan: Optional[Callable[[RolloutPlan], None]] = None,
    stop: Optional[threading.Event] = None,
    clock: Clock = SYSTEM_CLOCK,
    session: Optional[FleetSession] = None,
    **fields: Any,
) -> RolloutResult:
    """Enable terminate notification with the options' `timeout` on every non-compliant scale set
    in `scope`.

    `options` is a `RolloutOptions`, or its fields are given as keywords (`timeout=10,
    journal="rollout.journal"`). Audits first and builds the plan (`on_plan(plan)` is called with
    it before any write); `dry_run` stops there. Automatic / Rolling sets are waited for (up to
    `wait_timeout` seconds on `clock`) until Azure has applied the model. Raises UsageError for bad
    input; Azure failures of single sets are reported in the result (`failed`), not raised.
    """
    checked: RolloutOptions = with_fields(RolloutOptions, options, fields)
    minutes, batch, journal, dry_run = checked.minutes, checked.batch, checked.journal, checked.dry_run
    concurrency, include = checked.concurrency, list(checked.include_skipped)
    stop = stop or threading.Event()
    policy = checked.policy
    if policy is not None:  # a pinned api-version too old for an option: exit 2 before any request
        policy.check_api_version(connection.api_version if connection is not None else None)
    book = Journal(journal, to_iso(minutes), str(batch), read_only=dry_run,
                   policy=policy.to_dict() if policy is not None else None) if journal is not None else None
    owned = session is None
    session = session or FleetSession(connection, clock)
    started = time.monotonic()
    try:
        report: AuditReport = audit(scope, AuditOptions(concurrency=concurrency, timeout=minutes), clock=clock,
                                    session=session)
        plan = make_plan(report.scale_sets, minutes, batch, include, book.done() if book else None, policy)
        if on_plan is not None:
            on_plan(plan)
        result = RolloutResult(plan, [], dry_run=dry_run, journal=str(journal) if journal else None,
                               resumed=bool(book and book.resumed), audit_seconds=report.seconds,
                               source=report.source)
        if dry_run:
            result.outcomes = [_static_status(p) for p in plan.sets]
        else:
            upgrade = UpgradeOptions(batch_size=batch, wait=True, wait_timeout=checked.wait_timeout)
            session.throttle.stop = stop  # a throttled request stops waiting when the run stops
            if policy is not None and not policy.force:
                _check_features(plan, session, policy)
            result.outcomes = _execute(plan, session, upgrade, concurrency, book, progress, stop, clock, policy)
            result.interrupted = stop.is_set()
        result.throttling = session.throttle.stats.to_dict()
        result.seconds = time.monotonic() - started
        return result
    finally:
        if book is not None:
            book.close()
        if owned:
            session.close()


def _static_status(planned: PlannedSet) -> SetOutcome:
    status = {"skip": SKIPPED, "none": COMPLIANT}.get(planned.action, NOT_STARTED)
    return SetOutcome(planned, status, note=planned.note)


def _check_features(plan: RolloutPlan, session: FleetSession, policy: Optional[PolicyChange]) -> None:
    """Before the first write: every subscription where the rollout turns Event Grid publishing on
    has the preview feature registered (one Features GET per subscription), else exit 1 naming the
    `az feature register` line of each (`force` skips this)."""
    if policy is None or not policy.enables_event_grid:
        return
    subscriptions = sorted({p.record.subscription_id for p in plan.work
                            if p.policy_change and not p.record.events_policy.publishes})
    missing = []
    for subscription in subscriptions:
        state = session.compute(subscription).feature_state(FEATURE_NAMESPACE, FEATURE_NAME)
        if state.lower() != "registered":
            missing.append((subscription, state))
    if missing:
        raise AzureError(
            f"publishing scheduled events to Event Grid and Resource Graph is a preview that needs the feature "
            f"{FEATURE_NAMESPACE}/{FEATURE_NAME} registered; {len(missing)} subscription(s) of this rollout do not "
            f"have it ({', '.join(f'{sub}: {state}' for sub, state in missing)}); nothing was changed. Register it "
            f"with: {'; '.join(register_command(sub) for sub, _ in missing)} -- then, once `az feature show` says "
            f"Registered, `az provider register --namespace {FEATURE_NAMESPACE}` in each; or pass --force")


def _execute(plan: RolloutPlan, session: FleetSession, options: UpgradeOptions, concurrency: int,
             book: Optional[Journal], progress: Optional[Callable[[RolloutProgress], None]],
             stop: threading.Event, clock: Clock, policy: Optional[PolicyChange] = None) -> List[SetOutcome]:
    tracker = _Tracker(plan, progress)
    outcomes: Dict[int, SetOutcome] = {i: _static_status(p) for i, p in enumerate(plan.sets)}
    queue = _FairQueue([(i, p.record.subscription_id) for i, p in enumerate(plan.sets) if p.works])
    running: Set["Future[SetOutcome]"] = set()
    index_of: Dict["Future[SetOutcome]", int] = {}
    finishing: "SimpleQueue[Future[SetOutcome]]" = SimpleQueue()  # each future puts itself here when done
    pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="fleet-rollout")
    rejected: List[str] = []  # ARM refused this run's token (401): every further set would be refused too
    try:
        while queue or running:
            while queue and len(running) < concurrency and not stop.is_set() and not rejected:
                i = queue.pop()
                future = pool.submit(_one, plan.sets[i], plan.timeout_minutes, session, options, book, tracker,
                                     stop, clock, policy, rejected)
                running.add(future)
                index_of[future] = i
                future.add_done_callback(finishing.put)
            if not running:
                break  # stopped with work still queued: it stays not-started
            finished = _finished(finishing)
            running.difference_update(finished)
            for future in finished:
                i = index_of.pop(future)
                queue.done(plan.sets[i].record.subscription_id)
                outcomes[i] = future.result()
    except BaseException:
        # a second Ctrl-C / SIGTERM (StopSignal): do not join workers still waiting on Azure
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    if rejected:
        for outcome in outcomes.values():
            if outcome.status == NOT_STARTED and outcome.planned.works:
                outcome.error = f"not started: ARM rejected this run's token on {rejected[0]} (see its error)"
    return [outcomes[i] for i in range(len(plan.sets))]


class _FairQueue:
    """Work by subscription: the next set comes from the subscription with the fewest sets running,
    so a throttled subscription holds its own share of the workers, not all of them (sets of one
    subscription come in plan order)."""

    def __init__(self, items: List["tuple[int, str]"]) -> None:
        self.pending: Dict[str, List[int]] = {}
        for index, subscription in items:
            self.pending.setdefault(subscription.lower(), []).append(index)
        self.running: Dict[str, int] = {sub: 0 for sub in self.pending}

    def __bool__(self) -> bool:
        return any(self.pending.values())

    def pop(self) -> int:
        sub = min((s for s, items in self.pending.items() if items), key=lambda s: self.running[s])
        self.running[sub] += 1
        return self.pending[sub].pop(0)

    def done(self, subscription: str) -> None:
        self.running[subscription.lower()] -= 1


def _finished(finishing: "SimpleQueue[Future[SetOutcome]]") -> "List[Future[SetOutcome]]":
    """The futures done since the last call: waits up to 0.2 s for the first (so a stop is seen),
    then takes every other one already there. Why a queue fed by done-callbacks and not
    `concurrent.futures.wait`: that installs a waiter on every running future and removes it again
    on every call -- per set done, a pass over all `concurrency` futures under their locks."""
    try:
        done = [finishing.get(timeout=0.2)]
    except Empty:
        return []
    while True:
        try:
            done.append(finishing.get_nowait())
        except Empty:
            return done


def _one(planned: PlannedSet, minutes: int, session: FleetSession, options: UpgradeOptions, book: Optional[Journal],
         tracker: _Tracker, stop: threading.Event, clock: Clock, policy: Optional[PolicyChange] = None,
         rejected: Optional[List[str]] = None) -> SetOutcome:
    """Enable one scale set through the control plane; never raises for Azure failures."""
    record = planned.record
    key = record.id.lower()
    if stop.is_set():
        return SetOutcome(planned, NOT_STARTED)
    if book is not None:
        book.record(record.id, STARTED)
    upgraded = [0]

    def on_progress(done: int, total: int) -> None:
        if done > upgraded[0]:
            tracker.update(key, done, writes=1)
        upgraded[0] = done
        if stop.is_set() and done < total:
            raise _Stopped()

    connection = session.compute(record.subscription_id)
    upgrade: Optional[UpgradeResult]
    try:
        if planned.action == UPGRADE and record.stale_unknown:
            # profile already right, members' model unknown: `upgrade` upgrades every member
            changed, upgrade = False, control.upgrade(record.resource_group, record.name, connection=connection,
                                                      options=options, progress=on_progress, clock=clock)
        else:
            # the features were checked once per subscription before the first write (or --force)
            result = control.enable(record.resource_group, record.name, minutes, connection=connection,
                                    options=options, progress=on_progress, clock=clock,
                                    policy=dataclasses.replace(policy, force=True) if policy is not None else None)
            changed, upgrade = result.changed, result.upgrade
    except _Stopped:
        outcome = SetOutcome(planned, INTERRUPTED, upgraded[0], "stopped before the remaining upgrade batches")
    except ThrottleStopped as exc:  # stopped while throttled: the request waiting for its turn was not sent
        outcome = SetOutcome(planned, INTERRUPTED, upgraded[0], str(exc))
    except UpgradeIncomplete as exc:
        if stop.is_set():  # a batch's requests stopped waiting for the throttle: resumable, not failed
            outcome = SetOutcome(planned, INTERRUPTED, len(exc.result.upgraded), str(exc))
        else:
            outcome = SetOutcome(planned, FAILED, len(exc.result.upgraded), str(exc))
    except CredentialRejected as exc:
        if rejected is not None:
            rejected.append(f"{record.resource_group}/{record.name}")
        outcome = SetOutcome(planned, FAILED, upgraded[0], str(exc))
    except VmssTerminateError as exc:
        outcome = SetOutcome(planned, INTERRUPTED if stop.is_set() else FAILED, upgraded[0], str(exc))
    else:
        done = len(upgrade.upgraded) if upgrade is not None else 0
        if upgrade is not None and upgrade.mode == "platform":
            done = upgrade.total - len(upgrade.remaining)
        outcome = SetOutcome(planned, CHANGED, done, note=_unknown_note(record, upgrade))
        if changed:
            tracker.update(writes=1)
    if book is not None:
        book.record(record.id, DONE if outcome.status == CHANGED else outcome.status,
                    upgraded=outcome.upgraded, error=outcome.error)
    tracker.update(key, outcome.upgraded, set_done=outcome.status == CHANGED)
    return outcome



def _unknown_note(record: Any, upgrade: Optional[UpgradeResult]) -> Optional[str]:
    """Why a set this run finished may still audit as stale-unknown (Flexible: Azure never reports
    which members run the latest model), so that a re-audit is not read as a failed rollout."""
    if record.uniform and not record.stale_unknown:
        return None
    done = len(upgrade.upgraded) if upgrade is not None else 0
    what = (f"all {done} member(s) upgraded in this run" if upgrade is not None and upgrade.mode == "manual"
            else (upgrade.note if upgrade is not None and upgrade.note else "members not upgraded by this run"))
    return (f"done: {what}; which members run the latest model is not reported, so a re-audit still shows "
            "stale-unknown (re-running with the same --journal does not upgrade them again)")
