"""The central handler: a source of scale sets' scheduled events (Resource Graph, a queue) plugged
into the one action pipeline (`pipeline.Pipeline`), acknowledging through the Maintenance RP.

This module is only the source's side of the seam (`pipeline.Source`): it polls, keeps what it read
of each event, hands every new Scheduled event of a handled type of a scale set in scope to the
pipeline, and acknowledges when the pipeline says so. What runs, in which order, under which
deadline, what the journal records and when an approval may go are the pipeline's, exactly as for
the in-VM agent (`pipeline/pipeline.py`, `jobs.py`, the pure `policy.py`):
1. `--hook CMD` once per listed VM, VMs at once (no shell; the VMSS_TERMINATE_* variables with
   VMSS_TERMINATE_VM_NAME that VM, the event JSON with `VmName`, `VmId`, `ScaleSetId`, `VmIds` and
   `ResourceIds` on stdin);
2. `--webhook URL` (the event JSON, once per event); chat notices (`--webhook-format slack|teams`)
   are decision subscribers, never a step;
3. `--kubernetes`: the pipeline's node drain, once per listed VM, its node found by providerID
   across the cluster (a VM that is no node is said and skipped), even after a failed hook;
4. `--run-command FILE`: Azure Run Command on every listed VM, by the set's OS type, after the drain
   and also after a failed hook.
The pipeline acts for every listed VM (`EVERY_LISTED_VM`): the event is acknowledged once, after
every listed VM's steps ended, unless one failed and `on_failure` is "wait"; a VM added to the event
meanwhile has its steps run before that (`policy.uncovered`). Deadlines: NotBefore minus
`safety_margin`, anchored when the event was first seen and counted on the monotonic clock.

Only a Scheduled event of a set the scope selects is ever handed over; Started, Completed and
Canceled never (a Canceled event stops its job and undoes the cordon the drain made, through the
pipeline's `gone` and `undo_drains`). The journal (`--state-file`, keyed by EventId) makes kill -9
safe: a step started but not finished runs again, a finished one never, an acknowledged event is
never handled again. A source that leases events to one replica (the queue: `holds(event)`,
`on_lost`) may lose an event while its job runs: the pipeline then stops the running step as on a
stop (the hook's process group terminated, killed after `kill_grace`), starts no other and never
acknowledges it here; the loss is logged, published (`EVENT_LOST`) and counted.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from vmss_terminate.central.graph import ScaleSetInfo
from vmss_terminate.central.legacy import Legacy
from vmss_terminate.central.maintenance import AckResult
from vmss_terminate.central.runcommand import CommandOutput
from vmss_terminate.central.source import CANCELED, CentralEvent, EventSource, ScaleSetRef, SourceBatch
from vmss_terminate.clock import SYSTEM_CLOCK, Clock
from vmss_terminate.errors import AzureError
from vmss_terminate.pipeline import decisions as D
from vmss_terminate.pipeline import policy
from vmss_terminate.pipeline.decisions import Decision, DecisionBus
from vmss_terminate.pipeline.events import EVERY_LISTED_VM, Event
from vmss_terminate.pipeline.hooks import FAILED, OK, WAKE_EVERY, Run, StepResult
from vmss_terminate.pipeline.jobs import Step
from vmss_terminate.pipeline.journal import StateStore, event_of
from vmss_terminate.pipeline.pipeline import Pipeline, Source

log = logging.getLogger(__name__)

DEFAULT_POLL_INTERVAL = 5.0
"""Seconds between Resource Graph polls: Resource Graph's documented user quota is 15 queries per
5-second window (x-ms-user-quota-remaining); a poll costs one query (two when new sets appear), so
the handler leaves most of the quota to other tools, and a Terminate's notice (5..15 minutes) is
long against it."""
DEFAULT_SAFETY_MARGIN = 15.0
RUN_COMMAND_STEP = "run-command"
CENTRAL_OPTION_NAMES: Mapping[str, str] = {"approve_types": "--type", "on_hook_failure": "--on-failure"}
"""`central run`'s spelling of the settings the pipeline's messages name (commands/central.py)."""


@dataclass(frozen=True)
class HandlerConfig:
    """`central run`'s options; also the pipeline's `policy.Settings` (the properties below)."""

    hooks: Tuple[str, ...] = ()
    webhook: Optional[str] = None
    webhook_format: str = "json"  # json: the event POSTed as a step; slack / teams: chat notices (never a step)
    run_command: Optional[str] = None  # the script's text (--run-command FILE's content)
    kubernetes: bool = False
    handle_types: Tuple[str, ...] = ("Terminate",)
    safety_margin: float = DEFAULT_SAFETY_MARGIN
    on_failure: str = "approve"  # approve | wait
    poll_interval: float = DEFAULT_POLL_INTERVAL
    kill_grace: float = 5.0  # seconds between a stopped hook's SIGTERM and its SIGKILL

    # -- policy.Settings: the handled types are the ones hooks run for and acknowledged ----------
    @property
    def hook_events(self) -> Tuple[str, ...]:
        return self.handle_types

    @property
    def approve_types(self) -> Tuple[str, ...]:
        return self.handle_types

    @property
    def approve_shared(self) -> bool:
        return False  # acting for every listed VM, no listed VM is another's

    @property
    def on_hook_failure(self) -> str:
        return self.on_failure

    @property
    def drain_delay(self) -> float:
        return 0.0

    @property
    def rerun_interrupted(self) -> bool:
        return True  # hooks at least once

    @property
    def option_names(self) -> Mapping[str, str]:
        return CENTRAL_OPTION_NAMES


def kill_grace_problem(kill_grace: float, give_up_before: Optional[float]) -> Optional[str]:
    """Why `kill_grace` cannot go with a leasing source's `give_up_before` (None: it can): a running
    step sees the loss within `WAKE_EVERY` of the give-up, its hook is killed `kill_grace` later, and
    must be dead before the lease can lapse and another replica run the event's hook
    (`QueueSettings.give_up_before`)."""
    if give_up_before is None or kill_grace + WAKE_EVERY < give_up_before:
        return None
    return (f"--kill-grace {kill_grace:g} must be shorter than the queue source's give_up_before "
            f"({give_up_before:g} s) less the {WAKE_EVERY:g} s a running step takes to notice the loss: a hook "
            f"stopped when a lease is given up would outlive it, and another replica could run the same "
            f"event's hook meanwhile")


@dataclass
class Outcome:
    """What happened to one event in one handling (`CentralHandler.handle`)."""

    event: CentralEvent
    steps: Dict[str, str] = field(default_factory=dict)  # step name (`name@VM` per VM) -> outcome
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


DrainFactory = Callable[[StateStore, Callable[..., None], Callable[[str], bool]], Any]


@dataclass(frozen=True)
class Actions:
    """The handler's collaborators that act outside it: Run Command on a VM (`--run-command`) and
    the node drain (`--kubernetes`: `drain(journal, report, live)` -> the pipeline's NodeDrain,
    targets `kubernetes.drain.listed_vms`); None: not used."""

    run_command: Optional[Callable[..., CommandOutput]] = None
    drain: Optional[DrainFactory] = None


def pipeline_event(event: CentralEvent, info: Optional[ScaleSetInfo]) -> Event:
    """The pipeline's Event for a central one: IMDS's fields plus `ScaleSetId` and `VmIds` (every
    listed VM's resource id, also `Event.resource_ids`)."""
    ids = {vm: info.vm_id(vm) for vm in event.resources} if info is not None else dict(event.vm_ids)
    raw = dict(event.fields(), ScaleSetId=event.scale_set.id, VmIds=ids)
    return dataclasses.replace(Event.from_json(raw), resource_ids=ids)


def action_label(step: str) -> str:
    """A step's name as a bounded metric label: hook, webhook, python, kubernetes:drain, run-command."""
    name = step.split("@", 1)[0]
    for prefix, label in (("hook#", "hook"), ("webhook:", "webhook"), ("python:", "python")):
        if name.startswith(prefix):
            return label
    return name


class _RunCommand:
    """`--run-command`: Azure Run Command on one listed VM (a per-VM step, `Step.per_vm`)."""

    name = RUN_COMMAND_STEP

    def __init__(self, run_command: Callable[..., CommandOutput], infos: Callable[[str], Optional[ScaleSetInfo]]):
        self.run_command, self.infos = run_command, infos

    def run(self, run: Run) -> StepResult:
        info = self.infos(run.event.event_id)
        if info is None:
            return StepResult(FAILED, "the event's scale set is not known")
        try:
            output = self.run_command(info, run.vm_name, run.deadline,
                                      lambda: run.cancelled.is_set() or not run.held() or run.gone())
        except AzureError as exc:
            return StepResult(FAILED, str(exc))
        log.info("run command on %s: %s; stdout: %s; stderr: %s", run.vm_name, output.detail, output.stdout[-500:],
                 output.stderr[-500:])
        return StepResult(OK if output.ok else FAILED, output.detail, output.exit_code)


@dataclass
class _Known:
    """An event as the source last read it, its scale set and what was said of it once."""

    central: CentralEvent
    event: Event
    info: Optional[ScaleSetInfo] = None
    said: Set[str] = field(default_factory=set)
    ack: Optional[AckResult] = None


class CentralHandler:
    """Polls a source and hands its events to the pipeline. `handle(event, info)` is the Python API
    for one event (its steps, then the acknowledgement)."""

    def __init__(self, source: EventSource, lookup: Callable[[Sequence[ScaleSetRef]], Dict[str, ScaleSetInfo]],
                 acknowledge: Callable[[ScaleSetRef, Sequence[str]], List[AckResult]],
                 config: HandlerConfig = HandlerConfig(), journal: Optional[StateStore] = None,
                 actions: Actions = Actions(), clock: Clock = SYSTEM_CLOCK,
                 observe: Optional[Callable[..., None]] = None) -> None:
        give_up = getattr(getattr(source, "settings", None), "give_up_before", None)  # a leasing source's
        problem = kill_grace_problem(config.kill_grace, give_up if isinstance(give_up, (int, float)) else None)
        if problem is not None:
            raise ValueError(problem)
        self.source, self.lookup, self._acknowledge = source, lookup, acknowledge
        self.config, self.clock = config, clock
        self.journal = journal or StateStore()
        self.legacy = Legacy(self.journal)  # the journal of the handler before the pipeline, re-keyed
        self.observe = observe or (lambda kind, **data: None)
        self.stopping = threading.Event()
        self._known: Dict[str, _Known] = {}  # by EventId (guarded by _lock)
        self._lock = threading.Lock()
        self.bus = DecisionBus()
        self.bus.subscribe(self._count)
        self.pipeline = Pipeline(config, Source(latest=self._latest, gone=self._gone, approve=self._approve,
                                                report=self._report, once=self._once, holds=self._holds),
                                 self.journal, self.bus, clock, me=lambda: EVERY_LISTED_VM)
        self.pipeline.approve_in_jobs = True  # one poll may hand over dozens of events: acknowledged in parallel
        if config.kubernetes and actions.drain is not None:
            self.pipeline.drain = actions.drain(self.journal, self._report, self._live)
        if config.run_command and actions.run_command is not None:
            self.pipeline.add_step(Step(RUN_COMMAND_STEP, _RunCommand(actions.run_command, self._info), always=True,
                                        per_vm=True), after_drain=True)
        self.legacy.migrate(self.pipeline.webhook_step)
        listeners = getattr(source, "on_lost", None)
        if isinstance(listeners, list):
            listeners.append(self._lost)
        self.ready = False
        self.last_poll: Optional[float] = None
        self.last_batch: Optional[SourceBatch] = None

    @property
    def notifier(self) -> Any:
        """The chat notifier (`--webhook-format slack|teams`), else None."""
        return self.pipeline.notifier

    # -- the loop ---------------------------------------------------------------------------------

    def poll_once(self, wait: bool = False) -> List[CentralEvent]:
        """One pass: read the source and hand every new pending event in scope to the pipeline
        (`wait`: and wait for the jobs it started, as `--once` does). Returns the events started."""
        started_at = time.monotonic()
        batch = self.source.poll()
        self.last_batch = batch
        self.observe("poll", complete=batch.complete, requests=batch.requests, throttled=batch.throttled,
                     quota_waits=batch.quota_waits, events=len(batch.events), seconds=time.monotonic() - started_at)
        if not batch.complete:
            log.warning("the source's answer is incomplete (%s): events missing from it are not taken as gone",
                        batch.problem)
        handled = [e for e in batch.events if e.event_type in self.config.handle_types]
        for event in handled:
            self.legacy.adopt(event.event_id)  # before anything reads its record
        pending = [e for e in handled if e.pending and not self._finished(e)]
        infos: Dict[str, ScaleSetInfo] = {}
        if pending:
            try:
                infos = self.lookup([e.scale_set for e in pending])
            except AzureError as exc:
                log.warning("cannot read the scale sets of %d event(s): %s (retried next poll)", len(pending), exc)
                return []
        for event in handled:  # what the running jobs and the approval read as the latest
            self._remember(event, infos.get(event.scale_set.key))
        canceled = {e.event_id: self._known[e.event_id].event for e in handled
                    if e.status == CANCELED and e.event_id in self._known}
        for event_id in canceled:
            self.pipeline.jobs.wake(event_id)  # its job stops (its drain undoes the cordon), never acknowledged
        if canceled:
            keep = {event_of(k, self.journal.get(k)) for k in self.journal.event_ids()} - set(canceled)
            self.pipeline.undo_drains(keep, canceled)
        if batch.complete:
            self._forget_unlisted({e.event_id for e in batch.events})
        started: List[CentralEvent] = []
        for event in pending:
            if event.scale_set.key not in infos:
                self._note_once(event, "out_of_scope", f"event {event.event_id} of {event.scale_set} is outside "
                                                       "the scope: never acted on, never acknowledged")
                continue
            if self._advance(event):
                started.append(event)
        from azure.core.exceptions import AzureError as SdkError

        for event in batch.events:
            # Tell the source which events are done with (a queue deletes their messages then):
            # not pending (Started/Completed/Canceled), acknowledged or withheld, of a type this
            # handler does not act on, or of a scale set outside the scope. Never one still running.
            if self.pipeline.jobs.running(event.event_id):
                continue
            if (not event.pending or self._finished(event) or event.event_type not in self.config.handle_types
                    or (event in pending and event.scale_set.key not in infos)):
                try:
                    self.source.settle(event)
                except SdkError as exc:  # a Storage SDK error (5xx, no answer): settled again next poll
                    log.warning("settling event %s with the source failed: %s (retried next poll)",
                                event.event_id, exc)
        self.last_poll = self.clock.now()
        self.ready = True
        if wait:
            self._wait([e.event_id for e in started])
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
        """End the loop and stop the running jobs (their hooks rerun on the next start)."""
        self.stopping.set()
        for job in self.pipeline.jobs.jobs():
            job.cancel()

    def join(self, timeout: Optional[float] = None) -> None:
        """Wait for the running jobs (each up to `timeout` real seconds)."""
        for job in self.pipeline.jobs.jobs():
            job.done.wait(timeout)

    # -- one event --------------------------------------------------------------------------------

    def handle(self, event: CentralEvent, info: ScaleSetInfo) -> Outcome:
        """Run the steps for every VM the event lists, then acknowledge it (once), now."""
        outcome = Outcome(event)

        def collect(decision: Decision) -> None:
            if decision.event_id != event.event_id:
                return
            data = decision.view(D.HookData)
            if decision.kind in (D.HOOK_FINISHED, D.HOOK_FAILED):
                outcome.steps[str(data.get("hook"))] = OK if decision.kind == D.HOOK_FINISHED else str(
                    data.get("outcome", FAILED))
            elif decision.kind in (D.APPROVAL_WITHHELD, D.EVENT_LOST):
                outcome.withheld = decision.message

        self.legacy.adopt(event.event_id)
        if self.journal.get(event.event_id).get("approved"):
            outcome.withheld = "acknowledged before"
            return outcome
        unsubscribe = self.bus.subscribe(collect)
        try:
            self._remember(event, info)
            self._advance(event)
            self._wait([event.event_id])
        finally:
            unsubscribe()
        with self._lock:
            known = self._known.get(event.event_id)
            outcome.acknowledged = known.ack if known is not None else None
        if outcome.acknowledged is None and not outcome.withheld:
            outcome.withheld = self._why_not_acknowledged(event.event_id)
        return outcome

    def _why_not_acknowledged(self, event_id: str) -> str:
        """What kept a handled event from its acknowledgement when no decision said it (`handle`)."""
        latest = self._latest(event_id)
        if self.stopping.is_set():
            return "handler stopping (the event is handled again on restart)"
        if latest is None or not latest.scheduled:
            return "the event is no longer Scheduled (as last read): not acknowledged"
        verdict = policy.approval(latest, EVERY_LISTED_VM, self.config,
                                  policy.Progress.from_record(self.journal.get(event_id)),
                                  now=self.pipeline.jobs.steady_now(latest))
        return verdict.message or f"not acknowledged (the policy says {verdict.action})"

    def _advance(self, event: CentralEvent) -> bool:
        """Hand `event` to the pipeline (a first sighting is journalled and said); True when no job
        of it ran before."""
        eid = event.event_id
        if not self.journal.get(eid).get("seen"):
            self.journal.update(eid, seen=self.clock.now(), scale_set=event.scale_set.id)
            self.observe("seen", event_type=event.event_type)
            self._report(D.DRAIN_STARTED, eid, f"event seen: running its actions for {len(event.resources)} VM(s)")
        running = self.pipeline.jobs.running(eid)
        self.pipeline.advance(self._known[eid].event)
        return not running

    def _forget_unlisted(self, listed: Set[str]) -> None:
        """A complete answer: events it no longer lists, with no job, are forgotten (the journal
        keeps what was done; the map stays as large as the source's pending events)."""
        with self._lock:
            for event_id in [e for e in self._known if e not in listed]:
                if not self.pipeline.jobs.running(event_id):
                    del self._known[event_id]
                    self.pipeline.forget(event_id)

    def _wait(self, event_ids: Sequence[str]) -> None:
        for job in self.pipeline.jobs.jobs():
            if job.event_id in event_ids:
                job.done.wait()

    # -- the pipeline's Source ----------------------------------------------------------------------

    def _remember(self, event: CentralEvent, info: Optional[ScaleSetInfo]) -> None:
        with self._lock:
            known = self._known.get(event.event_id)
            info = info or (known.info if known is not None else None)
            converted = pipeline_event(event, info)
            if known is None:
                self._known[event.event_id] = _Known(event, converted, info)
            else:
                known.central, known.event, known.info = event, converted, info

    def _latest(self, event_id: str) -> Optional[Event]:
        with self._lock:
            known = self._known.get(event_id)
        return known.event if known is not None else None

    def _info(self, event_id: str) -> Optional[ScaleSetInfo]:
        with self._lock:
            known = self._known.get(event_id)
        return known.info if known is not None else None

    def _gone(self, event_id: str) -> bool:
        """Canceled (Azure gave the scale-in up): its steps stop, its cordon is undone."""
        with self._lock:
            known = self._known.get(event_id)
        return known is not None and known.central.status == CANCELED

    def _live(self, event_id: str) -> bool:
        """Pending as last read, or being handled (a node drain hands its cordon over to it)."""
        with self._lock:
            known = self._known.get(event_id)
        return (known is not None and known.central.pending) or self.pipeline.jobs.running(event_id)

    def _holds(self, event_id: str) -> bool:
        """This replica may still act on the event: always, unless the source leases events to one
        replica (`holds`) and no longer holds this one's lease."""
        holds: Optional[Callable[[CentralEvent], bool]] = getattr(self.source, "holds", None)
        with self._lock:
            known = self._known.get(event_id)
        return holds is None or known is None or holds(known.central)

    def _lost(self, event: CentralEvent) -> None:
        """The source lost `event` to another replica: its job stops now (`Source.holds`)."""
        self.observe("lease_lost", event_type=event.event_type)
        self._report(D.EVENT_LOST, event.event_id, f"{event.event_type} {event.event_id} of {event.scale_set}: "
                                                   "lost the event's lease (another replica may handle it): its "
                                                   "running step is stopped and it is not acknowledged here")
        self.pipeline.jobs.wake(event.event_id)

    def _approve(self, event: Event) -> bool:
        """The Maintenance RP acknowledgement (the pipeline's `Source.approve`); last before the POST, a leasing
        source records it under the event's lease (`_fence`): a replica that lost the lease sends nothing."""
        with self._lock:
            known = self._known.get(event.event_id)
        if known is None or not self._holds(event.event_id):
            return False
        central = known.central
        if self._widened(event, central):
            return False
        try:
            if not self._fence(central):
                return False
            with self._lock:
                latest = known.central
            if self._widened(event, latest):
                # a poll read the event again while the record was written (`acknowledging` waits for
                # the event's other Storage calls): take the record back, nothing is sent
                taken: Optional[Callable[[CentralEvent], None]] = getattr(self.source, "unacknowledging", None)
                if taken is not None:
                    taken(central)
                return False
            answer = self._acknowledge(central.scale_set, [central.event_id])[0]
        except AzureError as exc:
            self._report(D.APPROVAL_FAILED, event.event_id, f"acknowledging {event.event_id} failed: {exc}; "
                                                            "retried next poll")
            return False
        known.ack = answer
        if not answer.ok:
            taken_back: Optional[Callable[[CentralEvent], None]] = getattr(self.source, "unacknowledging", None)
            if taken_back is not None:
                taken_back(central)  # refused: nothing released, another replica may acknowledge it
            self.observe("acknowledge_refused", event_type=central.event_type, event_id=central.event_id)
            self._report(D.APPROVAL_FAILED, event.event_id, f"event {central.event_id} of {central.scale_set}: "
                                                            f"acknowledge refused (HTTP {answer.status} "
                                                            f"{answer.message}); retried next poll")
            return False
        seen = float(self.journal.get(event.event_id).get("seen") or self.clock.now())
        self.observe("acknowledged", event_type=central.event_type, event_id=central.event_id,
                     seconds=max(0.0, self.clock.now() - seen))
        log.info("event %s of %s acknowledged: %s", central.event_id, central.scale_set, answer.message)
        return True

    def _widened(self, event: Event, central: CentralEvent) -> bool:
        """A poll read the event again since the policy checked it, and it lists other VMs: what it
        would release now is not what was checked; the next sighting judges the event as read (a new
        VM's steps run). Said (APPROVAL_WITHHELD) when so."""
        if sorted(vm.lower() for vm in central.resources) == sorted(vm.lower() for vm in event.resources):
            return False
        self._report(D.APPROVAL_WITHHELD, event.event_id, f"not acknowledging {event.event_id} yet: it now lists "
                                                          f"{', '.join(central.resources) or 'no VM'} (checked: "
                                                          f"{', '.join(event.resources) or 'no VM'}); judged "
                                                          "again as read next poll")
        return True

    def _fence(self, central: CentralEvent) -> bool:
        """A source shared by replicas records the acknowledgement under the event's lease before
        it is sent (`acknowledging`: the queue's blob); False when it refused (said and published)."""
        fence: Optional[Callable[[CentralEvent], Optional[str]]] = getattr(self.source, "acknowledging", None)
        why = fence(central) if fence is not None else None
        if why is None:
            return True
        self._report(D.EVENT_LOST, central.event_id, f"{central.event_type} {central.event_id} of "
                                                     f"{central.scale_set} is not acknowledged here: {why}")
        return False

    def _report(self, kind: str, event_id: Optional[str], message: str, event: Optional[Event] = None,
                **data: Any) -> None:
        """Publish a decision about an event, with what the source read of it (chat notices and
        metrics subscribe); an acknowledged event is settled with the source right away."""
        with self._lock:
            known = self._known.get(event_id or "")
        vms = None
        if known is not None:
            central = known.central
            vms = ", ".join(central.resources)
            data.setdefault("event_type", central.event_type)
            data.setdefault("status", central.status)
            data.setdefault("not_before", central.fields()["NotBefore"] or "-")
            data.setdefault("resources", list(central.resources))
            data.setdefault("event_source", f"central handler, {central.scale_set}")
        self.bus.publish(Decision(kind, event_id, vms, message, self.clock.now(), data))
        if kind == D.APPROVAL_SENT and known is not None:
            self.source.settle(known.central)  # at once: a queue deletes the message now, not a poll later

    def _once(self, kind: str, event_id: str, message: str, **data: Any) -> None:
        """Publish `kind` once per event; a withheld acknowledgement is journalled (never handled again)."""
        with self._lock:
            known = self._known.get(event_id)
            if known is not None:
                said = kind if known.central.resources else f"{kind}:no VM"  # said again once it lists VMs
                if said in known.said:
                    return
                known.said.add(said)
        if kind == D.APPROVAL_WITHHELD and known is not None and known.central.resources:
            # journalled: never handled again; an event read with no VM is not (a later read may list them)
            self.journal.update(event_id, withheld=message)
        self._report(kind, event_id, message, **data)

    def _count(self, decision: Decision) -> None:
        """The decisions the handler's metrics count (`observe`): every one for the pipeline's table
        (`pipeline.metrics.PipelineMetrics`, as the agent's), and each step's outcome per action."""
        self.observe("decision", decision=decision)
        if decision.kind in (D.HOOK_FINISHED, D.HOOK_FAILED):
            step = str(decision.view(D.HookData).get("hook") or "")
            self.observe("action", action=action_label(step), vm=step.split("@", 1)[1] if "@" in step else "",
                         outcome=OK if decision.kind == D.HOOK_FINISHED else str(
                             decision.view(D.HookData).get("outcome", FAILED)), event_id=decision.event_id)

    # -- journal ------------------------------------------------------------------------------------

    def _finished(self, event: CentralEvent) -> bool:
        record = self.journal.get(event.event_id)
        return bool(record.get("approved") or record.get("withheld"))

    def _note_once(self, event: CentralEvent, kind: str, message: str) -> None:
        record = self.journal.get(event.event_id)
        if not record.get(kind):
            log.warning("%s", message)
            self.observe(kind, event_type=event.event_type)
            self.journal.update(event.event_id, **{kind: True})
