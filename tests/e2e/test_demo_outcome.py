"""The demo's verdict and its summary count the same facts (issue 27 item 10): a VM approved with its
node not drained fails the demo, and the summary says so instead of "0 failed ... each VM approved
only after its node was drained". The story is stated as the records the demo reads (the
scheduler's deletions, the timeline's entries, the IMDS approvals), on a manual clock: no sandbox runs."""

from __future__ import annotations

from typing import List

import pytest

from vmss_terminate.clock import ManualClock
from vmss_terminate.pipeline import decisions as D
from vmss_terminate.pipeline.kubernetes.drain import DRAIN_STEP
from vmss_terminate_sim.emulator.imds.events import Approval
from vmss_terminate_sim.sandbox.demo import DemoOptions, DemoResult, render_text
from vmss_terminate_sim.sandbox.outcome import Outcome, failure_of
from vmss_terminate_sim.sandbox.scheduler import Deletion
from vmss_terminate_sim.sandbox.timeline import Timeline

HOOK = "python -m vmss_terminate_sim.demo_hook"
OPTIONS = DemoOptions(instances=4, scale_in=2, kubernetes=True)


def _deletion(vm: str, clock: ManualClock) -> Deletion:
    now = clock.now()
    return Deletion("myvmss", vm.rsplit("_", 1)[1], vm, now, 300.0, event_id=f"EV-{vm}", not_before=now + 300,
                    approved_at=now + 100, approved_by=vm, started_at=now + 100, start_reason="approved",
                    deleted_at=now + 130)


def _story(timeline: Timeline, vm: str, node_drained: bool) -> None:
    """What the agent of `vm` says: its drain hook finished, then its node drain; the approval."""
    say = timeline.record
    say("agent", D.HOOK_FINISHED, vm, "drain hook finished (exit 0)", hook=HOOK, exit_code=0)
    say("agent", D.HOOK_STARTED, vm, "Kubernetes node drain started", hook=DRAIN_STEP)
    say("agent", D.KUBE_EVICTION_REFUSED, vm, "eviction refused (429)", pod="default/web-a", attempt=1)
    if node_drained:
        say("agent", D.KUBE_DRAINED, vm, "node drained", node="n", evicted=2)
        say("agent", D.HOOK_FINISHED, vm, "Kubernetes node drain finished", hook=DRAIN_STEP, exit_code=None)
    else:
        say("agent", D.KUBE_NOT_DRAINED, vm, "node n not drained: default/web-a stayed", node="n",
            not_evicted=["default/web-a"])
        say("agent", D.HOOK_FAILED, vm, "hook kubernetes:drain failed: 1 pod(s) not evicted", hook=DRAIN_STEP,
            outcome="deadline")
    say("agent", D.APPROVAL_SENT, vm, "approved its own Terminate event", hooks_result="ok")


def _outcome(undrained: List[str]) -> Outcome:
    clock = ManualClock()
    timeline = Timeline(clock)
    removed = ["myvmss_3", "myvmss_2"]
    for vm in removed:
        _story(timeline, vm, node_drained=vm not in undrained)
    approvals = [Approval(f"EV-{vm}", vm, clock.now() + 100) for vm in removed]
    return Outcome.read([_deletion(vm, clock) for vm in removed], timeline.entries(), approvals,
                        stayed=["myvmss_0", "myvmss_1"], kubernetes=True)


def _summary(outcome: Outcome) -> List[str]:
    problems = outcome.problems(speed=60)
    totals = {"deleted": 2, "instances_after": 2, "approvals": 2, "foreign_approvals": 0,
              "foreign_events_ignored": 2, "pods_evicted": 3, "evictions_refused": 2, "real_s": 1.0,
              **outcome.totals()}
    result = DemoResult(failure_of(problems) is None, OPTIONS, [], [], totals, failure_of(problems), [], problems)
    return render_text(result)


def test_a_vm_approved_with_its_node_not_drained_fails_the_demo_and_the_summary_says_so() -> None:
    outcome = _outcome(undrained=["myvmss_3"])
    problems = outcome.problems(speed=60)
    assert problems == ["myvmss_3's node was not drained before its approval (node n not drained: default/web-a "
                        "stayed); its agent approved anyway (on_hook_failure=approve), so the instance went "
                        "without draining"]
    assert failure_of(problems) == problems[0]  # not None: the demo exits 1
    totals = outcome.totals()
    assert (totals["drained_and_approved"], totals["approved_without_draining"]) == (1, 1)
    assert (totals["nodes_drained"], totals["nodes_not_drained"], totals["approved_before_node_drained"]) == (1, 1, 1)
    text = "\n".join(_summary(outcome))
    assert "1 of them after their own agent drained and approved, 1 approved without draining" in text
    assert "Kubernetes: 1 nodes cordoned and drained, 1 not drained," in text
    assert "1 VM(s) approved before their node was drained." in text
    assert "each VM approved only after its node was drained" not in text and "OK:" not in text


def test_every_node_drained_before_its_approval_is_ok_and_said_once() -> None:
    outcome = _outcome(undrained=[])
    assert outcome.problems(speed=60) == [] and failure_of([]) is None
    text = "\n".join(_summary(outcome))
    assert "2 of them after their own agent drained and approved, 0 approved without draining" in text
    assert "each VM approved only after its node was drained." in text and "OK: graceful scale-in completed." in text


def test_an_approval_before_the_node_drained_is_a_problem() -> None:
    clock = ManualClock()
    timeline = Timeline(clock)
    timeline.record("agent", D.HOOK_FINISHED, "myvmss_3", "", hook=HOOK, exit_code=0)
    timeline.record("agent", D.APPROVAL_SENT, "myvmss_3", "")
    timeline.record("agent", D.KUBE_EVICTION_REFUSED, "myvmss_3", "", pod="default/web-a", attempt=1)
    timeline.record("agent", D.KUBE_DRAINED, "myvmss_3", "", node="n")
    outcome = Outcome.read([_deletion("myvmss_3", clock)], timeline.entries(), [], stayed=[], kubernetes=True)
    assert outcome.problems(speed=60) == ["myvmss_3 was approved before its node was drained"]
    assert outcome.totals()["approved_without_draining"] == 1


def test_several_problems_are_one_verdict_naming_the_rest() -> None:
    assert failure_of(["a", "b", "c"]) == "a; 2 more problem(s): -o json lists them"


@pytest.mark.parametrize("kind, shape", [(D.HOOK_FINISHED, D.KubeData), (D.KUBE_DRAINED, D.HookData)])
def test_an_entry_read_through_another_kinds_shape_is_refused(kind: str, shape: type) -> None:
    entry = Timeline(ManualClock()).record("agent", kind, "myvmss_3", "")
    with pytest.raises(TypeError):
        entry.view(shape)
    with pytest.raises(TypeError):  # a sandbox entry carries no decision
        Timeline(ManualClock()).record("sandbox", kind).view(D.DATA[kind])


@pytest.mark.parametrize("ok", [True, False])
def test_the_central_kubernetes_line_claims_drained_acknowledgements_only_when_the_verdict_does(ok: bool) -> None:
    options = DemoOptions(instances=4, scale_in=2, kubernetes=True, central=True)
    totals = {"deleted": 2, "instances_after": 2, "central_hooks_ok": 2, "central_run_commands": 2,
              "central_acknowledged": 2, "pods_evicted": 4, "evictions_refused": 3, "real_s": 1.0}
    failure = None if ok else "myvmss_3's event was acknowledged before its node was drained"
    text = "\n".join(render_text(DemoResult(ok, options, [], [], totals, failure, [], [failure] if failure else [])))
    assert ("each event acknowledged only after its node was drained" in text) is ok
