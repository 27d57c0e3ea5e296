"""The pipeline seam: a source that is not the agent (here a central-handler-like one, in the test)
runs the same pipeline for one event -- a hook once per listed VM, each with every listed VM's name
and resource id, its own step, the node drain of every listed VM that is a node (found by providerID, cluster-wide) -- and
approves through its own callable, once, only after every step finished; a restart resumes from
the journal without running a finished step twice. The Kubernetes API is the emulator over real
HTTP; nothing of `vmss_terminate.agent` is used."""

from __future__ import annotations

import json
import sys
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Collection, Dict, Iterator, List, Optional, Sequence

import pytest

from vmss_terminate.clock import SYSTEM_CLOCK
from vmss_terminate.pipeline import DecisionBus, Event, StateStore
from vmss_terminate.pipeline import decisions as D
from vmss_terminate.pipeline.decisions import Decision
from vmss_terminate.pipeline.events import EVERY_LISTED_VM
from vmss_terminate.pipeline.hooks import OK, Run, StepResult
from vmss_terminate.pipeline.jobs import Step
from vmss_terminate.pipeline.kubernetes.api import KubeApi
from vmss_terminate.pipeline.kubernetes.credentials import load_access
from vmss_terminate.pipeline.kubernetes.drain import DrainTarget, NodeDrain, listed_vms
from vmss_terminate.pipeline.pipeline import Pipeline, Source
from vmss_terminate.scheduled_events import format_not_before
from vmss_terminate_sim.emulator.kube import KubeState, start_kube

PROBE = Path(__file__).resolve().parent.parent / "agent" / "hook_probe.py"
SET = "/subscriptions/s1/resourceGroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/web"
VMS = {"web_1": f"{SET}/virtualMachines/1", "web_2": f"{SET}/virtualMachines/2", "web_9": f"{SET}/virtualMachines/9"}


@dataclass(frozen=True)
class CentralSettings:
    """The options the pipeline reads, as a central handler would fill them (no AgentConfig)."""

    hooks: Sequence[str] = ()
    hook_events: Collection[str] = frozenset({"Terminate"})
    approve_types: Collection[str] = frozenset({"Terminate"})
    approve_shared: bool = False  # not needed: acting for EVERY_LISTED_VM, no listed VM is another's
    on_hook_failure: str = "approve"
    drain_delay: float = 0.0
    safety_margin: float = 15.0
    kill_grace: float = 2.0
    rerun_interrupted: bool = True
    webhook: Optional[str] = None
    webhook_format: str = "json"


@dataclass
class CentralSource:
    """A source in the test: one event it read, approvals recorded (what was drained at that moment)."""

    event: Event
    state: KubeState
    approvals: List[Dict[str, Any]] = field(default_factory=list)
    refuse: bool = False
    decisions: List[Decision] = field(default_factory=list)
    bus: DecisionBus = field(default_factory=DecisionBus)

    def source(self) -> Source:
        return Source(latest=lambda eid: self.event if eid == self.event.event_id else None,
                      gone=lambda eid: False, approve=self.approve, report=self.report, once=self.report)

    def approve(self, event: Event) -> bool:
        if self.refuse:  # the acknowledge failed (or the process died before it)
            return False
        self.approvals.append({"event": event.event_id,
                               "pods": {n: len(self.state.pods_on(n)) for n in ("node-1", "node-2")},
                               "cordoned": sorted(n for n in ("node-1", "node-2") if _unschedulable(self.state, n))})
        return True

    def report(self, kind: str, event_id: Optional[str], message: str, event: Optional[Event] = None,
               **data: Any) -> None:
        self.bus.publish(Decision(kind, event_id, None, message, SYSTEM_CLOCK.now(), data))


class RunCommand:
    """The central handler's own step (stands in for Azure Run Command)."""

    name = "run-command"

    def __init__(self) -> None:
        self.runs: List[List[str]] = []

    def run(self, run: Run) -> StepResult:
        self.runs.append(list(run.event.resources))
        return StepResult(OK, "ran on every listed VM")


def _unschedulable(state: KubeState, node: str) -> bool:
    from vmss_terminate_sim.emulator.kube import NODES

    return bool((state.get(NODES, "", node).get("spec") or {}).get("unschedulable"))


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple]:
    state = KubeState()
    state.add_node("node-1", provider_id="azure://" + VMS["web_1"])
    state.add_node("node-2", provider_id="azure://" + VMS["web_2"])
    state.add_node("spare")  # takes the replacements
    for node in ("node-1", "node-2"):
        for i in range(2):
            state.add_pod(f"app-{node}-{i}", node, owner="ReplicaSet/app-1", grace=0)
    with start_kube(state, token="seam-token") as servers:
        yield servers, state, servers.write_kubeconfig(tmp_path / "kubeconfig")


def _event() -> Event:
    event = Event.from_json({"EventId": "C1", "EventType": "Terminate", "ResourceType": "VirtualMachine",
                             "Resources": ["web_1", "web_2", "web_9"], "EventStatus": "Scheduled",
                             "NotBefore": format_not_before(SYSTEM_CLOCK.now() + 600)})
    return replace(event, resource_ids=VMS)


def _pipeline(side: CentralSource, journal: StateStore, kubeconfig: Path, hooks: Sequence[str],
              step: RunCommand) -> Pipeline:
    pipeline = Pipeline(CentralSettings(hooks=tuple(hooks)), side.source(), journal, side.bus, SYSTEM_CLOCK,
                        me=lambda: EVERY_LISTED_VM)
    pipeline.add_step(Step(step.name, step))
    pipeline.drain = NodeDrain(KubeApi(load_access(str(kubeconfig))), journal, side.report,
                               listed_vms,
                               SYSTEM_CLOCK, reporter=lambda: "central-test", live=lambda eid: True)
    return pipeline


def undeclared(decisions: List[Decision]) -> List[str]:
    """Payload keys a decision carries that its kind's TypedDict (decisions.DATA) does not declare."""
    wrong = []
    for decision in decisions:
        shape = D.DATA.get(decision.kind)
        keys = set() if shape is None else set(shape.__required_keys__) | set(shape.__optional_keys__)
        wrong += [f"{decision.kind}.{key}" for key in decision.data if key not in keys]
    return wrong


def _finish(pipeline: Pipeline) -> None:
    for job in pipeline.jobs.jobs():
        assert job.done.wait(60), "the event's steps did not end"


def test_a_second_source_runs_the_pipeline_and_approves_once_after_every_step(
        cluster: tuple, tmp_path: Path) -> None:
    _servers, state, kubeconfig = cluster
    out = tmp_path / "hook"
    side = CentralSource(_event(), state)
    seen: List[str] = []
    said: List[Decision] = []
    side.bus.subscribe(lambda d: seen.append(d.kind))
    side.bus.subscribe(said.append)
    step = RunCommand()
    pipeline = _pipeline(side, StateStore(), kubeconfig, [f'"{sys.executable}" "{PROBE}" "{out}"'], step)

    pipeline.advance(side.event)
    _finish(pipeline)

    assert side.approvals == [{"event": "C1", "pods": {"node-1": 0, "node-2": 0}, "cordoned": ["node-1", "node-2"]}]
    records = [json.loads(p.read_text()) for p in out.glob("*.json")]  # the hook ran once per listed VM
    by_vm = {r["env"]["VMSS_TERMINATE_VM_NAME"]: r for r in records}
    assert sorted(by_vm) == ["web_1", "web_2", "web_9"]
    for vm, record in by_vm.items():
        assert json.loads(record["env"]["VMSS_TERMINATE_RESOURCE_IDS"]) == VMS
        assert json.loads(record["env"]["VMSS_TERMINATE_RESOURCES"]) == ["web_1", "web_2", "web_9"]
        stdin = json.loads(record["stdin"])
        assert stdin["ResourceIds"] == VMS and stdin["VmName"] == vm and stdin["VmId"] == VMS[vm]
    assert step.runs == [["web_1", "web_2", "web_9"]]
    assert seen.count("kube_node") == 2 and "kube_node_not_found" in seen  # web_9 is no node: skipped
    pipeline.advance(side.event)  # seen again: already approved, nothing runs twice
    _finish(pipeline)
    assert len(side.approvals) == 1 and len(list(out.glob("*.json"))) == 3 and len(step.runs) == 1
    assert said and undeclared(said) == []  # every payload is its kind's TypedDict (subscribers read those)


def test_a_restarted_source_resumes_from_the_journal_and_approves_without_rerunning(
        cluster: tuple, tmp_path: Path) -> None:
    _servers, state, kubeconfig = cluster
    out, path = tmp_path / "hook", str(tmp_path / "journal.json")
    hooks = [f'"{sys.executable}" "{PROBE}" "{out}"']
    first = CentralSource(_event(), state, refuse=True)
    pipeline = _pipeline(first, StateStore(path), kubeconfig, hooks, RunCommand())
    pipeline.advance(first.event)
    _finish(pipeline)
    assert first.approvals == [] and len(list(out.glob("*.json"))) == 3

    again = CentralSource(_event(), state)  # a new process, the same journal file
    step = RunCommand()
    restarted = _pipeline(again, StateStore(path), kubeconfig, hooks, step)
    restarted.advance(again.event)
    _finish(restarted)
    assert [a["event"] for a in again.approvals] == ["C1"]
    assert len(list(out.glob("*.json"))) == 3 and step.runs == []  # finished steps are not rerun



def test_the_drain_runs_in_process_through_an_injected_transport() -> None:
    """KubeApi(transport=...) as ImdsClient(transport=...): the emulator app answers in process, no
    socket; the drain finds the listed VM's node by providerID, cordons it and evicts its pods."""
    from inprocess import InProcessTransport

    from vmss_terminate.pipeline.hooks import Run
    from vmss_terminate.pipeline.kubernetes.credentials import Access
    from vmss_terminate_sim.emulator.kube.app import KubeEmulator

    state = KubeState()
    state.add_node("node-1", provider_id="azure://" + VMS["web_1"])
    state.add_node("spare")
    state.add_pod("app-0", "node-1", owner="ReplicaSet/app-1", grace=0)
    transport = InProcessTransport(KubeEmulator(state, token="in-process"))
    api = KubeApi(Access(server="http://127.0.0.1:9", source="test", token=lambda: "in-process"), transport=transport)
    said: List[Decision] = []
    drain = NodeDrain(api, StateStore(),
                      lambda kind, eid, message, **data: said.append(Decision(kind, eid, None, message, 0.0, data)),
                      lambda event: [DrainTarget.of_vm("web_1", VMS["web_1"])], SYSTEM_CLOCK, reporter=lambda: "test")
    event = replace(_event(), resource_ids=VMS)
    result = drain.run(Run(event, EVERY_LISTED_VM, SYSTEM_CLOCK, lambda: SYSTEM_CLOCK.now() + 300,
                           threading.Event(), threading.Event()))
    assert result.outcome == OK, result.detail
    assert _unschedulable(state, "node-1") and state.pods_on("node-1") == []
    assert "kube_drained" in [d.kind for d in said] and transport.log.count("POST") >= 1
    assert undeclared(said) == []
