"""The deletion scheduler's rules, driven step by step with a ManualClock against a real PlacementGroup.

These are the documented Azure behaviours the sandbox reproduces: "Approve all pending deletes",
"Approve all simultaneous deletes", "Mandatory delete at timeout" and the no-notification case.
"""

from __future__ import annotations

from typing import List, Tuple

import pytest

from vmss_terminate.clock import ManualClock
from vmss_terminate_sim.emulator.imds.app import PlacementGroup
from vmss_terminate_sim.sandbox.scheduler import DeletionScheduler, plan_deletions

pytestmark = pytest.mark.timeout(30)

DELETE_S = 10.0


@pytest.fixture()
def world() -> Tuple[ManualClock, PlacementGroup, DeletionScheduler, List[str]]:
    clock = ManualClock(start=1_700_000_000.0)
    group = PlacementGroup(clock=clock, started_ttl=3600.0, auto_start=False)
    gone: List[str] = []
    scheduler = DeletionScheduler(group, clock=clock, delete_duration=DELETE_S,
                                  on_deleted=lambda d: gone.append(d.vm_name))
    return clock, group, scheduler, gone


def _status(group: PlacementGroup, event_id: str) -> str:
    event = group.get(event_id)
    return "removed" if event is None else event.status


def test_approved_deletion_alone_starts_then_finishes(world) -> None:
    clock, group, scheduler, gone = world
    d = scheduler.request("ss", "1", "vmss_1", timeout_s=300)
    assert d.event_id is not None and _status(group, d.event_id) == "Scheduled"
    scheduler.step()
    assert d.pending  # nobody approved, NotBefore far away
    group.approve(d.event_id, "vmss_1")
    scheduler.step()
    assert _status(group, d.event_id) == "Started" and d.start_reason == "approved"
    assert gone == []
    clock.advance(DELETE_S)
    scheduler.step()
    assert _status(group, d.event_id) == "removed" and gone == ["vmss_1"]


def test_approved_deletion_waits_for_unapproved_pending_one(world) -> None:
    clock, group, scheduler, gone = world
    slow = scheduler.request("ss", "1", "vmss_1", timeout_s=300)  # never approved
    clock.advance(60)
    fast = scheduler.request("ss", "2", "vmss_2", timeout_s=300)
    group.approve(fast.event_id, "vmss_2")
    scheduler.step()
    assert fast.pending and fast.held_by == ("vmss_1",)
    assert "held back by pending deletion of vmss_1" in fast.explain()
    clock.advance(239)  # 1 s before vmss_1's NotBefore
    scheduler.step()
    assert fast.pending and slow.pending
    clock.advance(1)
    scheduler.step()  # vmss_1 expires: both go
    assert not slow.pending and slow.start_reason == "NotBefore passed without approval"
    assert not fast.pending and "every other pending deletion" in fast.start_reason
    assert fast.started_at == slow.not_before


def test_approving_the_blocker_releases_both(world) -> None:
    clock, group, scheduler, gone = world
    first = scheduler.request("ss", "1", "vmss_1", timeout_s=300)
    second = scheduler.request("ss", "2", "vmss_2", timeout_s=300)
    group.approve(second.event_id, "vmss_2")
    scheduler.step()
    assert second.pending
    clock.advance(5)
    group.approve(first.event_id, "vmss_1")
    scheduler.step()
    assert not first.pending and not second.pending
    clock.advance(DELETE_S)
    scheduler.step()
    assert sorted(gone) == ["vmss_1", "vmss_2"]


def test_simultaneous_deletes_need_every_approval(world) -> None:
    clock, group, scheduler, gone = world
    a = scheduler.request("ss", "1", "vmss_1", timeout_s=300)
    b = scheduler.request("ss", "2", "vmss_2", timeout_s=300)
    assert a.not_before == b.not_before
    group.approve(a.event_id, "vmss_1")
    scheduler.step()
    held = scheduler.timeline.entries(kind="held_back", vm="vmss_1")
    assert held and "same NotBefore" in held[-1].message
    assert a.pending and b.pending


def test_unknown_event_approval_approves_nothing(world) -> None:
    clock, group, scheduler, gone = world
    d = scheduler.request("ss", "1", "vmss_1", timeout_s=300)
    assert group.approve("00000000-0000-0000-0000-000000000000", "vmss_1") is False
    scheduler.step()
    assert d.pending and d.approved_at is None


def test_no_notification_means_immediate_deletion_without_event(world) -> None:
    clock, group, scheduler, gone = world
    waiting = scheduler.request("ss", "1", "vmss_1", timeout_s=300)
    d = scheduler.request("ss", "2", "vmss_2", timeout_s=None)
    assert d.event_id is None and group.events()[0].resources == ["vmss_1"]
    scheduler.step()
    assert gone == ["vmss_2"] and waiting.pending  # an event-less deletion is never held back


def test_other_scale_set_does_not_hold_back(world) -> None:
    clock, group, scheduler, gone = world
    scheduler.request("other", "1", "other_1", timeout_s=300)
    d = scheduler.request("ss", "1", "vmss_1", timeout_s=300)
    group.approve(d.event_id, "vmss_1")
    scheduler.step()
    assert not d.pending


def test_plan_reports_next_wake_up() -> None:
    clock = ManualClock(start=0.0)
    group = PlacementGroup(clock=clock, auto_start=False)
    scheduler = DeletionScheduler(group, clock=clock)
    scheduler.request("ss", "1", "a_1", timeout_s=300)
    scheduler.request("ss", "2", "a_2", timeout_s=600)
    assert plan_deletions(scheduler.deletions(), clock.now()).wake_at == 300
