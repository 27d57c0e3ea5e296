"""A source shared by replicas (the queue's blob lease per EventId) loses an event while its hook
runs: the pipeline stops the hook as it stops one at the deadline or on a stop -- its process group
terminated, killed after the grace -- before the lease can lapse and another replica take the event,
and nothing is approved by this replica (issue 26). Time is frozen but for the test's steps (the stop's real duration is measured against the lease's
last GIVE_UP_BEFORE seconds); the lease is modelled as
the queue source keeps it (`QueueSource.holds`: `give_up_before` seconds before its expiry)."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, List, Optional

from helpers import poll_until

from vmss_terminate.clock import ManualClock
from vmss_terminate.pipeline import DecisionBus, Event, StateStore
from vmss_terminate.pipeline import decisions as D
from vmss_terminate.pipeline.decisions import Decision
from vmss_terminate.pipeline.events import EVERY_LISTED_VM
from vmss_terminate.pipeline.pipeline import Pipeline, Source
from vmss_terminate.scheduled_events import format_not_before

from .test_seam import CentralSettings

LEASE, GIVE_UP_BEFORE = 15.0, 7.0

# A hook that leads a process group with a child, ignores SIGTERM (so only the kill after the grace
# ends it) and writes both pids once both run.
HOOK = ("import os, signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time\\nwhile True: time.sleep(1)'])\n"
        "open(sys.argv[1] + '.tmp', 'w').write(f'{os.getpid()} {child.pid}')\n"
        "os.rename(sys.argv[1] + '.tmp', sys.argv[1])\n"
        "while True:\n    time.sleep(1)\n")


class FrozenClock(ManualClock):
    """Time that moves only when the test advances it: a wait is for its event alone (briefly, in
    real time, then the waiter looks again) and never moves time, so no deadline or lease expiry
    comes before the test says so."""

    def wait(self, event: Any, seconds: float) -> bool:
        return bool(event.wait(min(max(0.0, seconds), 0.05)))


class LeasedSource:
    """One event under a lease that this replica renewed last at `renewed` (monotonic)."""

    def __init__(self, event: Event, clock: FrozenClock) -> None:
        self.event, self.clock = event, clock
        self.renewed = clock.monotonic()
        self.approvals: List[str] = []
        self.decisions: List[Decision] = []
        self.bus = DecisionBus()
        self.bus.subscribe(self.decisions.append)

    @property
    def expires(self) -> float:
        """When the lease lapses at Azure, at the earliest: another replica may take it from then."""
        return self.renewed + LEASE

    def holds(self, event_id: str) -> bool:
        return self.clock.monotonic() < self.expires - GIVE_UP_BEFORE

    def source(self) -> Source:
        return Source(latest=lambda eid: self.event, gone=lambda eid: False, approve=self.approve,
                      report=self.report, once=self.report, holds=self.holds)

    def approve(self, event: Event) -> bool:
        self.approvals.append(event.event_id)
        return True

    def report(self, kind: str, event_id: Optional[str], message: str, event: Any = None, **data: Any) -> None:
        self.bus.publish(Decision(kind, event_id, None, message, self.clock.now(), data))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not reaped by its parent yet) runs nothing
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_lease_lost_mid_hook_kills_its_process_group_before_another_replica_may_take_it(tmp_path: Path) -> None:
    clock = FrozenClock()
    event = Event.from_json({"EventId": "L1", "EventType": "Terminate", "ResourceType": "VirtualMachine",
                             "Resources": ["web_1"], "EventStatus": "Scheduled",
                             "NotBefore": format_not_before(clock.now() + 600)})
    pids = tmp_path / "pids"
    script = tmp_path / "hook.py"
    script.write_text(HOOK)
    side = LeasedSource(event, clock)
    journal = StateStore()
    pipeline = Pipeline(CentralSettings(hooks=(f'"{sys.executable}" "{script}" "{pids}"',), kill_grace=0.2),
                        side.source(), journal, side.bus, clock, me=lambda: EVERY_LISTED_VM)
    pipeline.advance(event)
    assert poll_until(pids.exists)
    hook, child = (int(p) for p in pids.read_text().split())
    try:
        assert _alive(hook) and _alive(child)
        clock.advance(LEASE - GIVE_UP_BEFORE)  # no renewal went through: the replica gives the event up
        given_up = time.monotonic()  # from here the lease has GIVE_UP_BEFORE real seconds left at Azure
        pipeline.jobs.wake("L1")  # what the source's keeper does when it finds the lease lost (on_lost)
        assert all(j.done.wait(10) for j in pipeline.jobs.jobs()), "the hook was not stopped when the lease was lost"
        stopped_in = time.monotonic() - given_up
    finally:  # never leave the SIGTERM-proof hook behind when the assertion fails
        for pid in (hook, child):
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)

    # ... all before another replica could take the lease: the stop (SIGTERM, the 0.2 s grace, SIGKILL)
    # took less real time than the lease had left (generous: 0.2 s of work against a 7 s budget)
    assert stopped_in < GIVE_UP_BEFORE, f"stopping the hook took {stopped_in:.1f} s"
    # SIGTERM ignored: killed, the whole group (the kernel ends the child of a SIGKILLed group at once,
    # but not synchronously with the kill: the test looks again until it is gone)
    assert not _alive(hook) and poll_until(lambda: not _alive(child), timeout=10)
    assert side.approvals == []
    lost = [d for d in side.decisions if d.kind == D.HOOK_FAILED and d.data.get("outcome") == "lost"]
    assert [d.data["hook"] for d in lost] == [f"{pipeline.steps_for(event)[0].name}@web_1"]
    record = journal.get("L1")  # started, not finished: if this replica gets the event again, it reruns
    assert record.get("hooks_started") and not record.get("hooks_finished")
    pipeline.advance(event)  # seen again while the lease is lost: nothing starts, nothing approved
    assert pipeline.jobs.jobs() == [] and side.approvals == []
