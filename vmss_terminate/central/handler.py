"""The central handler: for each new scheduled event of a handled type of a scale set in scope,
run the actions in order under one deadline, then acknowledge it through the Maintenance RP.

Actions, in this order (each bounded by the deadline, NotBefore minus `safety_margin`):
1. `--hook CMD` per listed VM (no shell; the event in VMSS_TERMINATE_* variables, the event JSON
   with `VmName`, `VmId`, `ScaleSetId` and `VmIds` on stdin), VMs in parallel;
2. `--webhook URL` (the event JSON, once per event);
3. chat notices are subscribers, never a step (pipeline/notify.py in the agent);
4. `--kubernetes`: the pipeline's node drain for every listed VM, its node found by providerID
   across the cluster (a VM that is no node is logged and skipped);
5. `--run-command FILE`: Azure Run Command on every listed VM, by the set's OS type.

An event is acknowledged once, after every listed VM's actions ended, unless one failed and
`on_failure` is "wait" (then NotBefore expires and Azure proceeds on its own). Only a Scheduled
event of a set the scope selects is ever acted on; Started, Completed and Canceled never (a
Canceled event undoes the cordon this handler made).

Restart safety: the journal (`pipeline.journal.StateStore`, a JSON file; `--state-file`) records
per event which steps finished and whether the acknowledgement was sent. After kill -9 a step
started but not recorded finished runs again (at least once); no event is acknowledged before its
steps are recorded finished; an acknowledged event is never run again. An event that is no longer
Scheduled (Started: someone acknowledged it, or NotBefore passed) is never acted on again.
A Canceled event whose job still runs stops its drain (undone) and is never acknowledged.
A source that leases its events to one replica (the queue: `holds(event)`) may lose an event's
lease while its job runs (a renewal refused, or the replica paused past the lease's expiry): the
job then takes the cancel path -- its drain stops and undoes its cordon, no further stage starts --
and the acknowledgement is withheld (not journaled: the replica holding the lease now handles it).
The lease is checked again right before the acknowledgement is sent.
One replica: the journal is a local file; the templates run one replica (docs/central.md).
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from vmss_terminate.central.graph import ScaleSetInfo
from vmss_terminate.central.maintenance import AckResult
from vmss_terminate.central.runcommand import CommandOutput
from vmss_terminate.central.source import CANCELED, CentralEvent, EventSource, ScaleSetRef, SourceBatch
from vmss_terminate.clock import SYSTEM_CLOCK, Clock
from vmss_terminate.errors import AzureError
from vmss_terminate.pipeline.events import Event
from vmss_terminate.pipeline.hooks import OK, CommandHook, Run, StepResult, WebhookHook
from vmss_terminate.pipeline.journal import StateStore

log = logging.getLogger(__name__)

DEFAULT_POLL_INTERVAL = 5.0
"""Seconds between Resource Graph polls: Resource Graph's documented user quota is 15 queries per
5-second window (x-ms-user-quota-remaining); a poll costs one query (two when new sets appear), so
the handler leaves most of the quota to other tools, and a Terminate's notice (5..15 minutes) is
long against it."""
DEFAULT_SAFETY_MARGIN = 15.0


@dataclass(frozen=True)
class HandlerConfig:
    hooks: Tuple[str, ...] = ()
    webhook: Optional[str] = None
    webhook_format: str = "json"  # json: the event POSTed as a step; slack / teams: chat notices (never a step)
    run_command: Optional[str] = None  # the script's text (--run-command FILE's content)
    kubernetes: bool = False
    handle_types: Tuple[str, ...] = ("Terminate",)
    safety_margin: float = DEFAULT_SAFETY_MARGIN
    on_failure: str = "approve"  # approve | wait
    poll_interval: float = DEFAULT_POLL_INTERVAL


@dataclass
class Outcome:
    """What happened to one event in one handling."""

    event: CentralEvent
    steps: Dict[str, str] = field(default_factory=dict)  # step name -> outcome
    acknowledged: Optional[AckResult] = None
    withheld: str = ""

    @property
    def failed(self) -> List[str]:
        return [name for name, result in self.steps.items() if result != OK]

    def to_dict(self) -> Dict[str, Any]:
        return {"event_id": self.event.event_id, "scale_set_id": self.event.scale_set.id,
                "vms": list(self.event.resources), "steps": dict(self.steps),
                "acknowledged": None if self.acknowledged is None else self.acknowledged.to_dict(),
                "withheld": self.withheld}


class ScopedJournal:
    """One VM's view of the journal: the node drain keeps its record of an event under
    `{scale set id}/{event id}@{vm}` (`drain_key`), so each listed VM's drain resumes on its own."""

    def __init__(self, journal: StateStore, scale_set: ScaleSetRef, vm: str) -> None:
        self.journal, self.scale_set, self.vm = journal, scale_set, vm

    def _key(self, event_id: str) -> str:
        return f"{self.scale_set.key}/{event_id.lower()}@{self.vm}"

    def get(self, event_id: str) -> Dict[str, Any]:
        return self.journal.get(self._key(event_id))

    def update(self, event_id: str, **fields: Any) -> Dict[str, Any]:
        return self.journal.update(self._key(event_id), **fields)

    def forget(self, event_id: str, *keys: str) -> None:
        self.journal.forget(self._key(event_id), *keys)

    def event_ids(self) -> List[str]:
        return []  # no hand-over between VMs: each VM is its own node


@dataclass(frozen=True)
class Actions:
    """The handler's collaborators that act outside it: Run Command on a VM (`--run-command`), the
    node drain for a VM (`--kubernetes`) and its undo when the event is canceled; None: not used."""

    run_command: Optional[Callable[..., CommandOutput]] = None
    drain: Optional[Callable[[CentralEvent, str, str, Run], StepResult]] = None
    undo: Optional[Callable[[CentralEvent, str], None]] = None


class CentralHandler:
    """Polls a source, acts on new events, acknowledges them. `handle(event, info)` is the Python
    API for one event (actions, then the acknowledgement)."""

    def __init__(self, source: EventSource, lookup: Callable[[Sequence[ScaleSetRef]], Dict[str, ScaleSetInfo]],
                 acknowledge: Callable[[ScaleSetRef, Sequence[str]], List[AckResult]],
                 config: HandlerConfig = HandlerConfig(), journal: Optional[StateStore] = None,
                 actions: Actions = Actions(), clock: Clock = SYSTEM_CLOCK, observe: Optional[Callable[..., None]] = None,
                 workers: int = 16) -> None:
        self.source, self.lookup, self._acknowledge = source, lookup, acknowledge
        self.config, self.clock = config, clock
        self.journal = journal or StateStore()
        self.run_command, self.drain, self.undo = actions.run_command, actions.drain, actions.undo
        self.observe = observe or (lambda kind, **data: None)
        self.stopping = threading.Event()
        self._jobs: Dict[str, threading.Thread] = {}
        self._canceled: Dict[str, threading.Event] = {}  # event key -> set once a poll saw it Canceled
        self._listed: Dict[str, Tuple[str, ...]] = {}  # event key -> Resources as the latest poll read them
        self._anchors: Dict[str, Tuple[Optional[float], float, float]] = {}  # key -> (NotBefore, wall, mono)
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="central-vm")
        self._steps = [CommandHook(cmd, i) for i, cmd in enumerate(config.hooks)]  # validated now
        self._webhook = WebhookHook(config.webhook) if config.webhook and config.webhook_format == "json" else None
        self.notifier: Any = None  # --webhook-format slack|teams: a subscriber, never delaying the acknowledgement
        if config.webhook and config.webhook_format != "json":
            from vmss_terminate.central.notices import CentralNotices

            self.notifier = CentralNotices(config.webhook, config.webhook_format, clock)
        self.ready = False
        self.last_poll: Optional[float] = None
        self.last_batch: Optional[SourceBatch] = None

    # -- the loop ---------------------------------------------------------------------------------

    def poll_once(self, wait: bool = False) -> List[CentralEvent]:
        """One pass: read the source, start a job for every new pending event in scope (`wait`:
        and wait for them, as `--once` does). Returns the events started."""
        started_at = time.monotonic()
        batch = self.source.poll()
        self.last_batch = batch
        self.observe("poll", complete=batch.complete, requests=batch.requests, throttled=batch.throttled,
                     quota_waits=batch.quota_waits,
                     events=len(batch.events), seconds=time.monotonic() - started_at)
        if not batch.complete:
            log.warning("the source's answer is incomplete (%s): events missing from it are not taken as gone",
                        batch.problem)
        handled = [e for e in batch.events if e.event_type in self.config.handle_types]
        pending = [e for e in handled if e.pending and not self._finished(e)]
        self._anchor_all(pending, forget_others=batch.complete)
        for event in batch.events:
            if self._running(event):
                with self._lock:
                    self._listed[event.key] = event.resources
            if event.status == CANCELED and self._running(event):  # its job stops its drain, never acknowledges
                self._canceled_flag(event).set()
        canceled = [e for e in batch.events if e.status == CANCELED and self._drained_somewhere(e)]
        infos: Dict[str, ScaleSetInfo] = {}
        if pending or canceled:
            try:
                infos = self.lookup([e.scale_set for e in pending + canceled])
            except AzureError as exc:
                log.warning("cannot read the scale sets of %d event(s): %s (retried next poll)", len(pending), exc)
                return []
        for event in canceled:
            if event.scale_set.key in infos and self.undo is not None:
                for vm in event.resources:
                    self.undo(event, vm)
        started: List[CentralEvent] = []
        for event in pending:
            self.observe("seen", event_type=event.event_type)
            info = infos.get(event.scale_set.key)
            if info is None:
                self._note_once(event, "out_of_scope", f"event {event.event_id} of {event.scale_set} is outside "
                                                       "the scope: never acted on, never acknowledged")
                continue
            with self._lock:
                if event.key in self._jobs and self._jobs[event.key].is_alive():
                    continue
                thread = threading.Thread(target=self._job, args=(event, info), daemon=True,
                                          name=f"central:{event.event_id[:8]}")
                self._jobs[event.key] = thread
            thread.start()
            started.append(event)
        for event in batch.events:
            # Tell the source which events are done with (a queue deletes their messages then):
            # not pending (Started/Completed/Canceled), acknowledged or withheld, of a type this
            # handler does not act on, or of a scale set outside the scope. Never one still running.
            if self._running(event):
                continue
            if (not event.pending or self._finished(event) or event.event_type not in self.config.handle_types
                    or (event in pending and event.scale_set.key not in infos)):
                self.source.settle(event)
        self.last_poll = self.clock.now()
        self.ready = True
        if wait:
            for event in started:
                with self._lock:
                    job = self._jobs.get(event.key)
                if job is not None:
                    job.join()
        return started

    def run(self, once: bool = False) -> None:
        """Poll every `poll_interval` until `stop()` (or one pass and its jobs, `once`)."""
        while not self.stopping.is_set():
            try:
                self.poll_once(wait=once)
            except AzureError as exc:
                log.warning("poll failed: %s", exc)
                if once:
                    raise
            if once:
                return
            self.stopping.wait(self.config.poll_interval)

    def stop(self) -> None:
        self.stopping.set()

    def join(self, timeout: Optional[float] = None) -> None:
        with self._lock:
            threads = list(self._jobs.values())
        for thread in threads:
            thread.join(timeout)
        self._pool.shutdown(wait=False)
        if self.notifier is not None:
            self.notifier.close()

    # -- one event --------------------------------------------------------------------------------

    def _job(self, event: CentralEvent, info: ScaleSetInfo) -> None:
        try:
            self.handle(event, info)
            if self._finished(event):
                self.source.settle(event)  # at once: a queue deletes the message now, not a poll later
        except Exception:  # a job must never take the loop down: logged, retried next poll
            log.exception("handling event %s of %s failed", event.event_id, event.scale_set)
        finally:
            with self._lock:
                self._canceled.pop(event.key, None)
                self._listed.pop(event.key, None)

    def handle(self, event: CentralEvent, info: ScaleSetInfo) -> Outcome:
        """Run the actions for every VM the event lists, then acknowledge it (once); chat notices
        (`webhook_format` slack/teams) say it was seen, which actions failed, and how it ended."""
        if self.notifier is None:
            return self._handle(event, info)
        if not self.journal.get(event.key).get("acknowledged"):
            self.notifier.seen(event)
        outcome = self._handle(event, info)
        self.notifier.ended(outcome)
        return outcome

    def _handle(self, event: CentralEvent, info: ScaleSetInfo) -> Outcome:
        outcome = Outcome(event)
        record = self.journal.get(event.key)
        if record.get("acknowledged"):
            outcome.withheld = "acknowledged before"
            return outcome
        done = set(record.get("steps_done") or [])
        if not record:
            self.journal.update(event.key, seen=self.clock.now(), scale_set=event.scale_set.id, steps_done=[])
        deadline = self._deadline(event)
        stages: List[Tuple[str, Callable[[str], Tuple[str, StepResult]]]] = []
        for step in self._steps:
            stages.append((step.name, lambda vm, s=step: self._hook(event, info, vm, s, deadline)))  # type: ignore[misc]
        if self._webhook is not None:
            stages.append(("webhook", lambda vm: ("", self._webhook_step(event, info, deadline))))
        if self.config.kubernetes and self.drain is not None:
            stages.append(("kubernetes:drain", lambda vm: ("", self._drain_step(event, info, vm, deadline))))
        if self.config.run_command and self.run_command is not None:
            stages.append(("run-command", lambda vm: ("", self._run_command_step(info, vm, deadline))))
        failed = False
        for name, stage in stages:
            targets = [""] if name == "webhook" else list(event.resources)
            keys = {vm: f"{name}@{vm}" if vm else name for vm in targets}
            todo = [vm for vm in targets if keys[vm] not in done]
            for vm in targets:
                if vm not in todo:
                    outcome.steps[keys[vm]] = OK
            results = list(self._pool.map(lambda vm, stage=stage: stage(vm)[1], todo)) if todo else []
            for vm, result in zip(todo, results):
                outcome.steps[keys[vm]] = result.outcome
                self.observe("action", action=name.split("#")[0], outcome=result.outcome, vm=vm,
                             event_id=event.event_id)
                log.info("event %s %s %s: %s %s", event.event_id, name, vm, result.outcome, result.detail)
                if result.outcome == OK:
                    done.add(keys[vm])
                    self.journal.update(event.key, steps_done=sorted(done))
                else:
                    failed = True
            if self.stopping.is_set():
                outcome.withheld = "handler stopping (the event is handled again on restart)"
                return outcome
            if not self._holds(event):
                return self._lost(outcome)
        if failed and self.config.on_failure == "wait":
            outcome.withheld = f"a step failed ({', '.join(outcome.failed)}) and --on-failure wait: not acknowledged"
            log.warning("event %s: %s", event.event_id, outcome.withheld)
            self.journal.update(event.key, withheld=outcome.withheld)
            return outcome
        with self._lock:
            listed = self._listed.get(event.key, event.resources)
        grown = sorted(set(listed) - set(event.resources))
        if grown:  # acknowledging would release VMs whose actions never ran: the next poll's job runs them
            outcome.withheld = f"the event now also lists {', '.join(grown)}: not acknowledged yet"
            log.warning("event %s: %s", event.event_id, outcome.withheld)
            return outcome
        if self._canceled_flag(event).is_set():
            outcome.withheld = "the event was canceled while its actions ran: not acknowledged"
            log.warning("event %s: %s", event.event_id, outcome.withheld)
            self.journal.update(event.key, withheld=outcome.withheld)
            return outcome
        if not self._holds(event):  # checked last: a lease lost while the stages ran, or just now
            return self._lost(outcome)
        answer = self._acknowledge(event.scale_set, [event.event_id])[0]
        outcome.acknowledged = answer
        if answer.ok:
            self.journal.update(event.key, acknowledged=self.clock.now())
            self.observe("acknowledged", event_type=event.event_type, event_id=event.event_id,
                         seconds=max(0.0, self.clock.now() - float(self.journal.get(event.key).get("seen") or 0)))
            log.info("event %s of %s acknowledged: %s", event.event_id, event.scale_set, answer.message)
        else:
            self.observe("acknowledge_refused", event_type=event.event_type, event_id=event.event_id)
            log.warning("event %s of %s: acknowledge refused (HTTP %s %s)", event.event_id, event.scale_set,
                        answer.status, answer.message)
        return outcome

    def _holds(self, event: CentralEvent) -> bool:
        """Whether this replica may still act on `event`: always, unless the source leases events
        to one replica (`holds`) and no longer holds this one's lease."""
        holds: Optional[Callable[[CentralEvent], bool]] = getattr(self.source, "holds", None)
        return holds is None or holds(event)

    def _gone(self, event: CentralEvent) -> bool:
        """The job must stop (the cancel path): the event was Canceled, or its lease was lost."""
        return self._canceled_flag(event).is_set() or not self._holds(event)

    def _lost(self, outcome: Outcome) -> Outcome:
        event = outcome.event
        outcome.withheld = "lost the event's lease (another replica may handle it): not acknowledged"
        log.warning("event %s: %s", event.event_id, outcome.withheld)
        self.observe("lease_lost", event_type=event.event_type)
        return outcome

    def _anchor_all(self, pending: Sequence[CentralEvent], forget_others: bool) -> None:
        """Anchor each pending event's time when it is first seen (the wall and monotonic clocks read
        together; a changed NotBefore re-anchors). `forget_others`: a complete answer -- events
        missing from it drop their anchors (the dict stays as large as the pending events)."""
        with self._lock:
            for event in pending:
                anchor = self._anchors.get(event.key)
                if anchor is None or anchor[0] != event.not_before:
                    self._anchors[event.key] = (event.not_before, self.clock.now(), self.clock.monotonic())
            if forget_others:
                keep = {e.key for e in pending} | set(self._jobs)
                for key in [k for k in self._anchors if k not in keep]:
                    del self._anchors[key]

    def _deadline(self, event: CentralEvent) -> Callable[[], Optional[float]]:
        """NotBefore minus the safety margin, judged once against the wall clock when the event was
        first seen and counted since on the monotonic clock (as pipeline/jobs.py's Anchor): a wall
        clock stepped by NTP while a hook runs neither cuts the actions short nor lets them run past
        NotBefore. Said in the wall clock of the moment it is read, so `deadline() - clock.now()` is
        the real time left (what `Run.wait` and Run Command compare)."""
        if event.not_before is None:
            return lambda: None
        self._anchor_all([event], forget_others=False)
        with self._lock:
            _, wall, mono = self._anchors[event.key]
        limit = mono + (event.not_before - self.config.safety_margin - wall)  # on the monotonic clock
        return lambda: self.clock.now() + (limit - self.clock.monotonic())

    def _run_for(self, event: CentralEvent, info: ScaleSetInfo, vm: str,
                 deadline: Callable[[], Optional[float]]) -> Run:
        raw = dict(event.fields(), VmName=vm, VmId=info.vm_id(vm) if vm else "", ScaleSetId=event.scale_set.id,
                   VmIds={name: info.vm_id(name) for name in event.resources})
        return Run(Event.from_json(raw), vm, self.clock, deadline, self.stopping, threading.Event(),
                   gone=lambda: self._gone(event))

    def _hook(self, event: CentralEvent, info: ScaleSetInfo, vm: str, step: CommandHook,
              deadline: Callable[[], Optional[float]]) -> Tuple[str, StepResult]:
        return vm, step.run(self._run_for(event, info, vm, deadline))

    def _webhook_step(self, event: CentralEvent, info: ScaleSetInfo,
                      deadline: Callable[[], Optional[float]]) -> StepResult:
        assert self._webhook is not None
        return self._webhook.run(self._run_for(event, info, "", deadline))

    def _drain_step(self, event: CentralEvent, info: ScaleSetInfo, vm: str,
                    deadline: Callable[[], Optional[float]]) -> StepResult:
        assert self.drain is not None
        return self.drain(event, vm, info.vm_id(vm), self._run_for(event, info, vm, deadline))

    def _run_command_step(self, info: ScaleSetInfo, vm: str, deadline: Callable[[], Optional[float]]) -> StepResult:
        assert self.run_command is not None
        try:
            output = self.run_command(info, vm, deadline, self.stopping.is_set)
        except AzureError as exc:
            return StepResult("failed", str(exc))
        log.info("run command on %s: %s; stdout: %s; stderr: %s", vm, output.detail, output.stdout[-500:],
                 output.stderr[-500:])
        return StepResult(OK if output.ok else "failed", output.detail, output.exit_code)

    # -- journal ------------------------------------------------------------------------------------

    def _finished(self, event: CentralEvent) -> bool:
        record = self.journal.get(event.key)
        return bool(record.get("acknowledged") or record.get("withheld"))

    def _running(self, event: CentralEvent) -> bool:
        with self._lock:
            return event.key in self._jobs and self._jobs[event.key].is_alive()

    def _canceled_flag(self, event: CentralEvent) -> threading.Event:
        with self._lock:
            return self._canceled.setdefault(event.key, threading.Event())

    def _drained_somewhere(self, event: CentralEvent) -> bool:
        return any(self.journal.get(f"{event.key}@{vm}").get("kube_node") for vm in event.resources)

    def _note_once(self, event: CentralEvent, kind: str, message: str) -> None:
        record = self.journal.get(event.key)
        if not record.get(kind):
            log.warning("%s", message)
            self.observe(kind, event_type=event.event_type)
            self.journal.update(event.key, **{kind: True})
