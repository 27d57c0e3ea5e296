"""What an approval covers when the event a central source acts for changes while its steps run:
`policy.uncovered` (the listed VMs the finished steps did not run for) and `Pipeline._widen` (their
steps run before the approval). `covered` is what actually ran -- every per-VM step finished or
ended for the VM -- never the VMs the event listed when its job began."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable, List, Optional, Sequence, Tuple

from vmss_terminate.clock import SYSTEM_CLOCK
from vmss_terminate.pipeline import DecisionBus, Event, StateStore
from vmss_terminate.pipeline import decisions as D
from vmss_terminate.pipeline.events import EVERY_LISTED_VM
from vmss_terminate.pipeline.hooks import OK, Run, StepResult
from vmss_terminate.pipeline.jobs import Step
from vmss_terminate.pipeline.pipeline import Pipeline, Source
from vmss_terminate.pipeline.policy import Progress, uncovered
from vmss_terminate.scheduled_events import format_not_before

from .test_seam import CentralSettings

WAIT = 30.0  # real seconds a test waits for a step thread before it fails (never reached when it works)


def _event(*vms: str) -> Event:
    return Event.from_json({"EventId": "G1", "EventType": "Terminate", "ResourceType": "VirtualMachine",
                            "Resources": list(vms), "EventStatus": "Scheduled",
                            "NotBefore": format_not_before(SYSTEM_CLOCK.now() + 600)})


@dataclass
class Side:
    """The source: the event as it last read it (the test changes it), the approvals it sent."""

    event: Event
    approvals: List[List[str]] = field(default_factory=list)
    said: List[Tuple[str, str]] = field(default_factory=list)  # (kind, message) of each decision

    def source(self) -> Source:
        return Source(latest=lambda eid: self.event, gone=lambda eid: False, approve=self.approve,
                      report=self.report, once=self.report)

    def report(self, kind: str, event_id: Optional[str], message: str, event: Any = None, **data: Any) -> None:
        self.said.append((kind, message))

    def approve(self, event: Event) -> bool:
        self.approvals.append(list(event.resources))
        return True


class Recorder:
    """A per-VM step of the test's own: records each VM it ran for; `during(vm)` runs inside it."""

    def __init__(self, name: str, during: Optional[Callable[[str], None]] = None) -> None:
        self.name, self.during = name, during
        self.runs: List[str] = []
        self._lock = threading.Lock()

    def run(self, run: Run) -> StepResult:
        if self.during is not None:
            self.during(run.vm_name)
        with self._lock:
            self.runs.append(run.vm_name)
        return StepResult(OK, "done")


def _pipeline(side: Side, journal: StateStore, steps: Sequence[Recorder]) -> Pipeline:
    pipeline = Pipeline(CentralSettings(), side.source(), journal, DecisionBus(), SYSTEM_CLOCK,
                        me=lambda: EVERY_LISTED_VM)
    for step in steps:
        pipeline.add_step(Step(step.name, step, per_vm=True))
    return pipeline


def _finish(pipeline: Pipeline) -> None:
    for job in pipeline.jobs.jobs():
        assert job.done.wait(WAIT), "the event's steps did not end"


def test_uncovered_names_the_listed_vms_the_finished_steps_did_not_run_for() -> None:
    grown = _event("a", "b", "c")
    assert uncovered(grown, EVERY_LISTED_VM, Progress(covered=("a",))) == ("b", "c")
    assert uncovered(grown, EVERY_LISTED_VM, Progress(covered=("A", "b", "c"))) == ()  # names compare as Azure's
    assert uncovered(grown, EVERY_LISTED_VM, Progress(covered=None)) == ()  # no step finished yet
    assert uncovered(grown, "a", Progress(covered=("a",))) == ()  # the agent acts for its own VM only


def test_an_event_growing_after_its_steps_started_runs_them_for_the_new_vm_before_the_approval() -> None:
    side = Side(_event("a"))
    entered, gate = threading.Event(), threading.Event()

    def hold(vm: str) -> None:
        entered.set()
        assert gate.wait(WAIT)

    first, second = Recorder("first", hold), Recorder("second")
    journal = StateStore()
    pipeline = _pipeline(side, journal, [first, second])
    pipeline.advance(side.event)
    assert entered.wait(WAIT)
    side.event = _event("a", "b")  # Azure adds b while "first" runs for a
    gate.set()
    _finish(pipeline)
    assert side.approvals == []  # "first" never ran for b
    assert journal.get("G1")["covered"] == ["a"]
    assert sorted(journal.get("G1")["steps_done"]) == ["first@a", "second@a", "second@b"]

    pipeline.advance(side.event)  # the next sighting: _widen, then the steps b lacks
    _finish(pipeline)
    assert side.approvals == [["a", "b"]]
    assert sorted(first.runs) == ["a", "b"] and sorted(second.runs) == ["a", "b"]  # none twice
    assert journal.get("G1")["covered"] == ["a", "b"]


def test_an_event_shrinking_then_growing_back_is_not_approved_for_a_vm_a_step_skipped() -> None:
    side = Side(_event("a", "b"))
    entered, gate = threading.Event(), threading.Event()
    arrived: List[str] = []

    def hold(vm: str) -> None:
        arrived.append(vm)
        if len(arrived) == 2:
            entered.set()
        assert gate.wait(WAIT)

    def grow_back(vm: str) -> None:
        side.event = _event("a", "b")  # the source lists b again before the job ends

    first, second = Recorder("first", hold), Recorder("second", grow_back)
    journal = StateStore()
    pipeline = _pipeline(side, journal, [first, second])
    pipeline.advance(side.event)
    assert entered.wait(WAIT)  # "first" runs for a and b
    side.event = _event("a")  # a Resource Graph answer without b while it runs
    gate.set()
    _finish(pipeline)
    assert second.runs == ["a"]
    assert side.approvals == []  # acknowledging [a, b] now would release b, "second" never ran for it
    assert journal.get("G1")["covered"] == ["a"]

    pipeline.advance(side.event)
    _finish(pipeline)
    assert side.approvals == [["a", "b"]]
    assert sorted(first.runs) == ["a", "b"] and sorted(second.runs) == ["a", "b"]


def test_an_event_listing_no_vm_is_withheld_with_no_step_run() -> None:
    side = Side(_event())  # Resources: [] (an incomplete read, or a malformed event)
    step = Recorder("step")
    pipeline = _pipeline(side, StateStore(), [step])
    pipeline.advance(side.event)
    _finish(pipeline)
    assert side.approvals == [] and step.runs == []
    withheld = [message for kind, message in side.said if kind == D.APPROVAL_WITHHELD]
    assert len(withheld) == 1 and "lists no VM (empty Resources)" in withheld[0]

    side.event = _event("a")  # a later read lists the VM: its steps run, then the approval
    pipeline.advance(side.event)
    _finish(pipeline)
    assert step.runs == ["a"] and side.approvals == [["a"]]


def test_an_event_read_with_no_vm_while_its_steps_run_is_not_approved() -> None:
    side = Side(_event("a"))

    def empty(vm: str) -> None:
        side.event = _event()  # the next read lists nothing

    first, second = Recorder("first", empty), Recorder("second")
    pipeline = _pipeline(side, StateStore(), [first, second])
    pipeline.advance(side.event)
    _finish(pipeline)
    assert first.runs == ["a"] and second.runs == [] and side.approvals == []
    assert any(kind == D.HOOK_SKIPPED and "lists no VM now" in message for kind, message in side.said)
    assert not any("already finished before a restart" in message for _, message in side.said)
