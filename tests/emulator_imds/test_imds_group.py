"""PlacementGroup in-process: listeners, wait_for, validation, thread safety."""

from __future__ import annotations

import threading
from datetime import datetime, timezone
from typing import List, Tuple

import pytest

from vmss_terminate.clock import ScaledClock
from vmss_terminate.errors import UsageError
from vmss_terminate_sim.emulator.imds.app import EmulatedEvent, PlacementGroup

pytestmark = pytest.mark.timeout(30)


def test_listeners_see_every_kind_in_order_and_may_read_the_group(group, clock) -> None:
    seen: List[Tuple[str, str, int]] = []

    def listener(kind: str, event: EmulatedEvent) -> None:
        # runs outside the group's lock: reading the group from here must not deadlock
        seen.append((kind, event.status, group.incarnation))

    group.add_listener(listener)
    eid = group.add_event("Terminate", ["myvmss_3"])
    group.update_event(eid, description="x")
    group.approve(eid, "myvmss_3")
    clock.advance(60)
    group.tick()
    assert seen == [("added", "Scheduled", 2), ("changed", "Scheduled", 3), ("approved", "Scheduled", 4),
                    ("started", "Started", 4), ("removed", "Started", 5)]


def test_a_failing_listener_does_not_break_the_group(group) -> None:
    calls: List[str] = []
    group.add_listener(lambda kind, event: 1 / 0)
    group.add_listener(lambda kind, event: calls.append(kind))
    group.add_event("Freeze", ["a"])
    assert calls == ["added"]


def test_listener_gets_a_snapshot_not_the_live_event(group) -> None:
    captured: List[EmulatedEvent] = []
    group.add_listener(lambda kind, event: captured.append(event))
    eid = group.add_event("Freeze", ["a"])
    captured[0].resources.append("b")
    assert group.get(eid).resources == ["a"]
    group.remove_listener(captured.append)  # not registered: harmless


def test_wait_for_wakes_on_a_change_from_another_thread(group) -> None:
    eid = group.add_event("Terminate", ["myvmss_3"])
    timer = threading.Timer(0.05, group.approve, args=(eid, "myvmss_3"))
    timer.start()
    try:
        assert group.wait_for(lambda: bool(group.approvals), timeout=5)
    finally:
        timer.cancel()
    assert group.wait_for(lambda: group.get(eid).status == "Started", timeout=1)


def test_wait_for_times_out_false(group) -> None:
    assert group.wait_for(lambda: group.events() != [], timeout=0.05) is False


def test_wait_for_applies_time_on_a_running_clock() -> None:
    group = PlacementGroup(clock=ScaledClock(speed=600.0), started_ttl=60.0)
    eid = group.add_event("Preempt", ["a"])  # NotBefore in 30 s of clock time = 0.05 s real
    assert group.wait_for(lambda: group.get(eid) is None, timeout=5)  # started, then removed after ttl


def test_tick_without_auto_start_leaves_events_alone(clock) -> None:
    group = PlacementGroup(clock=clock, auto_start=False, started_ttl=10)
    eid = group.add_event("Freeze", ["a"])
    clock.advance(10_000)
    group.tick()
    assert group.get(eid).status == "Scheduled"
    group.start_event(eid)  # the owner decides; the ttl still removes it
    clock.advance(10)
    group.tick()
    assert group.events() == []


def test_started_at_add_models_hardware_failure(group, clock) -> None:
    eid = group.add_event("Reboot", ["a"], status="Started")
    event = group.get(eid)
    assert event.status == "Started" and event.started_at == clock.now()
    assert event.to_imds()["NotBefore"] == ""


def test_update_back_to_scheduled_and_not_before_reset(group, clock) -> None:
    eid = group.add_event("Redeploy", ["a"], not_before=clock.now() + 5)
    group.start_event(eid)
    group.update_event(eid, status="Scheduled", not_before=None)
    event = group.get(eid)
    assert event.status == "Scheduled" and event.started_at is None
    assert event.not_before == clock.now() + 600


def test_not_before_accepts_datetime_and_rfc1123(group) -> None:
    moment = datetime(2026, 4, 11, 22, 26, 58, tzinfo=timezone.utc)
    a = group.add_event("Freeze", ["a"], not_before=moment)
    b = group.add_event("Freeze", ["a"], not_before="Sat, 11 Apr 2026 22:26:58 GMT")
    assert group.get(a).not_before == group.get(b).not_before == moment.timestamp()


@pytest.mark.parametrize("kwargs", [
    dict(event_type="Explode", resources=["a"]),
    dict(event_type="Freeze", resources=[]),
    dict(event_type="Freeze", resources="a"),
    dict(event_type="Freeze", resources=["a"], status="Completed"),
    dict(event_type="Freeze", resources=["a"], event_source="Me"),
    dict(event_type="Freeze", resources=["a"], duration_in_seconds="long"),
    dict(event_type="Freeze", resources=["a"], not_before="next week"),
    dict(event_type="Freeze", resources=["a"], not_before=True),
    dict(event_type="Freeze", resources=["a"], description=5),
])
def test_bad_events_are_usage_errors(group, kwargs) -> None:
    with pytest.raises(UsageError):
        group.add_event(**kwargs)
    assert group.incarnation == 1


def test_duplicate_id_and_unknown_ids(group) -> None:
    group.add_event("Freeze", ["a"], event_id="e1")
    with pytest.raises(UsageError):
        group.add_event("Freeze", ["a"], event_id="e1")
    for call in (lambda: group.update_event("nope", description="x"), lambda: group.remove_event("nope"),
                 lambda: group.start_event("nope")):
        with pytest.raises(KeyError):
            call()
    with pytest.raises(UsageError):
        group.update_event("e1", colour="red")
    assert group.approve("nope", "a") is False
    assert group.approvals[-1].accepted is False


def test_concurrent_approvals_are_all_recorded_once_started(clock) -> None:
    group = PlacementGroup(clock=clock)
    eid = group.add_event("Freeze", [f"vm_{i}" for i in range(8)])
    started: List[str] = []
    group.add_listener(lambda kind, event: started.append(kind) if kind == "started" else None)
    barrier = threading.Barrier(8)

    def approve(i: int) -> None:
        barrier.wait()
        for _ in range(25):
            group.approve(eid, f"vm_{i}")

    threads = [threading.Thread(target=approve, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(group.approvals) == 200 and started == ["started"]
    assert group.incarnation == 3  # added, started; approvals alone do not change the document
    assert group.foreign_approvals() == []



def test_a_listener_may_change_the_group(group) -> None:
    seen: List[str] = []

    def start_freezes(kind: str, event: EmulatedEvent) -> None:
        seen.append(kind)
        if kind == "added" and event.event_type == "Freeze":
            group.start_event(event.event_id)

    group.add_listener(start_freezes)
    eid = group.add_event("Freeze", ["a"])
    assert seen == ["added", "started"] and group.get(eid).status == "Started"


def test_a_change_during_a_slow_listener_is_delivered_after_it_in_order(group) -> None:
    seen: List[str] = []
    entered, release = threading.Event(), threading.Event()

    def slow(kind: str, event: EmulatedEvent) -> None:
        seen.append(event.event_type)
        if event.event_type == "Freeze":
            entered.set()
            release.wait(5)

    group.add_listener(slow)
    adder = threading.Thread(target=group.add_event, args=("Freeze", ["a"]))
    adder.start()
    assert entered.wait(5)
    group.add_event("Reboot", ["a"])  # returns at once: the delivering thread will pass it on
    assert seen == ["Freeze"]
    release.set()
    adder.join(5)
    assert seen == ["Freeze", "Reboot"]
