"""The agent: the IMDS source (a monitor that polls Scheduled Events), the IMDS approval, and the
action pipeline (`vmss_terminate.pipeline`), in the shape of aws-node-termination-handler.

`Agent` is the loop; it hands each event of its own VM to the `Pipeline`, which is source-free:
- `pipeline/policy.py` (pure) decides what to do with an event: ignore, run hooks, observe,
  withhold or approve. An approval is sent only for an event that is ours, Scheduled, of a type in
  `approve_types`, not shared (unless `approve_shared`), whose hooks finished (or failed, with
  on_hook_failure="approve"). The IMDS client re-checks ownership right before the POST.
- `pipeline/jobs.py` runs the hooks of one event in a worker thread, under the NotBefore deadline,
  so polling continues (new events, a NotBefore that moved, an event that vanished or started).
- `pipeline/journal.py` keeps what happened per EventId across restarts.
What stays here is IMDS's: the document, which events are ours, when one left for good
(`policy.gone_for_good`), the approval POST, the /readyz drain and the IMDS outage.
The poll loop never dies: IMDS errors are retried with backoff and reported as decisions.
Everything time-dependent goes through the injected clock; nothing here installs signal
handlers, so agents can run in threads (the CLI adds those).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

from requests.adapters import BaseAdapter

from vmss_terminate.agent.config import AgentConfig
from vmss_terminate.agent.health import Outage
from vmss_terminate.agent.imds import ForeignEventError, ImdsClient, ImdsError, Stopped
from vmss_terminate.clock import SYSTEM_CLOCK, Clock
from vmss_terminate.errors import UsageError
from vmss_terminate.pipeline import decisions as D
from vmss_terminate.pipeline import policy
from vmss_terminate.pipeline.backoff import Backoff
from vmss_terminate.pipeline.decisions import Decision, DecisionBus
from vmss_terminate.pipeline.events import EVENT_TYPES, Event, EventsDocument, canonical_type, same_name
from vmss_terminate.pipeline.journal import StateStore, resolve_state_file
from vmss_terminate.pipeline.pipeline import Handler, Pipeline, Source

log = logging.getLogger(__name__)


@dataclass
class _Seen:
    """An event in the current document: its latest version and the once-per-event notes said."""

    event: Event
    said: Set[str] = field(default_factory=set)


@dataclass
class _Missing:
    """An event of a previous document absent from the latest one(s): gone for good only once
    `policy.gone_for_good` says so (an event that drops out of one answer is not a cancellation)."""

    event: Event
    since: float  # clock time of the first answer without it
    polls: int = 0  # consecutive answers without it


class Agent:
    """The in-VM agent. `run(stop)` loops; `run_once()` handles what is visible now."""

    def __init__(self, config: AgentConfig, clock: Clock = SYSTEM_CLOCK,
                 client: Optional[ImdsClient] = None, transport: Optional[BaseAdapter] = None) -> None:
        self.config = config.validated()
        self.clock = clock
        self.client = client or ImdsClient(
            self.config.imds_url, api_version=self.config.api_version, clock=clock,
            read_timeout=self.config.request_timeout, first_call_timeout=self.config.first_call_timeout,
            max_per_second=self.config.max_requests_per_second, transport=transport,
        )
        self.bus = DecisionBus()
        self.state = StateStore(resolve_state_file(self.config.state_file))
        self.vm_name: Optional[str] = self.config.vm_name
        self._seen: Dict[str, _Seen] = {}  # by EventId; guarded by _lock
        self._missing: Dict[str, _Missing] = {}  # by EventId: left the document, maybe not for good; _lock
        self._lock = threading.Lock()
        self.pipeline = Pipeline(self.config, Source(latest=self._latest, gone=self.gone, approve=self._approve,
                                                     report=self._decide, once=self._once),
                                 self.state, self.bus, clock, me=lambda: self.vm_name or "")
        self.jobs = self.pipeline.jobs
        self.cluster_problem: Optional[str] = None  # --kubernetes: why the cluster cannot be used now (/healthz)
        self._cluster_retry_at = 0.0
        self._cluster_backoff = Backoff(base=5.0, cap=60.0)
        self._own_target: Any = None  # --kubernetes: this VM's node (a DrainTarget)
        if self.config.kubernetes:
            self.pipeline.drain = self._node_drain()
        self._stop = threading.Event()   # the caller's: stop polling (then the stop grace runs)
        self._abort = threading.Event()  # ours: end every IMDS request and hook now (grace over)
        self.outage = Outage(clock, self._decide)
        self._approve_retry_for: Optional[float] = None  # run_once: its retry_for; run: 5 polls
        self.running = threading.Event()  # set while run() loops (the /healthz probe reads it)
        self.started_at: Optional[float] = None  # clock time run() began
        self.readiness_served = False  # set by probes.serve(): the drain logs then name /readyz
        self._version_said = False
        self._unreadable_said: Tuple[str, ...] = ()  # the unreadable entries last reported
        if "Terminate" not in self.config.approve_types:
            log.warning("Terminate is not in the approve types: Terminate events will wait for NotBefore")

    # -- public API -----------------------------------------------------------------------------

    def on(self, event_type: str, fn: Handler) -> Handler:
        """Run `fn(event, context)` for our own events of `event_type` ("*" = every type) before approval."""
        kind = "*" if event_type == "*" else canonical_type(event_type)
        if kind != "*" and kind not in EVENT_TYPES:
            raise UsageError(f"unknown event type {event_type!r}: use {', '.join(EVENT_TYPES)} or *")
        self.pipeline.add_handler(kind, fn)
        return fn

    @property
    def drain(self) -> Any:
        """--kubernetes: the node drain step (pipeline/kubernetes/drain.py), else None."""
        return self.pipeline.drain

    def subscribe(self, fn: Callable[[Decision], None]) -> Callable[[], None]:
        """Call `fn(decision)` for every decision; returns an unsubscribe function."""
        return self.bus.subscribe(fn)

    def run(self, stop: Optional[threading.Event] = None) -> None:
        """Poll every `poll_interval` until `stop` is set; then `shutdown()` (the stop grace) and return."""
        self._stop = stop if stop is not None else threading.Event()
        self._abort = threading.Event()
        self.started_at = self.clock.now()
        self.running.set()
        try:
            if not self._ensure_vm_name(retry_for=None):
                return
            if self.pipeline.drain is not None:
                self._check_cluster(first=True)  # a refused configuration ends the agent here (exit 2)
            while not self._stop.is_set():
                began = self.clock.now()
                if self.cluster_problem is not None and began >= self._cluster_retry_at:
                    self._check_cluster()
                try:
                    self.poll(retry_for=None)
                except Exception as exc:  # a bug or an absurd answer must not end the agent
                    log.exception("poll failed unexpectedly")
                    self.outage.failed(ImdsError(f"unexpected {exc.__class__.__name__}: {exc}"))
                    self.clock.wait(self._stop, self.outage.next_wait())
                left = self.config.poll_interval - (self.clock.now() - began)
                if left > 0:
                    self.clock.wait(self._stop, left)
        finally:
            self.running.clear()
            self.shutdown()

    def run_once(self, stop: Optional[threading.Event] = None,
                 retry_for: float = 70.0) -> Optional[EventsDocument]:
        """Fetch the document once, handle every event in it, wait for the hooks it started and
        their approvals. Raises ImdsError if IMDS stays unavailable for `retry_for` seconds (also
        when an approval could not be sent in that time);
        returns None if `stop` was set while waiting for IMDS."""
        self._stop = stop if stop is not None else threading.Event()
        self._abort = threading.Event()
        try:
            self._ensure_vm_name(retry_for=retry_for, raise_errors=True)
            document = self.client.get_events(retry_for=retry_for, stop=self._stop, on_retry=self._on_retry)
        except Stopped:
            return None
        self._say_api_version()
        failures: List[str] = []
        unsubscribe = self.subscribe(lambda d: failures.append(d.message) if d.kind == D.APPROVAL_FAILED else None)
        self._approve_retry_for = retry_for  # one shot: no next poll to try the approval again
        try:
            self.handle_document(document)
            for job in self.jobs.jobs():
                while not job.done.is_set() and not self._stop.is_set():
                    self.clock.wait(job.done, 1.0)
        finally:
            unsubscribe()
            self._approve_retry_for = None
        if self._stop.is_set():
            self.shutdown()
        else:
            self.pipeline.close()
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
            self.outage.failed(exc)
            self.clock.wait(self._stop, self.outage.next_wait())
            return None
        self.outage.answered()
        self._say_api_version()
        self.handle_document(document)
        return document

    def shutdown(self, timeout: float = 30.0) -> None:
        """The stop grace: hooks already running may finish for up to `stop_grace` seconds (a VM
        being deleted must not lose its drain because the service was restarted), and what they
        drained is approved. Then the hooks still running are stopped (their process trees), left
        'started, not finished' in the state file so the next agent reruns them; no new hook starts."""
        grace = self.config.stop_grace
        waiting = self.jobs.jobs()
        if waiting and grace > 0 and not self._abort.is_set():
            self._decide(D.STOPPING, None, f"stopping: letting the hooks of {len(waiting)} event(s) finish "
                                           f"(up to {grace:g}s), then approving what they drained")
            until = self.clock.now() + grace
            for job in waiting:
                while not job.done.is_set() and self.clock.now() < until:
                    self.clock.wait(job.done, min(1.0, until - self.clock.now()))
        running = self.jobs.event_ids()
        if running:
            self._decide(D.STOPPING, None, f"stopping: interrupting hooks of {len(running)} event(s); "
                                           f"they rerun when the agent starts again")
        self._abort.set()
        self.jobs.cancel_all(timeout)
        self.pipeline.close()

    # -- the pipeline -----------------------------------------------------------------------------

    def handle_document(self, document: EventsDocument) -> None:
        """Ownership filter -> hooks -> approval, for every event; then forget vanished events."""
        events = [self._known_spelling(e) for e in document.events]
        present = {e.event_id for e in events}
        if document.unreadable != self._unreadable_said:  # said when it changes, not on every poll
            self._unreadable_said = document.unreadable
            if document.unreadable:
                self._decide(D.EVENT_UNREADABLE, None, f"{len(document.unreadable)} unreadable entr"
                             f"{'y' if len(document.unreadable) == 1 else 'ies'} in the document skipped "
                             f"(the other events are handled): {'; '.join(document.unreadable)[:400]}")
        for event in events:
            try:
                self._handle_event(event)
            except Exception:  # one odd event must not stop the others (or the loop)
                log.exception("handling event %s failed", event.event_id)
        now = self.clock.now()
        with self._lock:
            vanished = {eid: self._seen.pop(eid).event for eid in list(self._seen) if eid not in present}
            for eid in present:
                self._missing.pop(eid, None)  # back (or never away): not gone
            for eid, last in vanished.items():
                self._missing[eid] = _Missing(last, now)
            for missing in self._missing.values():
                missing.polls += 1
            unsure = {eid for eid, m in self._missing.items() if not policy.gone_for_good(m.polls, m.since, now)}
            gone = {eid: m.event for eid, m in self._missing.items() if eid not in unsure}
        running = set(self.jobs.event_ids())
        for eid, last in vanished.items():
            self._decide(D.EVENT_GONE, eid, f"event {eid} left the document (completed or cancelled)")
            self._end_drain(last)
        for eid in gone:
            self.jobs.wake(eid)  # gone for good: a running node drain stops and undoes its cordon itself
        self.pipeline.undo_drains(present | running | unsure, gone)
        self.state.prune(present | running | unsure)  # writes the file only when something was dropped
        with self._lock:  # what is gone for good is forgotten once no job needs to know it
            for eid in gone:
                if eid not in running:
                    self._missing.pop(eid, None)
                    self.pipeline.forget(eid)

    def _known_spelling(self, event: Event) -> Event:
        """`event` under the EventId it was first seen with: IMDS compares GUIDs case-insensitively,
        so an EventId whose letter case changes between answers is the same event -- one job, one
        journal record, one drain -- never a second run of its hooks."""
        with self._lock:
            if event.event_id in self._seen:
                return event
            known = [*self._seen, *self._missing]
        known += self.jobs.event_ids()
        same = next((k for k in known if k != event.event_id and same_name(k, event.event_id)), None)
        return event if same is None else dataclasses.replace(event, event_id=same)

    def _spelled(self, event_id: str) -> str:
        """The EventId as the latest document spells it (what the approval must name), else as known."""
        document = self.client.last_document
        spellings = {e.event_id for e in document.all_with_id(event_id)} if document is not None else set()
        return spellings.pop() if len(spellings) == 1 else event_id

    def live(self, event_id: str) -> bool:
        """The event is in the document (or left it, not yet for good) or a job handles it."""
        with self._lock:
            missing = self._missing.get(event_id)
            known = event_id in self._seen or (
                missing is not None and not policy.gone_for_good(missing.polls, missing.since, self.clock.now()))
        return known or self.jobs.running(event_id)

    def gone(self, event_id: str) -> bool:
        """The event left the document for good (`policy.gone_for_good`): its drain stops and is undone."""
        with self._lock:
            missing = self._missing.get(event_id)
            return missing is not None and policy.gone_for_good(missing.polls, missing.since, self.clock.now())

    def _handle_event(self, event: Event) -> None:
        vm = self.vm_name or ""
        with self._lock:
            seen = self._seen.get(event.event_id)
            previous = seen.event if seen is not None else None
            if seen is None:
                self._seen[event.event_id] = _Seen(event)
            else:
                seen.event = event
        ours = event.names(vm)
        if ours:
            self.jobs.seen(event)  # its deadline is anchored now (again only if NotBefore changes)
        if previous is None:
            self._decide(D.EVENT_SEEN, event.event_id,
                         f"{event.event_type} {event.event_id} {event.status} NotBefore="
                         f"{event.not_before_raw or '-'} Resources={list(event.resources)}"
                         f"{' (ours)' if ours else ''}", event=event, ours=ours)
            if policy.drains(event, vm, self.config):
                self._begin_drain(event)
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
        if event.started and not self.state.get(event.event_id).get("started"):
            self.state.update(event.event_id, started=True)  # the VM is going away: never uncordoned
        if not event.scheduled:
            return  # Started: too late to prepare or approve; running hooks go on until their deadline
        self.pipeline.advance(event)

    def _latest(self, event_id: str) -> Optional[Event]:
        with self._lock:
            seen = self._seen.get(event_id)
        return seen.event if seen is not None else None

    def _approve(self, event: Event) -> bool:
        """The IMDS approval (the pipeline's `Source.approve`): True when the POST was answered 200."""
        eid, vm = event.event_id, self.vm_name or ""
        try:  # the client's guard re-checks the latest document (an event that left it: `absent`)
            retry_for = (self._approve_retry_for if self._approve_retry_for is not None
                         else self.config.poll_interval * 5)  # run_once(retry_for=0) means no retry
            self.client.approve(self._spelled(eid), vm, retry_for=retry_for, stop=self._abort,
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
            return False
        except Stopped:
            return False
        except ImdsError as exc:
            self._decide(D.APPROVAL_FAILED, eid, f"approval of {eid} failed: {exc}; retrying next poll")
            return False
        return True

    # -- drain (the /readyz probe) -------------------------------------------------------------------

    def _begin_drain(self, event: Event) -> None:
        """An own event of a drain type was seen: the drain begins now (or went on since a previous
        agent saw it: the journal keeps its start, so a restart neither delays nor shortens it)."""
        eid = event.event_id
        since = self.state.get(eid).get("drain_started")
        if not isinstance(since, (int, float)):
            since = self.jobs.steady_now(event)  # on the event's anchor, as the approval reads it
            self.state.update(eid, drain_started=since)
        probe = ": /readyz answers 503" if self.readiness_served else ""
        self._decide(D.DRAIN_STARTED, eid, f"draining for {event.event_type} {eid}{probe}"
                     + (f"; approval not before {self.config.drain_delay:g} s from now"
                        if self.config.drain_delay else ""), event=event, since=since,
                     drain_delay=self.config.drain_delay)

    def _end_drain(self, event: Event) -> None:
        """A drain event left the document: the drain ends unless this VM is going away."""
        if not policy.drains(event, self.vm_name or "", self.config):
            return
        record = self.state.get(event.event_id)
        if policy.drain_ends_when_gone(event.event_type, event.started or bool(record.get("approved"))):
            probe = ": /readyz answers 200 again" if self.readiness_served else ""
            self._decide(D.DRAIN_ENDED, event.event_id, f"{event.event_type} {event.event_id} left the document "
                                                        f"without taking this VM{probe}")

    # -- --kubernetes ------------------------------------------------------------------------------

    def _node_drain(self) -> Any:
        """The node drain step; UsageError now (exit 2) when the cluster credentials are unusable."""
        from vmss_terminate.pipeline.kubernetes.api import KubeApi  # only --kubernetes loads it
        from vmss_terminate.pipeline.kubernetes.credentials import load_access
        from vmss_terminate.pipeline.kubernetes.drain import DrainTarget, NodeDrain

        access = load_access(self.config.kubeconfig)
        log.info("--kubernetes: draining the node through %s (%s)", access.server, access.source)
        own = self._own_target = DrainTarget(identity=self._identity, node_name=self.config.node_name,
                                             wait_for_node=True)  # this VM's node, only
        return NodeDrain(KubeApi(access), self.state, self._decide, lambda event: [own], self.clock,
                         lambda: self.vm_name or "", taint=self.config.taint, live=self.live)

    def _check_cluster(self, first: bool = False) -> None:
        """--kubernetes: reach the cluster and find this VM's node. A refusal of the credentials
        (401/403) at start-up is bad input (UsageError: exit 2); anything that may pass (unreachable,
        5xx, node not registered yet) is said, makes /healthz 503 naming it, and is looked at again
        with backoff (5 s doubling to 60 s)."""
        from vmss_terminate.pipeline.kubernetes.api import KubeError

        try:
            node, how = self.pipeline.drain.check(self._own_target, self._stop)
        except UsageError as exc:
            if first:
                raise
            problem = str(exc)
        except (KubeError, ImdsError, Stopped) as exc:
            problem = str(exc)
        else:
            if first or self.cluster_problem is not None:
                self._decide(D.KUBE_NODE, None, f"this VM is Kubernetes node {node} ({how}; API server "
                                                f"{self.pipeline.drain.api.server})", node=node)
            self.cluster_problem = None
            self._cluster_backoff.reset()
            return
        if self._stop.is_set():
            return
        delay = self._cluster_backoff.next()
        if problem != self.cluster_problem:
            self._decide(D.KUBE_ERROR, None, f"--kubernetes: cannot use the cluster yet: {problem}; "
                                             f"/healthz answers 503; looking again in {delay:.0f} s")
        self.cluster_problem = problem
        self._cluster_retry_at = self.clock.now() + delay

    def _identity(self) -> Tuple[str, str]:
        """(compute.resourceId, osProfile.computerName) from instance metadata: how the drain finds its node."""
        compute = self.client.compute(retry_for=30.0, stop=self._abort, on_retry=self._on_retry)
        profile = compute.get("osProfile")
        profile = profile if isinstance(profile, dict) else {}
        return str(compute.get("resourceId") or ""), str(profile.get("computerName") or "")

    # -- helpers ----------------------------------------------------------------------------------

    def _say_api_version(self) -> None:
        """`--api-version latest`: say once which version IMDS serves and was chosen."""
        if self._version_said or self.client.discovered is None:
            return
        self._version_said = True
        chosen, offered = self.client.discovered
        self._decide(D.API_VERSION, None, f"api-version latest: IMDS lists {', '.join(offered) or 'nothing'}; "
                                          f"using {chosen}", api_version=chosen, offered=offered)

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
                self.outage.failed(exc)
                self.clock.wait(self._stop, self.outage.next_wait())
                continue
            self.outage.answered()
            self._decide(D.VM_NAME, None, f"this VM is {self.vm_name}")
            return True
        return False

    def _on_retry(self, exc: ImdsError, delay: float) -> None:
        self.outage.failed(exc, delay)

    def _once(self, kind: str, event_id: str, message: str, **data: Any) -> None:
        """Report `kind` for an event once while it stays in the document."""
        with self._lock:
            seen = self._seen.get(event_id)
            if seen is not None:
                if kind in seen.said:
                    return
                seen.said.add(kind)
        self._decide(kind, event_id, message, **data)

    def _decide(self, kind: str, event_id: Optional[str], message: str, event: Optional[Event] = None,
                **data: Any) -> None:
        if event is not None:
            data.setdefault("event_type", event.event_type)
            data.setdefault("status", event.status)
            data.setdefault("not_before", event.not_before_raw)
            data.setdefault("resources", list(event.resources))
            data.setdefault("event_source", event.event_source)
            data.setdefault("duration_in_seconds", event.duration_in_seconds)
            if event.not_before is not None and event.scheduled:
                data.setdefault("not_before_in", round(event.not_before - self.clock.now(), 3))
        self.bus.publish(Decision(kind, event_id, self.vm_name, message, self.clock.now(), data))
