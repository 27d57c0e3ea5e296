"""The job runner: the hooks of one event, in order, in a worker thread, under a deadline.

One `Job` per event whose hooks run. Its steps run one after another; before each the deadline
(NotBefore minus the safety margin, re-read so a moved NotBefore counts) is checked, and each
step's start and end are written to the journal, so an agent that dies mid-hook knows on restart
which hook to rerun. `cancel()` (the agent stopping) stops the running step and leaves it
"started, not finished". What happens after the hooks (approval) is not this module's business:
the runner calls `then(event_id)` when the steps are over, the drain delay (`policy.drain_until`,
counted from when the drain began, so it runs in parallel with the hooks) has passed, and the job
was not cancelled. A job may have no steps: then it only waits for the drain delay.
Deadlines never run on the wall clock alone: the VM's clock may step (NTP, chrony's `makestep`)
while a hook runs. When an event is first seen (`seen`), the wall clock and the monotonic clock are
read together (an `Anchor`); NotBefore is judged once, from that wall reading, and time since is
counted on the monotonic clock. Only a change of NotBefore itself re-anchors. The deadline handed to
steps (`Run.deadline`) is that monotonic deadline said in the wall clock of the moment it is read,
so `deadline() - clock.now()` is the real time left whatever the wall clock did meanwhile.
A failed step ends the chain, except for the steps marked `always` (the Kubernetes node drain,
which is last): they still run, as long as their deadline has not passed. An event gone from the
document for good (`policy.gone_for_good`) ends the job at the next step boundary (or the drain at
once) without `then`, and its progress is forgotten: a stopped step is never a finished one.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Dict, List, Optional, Set

from vmss_terminate.clock import Clock
from vmss_terminate.pipeline import decisions as D
from vmss_terminate.pipeline import policy
from vmss_terminate.pipeline.events import EVERY_LISTED_VM, Event
from vmss_terminate.pipeline.hooks import CANCELLED, GONE, LOST, OK, Run, StepResult
from vmss_terminate.pipeline.journal import StateStore
from vmss_terminate.pipeline.process import process_start_token

log = logging.getLogger(__name__)

Report = Callable[..., None]  # report(kind, event_id, message, **data): publish a decision

# What the journal knows of an event's steps; forgotten when the event leaves the document for good,
# so the same EventId coming back runs every step again (never "finished" by a drain that was stopped).
PROGRESS = ("steps_done", "hooks_started", "hooks_finished", "hooks_result", "current_step", "hooks",
            "hook_pid", "hook_token", "hook_pids", "covered")
MAX_VMS_AT_ONCE = 16  # runs of one per-VM step at once (an event lists at most a few dozen VMs)


def worst(results: List[StepResult]) -> StepResult:
    """The result of a step run once per VM: the first that stopped it (cancelled, lost, gone),
    else the first that failed, else ok."""
    for outcome in (CANCELLED, LOST, GONE):
        for result in results:
            if result.outcome == outcome:
                return result
    return next((r for r in results if r.outcome != OK), results[0] if results else StepResult(OK, "no VM"))


@dataclass(frozen=True)
class Anchor:
    """Where an event's time is measured from: the wall and monotonic clocks read together when the
    event, with this NotBefore, was first seen."""

    not_before_raw: str
    wall: float
    mono: float

    def now(self, clock: Clock) -> float:
        """The wall time as this anchor counts it: its wall reading plus monotonic time since."""
        return self.wall + (clock.monotonic() - self.mono)


@dataclass
class Step:
    """One hook to run for an event: a CommandHook, PythonHook or WebhookHook under a name."""

    name: str
    hook: Any
    always: bool = False  # runs even after an earlier step failed (the node drain)
    per_vm: bool = False  # for a source acting for every listed VM: run once per listed VM, in parallel


@dataclass
class Job:
    """The hooks of one event, running in a worker thread."""

    event_id: str
    thread: Optional[threading.Thread] = None
    cancelled: threading.Event = field(default_factory=threading.Event)
    wake: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)

    def cancel(self) -> None:
        self.cancelled.set()
        self.wake.set()


class JobRunner:
    """Starts, tracks and cancels the per-event hook jobs (one lock guards the job map)."""

    def __init__(self, config: policy.Settings, clock: Clock, journal: StateStore, report: Report,
                 latest: Callable[[str], Optional[Event]], vm_name: Callable[[], str],
                 gone: Callable[[str], bool], held: Callable[[str], bool] = lambda eid: True) -> None:
        self.config = config
        self.clock = clock
        self.journal = journal
        self._report = report
        self._latest = latest  # the event as the last document showed it (None: it left)
        self._vm_name = vm_name
        self._gone = gone  # left the document for good (policy.gone_for_good), not just this answer
        self._held = held  # False: the source lost the event to another replica (a queue's lease)
        self._jobs: Dict[str, Job] = {}
        self._anchors: Dict[str, Anchor] = {}  # by EventId: see `seen`
        self._lock = threading.Lock()
        self._progress = threading.Lock()  # the journal's steps_done / hook_pids, written by per-VM runs

    def seen(self, event: Event) -> Anchor:
        """Anchor `event`'s time now if it is new or its NotBefore changed; else its anchor as it was."""
        with self._lock:
            anchor = self._anchors.get(event.event_id)
            if anchor is None or anchor.not_before_raw != event.not_before_raw:
                anchor = Anchor(event.not_before_raw, self.clock.now(), self.clock.monotonic())
                self._anchors[event.event_id] = anchor
            return anchor

    def forget(self, event_id: str) -> None:
        """The event left the document for good: its anchor goes (it comes back as a new event)."""
        with self._lock:
            self._anchors.pop(event_id, None)

    def steady_now(self, event: Event) -> float:
        """Now on `event`'s anchor (wall time at first sight plus monotonic time since): what its
        NotBefore, drain delay and approval are judged against, immune to wall clock steps."""
        return self.seen(event).now(self.clock)

    def wake(self, event_id: str) -> None:
        """Have the job of `event_id` look again now (its event changed or left the document)."""
        with self._lock:
            job = self._jobs.get(event_id)
        if job is not None:
            job.wake.set()

    def running(self, event_id: str) -> bool:
        with self._lock:
            return event_id in self._jobs

    def jobs(self) -> List[Job]:
        with self._lock:
            return list(self._jobs.values())

    def event_ids(self) -> List[str]:
        with self._lock:
            return list(self._jobs)

    def start(self, event: Event, steps: List[Step], then: Callable[[str], None],
              failed: Optional[StepResult] = None) -> Job:
        """Run `steps` for `event` in a new thread; `then(event_id)` after them unless cancelled.
        `failed`: a step already failed (a hook interrupted by a restart, not rerun): only the steps
        that always run (the node drain) run, and the hooks count as failed."""
        job = Job(event.event_id)
        job.thread = threading.Thread(target=self._work, args=(job, event, steps, then, failed),
                                      name=f"hooks:{event.event_id}", daemon=True)
        with self._lock:
            self._jobs[event.event_id] = job
        job.thread.start()
        return job

    def cancel_all(self, timeout: float) -> int:
        """Cancel every job and wait up to `timeout` real seconds each for its thread; how many there were."""
        jobs = self.jobs()
        for job in jobs:
            job.cancel()
        for job in jobs:
            if job.thread is not None:
                job.thread.join(timeout)
        return len(jobs)

    def _work(self, job: Job, event: Event, steps: List[Step], then: Callable[[str], None],
              failed: Optional[StepResult] = None) -> None:
        eid = event.event_id
        try:
            if (not steps or self._run_steps(job, event, steps, failed)) and self._drain_delay(job, event):
                then(eid)
        except Exception:
            log.exception("hook worker for %s failed", eid)
        finally:
            with self._lock:
                self._jobs.pop(eid, None)  # only now: run_once waits for the jobs in this map
            job.done.set()

    def _drain_delay(self, job: Job, event: Event) -> bool:
        """Wait until the drain delay lets the approval go (NotBefore re-read, as for hooks); False if cancelled."""
        eid = event.event_id
        while not job.cancelled.is_set():
            latest = self._latest(eid) or event
            until = policy.drain_until(latest, self.config, policy.Progress.from_record(self.journal.get(eid)))
            left = 0.0 if until is None else until - self.steady_now(latest)
            if left <= 0:
                return True
            job.wake.clear()
            self.clock.wait(job.wake, min(left, 1.0))
        return False

    def _deadline(self, event: Event) -> Optional[float]:
        """NotBefore (re-read) minus the margin, judged from the event's anchor (a NotBefore that
        cannot be believed as seen then counts as the assumed window from then,
        `policy.assumed_not_before`), said in the wall clock of now (module docstring)."""
        latest = self._latest(event.event_id) or event
        anchor = self.seen(latest)
        deadline = policy.hook_deadline(policy.assumed_not_before(latest, anchor.wall), self.config)
        return None if deadline is None else self.clock.now() + (deadline - anchor.now(self.clock))

    def _run_steps(self, job: Job, event: Event, steps: List[Step], failed: Optional[StepResult] = None) -> bool:
        """Run the event's steps in order; False if interrupted (agent stopping, the event lost to
        another replica) or the event left the document for good, else True."""
        eid = event.event_id
        journal = self.journal
        ran: Dict[str, Set[str]] = {}  # step -> the VMs it ran for in this job (ended, ok or failed)
        ended: Set[str] = set()  # steps not run because an earlier step failed (or the deadline came)
        listed: Dict[str, None] = dict.fromkeys(event.resources)  # every VM the event listed meanwhile
        try:
            done = list(journal.get(eid).get("steps_done", []))
            for index, step in enumerate(steps):
                if failed is not None and not step.always:
                    ended.add(step.name)
                    continue  # after a failure only the steps that always run (the node drain)
                latest = self._latest(eid) or event
                listed.update(dict.fromkeys(latest.resources))
                vms = self._fanned(step, latest, done)
                if vms == [] and not latest.resources:
                    self._report(D.HOOK_SKIPPED, eid, f"hook {step.name} not run: {event.event_type} {eid} lists no "
                                                      f"VM now (empty Resources)", hook=step.name)
                    continue
                if step.name in done or vms == []:
                    self._report(D.HOOK_SKIPPED, eid, f"hook {step.name} already finished before a restart; "
                                                      f"not rerun", hook=step.name)
                    continue
                if self._gone(eid):
                    return self._forget(event, step.name)
                if not self._held(eid):
                    return self._lost(event, step.name)
                if policy.too_late_to_start(self._deadline(latest), self.clock.now()):
                    failed = StepResult("deadline", "too late to start: NotBefore minus safety margin passed")
                    self._report(D.HOOK_FAILED, eid, f"hook {step.name} for {event.event_type} {eid} not "
                                                      f"started: {failed.detail}",
                                 hook=step.name, outcome=failed.outcome)
                    ended.update(s.name for s in steps[index:])
                    break  # nor any later step: they would be too late as well
                journal.update(eid, hooks_started=journal.get(eid).get("hooks_started") or self.clock.now(),
                               current_step=step.name, event_type=event.event_type,
                               hooks=[s.name for s in steps])
                if vms is None:
                    result = self._run_one(job, latest, step, self._vm_name(), done)
                    ran[step.name] = set(latest.resources)  # a once-per-event step: the VMs it was told of
                else:  # once per listed VM, at once: the step is over when every VM's run is
                    with ThreadPoolExecutor(max_workers=min(MAX_VMS_AT_ONCE, len(vms)),
                                            thread_name_prefix=f"{step.name[:12]}:{eid[:8]}") as pool:
                        results = list(pool.map(lambda vm: self._run_one(job, latest, step, vm, done), vms))  # noqa: B023 (used now)
                    ran[step.name] = {vm for vm, r in zip(vms, results) if r.outcome not in (CANCELLED, LOST, GONE)}
                    result = worst(results)
                if result.outcome == GONE:
                    return self._forget(event, step.name)
                if result.outcome in (CANCELLED, LOST):
                    return False
                if result.outcome != OK:
                    failed = result
            listed.update(dict.fromkeys((self._latest(eid) or event).resources))
            journal.update(eid, hooks_finished=self.clock.now(), hooks_result="failed" if failed else "ok",
                           current_step=None, covered=self._covered(steps, list(listed), done, ran, ended))
        except Exception:
            log.exception("hook worker for %s failed", eid)
            journal.update(eid, hooks_finished=self.clock.now(), hooks_result="failed")
        return True

    def _covered(self, steps: List[Step], listed: List[str], done: List[str], ran: Dict[str, Set[str]],
                 ended: Set[str]) -> List[str]:
        """The VMs the steps ran for (`covered`, what `policy.uncovered` checks before an approval):
        those for which every step finished (`name@VM` in `done`) or ended in this job (ok or failed:
        the policy judges failures), a step that ran once for the event having been told of the VM.
        A step no VM ran because an earlier one failed (or the deadline came) leaves no VM out; a VM
        listed only after a step ran without it is out, and its steps run before the approval."""
        def has(step: Step, vm: str) -> bool:
            if step.name in ended:
                return True
            if step.name in ran:
                return vm in ran[step.name] or f"{step.name}@{vm}" in done
            if step.per_vm and self._vm_name() == EVERY_LISTED_VM:
                return f"{step.name}@{vm}" in done
            return True  # a once-per-event step finished before a restart (its VMs not journalled)

        return [vm for vm in listed if all(has(step, vm) for step in steps)]

    def _fanned(self, step: Step, event: Event, done: List[str]) -> Optional[List[str]]:
        """The listed VMs a per-VM step still runs for (those without `name@VM` in `done`); None: the
        step runs once (not per VM, or the source acts for one VM only)."""
        if not step.per_vm or self._vm_name() != EVERY_LISTED_VM:
            return None
        return [vm for vm in event.resources if f"{step.name}@{vm}" not in done]

    def _run_one(self, job: Job, event: Event, step: Step, vm: str, done: List[str]) -> StepResult:
        """One run of `step` (for `vm`, or for the source's VM), journalled and reported; a per-VM run
        is known as `name@VM`, gets the event with `VmName` and `VmId`, and its process id is kept
        under that name (`hook_pids`) so a restart stops it."""
        eid, journal = event.event_id, self.journal
        fanned = vm != self._vm_name()
        name = f"{step.name}@{vm}" if fanned else step.name
        if fanned:
            event = replace(event, raw={**event.raw, "VmName": vm, "VmId": event.resource_ids.get(vm, "")})

        def on_process(pid: int) -> None:
            token = process_start_token(pid)
            if not fanned:
                journal.update(eid, hook_pid=pid, hook_token=token)
                return
            with self._progress:
                pids = dict(journal.get(eid).get("hook_pids") or {})
                pids[name] = [pid, token]
                journal.update(eid, hook_pids=pids)

        self._report(D.HOOK_STARTED, eid, f"hook {name} started for {event.event_type} {eid}", hook=name)
        run = Run(event, vm, self.clock, lambda: self._deadline(event), job.cancelled, job.wake,
                  kill_grace=self.config.kill_grace, on_process=on_process, gone=lambda: self._gone(eid),
                  held=lambda: self._held(eid))
        step_began = self.clock.now()
        result: StepResult = step.hook.run(run)
        duration = round(self.clock.now() - step_began, 3)
        with self._progress:
            if result.outcome == OK:
                done.append(name)
            if fanned:
                pids = dict(journal.get(eid).get("hook_pids") or {})
                pids.pop(name, None)
                journal.update(eid, hook_pids=pids or None, steps_done=list(done) or None)
            else:
                journal.update(eid, hook_pid=None, hook_token=None, steps_done=list(done) or None)
        if result.outcome == CANCELLED:
            self._report(D.HOOK_FAILED, eid, f"hook {name} interrupted: agent stopping (reruns on restart)",
                         hook=name, outcome=CANCELLED, duration=duration)
        elif result.outcome == LOST:
            self._report(D.HOOK_FAILED, eid, f"hook {name} stopped: {event.event_type} {eid} was lost to another "
                                             f"replica (its lease); not approved here", hook=name, outcome=LOST,
                         duration=duration)
        elif result.outcome == OK:
            self._report(D.HOOK_FINISHED, eid, f"hook {name} finished: {result.detail}",
                         hook=name, exit_code=result.exit_code, duration=duration)
        elif result.outcome != GONE:
            self._report(D.HOOK_FAILED, eid, f"hook {name} failed: {result.detail}",
                         hook=name, outcome=result.outcome, exit_code=result.exit_code, duration=duration)
        return result

    def _lost(self, event: Event, step: str) -> bool:
        """The source lost the event to another replica before `step`: no step runs, nothing is
        approved here; the journal keeps the progress (if the event comes back, it resumes)."""
        self._report(D.HOOK_FAILED, event.event_id, f"hook {step} not started: {event.event_type} {event.event_id} "
                                                    f"was lost to another replica (its lease)", hook=step,
                     outcome=LOST)
        return False

    def _forget(self, event: Event, step: str) -> bool:
        """The event left the document for good: no further step runs, nothing is approved, and its
        progress is forgotten -- a stopped drain is not a finished one; if the same event comes back,
        every step runs again. False: the job ends without `then`."""
        eid = event.event_id
        self.journal.forget(eid, *PROGRESS)
        self.forget(eid)
        self._report(D.HOOK_FAILED, eid, f"{event.event_type} {eid} left the document: hook {step} stopped, no "
                                         f"later hook runs and nothing is approved; if the event comes back, "
                                         f"every hook runs again", hook=step, outcome=GONE)
        return False
