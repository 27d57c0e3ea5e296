"""The approval policy as pure functions: every rule tested without threads, HTTP or a clock."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import pytest

from vmss_terminate.agent.config import AgentConfig
from vmss_terminate.errors import UsageError
from vmss_terminate.pipeline import decisions as D
from vmss_terminate.pipeline import policy
from vmss_terminate.pipeline.events import Event
from vmss_terminate.pipeline.policy import Progress

VM = "web_1"
CONFIG = AgentConfig(vm_name=VM, imds_url="http://127.0.0.1:1").validated()


def event(resources: Optional[List[str]] = None, status: str = "Scheduled", kind: str = "Terminate",
          not_before: str = "Mon, 19 Sep 2016 18:29:47 GMT") -> Event:
    return Event.from_json({"EventId": "E1", "EventType": kind, "Resources": resources or [VM],
                            "EventStatus": status, "NotBefore": not_before})


def config(**kw: Any) -> AgentConfig:
    return AgentConfig(vm_name=VM, imds_url="http://127.0.0.1:1", **kw).validated()


def test_another_vms_event_is_ignored_whatever_the_journal_says() -> None:
    verdict = policy.next_step(event(["web_2"]), VM, CONFIG, Progress(hooks_finished=True), has_hooks=False)
    assert verdict.action == policy.IGNORE
    assert policy.approval(event(["web_2"]), VM, CONFIG, Progress()).action == policy.IGNORE


def test_a_started_event_is_never_approved() -> None:
    assert policy.next_step(event(status="Started", not_before=""), VM, CONFIG, Progress(), False).action == policy.IGNORE
    assert policy.approval(event(status="Started", not_before=""), VM, CONFIG, Progress()).action == policy.IGNORE


def test_hooks_run_before_the_approval_and_an_interrupted_hook_is_flagged() -> None:
    assert policy.next_step(event(), VM, CONFIG, Progress(), has_hooks=True).action == policy.RUN_HOOKS
    interrupted = policy.next_step(event(), VM, CONFIG, Progress(hooks_started=True), has_hooks=True)
    assert interrupted.action == policy.INTERRUPTED
    finished = policy.next_step(event(), VM, CONFIG, Progress(hooks_started=True, hooks_finished=True), True)
    assert finished.action == policy.APPROVE


def test_an_approved_event_is_done() -> None:
    assert policy.next_step(event(), VM, CONFIG, Progress(approved=True), has_hooks=True).action == policy.DONE


def test_own_terminate_without_hooks_is_approved_at_once() -> None:
    assert policy.next_step(event(), VM, CONFIG, Progress(), has_hooks=False).action == policy.APPROVE


def test_a_type_not_approved_without_hooks_is_only_observed() -> None:
    verdict = policy.next_step(event(kind="Reboot"), VM, CONFIG, Progress(), has_hooks=False)
    assert (verdict.action, verdict.kind) == (policy.OBSERVE, D.OBSERVED)


def test_a_type_not_approved_after_hooks_is_withheld() -> None:
    verdict = policy.approval(event(kind="Freeze"), VM, config(hook_events="Freeze"), Progress(hooks_finished=True))
    assert (verdict.action, verdict.kind) == (policy.WITHHOLD, D.APPROVAL_WITHHELD)
    assert "type not in --approve (Terminate)" in verdict.message


@pytest.mark.parametrize("on_failure,expected", [("approve", policy.APPROVE), ("wait", policy.WITHHOLD)])
def test_a_failed_hook_approves_or_waits_as_configured(on_failure: str, expected: str) -> None:
    progress = Progress(hooks_started=True, hooks_finished=True, hooks_failed=True)
    verdict = policy.approval(event(), VM, config(on_hook_failure=on_failure), progress)
    assert verdict.action == expected
    assert on_failure == "approve" or "a hook failed and --on-hook-failure=wait" in verdict.message


def test_a_shared_event_is_withheld_unless_approve_shared() -> None:
    shared = event([VM, "web_2"])
    verdict = policy.approval(shared, VM, CONFIG, Progress())
    assert (verdict.action, verdict.kind, verdict.others) == (policy.WITHHOLD, D.SHARED_NOT_APPROVED, ("web_2",))
    assert "(use --approve-shared)" in verdict.message
    assert policy.approval(shared, VM, config(approve_shared=True), Progress()).action == policy.APPROVE


def test_hooks_subscribe_by_type() -> None:
    assert policy.command_hooks_apply("Terminate", CONFIG) and not policy.command_hooks_apply("Reboot", CONFIG)
    assert policy.handler_applies("*", "Freeze") and policy.handler_applies("Freeze", "Freeze")
    assert not policy.handler_applies("Reboot", "Freeze")


def test_deadline_is_not_before_minus_the_safety_margin() -> None:
    assert policy.hook_deadline(1000.0, config(safety_margin=15)) == 985.0
    assert policy.hook_deadline(None, CONFIG) is None
    assert policy.too_late_to_start(985.0, 985.0) and not policy.too_late_to_start(985.0, 984.9)
    assert not policy.too_late_to_start(None, 1e12)


def test_an_unreadable_not_before_counts_as_the_longest_terminate_notice() -> None:
    assert policy.assumed_not_before(event(not_before="garbage"), began=100.0) == 100.0 + 15 * 60
    began = 1474309787.0 - 60
    assert policy.assumed_not_before(event(), began=began) == 1474309787.0  # a minute ahead: believed


@pytest.mark.parametrize("not_before", ["Mon, 01 Jan 0001 00:00:00 GMT",  # email.utils reads year 0001 as 2001
                                        "Mon, 19 Sep 2016 18:29:47 GMT",  # simply past (VM clock ahead of Azure's)
                                        "Fri, 31 Dec 9999 23:59:59 GMT"])  # absurdly far ahead
def test_a_past_or_absurd_not_before_counts_as_unreadable_so_hooks_are_never_too_late(not_before: str) -> None:
    began = 1_800_000_000.0  # 2027
    assumed = policy.assumed_not_before(event(not_before=not_before), began=began)
    assert assumed == began + policy.UNKNOWN_NOTICE
    assert not policy.too_late_to_start(policy.hook_deadline(assumed, CONFIG), began)


def test_a_not_before_is_believed_up_to_the_longest_notice_of_its_type() -> None:
    began = 1474309787.0 - 15 * 60  # exactly the longest Terminate notice ahead: believed
    assert policy.assumed_not_before(event(), began=began) == 1474309787.0
    assert policy.assumed_not_before(event(), began=began - 1) == began - 1 + policy.UNKNOWN_NOTICE
    assert policy.assumed_not_before(event(), began=1474309787.0) == 1474309787.0 + policy.UNKNOWN_NOTICE


def test_progress_reads_the_journal_record() -> None:
    record: Dict[str, Any] = {"hooks_started": 1.0, "hooks_finished": 2.0, "hooks_result": "failed"}
    assert Progress.from_record(record) == Progress(hooks_started=True, hooks_finished=True, hooks_failed=True)
    assert Progress.from_record({}) == Progress()


def test_after_a_restart_the_current_hook_list_runs_and_a_change_is_said() -> None:
    record = {"current_step": "hook#1:./slow.sh", "hooks": ["hook#1:./slow.sh", "hook#2:./tell.sh"],
              "steps_done": []}
    same = policy.resume_after_restart(record, ["hook#1:./slow.sh", "hook#2:./tell.sh"], rerun_interrupted=True)
    assert same.rerun and "rerunning it" in same.message and same.changed == ""
    changed = policy.resume_after_restart(record, ["hook#1:./drain.sh"], rerun_interrupted=True)
    assert changed.rerun and "no longer configured" in changed.message and "hook#1:./drain.sh" in changed.message
    assert "were hook#1:./slow.sh, hook#2:./tell.sh; now hook#1:./drain.sh" in changed.changed
    refused = policy.resume_after_restart(record, ["hook#1:./drain.sh"], rerun_interrupted=False)
    assert not refused.rerun and refused.changed


@pytest.mark.parametrize("margin", [900, 901, 1e9, -1])
def test_a_safety_margin_that_leaves_hooks_no_time_is_bad_input(margin: float) -> None:
    from vmss_terminate.errors import UsageError

    with pytest.raises(UsageError, match="--safety-margin"):
        config(safety_margin=margin)
    assert config(safety_margin=899).safety_margin == 899


# -- drain (rule 5) ----------------------------------------------------------------------------------

NB = 1474309787.0  # the NotBefore of event() as epoch seconds


def test_hook_events_name_types_besides_terminate_which_always_drains() -> None:
    assert config(hook_events="Reboot").hook_events == {"Terminate", "Reboot"}
    assert config(hook_events="none").hook_events == {"Terminate"}
    assert policy.drains(event(), VM, config(hook_events="Reboot"))
    assert policy.command_hooks_apply("Terminate", config(hook_events="Reboot"))


def test_own_event_of_a_hook_type_drains_others_do_not() -> None:
    assert policy.drains(event(), VM, CONFIG)
    assert not policy.drains(event(["web_2"]), VM, CONFIG)
    assert not policy.drains(event(kind="Reboot"), VM, CONFIG)
    assert policy.drains(event(kind="Reboot"), VM, config(hook_events="Terminate,Reboot"))
    assert policy.drains(event(status="Started", not_before=""), VM, CONFIG)  # seen late: still going


def test_drain_delay_holds_the_approval_until_it_is_over() -> None:
    cfg = config(drain_delay=30)
    started = NB - 300
    progress = Progress(hooks_started=True, hooks_finished=True, drain_since=started)
    waiting = policy.approval(event(), VM, cfg, progress, now=started + 29.9)
    assert waiting.action == policy.DRAIN_WAIT and waiting.until == started + 30
    assert policy.approval(event(), VM, cfg, progress, now=started + 30).action == policy.APPROVE
    assert policy.next_step(event(), VM, cfg, progress, has_hooks=True, now=started + 10).action == policy.DRAIN_WAIT
    assert policy.approval(event(), VM, cfg, progress).action == policy.DRAIN_WAIT  # no time: not over


def test_drain_delay_is_bounded_by_not_before_minus_the_safety_margin() -> None:
    cfg = config(drain_delay=600, safety_margin=15)
    progress = Progress(drain_since=NB - 100)
    assert policy.drain_until(event(), cfg, progress) == NB - 15
    assert policy.approval(event(), VM, cfg, progress, now=NB - 15).action == policy.APPROVE
    unreadable = event(not_before="soon")  # counts as the longest Terminate notice from the drain start
    assert policy.drain_until(unreadable, cfg, progress) == NB - 100 + 600


def test_no_delay_without_one_configured_or_before_the_drain_began() -> None:
    assert policy.drain_until(event(), CONFIG, Progress(drain_since=NB - 100)) is None
    assert policy.drain_until(event(), config(drain_delay=30), Progress()) is None


def test_a_drain_ends_when_its_event_leaves_unless_the_vm_is_going() -> None:
    assert policy.drain_ends_when_gone("Reboot", started_or_approved=True)
    assert policy.drain_ends_when_gone("Terminate", started_or_approved=False)  # cancelled before approval
    assert not policy.drain_ends_when_gone("Terminate", started_or_approved=True)
    assert not policy.drain_ends_when_gone("Preempt", started_or_approved=True)


@pytest.mark.parametrize("delay", [-1, 901, float("nan")])
def test_bad_drain_delay_is_refused(delay: float) -> None:
    with pytest.raises(UsageError):
        config(drain_delay=delay)


def test_an_event_is_gone_for_good_after_two_answers_without_it_spanning_a_few_seconds() -> None:
    since = NB - 100
    assert not policy.gone_for_good(1, since, since + 60)  # one answer without it: not yet
    assert not policy.gone_for_good(2, since, since + 1)   # two quick answers: not yet
    assert policy.gone_for_good(2, since, since + policy.GONE_AFTER)


def test_a_vm_is_departing_once_its_approval_was_being_sent_or_its_not_before_passed() -> None:
    ahead = event()
    assert not policy.departing({}, ahead, NB - 100)
    assert policy.departing({"approved": NB - 200}, ahead, NB - 100)
    assert policy.departing({"approval_started": NB - 200}, ahead, NB - 100)  # killed mid-POST: maybe sent
    assert policy.departing({}, ahead, NB)  # NotBefore passed: Azure starts it
    assert policy.departing({}, event(status="Started"), NB - 100)
    assert not policy.departing({}, None, NB + 1000)  # nothing known but the journal: not departing
