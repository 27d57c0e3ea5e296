"""The agent: a monitor that polls Scheduled Events, and one action pipeline per event
(ownership filter -> hooks -> approval), in the shape of aws-node-termination-handler.

- The poll loop never dies: IMDS errors are retried with backoff and reported as decisions.
- Hooks for an event run in a worker thread, so polling continues (new events, a NotBefore that
  moved, an event that vanished or started).
- An approval is sent only for an event that is ours (our VM name is in Resources), Scheduled,
  of a type in `approve_types`, not shared with other VMs (unless `approve_shared`), and whose hooks
  finished (or failed, with on_hook_failure="approve"). The IMDS client re-checks ownership right
  before the POST.
- State per EventId survives restarts (see `state.py`).
- Everything time-dependent goes through the injected clock; nothing here installs signal
  handlers, so agents can run in threads (the CLI adds those).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

from vmss_terminate.agent import decisions as D
from vmss_terminate.agent.config import AgentConfig
from vmss_terminate.agent.decisions import Decision, DecisionBus
from vmss_terminate.agent.events import EVENT_TYPES, Event, EventsDocument, canonical_type
from vmss_terminate.agent.hooks import (
    CANCELLED, OK, CommandHook, HookContext, PythonHook, Run, StepResult, WebhookHook,
)
from vmss_terminate.agent.imds import Backoff, ForeignEventError, ImdsClient, ImdsError, Stopped
from vmss_terminate.agent.process import process_start_token, stop_orphan
from vmss_terminate.agent.journal import StateStore, resolve_state_file
from vmss_terminate.clock import SYSTEM_CLOCK, Clock
from vmss_terminate.errors import UsageError

log = logging.getLogger(__name__)

Handler = Callable[[Event, HookContext], Any]
UNKNOWN_NOTICE = 15 * 60.0  # seconds assumed until NotBefore when an event's NotBefore is unreadable


@dataclass
class _Step:
    name: str
    hook: Any  # CommandHook | PythonHook | WebhookHook


@dataclass
class _Job:
    """The hooks of one event, running in a worker thread."""

    event_id: str
    thread: Optional[threading.Thread] = None
    cancelled: threading.Event = field(default_factory=threading.Event)
    wake: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)

    def cancel(self) -> None:
        self.cancelled.set()
        self.wake.set()


class Agent:
    """The in-VM agent. `run(stop)` loops; `run_once()` handles what is visible now."""

    def __init__(self, config: AgentConfig, clock: Clock = SYSTEM_CLOCK,
                 client: Optional[ImdsClient] = None) -> None:
        self.config = config.validated()
        self.clock = clock
        self.client = client or ImdsClient(
            self.config.imds_url, api_version=self.config.api_version, clock=clock,
            read_timeout=self.config.request_timeout, first_call_timeout=self.config.first_call_timeout,
            max_per_second=self.config.max_requests_per_second,
        )
        self.bus = DecisionBus()
        self.state = StateStore(resolve_state_file(self.config.state_file))
        self.vm_name: Optional[str] = self.config.vm_name
        self._handlers: List[Tuple[str, Handler]] = []
        self._commands = [CommandHook(c, i) for i, c in enumerate(self.config.hooks)]
        self._webhook = WebhookHook(self.config.webhook) if self.config.webhook else None
        self._jobs: Dict[str, _Job] = {}
        self._known: Dict[str, Event] = {}
        self._said: Set[Tuple[str, str]] = set()
        self._lock = threading.RLock()
        self._approve_lock = threading.Lock()
        self._stop = threading.Event()
        self._imds_failing = False
        self._retry_reports = 0
        self._error_backoff = Backoff(base=1.0, cap=30.0)
        self._approve_retry_for: Optional[float] = None  # run_once: its retry_for; run: 5 polls
        if "Terminate" not in self.config.approve_types:
            log.warning("Terminate is not in the approve types: Terminate events will wait for NotBefore")

    # -- public API -----------------------------------------------------------------------------

    def on(self, event_type: str, fn: Handler) -> Handler:
        """Run `fn(event, context)` for our own events of `event_type` ("*" = every type) before approval."""
        kind = "*" if event_type == "*" else canonical_type(event_type)
        if kind != "*" and kind not in EVENT_TYPES:
            raise UsageError(f"unknown event type {event_type!r}: use {', '.join(EVENT_TYPES)} or *")
        self._handlers.append((kind, fn))
        return fn

    def subscribe(self, fn: Callable[[Decision], None]) -> Callable[[], None]:
        """Call `fn(decision)` for every decision; returns an unsubscribe function."""
        return self.bus.subscribe(fn)

    def run(self, stop: Optional[threading.Event] = None) -> None:
        """Poll every `poll_interval` until `stop` is set; then stop running hooks and return."""
        self._stop = stop if stop is not None else threading.Event()
        try:
            if not self._ensure_vm_name(retry_for=None):
                return
            while not self._stop.is_set():
                began = self.clock.now()
                try:
                    self.poll(retry_for=None)
                except Exception as exc:  # a bug or an absurd answer must not end the agent
                    log.exception("poll failed unexpectedly")
                    self._imds_trouble(ImdsError(f"unexpected {exc.__class__.__name__}: {exc}"))
                    self.clock.wait(self._stop, self._error_backoff.next())
                left = self.config.poll_interval - (self.clock.now() - began)
                if left > 0:
                    self.clock.wait(self._stop, left)
        finally:
            self.shutdown()

    def run_once(self, stop: Optional[threading.Event] = None,
                 retry_for: float = 70.0) -> Optional[EventsDocument]:
        """Fetch the document once, handle every event in it, wait for the hooks it started and
        their approvals. Raises ImdsError if IMDS stays unavailable for `retry_for` seconds (also
        when an approval could not be sent in that time);
        returns None if `stop` was set while waiting for IMDS."""
        self._stop = stop if stop is not None else threading.Event()
        try:
            self._ensure_vm_name(retry_for=retry_for, raise_errors=True)
            document = self.client.get_events(retry_for=retry_for, stop=self._stop, on_retry=self._on_retry)
        except Stopped:
            return None
        failures: List[str] = []
        unsubscribe = self.subscribe(lambda d: failures.append(d.message) if d.kind == D.APPROVAL_FAILED else None)
        self._approve_retry_for = retry_for  # one shot: no next poll to try the approval again
        try:
            self.handle_document(document)
            for job in self._running_jobs():
                while not job.done.is_set() and not self._stop.is_set():
                    self.clock.wait(job.done, 1.0)
        finally:
            unsubscribe()
            self._approve_retry_for = None
        if self._stop.is_set():
            self.shutdown()
        if failures:  # --once must not report success when an approval it owed was not sent
            raise ImdsError("; ".join(failures))
        return document

    def poll(self, retry_for: Optional[float] = None) -> Optional[EventsDocument]:
        """One Scheduled Events GET (retried) and its handling; never raises on IMDS trouble."""
        try:
            document = self.client.get_events(retry_for=retry_for, stop=self._stop, on_retry=self._on_retry)
        except Stopped:
            return None
        except ImdsError as exc:
            self._imds_trouble(exc)
            self.clock.wait(self._stop, self._error_backoff.next())
            return None
        self._imds_ok()
        self.handle_document(document)
        return document

    def shutdown(self, timeout: float = 30.0) -> None:
        """Stop running hooks (their process trees), leaving them 'started, not finished' in the
        state file, so the next agent reruns them; wait for the workers to exit."""
        jobs = self._running_jobs()
        if jobs:
            self._decide(D.STOPPING, None, f"stopping: interrupting hooks of {len(jobs)} event(s); "
                                           f"they rerun when the agent starts again")
        for job in jobs:
            job.cancel()
        for job in jobs:
            if job.thread is not None:
                job.thread.join(timeout)

    # -- the pipeline -----------------------------------------------------------------------------

    def handle_document(self, document: EventsDocument) -> None:
        """Ownership filter -> hooks -> approval, for every event; then forget vanished events."""
        present = {e.event_id for e in document.events}
        for event in document.events:
            try:
                self._handle_event(event)
            except Exception:  # one odd event must not stop the others (or the loop)
                log.exception("handling event %s failed", event.event_id)
        with self._lock:
            vanished = [eid for eid in self._known if eid not in present]
            for eid in vanished:
                del self._known[eid]
            if vanished:
                self._said = {s for s in self._said if s[0] not in vanished}
            running = set(self._jobs)
        for eid in vanished:
            self._decide(D.EVENT_GONE, eid, f"event {eid} left the document (completed or cancelled)")
        self.state.prune(present | running)  # writes the file only when something was dropped

    def _handle_event(self, event: Event) -> None:
        vm = self.vm_name or ""
        with self._lock:
            previous = self._known.get(event.event_id)
            self._known[event.event_id] = event
        ours = event.names(vm)
        if previous is None:
            self._decide(D.EVENT_SEEN, event.event_id,
                         f"{event.event_type} {event.event_id} {event.status} NotBefore="
                         f"{event.not_before_raw or '-'} Resources={list(event.resources)}"
                         f"{' (ours)' if ours else ''}", event=event, ours=ours)
            if not ours:
                self._decide(D.NOT_OURS, event.event_id,
                             f"not ours: {vm} is not in Resources {list(event.resources)}; ignored",
                             event=event)
        elif ours and (previous.status != event.status or previous.not_before_raw != event.not_before_raw):
            kind = D.EVENT_STARTED if event.started and not previous.started else D.EVENT_CHANGED
            self._decide(kind, event.event_id, f"{event.event_type} {event.event_id} is now {event.status}"
                         f" NotBefore={event.not_before_raw or '-'}", event=event)
        if not ours:
            return
        if not event.scheduled:
            return  # Started: too late to prepare or approve; running hooks go on until their deadline
        self._advance(event)

    def _advance(self, event: Event) -> None:
        """Start (or resume) hooks, or approve when there is nothing left to run."""
        eid = event.event_id
        with self._lock:
            if eid in self._jobs:
                return
        record = self.state.get(eid)
        if record.get("approved"):
            return
        steps = self._steps_for(event)
        if steps and not record.get("hooks_finished"):
            # Started, not finished, and no job of ours runs it: an agent stopped mid-hook.
            if record.get("hooks_started") and not self._resume_interrupted(event, record):
                return self._maybe_approve(event)
            self._start_job(event, steps)
            return
        if not steps and event.event_type not in self.config.approve_types:
            self._once(D.OBSERVED, eid, f"{event.event_type} {eid} is ours; observed only "
                                        f"(no hook subscribed, type not in --approve)", event=event)
            return
        self._maybe_approve(event)

    def _resume_interrupted(self, event: Event, record: Dict[str, Any]) -> bool:
        """A hook was started but not finished when the previous agent died. Returns True to rerun it."""
        eid = event.event_id
        pid, token = record.get("hook_pid"), record.get("hook_token")
        if pid and stop_orphan(int(pid), token, grace=self.config.kill_grace):
            log.warning("stopped hook process %s left running by the previous agent", pid)
        if self.config.rerun_interrupted:
            self._decide(D.HOOK_RERUN, eid, f"hook {record.get('current_step', '?')} was interrupted "
                                              f"by an agent restart; rerunning it")
            return True
        self.state.update(eid, hooks_finished=self.clock.now(), hooks_result="failed")
        self._decide(D.HOOK_FAILED, eid, "hook was interrupted by an agent restart; not rerun "
                                         "(rerun_interrupted=False)")
        return False

    def _steps_for(self, event: Event) -> List[_Step]:
        steps: List[_Step] = []
        if event.event_type in self.config.hook_events:
            steps += [_Step(h.name, h) for h in self._commands]
        for i, (kind, fn) in enumerate(self._handlers):
            if kind in ("*", event.event_type):
                hook = PythonHook(fn)
                steps.append(_Step(f"{hook.name}#{i}", hook))
        if self._webhook is not None and event.event_type in self.config.hook_events:
            steps.append(_Step(self._webhook.name, self._webhook))
        return steps

    def _start_job(self, event: Event, steps: List[_Step]) -> None:
        job = _Job(event.event_id)
        job.thread = threading.Thread(target=self._run_job, args=(job, event, steps),
                                      name=f"hooks:{event.event_id}", daemon=True)
        with self._lock:
            self._jobs[event.event_id] = job
        job.thread.start()

    def _deadline_of(self, event_id: str, fallback: Optional[float]) -> Optional[float]:
        with self._lock:
            event = self._known.get(event_id)
        not_before = event.not_before if event is not None and event.not_before is not None else fallback
        return None if not_before is None else not_before - self.config.safety_margin

    def _run_job(self, job: _Job, event: Event, steps: List[_Step]) -> None:
        """Worker: run the steps, then approve (unless cancelled, or the event vanished/started)."""
        eid = event.event_id
        try:
            if self._run_steps(job, event, steps) and not job.cancelled.is_set():
                with self._lock:
                    latest = self._known.get(eid)
                if latest is not None and latest.scheduled:
                    self._maybe_approve(latest)
        except Exception:
            log.exception("hook worker for %s failed", eid)
        finally:
            with self._lock:
                self._jobs.pop(eid, None)  # only now: run_once waits for the jobs in this dict
            job.done.set()

    def _run_steps(self, job: _Job, event: Event, steps: List[_Step]) -> bool:
        """Run the event's steps in order; False if interrupted (agent stopping), else True."""
        eid, vm = event.event_id, self.vm_name or ""
        # An unreadable NotBefore must not let a hook run forever: assume the longest Terminate
        # notice (PT15M) from now.
        last_not_before = event.not_before if event.not_before is not None else self.clock.now() + UNKNOWN_NOTICE
        failed: Optional[StepResult] = None
        try:
            done = list(self.state.get(eid).get("steps_done", []))
            for step in steps:
                if step.name in done:
                    self._decide(D.HOOK_SKIPPED, eid, f"hook {step.name} already finished before a restart; "
                                                      f"not rerun", hook=step.name)
                    continue
                with self._lock:
                    latest = self._known.get(eid, event)
                last_not_before = latest.not_before or last_not_before
                deadline = self._deadline_of(eid, last_not_before)
                if deadline is not None and deadline <= self.clock.now():
                    failed = StepResult("deadline", "too late to start: NotBefore minus safety margin passed")
                    self._decide(D.HOOK_FAILED, eid, f"hook {step.name} not started: {failed.detail}",
                                 hook=step.name, outcome=failed.outcome)
                    break
                self.state.update(eid, hooks_started=self.state.get(eid).get("hooks_started") or self.clock.now(),
                                  current_step=step.name, event_type=event.event_type)
                self._decide(D.HOOK_STARTED, eid, f"hook {step.name} started for {event.event_type} {eid}",
                             hook=step.name)
                run = Run(latest, vm, self.clock, lambda: self._deadline_of(eid, last_not_before),
                          job.cancelled, job.wake, kill_grace=self.config.kill_grace,
                          on_process=lambda pid: self.state.update(eid, hook_pid=pid,
                                                                   hook_token=process_start_token(pid)))
                result = step.hook.run(run)
                if result.outcome == OK:
                    done.append(step.name)
                self.state.update(eid, hook_pid=None, hook_token=None, steps_done=list(done) or None)
                if result.outcome == CANCELLED:
                    self._decide(D.HOOK_FAILED, eid, f"hook {step.name} interrupted: agent stopping "
                                                     f"(reruns on restart)", hook=step.name, outcome=CANCELLED)
                    return False
                if result.outcome != OK:
                    failed = result
                    self._decide(D.HOOK_FAILED, eid, f"hook {step.name} failed: {result.detail}",
                                 hook=step.name, outcome=result.outcome, exit_code=result.exit_code)
                    break
                self._decide(D.HOOK_FINISHED, eid, f"hook {step.name} finished: {result.detail}",
                             hook=step.name, exit_code=result.exit_code)
            self.state.update(eid, hooks_finished=self.clock.now(), hooks_result="failed" if failed else "ok",
                              current_step=None)
        except Exception:
            log.exception("hook worker for %s failed", eid)
            self.state.update(eid, hooks_finished=self.clock.now(), hooks_result="failed")
        return True

    def _maybe_approve(self, event: Event) -> None:
        eid, vm = event.event_id, self.vm_name or ""
        with self._approve_lock:
            record = self.state.get(eid)
            if record.get("approved"):
                return
            if event.event_type not in self.config.approve_types:
                self._once(D.APPROVAL_WITHHELD, eid, f"not approving {event.event_type} {eid}: type not in "
                                                     f"--approve ({', '.join(sorted(self.config.approve_types)) or 'none'})")
                return
            if record.get("hooks_result") == "failed" and self.config.on_hook_failure == "wait":
                self._once(D.APPROVAL_WITHHELD, eid, f"not approving {eid}: a hook failed and "
                                                     f"--on-hook-failure=wait; it starts at NotBefore")
                return
            if not event.names(vm):
                return  # no longer ours (Resources changed): never approve another VM's event
            others = event.others(vm)
            if others and not self.config.approve_shared:
                self._once(D.SHARED_NOT_APPROVED, eid, f"not approving {event.event_type} {eid}: it also names "
                                                       f"{', '.join(others)}; approving would release them before "
                                                       f"they drain (use --approve-shared); it starts at NotBefore",
                           others=others)
                return
            self.state.update(eid, approval_started=self.clock.now())  # documented in docs/agent.md
            try:  # the client's guard re-checks the latest document (an event that left it: `absent`)
                retry_for = (self._approve_retry_for if self._approve_retry_for is not None
                             else self.config.poll_interval * 5)  # run_once(retry_for=0) means no retry
                self.client.approve(eid, vm, retry_for=retry_for, stop=self._stop,
                                    on_retry=self._on_retry, allow_shared=self.config.approve_shared,
                                    event_type=event.event_type)
            except ForeignEventError as exc:
                # The re-check right before the POST saw a changed event; nothing was sent.
                if exc.absent:  # it left the document while we were about to approve: nothing to do
                    log.info("not approving %s: %s", eid, exc)
                elif exc.others:
                    self._once(D.SHARED_NOT_APPROVED, eid, f"not approving {event.event_type} {eid}: it now also "
                                                           f"names {', '.join(exc.others)} (re-checked right before "
                                                           f"approving); it starts at NotBefore", others=exc.others)
                else:
                    self._once(D.APPROVAL_WITHHELD, eid, f"not approving {eid}: {exc}; nothing was sent")
                return
            except Stopped:
                return
            except ImdsError as exc:
                self._decide(D.APPROVAL_FAILED, eid, f"approval of {eid} failed: {exc}; retrying next poll")
                return
            self.state.update(eid, approved=self.clock.now())
            self._decide(D.APPROVAL_SENT, eid, f"approved {event.event_type} {eid} for {vm}",
                         hooks_result=record.get("hooks_result"))

    # -- helpers ----------------------------------------------------------------------------------

    def _ensure_vm_name(self, retry_for: Optional[float], raise_errors: bool = False) -> bool:
        if self.vm_name:
            return True
        while not self._stop.is_set():
            try:
                self.vm_name = self.client.vm_name(retry_for=retry_for, stop=self._stop, on_retry=self._on_retry)
            except Stopped:
                return False
            except ImdsError as exc:
                if raise_errors:
                    raise
                self._imds_trouble(exc)
                self.clock.wait(self._stop, self._error_backoff.next())
                continue
            self._imds_ok()
            self._decide(D.VM_NAME, None, f"this VM is {self.vm_name}")
            return True
        return False

    def _on_retry(self, exc: ImdsError, delay: float) -> None:
        self._retry_reports += 1
        if not self._imds_failing or self._retry_reports % 30 == 0:
            self._decide(D.IMDS_ERROR, None, f"IMDS: {exc}; retrying in {delay:.1f}s",
                         status=exc.status, delay=delay)
        self._imds_failing = True

    def _imds_trouble(self, exc: ImdsError) -> None:
        self._imds_failing = True
        self._decide(D.IMDS_ERROR, None, f"IMDS: {exc}", status=exc.status)

    def _imds_ok(self) -> None:
        if self._imds_failing:
            self._imds_failing = False
            self._retry_reports = 0
            self._error_backoff.reset()
            self._decide(D.IMDS_RECOVERED, None, "IMDS answers again")

    def _running_jobs(self) -> List[_Job]:
        with self._lock:
            return list(self._jobs.values())

    def _once(self, kind: str, event_id: str, message: str, **data: Any) -> None:
        key = (event_id, kind)
        with self._lock:
            if key in self._said:
                return
            self._said.add(key)
        self._decide(kind, event_id, message, **data)

    def _decide(self, kind: str, event_id: Optional[str], message: str, event: Optional[Event] = None,
                **data: Any) -> None:
        if event is not None:
            data.setdefault("event_type", event.event_type)
            data.setdefault("status", event.status)
            data.setdefault("not_before", event.not_before_raw)
            data.setdefault("resources", list(event.resources))
        self.bus.publish(Decision(kind, event_id, self.vm_name, message, self.clock.now(), data))
