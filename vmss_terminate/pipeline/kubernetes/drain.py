"""`--kubernetes`: drain the Kubernetes node(s) an event names, as a step before the approval.

Which nodes is the caller's input (`targets(event)` -> `DrainTarget`s): the in-VM agent passes its
own VM (its node found through instance metadata, or `--node-name`); a central handler passes every
VM the event lists, each found by its resource id in the nodes' `spec.providerID`, cluster-wide.
One target's journal fields sit under the EventId (the agent's); several targets' under
`EventId/VM` each (`journal_key`), so every node's cordon, evictions and undo survive a restart
on their own. Several nodes are drained at once; the step is ok when every required node is.

`NodeDrain` is a step like the hooks (`jobs.py` runs it, last, under the same deadline: NotBefore
minus the safety margin), in the order `kubectl drain` works:
1. find the node (`rules.match_node`); none -> the step fails (approval per --on-hook-failure);
2. a Kubernetes Event `TerminateNotice` on the node (events.k8s.io/v1, with EventId and NotBefore);
3. cordon (`spec.unschedulable`) and add the taint (`--taint`), remembering in the journal, before
   the patch is sent, what this agent changed -- only that is undone if the Terminate is cancelled;
4. evict every pod but DaemonSet and mirror pods through `policy/v1` Eviction, `concurrency` at
   a time: 429 (a PodDisruptionBudget) is retried with backoff until the deadline, 404 is already
   gone, 5xx and connection failures are retried, other refusals are given up and reported;
   a redirect (3xx), from any request of the drain, is never followed nor retried: the step fails at
   once naming it (the kubeconfig's server is not the API server; waiting cannot mend that);
5. wait until the evicted pods are gone, by UID (one pod list of the node every second);
6. an Event `TerminateDrained` (or a Warning naming what stayed) and the step's result: ok when
   every pod left, else failed / deadline naming the pods.
Every evicted pod's UID is written to the journal, so an agent restarted mid-drain continues: the
node stays cordoned by "us", evicted pods are waited for, the rest are evicted; the approval still
comes only after the step (`policy.resume_after_restart` always resumes the drain).
The Terminate leaving the document for good (`policy.gone_for_good`: a scale-in cancelled, not an
event missing from one answer) stops the drain and `undo()` uncordons and removes the taint -- only
what the journal says this agent did, and not while another live event's drain names the node (that
one takes the cordon over; see `_hand_over` and the take-over in `_cordon`).
"""

from __future__ import annotations

import logging
import random
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Set, Tuple

from vmss_terminate.clock import Clock
from vmss_terminate.errors import UsageError
from vmss_terminate.pipeline import decisions as D
from vmss_terminate.pipeline import policy
from vmss_terminate.pipeline.backoff import Backoff
from vmss_terminate.pipeline.events import Event
from vmss_terminate.pipeline.hooks import CANCELLED, DEADLINE, FAILED, GONE, LOST, OK, Run, StepResult
from vmss_terminate.pipeline.journal import StateStore, event_of
from vmss_terminate.pipeline.kubernetes import rules
from vmss_terminate.pipeline.kubernetes.api import MERGE_PATCH, Answer, KubeApi, KubeError, KubeRedirect, path

log = logging.getLogger(__name__)

DRAIN_STEP = "kubernetes:drain"
POLL_GONE_EVERY = 1.0  # clock seconds between pod lists while waiting for evicted pods (kubectl: 1 s)
WARN_EVERY = 60.0  # clock seconds between repeats of the same warning while waiting for pods
CORDON_TRIES = 10  # PATCHes of the node refused with 409 (changed meanwhile) before the cordon fails
EVENT_POST_SECONDS = 2.0  # real seconds a Kubernetes Event's POST may take, also at the deadline
UNDO_FOR = 60.0  # clock seconds an uncordon is retried (the API may be briefly unavailable)
EVICT_RETRY_CAP = 5.0  # a refused eviction is retried after 1, 2, 4, then every 5 s (jittered): kubectl
# drain's callers use 5 s; a longer cap left budget-serialised drains idle (benchmarks/drain.py)

MAX_NODES_AT_ONCE = 8  # nodes of one event drained in parallel (each evicts `concurrency` pods at a time)

Report = Callable[..., None]  # report(kind, event_id, message, **data)
Identity = Callable[[], Tuple[str, str]]  # () -> (VM resource id, computer name); may raise: then unknown


@dataclass(frozen=True)
class DrainTarget:
    """One node to drain for an event: named (`node_name`), or found as the node whose
    `spec.providerID` is the VM's resource id (else named like its computer name), both from
    `identity()`, asked only when the journal does not know the node yet. `key` "" keeps the
    target's journal fields under the EventId itself (a single target: the agent); otherwise under
    `EventId/key`. `required` False: a VM that is no node of the cluster is said and skipped, not a
    failure (a central handler's event may list VMs outside the cluster)."""

    identity: Identity
    node_name: Optional[str] = None
    key: str = ""
    required: bool = True
    vm_name: str = ""
    wait_for_node: bool = False  # not found: look again until the deadline (an agent's own node may
    # register late, the API or instance metadata come back) instead of failing the step at once

    @classmethod
    def of_vm(cls, vm_name: str, resource_id: str, required: bool = False) -> "DrainTarget":
        """A listed VM known by its resource id (a central source's): found by providerID only."""
        return cls(identity=lambda: (resource_id, ""), key=vm_name, required=required, vm_name=vm_name)


Targets = Callable[[Event], Sequence[DrainTarget]]


def listed_vms(event: Event) -> List[DrainTarget]:
    """The targets of a source acting for every listed VM: the VM a per-VM run is for (`VmName` in
    the event, `jobs.Step.per_vm`), else every listed VM; each found by its resource id in the
    nodes' providerID, cluster-wide, and skipped when it is no node of the cluster."""
    vm = event.raw.get("VmName")
    names = [vm] if isinstance(vm, str) and vm else list(event.resources)
    return [DrainTarget.of_vm(name, event.resource_ids.get(name, "")) for name in names]


def journal_key(event_id: str, target: DrainTarget) -> str:
    """Where a target's drain is journalled: the EventId for a keyless target, else EventId/key."""
    return f"{event_id}/{target.key}" if target.key else event_id


class _Stop(Exception):
    """The drain must end now: cancelled (agent stopping), gone (event left) or deadline."""

    def __init__(self, outcome: str) -> None:
        super().__init__(outcome)
        self.outcome = outcome


class NodeDrain:
    """The `kubernetes:drain` step (see the module docstring). Thread-safe; one per agent."""

    name = DRAIN_STEP

    def __init__(self, api: KubeApi, journal: StateStore, report: Report, targets: Targets, clock: Clock,
                 reporter: Callable[[], str], taint: str = rules.DEFAULT_TAINT, concurrency: int = 8,
                 rng: Optional[random.Random] = None, live: Callable[[str], bool] = lambda eid: False) -> None:
        self.api = api
        self.journal = journal
        self.report = report
        self.targets = targets  # (event) -> the nodes to drain for it
        self.clock = clock
        self.reporter = reporter  # who drains: the Kubernetes Events' reportingInstance (the agent's VM name)
        self.taint = rules.parse_taint(taint)
        self.concurrency = max(1, int(concurrency))
        self._rng = rng or random.Random()
        self.live = live  # (event id) -> in the document (or not yet gone for good) or being handled
        self._lock = threading.Lock()  # journal read-modify-writes (never held across a request)
        self._draining: Dict[str, threading.Lock] = {}  # per target (DrainTarget.key): one drain of a node
        # at a time, whichever event asked (guarded by _lock)
        self._waiting: Dict[str, str] = {}  # journal key -> its target's key, while it waits for its turn (_lock)
        self._undoing: Set[str] = set()  # event ids whose undo runs now (guarded by _lock)

    # -- the step ------------------------------------------------------------------------------

    def run(self, run: Run) -> StepResult:
        targets = list(self.targets(run.event))
        if len(targets) == 1:
            return self._run_one(run, targets[0])
        if not targets:
            return StepResult(OK, "no node to drain")
        with ThreadPoolExecutor(max_workers=min(MAX_NODES_AT_ONCE, len(targets)),
                                thread_name_prefix=f"drain:{run.event.event_id[:8]}") as pool:
            results = list(pool.map(lambda target: self._run_one(run, target), targets))
        for outcome in (CANCELLED, LOST, GONE, DEADLINE, FAILED):
            bad = [f"{t.vm_name or t.key}: {r.detail}" for t, r in zip(targets, results) if r.outcome == outcome]
            if bad:
                return StepResult(outcome, "; ".join(bad))
        return StepResult(OK, "; ".join(f"{t.vm_name or t.key}: {r.detail}" for t, r in zip(targets, results)))

    def keys(self, event_id: str) -> List[str]:
        """The journal keys of `event_id`'s node drains (the EventId, and EventId/VM per listed VM)."""
        prefix = event_id + "/"
        return [k for k in self.journal.event_ids() if k == event_id or k.startswith(prefix)]

    def _run_one(self, run: Run, target: DrainTarget) -> StepResult:
        eid = run.event.event_id
        key = journal_key(eid, target)
        try:
            with self._one_at_a_time(run, target, key), self.api.bounded(lambda: self._left(run), run.cancelled):
                return self._drain(run, eid, key, target)  # (no request outlives the step)
        except KubeRedirect as exc:  # a configuration error, never transient: not retried, the step failed
            self.report(D.KUBE_ERROR, eid, f"drain stopped: {exc} (is the kubeconfig's server the API server, "
                                           f"or does a proxy redirect?)")
            return StepResult(FAILED, str(exc))
        except KubeError as exc:  # refused for good (403: RBAC, ...): said, and the step failed
            self.report(D.KUBE_ERROR, eid, f"drain stopped: {exc}")
            return StepResult(FAILED, str(exc))
        except _Stop as stop:
            if stop.outcome == GONE:
                if policy.departing(self.journal.get(eid), run.event, self.clock.now()):  # Started (or approved)
                    return StepResult(GONE, "the event left the document after it started: the node stays cordoned")
                self.undo(key, self.journal.get(key), f"{run.event.event_type} {eid} left the document "
                                                      f"(scale-in cancelled) during the drain")
                self.journal.forget(key, "kube_drain_started", "kube_event_started")  # back: a new drain
                return StepResult(GONE, "the event left the document: drain stopped")
            if stop.outcome == CANCELLED:
                return StepResult(CANCELLED, "agent stopping (the drain continues on restart)")
            if stop.outcome == LOST:  # the replica holding the event now drains on: its cordon is left
                return StepResult(LOST, "the event was lost to another replica (its lease): drain stopped, "
                                        "the node stays cordoned")
            return StepResult(DEADLINE, "deadline (NotBefore minus safety margin) reached")

    def _drain(self, run: Run, eid: str, key: str, target: DrainTarget) -> StepResult:
        record = self.journal.get(key)
        node_name = record.get("kube_node")
        if not isinstance(node_name, str) or not node_name:
            # not found (not registered yet, instance metadata or the API unavailable) may change:
            # a target that waits for its node (the agent's own) is looked for again until the deadline,
            # never given up at once (the VM approved undrained); an optional one is skipped
            backoff = Backoff(base=1.0, cap=10.0, rng=self._rng)
            said_at: Optional[float] = None
            while True:
                say = said_at is None or self.clock.now() - said_at >= WARN_EVERY
                found = self._find_node(run, target, say=say)
                if found is not None:
                    break
                if not target.required:
                    return StepResult(OK, "no node of the cluster: skipped")
                if not target.wait_for_node:
                    return StepResult(FAILED, "no Kubernetes node is this VM (see the kube_node_not_found line)")
                said_at = self.clock.now() if say else said_at
                why = self._sleep(run, backoff.next())
                if why is not None:
                    raise _Stop(why)
            node_name, how = found
            who = f"VM {target.vm_name} is" if target.key else "this VM is"
            self.report(D.KUBE_NODE, eid, f"{who} Kubernetes node {node_name} ({how})", node=node_name)
        began = record.get("kube_drain_started")
        began = float(began) if isinstance(began, (int, float)) else self.clock.now()
        self.journal.update(key, kube_node=node_name, kube_drain_started=began,
                            **({"kube_event_id": eid} if key != eid else {}))
        node = self._get_node(run, node_name)
        if node is None:
            self.report(D.KUBE_NODE_NOT_FOUND, eid, f"Kubernetes node {node_name} does not exist (any more); "
                                                    f"nothing to drain", node=node_name)
            return StepResult(FAILED, f"node {node_name} not found")
        if not record.get("kube_event_started"):
            self._event(node, "TerminateNotice", f"Terminate {eid} scheduled (NotBefore "
                        f"{run.event.not_before_raw or '-'}): vmss-terminate cordons and drains this node "
                        f"before approving the VM's deletion", eid)
            self.journal.update(key, kube_event_started=True)
        self._cordon(run, eid, key, node)
        evicted, not_evicted, refused = self._evict_all(run, eid, key, node_name)
        left = self._wait_gone(run, node_name, evicted)
        seconds = round(self.clock.now() - began, 3)
        stuck = sorted(not_evicted) + sorted(left.values())
        late = run.deadline() is not None and self.clock.now() >= (run.deadline() or 0)
        data = {"node": node_name, "evicted": len(evicted), "not_evicted": sorted(not_evicted),
                "still_terminating": sorted(left.values()), "refused": refused, "seconds": seconds}
        if not stuck:
            self.report(D.KUBE_DRAINED, eid, f"node {node_name} drained in {seconds:.1f} s: {len(evicted)} pod(s) "
                                             f"evicted and gone", **data)
            self._event(node, "TerminateDrained", f"Terminate {eid}: node drained ({len(evicted)} pod(s) evicted); "
                                                  f"the VM's deletion is approved next", eid)
            return StepResult(OK, f"{len(evicted)} pod(s) evicted and gone")
        parts = []
        if not_evicted:
            parts.append(f"{len(not_evicted)} pod(s) not evicted: {rules.names(sorted(not_evicted))}")
        if left:
            parts.append(f"{len(left)} evicted pod(s) still terminating: {rules.names(sorted(left.values()))}")
        detail = "; ".join(parts)
        self.report(D.KUBE_NOT_DRAINED, eid, f"node {node_name} not fully drained after {seconds:.1f} s: {detail}",
                    **data)
        self._event(node, "TerminateDrainIncomplete", f"Terminate {eid}: {detail}", eid, warning=True)
        return StepResult(DEADLINE if late else FAILED, detail)

    # -- node --------------------------------------------------------------------------------------

    def check(self, target: DrainTarget, stop: Optional[threading.Event] = None) -> Tuple[str, str]:
        """Find this VM's node now (the agent's start-up): (its name, how it was found). UsageError when the cluster
        refuses these credentials (401/403: a wrong kubeconfig or missing RBAC, docs/kubernetes.md);
        KubeError when it may work later (unreachable, 5xx, the node not registered yet, instance
        metadata unavailable)."""
        try:
            return self._check(target, stop)
        except KubeRedirect as exc:  # the kubeconfig's server is not the API server (or something intercepts)
            raise UsageError(f"--kubernetes: {exc} (is the kubeconfig's server the API server?)") from None

    def _check(self, target: DrainTarget, stop: Optional[threading.Event]) -> Tuple[str, str]:
        with self.api.bounded(lambda: None, stop):
            if target.node_name:
                answer = self.api.request("GET", path("api", "v1", "nodes", target.node_name))
                self._refused(answer, f"GET node {target.node_name}")
                if answer.status == 404:
                    raise KubeError(f"no node named {target.node_name} (--node-name / NODE_NAME) yet")
                if not answer.ok:
                    raise KubeError(f"GET node {target.node_name}: {answer.message()}")
                return target.node_name, "--node-name"
            try:
                resource_id, computer_name = target.identity()
            except Exception as exc:  # IMDS: its own retries are over
                raise KubeError(f"instance metadata unavailable ({exc}): which node this VM is is unknown") from None
            answer = self.api.request("GET", path("api", "v1", "nodes"))
            self._refused(answer, "list nodes")
            items = answer.body.get("items") if answer.ok and isinstance(answer.body, dict) else None
            if not isinstance(items, list):
                raise KubeError(f"cannot list nodes: {answer.message()}")
            found = rules.match_node([n for n in items if isinstance(n, dict)], resource_id, computer_name)
            if found is None:
                raise KubeError(f"no node is this VM yet: none of {len(items)} has spec.providerID "
                                f"azure://{resource_id} or the name {computer_name.lower()!r} (not registered "
                                f"yet? else pass --node-name)")
            return found

    def _refused(self, answer: Answer, what: str) -> None:
        if answer.status in (401, 403):
            raise UsageError(f"--kubernetes: the API server {self.api.server} refused to {what}: {answer.message()} "
                             f"(401: the kubeconfig's credentials; 403: the RBAC in docs/kubernetes.md)")

    def _find_node(self, run: Run, target: DrainTarget, say: bool = True) -> Optional[Tuple[str, str]]:
        eid = run.event.event_id
        report = self.report if say else (lambda *args, **kwargs: None)
        then = "; looking again until the deadline" if target.wait_for_node else "; nothing to drain"
        if target.node_name:
            node = self._get_node(run, target.node_name)
            if node is None:
                report(D.KUBE_NODE_NOT_FOUND, eid, f"no Kubernetes node named {target.node_name} "
                                                   f"(--node-name / NODE_NAME){then}", node=target.node_name)
                return None
            return target.node_name, "--node-name"
        try:
            resource_id, computer_name = target.identity()
        except Exception as exc:  # IMDS unavailable: the node cannot be known
            report(D.KUBE_NODE_NOT_FOUND, eid, f"cannot tell which Kubernetes node this VM is: instance "
                                               f"metadata unavailable ({exc}){then} (--node-name avoids it)")
            return None
        answer = self._call(run, "GET", path("api", "v1", "nodes"))
        items = answer.body.get("items") if answer.ok and isinstance(answer.body, dict) else None
        if not isinstance(items, list):
            report(D.KUBE_NODE_NOT_FOUND, eid, f"cannot list Kubernetes nodes: {answer.message()}{then}")
            return None
        found = rules.match_node([n for n in items if isinstance(n, dict)], resource_id, computer_name)
        if found is None and target.key:
            report(D.KUBE_NODE_NOT_FOUND, eid, f"VM {target.vm_name} is no node of this cluster: none of "
                                               f"{len(items)} node(s) has spec.providerID azure://{resource_id}"
                                               + ("" if target.required else "; skipped"),
                   vm=target.vm_name)
        elif found is None:
            report(D.KUBE_NODE_NOT_FOUND, eid, f"no Kubernetes node is this VM: none of {len(items)} node(s) "
                                               f"has spec.providerID azure://{resource_id} or the name "
                                               f"{computer_name.lower()!r} (not registered yet?){then} "
                                               f"(--node-name if it is named otherwise)")
        return found

    def _get_node(self, run: Run, name: str) -> Optional[Dict[str, Any]]:
        answer = self._call(run, "GET", path("api", "v1", "nodes", name))
        if answer.status == 404:
            return None
        if not answer.ok or not isinstance(answer.body, dict):
            raise KubeError(f"GET node {name}: {answer.message()}")
        return answer.body

    def _cordon(self, run: Run, eid: str, key: str, node: Dict[str, Any]) -> None:
        name = str(node["metadata"]["name"])
        owner = rules.cordoned_for(node)
        if owner and owner != eid and not self.live(owner):
            # cordoned by the drain of an event that is no longer in the document (a cancelled scale-in
            # whose undo has not run, or an agent before us): this event's drain takes it over
            claim = rules.take_over_patch(node, eid)
            answer = self._call(run, "PATCH", path("api", "v1", "nodes", name), body=claim, content_type=MERGE_PATCH)
            if answer.ok and isinstance(answer.body, dict):
                node = answer.body
            elif answer.status == 409:
                node = self._get_node(run, name) or node
            else:
                raise KubeError(f"cordon {name}: {answer.message()}")
        cordoned, tainted = rules.done_for(node, self.taint, eid)  # by an agent before us (journal lost)
        if cordoned or tainted:
            with self._lock:
                record = self.journal.get(key)
                self.journal.update(key, kube_cordoned=bool(record.get("kube_cordoned") or cordoned) or None,
                                    kube_tainted=bool(record.get("kube_tainted") or tainted) or None)
        for _ in range(CORDON_TRIES):  # 409: someone changed the node meanwhile; read it again and redo
            patch, cordons, taints = rules.cordon_patch(node, self.taint, eid)
            if patch is None:
                break
            with self._lock:  # said before it is done: a restart must know the cordon is ours
                record = self.journal.get(key)
                self.journal.update(key, kube_cordoned=bool(record.get("kube_cordoned") or cordons) or None,
                                    kube_tainted=bool(record.get("kube_tainted") or taints) or None)
            answer = self._call(run, "PATCH", path("api", "v1", "nodes", name), body=patch, content_type=MERGE_PATCH)
            if answer.ok:
                break
            if answer.status != 409:
                raise KubeError(f"cordon {name}: {answer.message()}")
            node = self._get_node(run, name) or node
        else:
            raise KubeError(f"cordon {name}: the node changed under every one of {CORDON_TRIES} patches "
                            f"(409 Conflict each time); not cordoned")
        record = self.journal.get(key)
        ours = bool(record.get("kube_cordoned"))
        owner = rules.cordoned_for(node)
        if ours:
            how = ""
        elif owner and owner != eid:
            how = (f" (it was cordoned already, for event {owner}: if that event is cancelled, this event's "
                   f"drain takes the cordon over)")
        else:
            how = " (it was cordoned already, not by vmss-terminate: it stays cordoned if this event is cancelled)"
        self.report(D.KUBE_CORDONED, eid, f"node {name} cordoned and tainted {self.taint}{how}",
                    node=name, by_us=bool(ours or record.get("kube_tainted")))

    # -- pods --------------------------------------------------------------------------------------

    def _pods(self, run: Run, node_name: str) -> List[Dict[str, Any]]:
        answer = self._call(run, "GET", path("api", "v1", "pods"), params={"fieldSelector": f"spec.nodeName={node_name}"})
        items = answer.body.get("items") if answer.ok and isinstance(answer.body, dict) else None
        if not isinstance(items, list):
            raise KubeError(f"list pods of {node_name}: {answer.message()}")
        return [p for p in items if isinstance(p, dict)]

    def _evict_all(self, run: Run, eid: str, key: str, node_name: str) -> Tuple[Dict[str, str], Dict[str, str], int]:
        """Evict what `rules.plan_pods` says; returns (uid -> pod evicted or terminating, pod -> why
        not evicted, refusals)."""
        before = self.journal.get(key).get("kube_evicted")
        evicted: Dict[str, str] = dict(before) if isinstance(before, dict) else {}
        plan = rules.plan_pods(self._pods(run, node_name), evicted)
        if plan.skipped:
            self.report(D.KUBE_PODS_SKIPPED, eid, f"not evicting {len(plan.skipped)} pod(s) of node {node_name}: "
                        f"{rules.names([f'{k} ({why})' for k, why in sorted(plan.skipped.items())])}",
                        skipped=plan.skipped)
        waiting = dict(plan.wait)
        failed: Dict[str, str] = {}
        refused = [0]
        if plan.evict:
            redirected: List[KubeRedirect] = []  # the first ends every worker's retries: the drain fails
            with ThreadPoolExecutor(max_workers=min(self.concurrency, len(plan.evict)),
                                    thread_name_prefix=f"evict:{eid[:8]}") as pool:
                results = list(pool.map(lambda pod: self._evict_one(run, eid, key, pod, refused, redirected),
                                        plan.evict))
            if redirected:
                raise redirected[0]
            stops = [r[1] for r in results if r[0] == "stop"]
            for pod, (what, detail) in zip(plan.evict, results):
                if what == "evicted":
                    waiting[rules.pod_uid(pod)] = rules.pod_key(pod)
                elif what in ("failed", "stop"):
                    failed[rules.pod_key(pod)] = detail
            for outcome in (CANCELLED, LOST, GONE):
                if outcome in stops:
                    raise _Stop(outcome)
        return waiting, failed, refused[0]

    @contextmanager
    def _one_at_a_time(self, run: Run, target: DrainTarget, key: str) -> Iterator[None]:
        """A node is drained by one event at a time: an own Terminate and a shared one naming this
        VM (or any two events) would otherwise evict every pod twice, concurrently. The second waits
        (until its own deadline, stop or gone) and then finds the pods evicted or terminating. One
        lock per target (`DrainTarget.key`: the agent's one node; a listed VM each), so the nodes of
        one event still drain at once."""
        with self._lock:
            self._waiting[key] = target.key
            draining = self._draining.setdefault(target.key, threading.Lock())
        try:
            while not draining.acquire(timeout=0.2 / max(self.clock.speed, 1.0)):
                why = self._stop_reason(run)
                if why is not None:
                    raise _Stop(why)
        finally:
            with self._lock:
                self._waiting.pop(key, None)
        try:
            yield
        finally:
            draining.release()

    def _left(self, run: Run) -> Optional[float]:
        """Real seconds until the step's deadline (None: no deadline known): what a request may take."""
        deadline = run.deadline()
        return None if deadline is None else (deadline - self.clock.now()) / self.clock.speed

    def _evict_one(self, run: Run, eid: str, key: str, pod: Mapping[str, Any], refused: List[int],
                   redirected: List[KubeRedirect]) -> Tuple[str, str]:
        """("evicted" | "gone" | "failed" | "stop", detail) for one pod (in a worker thread: its
        requests are bounded as the step's are). A redirect is appended to `redirected` and ends
        this pod's retries and, at their next look, every other worker's."""
        with self.api.bounded(lambda: self._left(run), run.cancelled):
            try:
                return self._evict_pod(run, eid, key, pod, refused, redirected)
            except KubeRedirect as exc:
                redirected.append(exc)
                return "stop", str(exc)

    def _evict_pod(self, run: Run, eid: str, key: str, pod: Mapping[str, Any], refused: List[int],
                   redirected: List[KubeRedirect]) -> Tuple[str, str]:
        meta = pod.get("metadata") or {}
        pod_name = rules.pod_key(pod)
        url = path("api", "v1", "namespaces", str(meta.get("namespace")), "pods", str(meta.get("name")), "eviction")
        backoff = Backoff(base=1.0, cap=EVICT_RETRY_CAP, rng=self._rng)
        said_error = ""
        refusals = 0
        while True:
            why = self._stop_reason(run)
            if why is not None:
                return "stop", why
            if redirected:  # another pod's eviction was redirected: the drain fails
                return "stop", FAILED
            try:
                answer: Optional[Answer] = self.api.request("POST", url, body=rules.eviction(pod))
                problem = ""
            except KubeRedirect:
                raise
            except KubeError as exc:
                answer, problem = None, str(exc)
            if answer is not None:
                if answer.ok:
                    with self._lock:
                        record = self.journal.get(key).get("kube_evicted")
                        known = dict(record) if isinstance(record, dict) else {}
                        known[rules.pod_uid(pod)] = pod_name
                        self.journal.update(key, kube_evicted=known)
                    self.report(D.KUBE_EVICTED, eid, f"evicted pod {pod_name}", pod=pod_name)
                    return "evicted", ""
                if answer.status in (404, 409):  # 409: the name is another pod now (UID precondition)
                    return "gone", ""
                problem = answer.message()
                if answer.status == 429:
                    refused[0] += 1
                    refusals += 1
                elif answer.status < 500 and answer.status != 401:  # 401: a rotated token; read it again
                    self.report(D.KUBE_EVICTION_FAILED, eid, f"eviction of pod {pod_name} refused: {problem}; "
                                                              f"not retried", pod=pod_name, status=answer.status)
                    return "failed", problem
            delay = backoff.next()
            if answer is not None and answer.status == 429:
                self.report(D.KUBE_EVICTION_REFUSED, eid, f"eviction of pod {pod_name} refused ({problem}); "
                                                          f"retrying in {delay:.1f} s", pod=pod_name, attempt=refusals)
            elif problem != said_error:  # said when it changes, not on every retry
                said_error = problem
                self.report(D.KUBE_ERROR, eid, f"eviction of pod {pod_name} failed ({problem}); retrying until the "
                                               f"deadline", pod=pod_name)
            why = self._sleep(run, delay, until=lambda: bool(redirected))
            if why is not None:
                return "stop", why if why != DEADLINE else f"deadline reached ({problem})"

    def _wait_gone(self, run: Run, node_name: str, waiting: Dict[str, str]) -> Dict[str, str]:
        """Wait until none of `waiting` (uid -> pod) is on the node any more, or the deadline; what is left."""
        said, said_at = "", 0.0
        while waiting:
            why = self._stop_reason(run)
            if why in (CANCELLED, LOST, GONE):
                raise _Stop(why)
            if why == DEADLINE:
                return waiting
            try:
                waiting = rules.still_there(waiting, self._pods(run, node_name))
            except _Stop as stop:  # the deadline came during a list (its retries): what is left, as between lists
                if stop.outcome != DEADLINE:
                    raise
                return waiting
            except KubeRedirect:
                raise
            except KubeError as exc:  # said when it changes, then at most once a minute
                if str(exc) != said or self.clock.now() - said_at >= WARN_EVERY:
                    said, said_at = str(exc), self.clock.now()
                    log.warning("waiting for evicted pods: %s", exc)
            if waiting:
                self._sleep(run, POLL_GONE_EVERY)
        return waiting

    # -- undo ---------------------------------------------------------------------------------------

    def undoing(self, key: str) -> bool:
        """An undo of journal key `key` (an EventId, or EventId/VM) runs now (no second thread for it)."""
        with self._lock:
            return key in self._undoing

    def undo(self, key: str, record: Mapping[str, Any], why: str) -> bool:
        """Uncordon and untaint the node if (and as far as) the journal `record` (at `key`, see
        `keys()`) says this drain cordoned or tainted it; True when nothing is left to undo. A node
        another live event's drain names is left alone: that event takes the cordon over. No lock is
        held across a request."""
        node_name = record.get("kube_node")
        cordoned, tainted = bool(record.get("kube_cordoned")), bool(record.get("kube_tainted"))
        if not isinstance(node_name, str) or not (cordoned or tainted):
            return True
        with self._lock:
            if key in self._undoing:
                return True  # another thread undoes it now
            self._undoing.add(key)
        try:
            return self._undo(key, node_name, cordoned, tainted, why)
        finally:
            with self._lock:
                self._undoing.discard(key)

    def _undo(self, key: str, node_name: str, cordoned: bool, tainted: bool, why: str) -> bool:
        eid = event_of(key, self.journal.get(key))
        until = self.clock.now() + UNDO_FOR
        last = ""
        while self.clock.now() < until:
            heir = self._hand_over(key, node_name, cordoned, tainted)
            if heir is not None:
                self.report(D.KUBE_UNCORDONED, eid, f"{why}: node {node_name} stays cordoned: the drain of "
                                                    f"event {heir} takes it over", node=node_name, heir=heir)
                return True
            try:
                answer = self.api.request("GET", path("api", "v1", "nodes", node_name))
                if answer.status == 404:
                    return True
                if answer.ok and isinstance(answer.body, dict):
                    patch = rules.uncordon_patch(answer.body, self.taint, cordoned, tainted)
                    result = Answer(200) if patch is None else self.api.request(
                        "PATCH", path("api", "v1", "nodes", node_name), body=patch, content_type=MERGE_PATCH)
                    if result.ok:
                        self.journal.forget(key, "kube_cordoned", "kube_tainted")
                        self.report(D.KUBE_UNCORDONED, eid, f"{why}: node {node_name} uncordoned and its "
                                                            f"taint {self.taint} removed", node=node_name)
                        self._event(answer.body, "TerminateCancelled", f"{why}: vmss-terminate uncordoned "
                                                                       f"the node", eid)
                        return True
                    last = result.message()
                else:
                    last = answer.message()
            except KubeRedirect as exc:  # a configuration error: retrying cannot help
                last = str(exc)
                break
            except KubeError as exc:
                last = str(exc)
            self.clock.sleep(2.0)
        self.report(D.KUBE_ERROR, eid, f"{why}, but node {node_name} could not be uncordoned ({last}): run "
                                       f"kubectl uncordon {node_name} && kubectl taint node {node_name} "
                                       f"{self.taint.key}:{self.taint.effect}-", node=node_name)
        return False

    def _hand_over(self, key: str, node_name: str, cordoned: bool, tainted: bool) -> Optional[str]:
        """Another live event whose drain names the same node: it inherits this event's cordon and
        taint (in the journal) and the node is not uncordoned; its id, or None."""
        with self._lock:
            mine = key[len(event_of(key, self.journal.get(key))) + 1:]  # the target's key ("": the only one)
            for other in self.journal.event_ids():
                record = self.journal.get(other)
                heir = event_of(other, record)
                waiting = self._waiting.get(other) == mine  # its drain waits for this one's turn: the same node
                if other == key or (record.get("kube_node") != node_name and not waiting) or not self.live(heir):
                    continue
                self.journal.update(other, kube_node=node_name,
                                    kube_cordoned=bool(record.get("kube_cordoned") or cordoned) or None,
                                    kube_tainted=bool(record.get("kube_tainted") or tainted) or None)
                self.journal.forget(key, "kube_cordoned", "kube_tainted")
                return heir
        return None

    # -- helpers ------------------------------------------------------------------------------------

    def _event(self, node: Mapping[str, Any], reason: str, note: str, eid: str, warning: bool = False) -> None:
        """Post a Kubernetes Event about the node; a failure is logged, never stops the drain."""
        body = rules.node_event(node, reason, note, self.clock.now(), self.reporter(), warning=warning)
        bound = self.api.bound()  # an Event may be posted at the deadline (TerminateDrainIncomplete): a moment more
        try:
            with self.api.bounded(lambda: EVENT_POST_SECONDS, bound[1] if bound is not None else None):
                answer = self.api.request("POST", path("apis", "events.k8s.io", "v1", "namespaces", "default",
                                                       "events"), body=body)
            problem = "" if answer.ok else answer.message()
        except KubeError as exc:
            problem = str(exc)
        if problem:
            self.report(D.KUBE_ERROR, eid, f"could not post the Kubernetes Event {reason}: {problem}")

    def _call(self, run: Run, method: str, api_path: str, params: Optional[Dict[str, str]] = None,
              body: Any = None, content_type: str = "application/json") -> Answer:
        """A request retried (connection failures, 5xx, 429 throttling, 401 with a rotating token)
        until it is answered or the drain must stop; a redirect (`KubeRedirect`) is raised at once."""
        backoff = Backoff(base=0.5, cap=5.0, rng=self._rng)
        said = ""
        while True:
            why = self._stop_reason(run)
            if why is not None:
                raise _Stop(why)
            try:
                answer = self.api.request(method, api_path, params=params, body=body, content_type=content_type)
                if answer.status < 500 and answer.status not in (401, 429):
                    return answer
                problem = answer.message()
            except KubeRedirect:  # a configuration error: retrying cannot help (the drain fails now)
                raise
            except KubeError as exc:
                problem = str(exc)
            if problem != said:
                said = problem
                self.report(D.KUBE_ERROR, run.event.event_id, f"Kubernetes API: {problem}; retrying")
            why = self._sleep(run, backoff.next())
            if why is not None:
                raise _Stop(why)

    def _stop_reason(self, run: Run) -> Optional[str]:
        if run.cancelled.is_set():
            return CANCELLED
        if not run.held():
            return LOST
        if run.gone():
            return GONE
        deadline = run.deadline()
        if deadline is not None and self.clock.now() >= deadline:
            return DEADLINE
        return None

    def _sleep(self, run: Run, seconds: float, until: Callable[[], bool] = lambda: False) -> Optional[str]:
        """Wait `seconds` of clock time in steps of at most one second; a reason to stop ends it early
        (`until()` true too: FAILED)."""
        end = self.clock.now() + seconds
        while True:
            why = self._stop_reason(run)
            if why is not None:
                return why
            if until():
                return FAILED
            left = end - self.clock.now()
            if left <= 0:
                return None
            self.clock.wait(run.cancelled, min(left, 1.0))

