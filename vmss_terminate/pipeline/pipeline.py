"""The action pipeline of one source: for each event the source hands it, decide, act, approve.

A source finds events and knows how to approve them; everything in between is here and knows
nothing of where the event came from (aws-node-termination-handler's shape: one monitor per source,
one action pipeline). The in-VM agent is "IMDS source + IMDS approval + this pipeline"; a central
handler is "Resource Graph or a queue + the Maintenance RP acknowledge + this pipeline".

For each event it is handed (`advance(event)`, again on every sighting: cheap when nothing is due),
the pipeline asks the pure policy (`policy.py`) what to do and does it:
- run the event's steps in order under one deadline, NotBefore minus the safety margin (`jobs.py`):
  command hooks, Python handlers, the JSON webhook, the source's own steps (`add_step`), and the
  node drain last (`drain`, the step that runs even after a failed hook);
- approve through the source's `approve(event)` only after all of them finished (or failed, as
  `on_hook_failure` says), and only a type in `approve_types`; never twice (the journal says so);
- after a restart, resume from the journal: finished steps are not rerun, an interrupted hook is
  rerun (or counted failed), an interrupted drain continues;
- an event gone for good (`source.gone`) stops its steps and undoes its node drain (`undo_drains`).
Chat notices (`webhook_format` slack/teams) subscribe to the decisions.

`me()` is the VM the source acts for: the agent's own VM name; `EVERY_LISTED_VM` for a central
source, which acts for every VM an event lists: an event naming several VMs is approved once, after
every listed VM's steps finished (the source hands over only events of its scope).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any, Callable, Collection, Dict, List, Optional, Set, Tuple

from vmss_terminate.clock import Clock
from vmss_terminate.pipeline import decisions as D
from vmss_terminate.pipeline import policy
from vmss_terminate.pipeline.decisions import DecisionBus
from vmss_terminate.pipeline.events import EVERY_LISTED_VM, Event
from vmss_terminate.pipeline.hooks import FAILED, CommandHook, HookContext, PythonHook, StepResult, WebhookHook
from vmss_terminate.pipeline.jobs import JobRunner, Step
from vmss_terminate.pipeline.journal import StateStore, event_of
from vmss_terminate.pipeline.process import stop_orphan

log = logging.getLogger(__name__)

Handler = Callable[[Event, HookContext], Any]


@dataclass(frozen=True)
class Source:
    """What the pipeline asks of the source that fed it, as callables.

    - `latest(event_id)`: the event as the source last saw it (None: not seen now);
    - `gone(event_id)`: it left for good (a cancelled scale-in): its steps stop, nothing is approved;
    - `approve(event)`: send the approval now; True when it was sent. False: not sent, and the
      source has said why (`report`); the pipeline tries again when the event is handed to it again;
    - `report(kind, event_id, message, event=None, **data)`: publish a decision;
    - `once(kind, event_id, message, **data)`: publish it once while the event stays visible;
    - `holds(event_id)`: the source may still act on the event. A source shared by replicas (the
      queue's blob lease per event) answers False once another replica may have it: the running
      step is stopped like on a stop (a hook's process group terminated, killed after the grace),
      no later step starts and nothing is approved here. The source wakes the job (`jobs.wake`).
    """

    latest: Callable[[str], Optional[Event]]
    gone: Callable[[str], bool]
    approve: Callable[[Event], bool]
    report: Callable[..., None]
    once: Callable[..., None]
    holds: Callable[[str], bool] = lambda event_id: True


class Pipeline:
    """The steps, policy, jobs and approval for the events of one source (see the module docstring)."""

    def __init__(self, settings: policy.Settings, source: Source, journal: StateStore, bus: DecisionBus,
                 clock: Clock, me: Callable[[], str]) -> None:
        self.settings = settings
        self.source = source
        self.journal = journal
        self.clock = clock
        self.me = me
        self._handlers: List[Tuple[str, Handler]] = []
        self._extra: List[Tuple[Step, Optional[Collection[str]], bool]] = []  # (step, types, after the drain)
        self._commands = [CommandHook(c, i) for i, c in enumerate(settings.hooks)]
        self._webhook = (WebhookHook(settings.webhook)
                         if settings.webhook and settings.webhook_format == "json" else None)
        self.notifier: Any = None
        if settings.webhook and settings.webhook_format != "json":
            from vmss_terminate.pipeline.notify import ChatNotifier  # only chat users load it

            self.notifier = ChatNotifier(settings.webhook, settings.webhook_format)
            bus.subscribe(self.notifier)
        self._approve_lock = threading.Lock()  # approvals come from the source's loop and from job threads
        self.jobs = JobRunner(settings, clock, journal, source.report, source.latest, me, gone=source.gone,
                              held=source.holds)
        self.drain: Any = None  # --kubernetes: the node drain step (kubernetes/drain.py), set by the source
        # A source handing over many events per pass (a central handler) sends an approval that is
        # due at once from a job thread too, so one pass is not a row of approval requests.
        self.approve_in_jobs = False

    # -- what runs ---------------------------------------------------------------------------------

    @property
    def webhook_step(self) -> Optional[str]:
        """The JSON webhook step's name (`webhook:URL`, redacted), None without one."""
        return self._webhook.name if self._webhook is not None else None

    def add_handler(self, kind: str, fn: Handler) -> None:
        """`fn(event, context)` for events of type `kind` ("*": every type), after the command hooks."""
        self._handlers.append((kind, fn))

    def add_step(self, step: Step, types: Optional[Collection[str]] = None, after_drain: bool = False) -> None:
        """A step of the source's own, after the webhook and before the node drain (`after_drain`:
        after it, as a central handler's Run Command), for events of `types` (None: the types the
        hooks run for)."""
        self._extra.append((step, types, after_drain))

    def steps_for(self, event: Event) -> List[Step]:
        """An event's steps, in order: commands, Python handlers, webhook, the source's own, node
        drain, the source's own that come after the drain. A source acting for every listed VM runs
        the per-VM steps (`Step.per_vm`: the commands, the node drain, a central handler's Run Command)
        once per VM."""
        steps: List[Step] = []
        commands = policy.command_hooks_apply(event.event_type, self.settings)
        if commands:
            steps += [Step(h.name, h, per_vm=True) for h in self._commands]
        for i, (kind, fn) in enumerate(self._handlers):
            if policy.handler_applies(kind, event.event_type):
                hook = PythonHook(fn)
                steps.append(Step(f"{hook.name}#{i}", hook))
        if self._webhook is not None and commands:
            steps.append(Step(self._webhook.name, self._webhook))
        own = [(step, after) for step, types, after in self._extra
               if (commands if types is None else event.event_type in types)]
        steps += [step for step, after in own if not after]
        if self.drain is not None and commands and policy.drains_node(event.event_type):
            # last but for the source's after-drain steps, and even after a failed hook; never for a
            # Freeze (a pause of seconds)
            steps.append(Step(self.drain.name, self.drain, always=True, per_vm=True))
        return steps + [step for step, after in own if after]

    # -- the flow ----------------------------------------------------------------------------------

    def advance(self, event: Event) -> None:
        """Ask the policy what to do with a Scheduled event of ours, and do it (nothing while the
        source does not hold the event: another replica may)."""
        if self.jobs.running(event.event_id) or not self.source.holds(event.event_id):
            return
        steps = self.steps_for(event)
        progress = policy.Progress.from_record(self.journal.get(event.event_id))
        verdict = policy.next_step(event, self.me(), self.settings, progress, has_hooks=bool(steps),
                                   now=self.jobs.steady_now(event))
        if verdict.action == policy.INTERRUPTED:
            failed = self._resume_interrupted(event, self.journal.get(event.event_id), steps)
            if failed is None:
                self.jobs.start(event, steps, then=self._after_steps)
            elif any(step.always for step in steps):  # the node drain still runs before any approval
                self.jobs.start(event, steps, then=self._after_steps, failed=failed)
            else:
                self.maybe_approve(event)
        elif verdict.action == policy.RUN_HOOKS:
            if progress.hooks_finished:  # the event grew (policy.uncovered): the steps run again for it
                self._widen(event, verdict.message)
            self.jobs.start(event, steps, then=self._after_steps)
        elif verdict.action == policy.APPROVE:
            if self.approve_in_jobs:
                self.jobs.start(event, [], then=self._after_steps)  # no step: only the approval
            else:
                self.maybe_approve(event)
        elif verdict.action == policy.DRAIN_WAIT:
            self.jobs.start(event, [], then=self._after_steps)  # no hooks left: only the drain delay
        else:
            self._carry_out(event.event_id, verdict)

    def maybe_approve(self, event: Event) -> None:
        """Approve `event` through the source if the policy says it may be now (never twice)."""
        eid, me = event.event_id, self.me()
        with self._approve_lock:
            record = self.journal.get(eid)
            progress = policy.Progress.from_record(record)
            verdict = policy.approval(event, me, self.settings, progress, now=self.jobs.steady_now(event))
            if verdict.action == policy.DRAIN_WAIT:
                return  # a job waits for the delay, or the next sighting starts one
            if verdict.action != policy.APPROVE:
                self._carry_out(eid, verdict)
                return
            if not self.source.holds(eid):
                return  # lost to another replica (the source said so): that one approves it
            self.journal.update(eid, approval_started=self.clock.now())  # documented in docs/agent.md
            if not self.source.approve(event):
                return
            approved = self.clock.now()
            self.journal.update(eid, approved=approved)
            drained = {} if progress.drain_since is None else {"drain_seconds": round(approved - progress.drain_since, 3)}
            self.source.report(D.APPROVAL_SENT, eid, f"approved {event.event_type} {eid} for "
                               f"{', '.join(event.resources) if me == EVERY_LISTED_VM else me}", event=event,
                               hooks_result=record.get("hooks_result"), **drained)

    def undo_drains(self, keep: Set[str], gone: Dict[str, Event]) -> None:
        """Events no longer pending (not in `keep`) whose node drain cordoned a node: uncordon it
        unless the VM is going away (`policy.departing`). `gone`: such events as last seen."""
        if self.drain is None:
            return
        for key in self.journal.event_ids():
            record = self.journal.get(key)
            eid = event_of(key, record)
            if eid in keep or not (record.get("kube_cordoned") or record.get("kube_tainted")):
                continue
            if self.drain.undoing(key):  # being undone (retried up to UNDO_FOR): no new thread every poll
                continue
            last = gone.get(eid)
            kind = last.event_type if last is not None else str(
                record.get("event_type") or self.journal.get(eid).get("event_type") or "Terminate")
            if not policy.drain_ends_when_gone(kind, policy.departing(self.journal.get(eid), last,
                                                                      self.clock.now())):
                continue
            why = f"{kind} {eid} left the document without taking this VM (scale-in cancelled?)"
            threading.Thread(target=self.drain.undo, args=(key, record, why), name=f"uncordon:{eid[:8]}",
                             daemon=True).start()

    def forget(self, event_id: str) -> None:
        """The event left for good: its deadline anchor goes (if it comes back, it is a new event)."""
        self.jobs.forget(event_id)

    def close(self) -> None:
        """Send what the chat notifier still holds."""
        if self.notifier is not None:
            self.notifier.close()

    # -- inside --------------------------------------------------------------------------------------

    def _after_steps(self, event_id: str) -> None:
        """A job's steps are over: approve the event as the source last saw it, if still Scheduled."""
        latest = self.source.latest(event_id)
        if latest is not None and latest.scheduled:
            self.maybe_approve(latest)

    def _carry_out(self, event_id: str, verdict: policy.Verdict) -> None:
        """Report a verdict that sends nothing (observe / withhold), once per event."""
        if verdict.kind is not None:
            data = {"others": list(verdict.others)} if verdict.others else {}
            self.source.once(verdict.kind, event_id, verdict.message, **data)

    def _widen(self, event: Event, why: str) -> None:
        """The event lists VMs its finished steps did not run for: forget that the steps finished
        (a per-VM step keeps its finished VMs, `name@VM`), so they run for the new VMs before the
        approval; the once-per-event steps (webhook, node drain of every listed VM) run again."""
        record = self.journal.get(event.event_id)
        kept = [name for name in record.get("steps_done") or () if "@" in name]
        log.info("%s", why)
        self.journal.update(event.event_id, hooks_started=None, hooks_finished=None, hooks_result=None,
                            covered=None, steps_done=kept or None)

    def _resume_interrupted(self, event: Event, record: Dict[str, Any], steps: List[Step]) -> Optional[StepResult]:
        """A hook was started but not finished when the previous process died. Returns None to run
        the hooks again (the finished ones are skipped), else the failure the interruption counts
        as: the steps that always run (the node drain) still run after it."""
        eid = event.event_id
        orphans = [(record.get("hook_pid"), record.get("hook_token"))]
        orphans += [tuple(pair) for pair in (record.get("hook_pids") or {}).values() if len(pair) == 2]
        for pid, token in orphans:  # one per VM when a per-VM step was interrupted
            if pid and stop_orphan(int(pid), token, grace=self.settings.kill_grace):
                log.warning("stopped hook process %s left running by the previous agent", pid)
        plan = policy.resume_after_restart(record, [s.name for s in steps], self.settings.rerun_interrupted,
                                           resumable=[self.drain.name] if self.drain is not None else [])
        if plan.changed:
            self.source.report(D.HOOKS_CHANGED, eid, plan.changed, previous=record.get("hooks"),
                               current=[s.name for s in steps])
        if plan.rerun:
            self.source.report(D.HOOK_RERUN, eid, plan.message, hook=record.get("current_step"))
            return None
        if not any(step.always for step in steps):
            self.journal.update(eid, hooks_finished=self.clock.now(), hooks_result="failed")
        self.source.report(D.HOOK_FAILED, eid, plan.message, hook=record.get("current_step"))
        return StepResult(FAILED, plan.message)

