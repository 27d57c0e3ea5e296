"""When does a scale-set instance that is being deleted actually go? Azure's documented rules.

A deletion of an instance whose model carries a terminate notification publishes a Terminate
event with NotBefore = now + that model's timeout. The instance is then deleted when:

* its event is approved AND no other pending deletion in the scale set is still unapproved with
  its NotBefore in the future ("Approve all pending deletes"; with equal NotBefore this is
  "Approve all simultaneous deletes": every one must be approved), or
* its NotBefore passes ("Mandatory delete at timeout"), whatever anyone approved.

An instance whose model has no notification (never upgraded, or disabled) gets no event and is
deleted at once: the "incorrect NotBefore" case of the docs.

`plan_deletions()` is the pure rule; `DeletionScheduler` applies it to a PlacementGroup on a Clock, so a test
can drive it step by step with a ManualClock and the sandbox can run it on a ScaledClock thread.
"""

from __future__ import annotations

import logging
import math
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from vmss_terminate.clock import SYSTEM_CLOCK, Clock, wait_until
from vmss_terminate_sim.sandbox.timeline import Timeline

log = logging.getLogger(__name__)

SAME_NOT_BEFORE_S = 1.0
"""NotBefore values closer than this count as simultaneous (Azure stamps whole seconds)."""


@dataclass
class Deletion:
    """One instance on its way out, with everything the report needs to explain its fate."""

    scale_set: str
    instance_id: str
    vm_name: str
    requested_at: float
    timeout_s: Optional[float]  # None: the instance's model has no terminate notification
    event_id: Optional[str] = None
    not_before: Optional[float] = None
    approved_at: Optional[float] = None
    approved_by: Optional[str] = None
    held_by: Tuple[str, ...] = ()
    holds: List[Tuple[float, Tuple[str, ...]]] = field(default_factory=list)
    started_at: Optional[float] = None
    start_reason: str = ""
    deleted_at: Optional[float] = None

    @property
    def pending(self) -> bool:
        """Still waiting to start (Scheduled, from Azure's point of view)."""
        return self.started_at is None

    def expired(self, now: float) -> bool:
        return self.not_before is None or now >= self.not_before

    def explain(self, origin: float = 0.0) -> str:
        """One line a human can read: what happened to this instance and why."""
        parts = [self.vm_name + ":"]
        if self.event_id is None:
            parts.append("no Terminate event (the model it runs has no terminate notification);")
        else:
            parts.append(f"Terminate event, NotBefore +{self.not_before - origin:.0f}s;")  # type: ignore[operator]
            if self.approved_at is not None:
                parts.append(f"approved by {self.approved_by} at +{self.approved_at - origin:.1f}s;")
            else:
                parts.append("never approved;")
        for since, blockers in self.holds:
            parts.append(
                f"held back by pending deletion of {', '.join(blockers)} from +{since - origin:.1f}s;"
            )
        if self.started_at is not None:
            parts.append(f"deletion started at +{self.started_at - origin:.1f}s ({self.start_reason})")
        if self.deleted_at is not None:
            parts.append(f"and finished at +{self.deleted_at - origin:.1f}s.")
        elif self.started_at is None:
            parts.append("still pending.")
        return " ".join(parts)


@dataclass(frozen=True)
class DeletionPlan:
    """What to do now: deletions to start (with the reason) and who holds back the approved rest."""

    start: List[Tuple[Deletion, str]]
    held: Dict[str, Tuple[str, ...]]  # vm_name -> blocking vm names
    wake_at: Optional[float]  # next NotBefore among pending deletions


def plan_deletions(deletions: Sequence[Deletion], now: float) -> DeletionPlan:
    """Apply Azure's rules to the pending deletions at time `now` (pure; no side effects)."""
    pending = [d for d in deletions if d.pending]
    start: List[Tuple[Deletion, str]] = []
    held: Dict[str, Tuple[str, ...]] = {}
    for d in pending:
        if d.event_id is None:
            start.append((d, "no terminate notification: deleted immediately"))
        elif d.expired(now):
            start.append((d, "NotBefore passed" + ("" if d.approved_at is not None else " without approval")))
        elif d.approved_at is not None:
            blockers = [
                o
                for o in pending
                if o is not d
                and o.scale_set == d.scale_set
                and o.event_id is not None
                and o.approved_at is None
                and not o.expired(now)
            ]
            if blockers:
                held[d.vm_name] = tuple(sorted(o.vm_name for o in blockers))
            else:
                start.append((d, _release_reason(d)))
    future = [d.not_before for d in pending if d.not_before is not None and d.not_before > now]
    return DeletionPlan(start=start, held=held, wake_at=min(future) if future else None)


def _release_reason(d: Deletion) -> str:
    if d.holds:
        return "approved; every other pending deletion is now approved or past its NotBefore"
    return "approved"


def simultaneous(a: Deletion, b: Deletion) -> bool:
    """Same NotBefore: the docs' "Approve all simultaneous deletes" case."""
    return (
        a.not_before is not None
        and b.not_before is not None
        and abs(a.not_before - b.not_before) < SAME_NOT_BEFORE_S
    )


class DeletionScheduler:
    """Runs the rules against a PlacementGroup (created with auto_start=False).

    `request()` is called by the ARM emulator's deleter (an HTTP thread): it publishes the event and
    returns at once. `step()` does everything else at `clock.now()`: reads approvals, starts events,
    and after `delete_duration` (clock seconds) removes the event and calls `on_deleted`. The
    background thread calls `step()` whenever the group changes and on a short real-time tick.
    """

    def __init__(
        self,
        group: Any,
        clock: Clock = SYSTEM_CLOCK,
        timeline: Optional[Timeline] = None,
        delete_duration: float = 30.0,
        on_deleted: Optional[Callable[[Deletion], None]] = None,
        tick: float = 0.05,
    ) -> None:
        self.group = group
        self.clock = clock
        self.timeline = timeline if timeline is not None else Timeline(clock)
        self.delete_duration = delete_duration
        self.on_deleted = on_deleted
        self.tick = tick
        self._deletions: List[Deletion] = []
        self._changed = threading.Condition()
        self._step_lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        group.add_listener(self._on_group_change)

    # -- input -------------------------------------------------------------------------------

    def request(self, scale_set: str, instance_id: str, vm_name: str, timeout_s: Optional[float]) -> Deletion:
        """A deletion was asked for: publish the Terminate event (if the model has one)."""
        now = self.clock.now()
        deletion = Deletion(scale_set, instance_id, vm_name, requested_at=now, timeout_s=timeout_s)
        if timeout_s is not None:
            # IMDS shows NotBefore in whole seconds; round up so the rule enforces what agents see.
            deletion.not_before = float(math.ceil(now + timeout_s))
            deletion.event_id = self.group.add_event(
                "Terminate", [vm_name], not_before=deletion.not_before, event_source="Platform"
            )
            self.timeline.record(
                "sandbox",
                "event_published",
                vm_name,
                f"Terminate event {deletion.event_id[:8]} NotBefore in {timeout_s:.0f}s (sandbox)",
                event_id=deletion.event_id,
                not_before_s=deletion.not_before - self.timeline.sandbox_start,
            )
        else:
            self.timeline.record(
                "sandbox",
                "no_notification",
                vm_name,
                "the model this instance runs has no terminate notification: no event, deleted at once",
            )
        with self._changed:
            self._deletions.append(deletion)
            self._changed.notify_all()
        self._wake.set()
        return deletion

    def _on_group_change(self, kind: str, event: Any) -> None:
        # Called from whatever thread changed the group (an IMDS request, the scheduler): only wake up.
        self._wake.set()

    # -- evaluation --------------------------------------------------------------------------

    def step(self) -> None:
        """Evaluate the rules once at the clock's current time and act on them."""
        with self._step_lock:
            now = self.clock.now()
            self._read_approvals()
            with self._changed:
                snapshot = list(self._deletions)
            result = plan_deletions(snapshot, now)
            self._record_holds(snapshot, result, now)
            for deletion, reason in result.start:
                self._start(deletion, reason, now)
            for deletion in snapshot:
                if deletion.started_at is not None and deletion.deleted_at is None:
                    if deletion.event_id is None or now >= deletion.started_at + self.delete_duration:
                        self._finish(deletion, now)
            with self._changed:
                self._changed.notify_all()

    def _read_approvals(self) -> None:
        by_event: Dict[str, Any] = {}
        for approval in self.group.approvals:
            if getattr(approval, "accepted", True):  # a POST with an unknown EventId approves nothing
                by_event.setdefault(approval.event_id, approval)
        with self._changed:
            pending = [d for d in self._deletions if d.event_id in by_event and d.approved_at is None]
        for d in pending:
            approval = by_event[d.event_id]  # type: ignore[index]
            d.approved_at = approval.at
            d.approved_by = approval.vm_name
            self.timeline.record(
                "sandbox", "approved", d.vm_name, f"event approved by {approval.vm_name}",
                approved_by=approval.vm_name, event_id=d.event_id,
            )

    def _record_holds(self, snapshot: Sequence[Deletion], result: DeletionPlan, now: float) -> None:
        for d in snapshot:
            if not d.pending:
                continue
            blockers = result.held.get(d.vm_name, ())
            if blockers == d.held_by:
                continue
            d.held_by = blockers
            if blockers:
                d.holds.append((now, blockers))
                others = {o.vm_name: o for o in snapshot}
                same = [b for b in blockers if simultaneous(d, others[b])]
                note = " (same NotBefore: all must be approved)" if same else ""
                until = max(others[b].not_before or now for b in blockers) - self.timeline.sandbox_start
                self.timeline.record(
                    "sandbox",
                    "held_back",
                    d.vm_name,
                    f"approved but held back by pending deletion of {', '.join(blockers)}{note}; "
                    f"waits for their approval or NotBefore (+{until:.0f}s)",
                    blockers=list(blockers),
                )

    def _start(self, d: Deletion, reason: str, now: float) -> None:
        d.started_at = now
        d.start_reason = reason
        d.held_by = ()
        if d.event_id is not None:
            try:
                self.group.start_event(d.event_id)
            except KeyError:  # removed behind our back (emulator admin endpoint): delete anyway
                reason += "; its event had already been removed"
                d.start_reason = reason
        self.timeline.record("sandbox", "deletion_started", d.vm_name, f"deletion started: {reason}",
                             reason=reason)

    def _finish(self, d: Deletion, now: float) -> None:
        if d.event_id is not None:
            try:
                self.group.remove_event(d.event_id)
            except KeyError:
                pass  # the group's started_ttl already removed it
        if self.on_deleted is not None:
            try:
                self.on_deleted(d)
            except Exception:  # keep the scheduler alive; the report shows the instance stuck
                log.exception("completing the deletion of %s failed", d.vm_name)
                return
        d.deleted_at = now
        self.timeline.record("sandbox", "deleted", d.vm_name, "instance deleted; its IMDS stopped answering")

    # -- queries -----------------------------------------------------------------------------

    def deletions(self) -> List[Deletion]:
        with self._changed:
            return list(self._deletions)

    def find(self, vm_name: str) -> Optional[Deletion]:
        for d in self.deletions():
            if d.vm_name == vm_name:
                return d
        return None

    def wait_for(self, predicate: Callable[[List[Deletion]], bool], wait_seconds: float) -> bool:
        """Block until `predicate(deletions)` holds or `wait_seconds` real seconds pass."""
        return wait_until(self._changed, lambda: predicate(list(self._deletions)), wait_seconds)

    def wait_deleted(self, vm_names: Sequence[str], wait_seconds: float) -> bool:
        wanted = set(vm_names)
        return self.wait_for(
            lambda ds: wanted <= {d.vm_name for d in ds if d.deleted_at is not None}, wait_seconds
        )

    # -- thread ------------------------------------------------------------------------------

    def start(self) -> "DeletionScheduler":
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="sandbox-scheduler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _run(self) -> None:
        speed = float(self.clock.speed)
        while not self._stop.is_set():
            self._wake.clear()
            try:
                self.step()
            except Exception:
                log.exception("sandbox scheduler step failed")
            # Sleep until the next NotBefore / deletion end, a group change, or the tick.
            self._wake.wait(self._real_wait(speed))

    def _real_wait(self, speed: float) -> float:
        now = self.clock.now()
        candidates = [self.tick]
        for d in self.deletions():
            if d.pending and d.not_before is not None:
                candidates.append((d.not_before - now) / speed)
            elif d.deleted_at is None and d.started_at is not None:
                candidates.append((d.started_at + self.delete_duration - now) / speed)
        return max(0.0, min(candidates))
