"""The drain's waiting, on a ManualClock (no HTTP, no real time): every wait ends at the deadline,
on cancellation or when the event leaves the document; the journal keeps only well-typed kube_*
fields."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import List, Optional, Tuple

from vmss_terminate.clock import ManualClock
from vmss_terminate.pipeline.events import Event
from vmss_terminate.pipeline.hooks import CANCELLED, DEADLINE, Run
from vmss_terminate.pipeline.journal import StateStore
from vmss_terminate.pipeline.kubernetes.drain import GONE, DrainTarget, NodeDrain


def make(clock: ManualClock, deadline: Optional[float], gone: List[bool]) -> Tuple[NodeDrain, Run]:
    drain = NodeDrain(api=None, journal=StateStore(), report=lambda *a, **k: None,  # type: ignore[arg-type]
                      targets=lambda event: [DrainTarget(identity=lambda: ("", ""))], clock=clock,
                      reporter=lambda: "vm_1")
    event = Event.from_json({"EventId": "E1", "EventType": "Terminate", "ResourceType": "VirtualMachine",
                             "Resources": ["vm_1"], "EventStatus": "Scheduled", "NotBefore": ""})
    run = Run(event, "vm_1", clock, lambda: deadline, threading.Event(), threading.Event(),
              gone=lambda: gone[0])
    return drain, run


def test_a_backoff_wait_ends_at_the_deadline_not_after_it() -> None:
    clock = ManualClock()
    start = clock.now()
    drain, run = make(clock, deadline=start + 5.5, gone=[False])
    assert drain._sleep(run, 30.0) == DEADLINE
    assert start + 5.5 <= clock.now() <= start + 6.5  # waited in steps of at most a second
    clock2 = ManualClock()
    drain, run = make(clock2, deadline=None, gone=[False])
    assert drain._sleep(run, 3.0) is None and clock2.now() == ManualClock().now() + 3.0


def test_a_wait_ends_when_the_event_leaves_or_the_agent_stops() -> None:
    clock = ManualClock()
    gone = [False]
    drain, run = make(clock, deadline=clock.now() + 600, gone=gone)
    gone[0] = True
    assert drain._sleep(run, 30.0) == GONE and clock.now() == ManualClock().now()
    gone[0] = False
    run.cancelled.set()
    assert drain._sleep(run, 30.0) == CANCELLED


def test_journal_drops_kube_fields_of_the_wrong_type(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    good = {"kube_node": "n1", "kube_cordoned": True, "kube_evicted": {"uid-1": "default/a"},
            "kube_drain_started": 1700000000.0}
    bad = {"kube_node": 5, "kube_cordoned": "yes", "kube_evicted": ["default/a"], "kube_drain_started": "now"}
    path.write_text(json.dumps({"version": 1, "events": {"E1": good, "E2": bad}}))
    store = StateStore(str(path))
    assert store.get("E1") == good
    assert store.get("E2") == {}
    store.forget("E1", "kube_cordoned")
    store.forget("E3", "kube_cordoned")  # no record: none is made
    assert "kube_cordoned" not in store.get("E1") and "E3" not in store.event_ids()


