"""Every decision the agent takes, as data: subscribers (the sandbox timeline, tests) and the log
see the same record, so "why was this event (not) approved?" always has an answer."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Type, TypedDict, TypeVar, cast

log = logging.getLogger("vmss_terminate.agent")

# kinds (strings, so subscribers need not import anything)
VM_NAME = "vm_name"                      # learnt our VM name
EVENT_SEEN = "event_seen"                # a new EventId in the document
EVENT_CHANGED = "event_changed"          # status or NotBefore of a known event changed
EVENT_STARTED = "event_started"          # an event turned Started
EVENT_GONE = "event_gone"                # an event left the document
NOT_OURS = "not_ours"                    # our VM name is not in Resources: never touched
EVENT_LOST = "event_lost"                # a source shared by replicas lost the event (its lease): stopped here
EVENT_UNREADABLE = "event_unreadable"    # an entry of the document no parse survives: skipped, the others go on
OBSERVED = "observed"                    # ours, but no hook subscribed and not an approved type
HOOK_STARTED = "hook_started"
HOOK_FINISHED = "hook_finished"
HOOK_FAILED = "hook_failed"              # non-zero exit, exception, deadline, or could not start
HOOK_RERUN = "hook_rerun"                # started, not finished when the agent died: rerun
HOOK_SKIPPED = "hook_skipped"            # already finished before a restart, or too late to start
HOOKS_CHANGED = "hooks_changed"          # after a restart, the hook list differs from the interrupted one
APPROVAL_SENT = "approval_sent"          # the POST got 200
APPROVAL_FAILED = "approval_failed"      # the POST failed; retried on the next poll
APPROVAL_WITHHELD = "approval_withheld"  # hook failed with --on-hook-failure=wait, or type not approved
SHARED_NOT_APPROVED = "shared_not_approved"
IMDS_ERROR = "imds_error"
IMDS_RECOVERED = "imds_recovered"
STOPPING = "stopping"
DRAIN_STARTED = "drain_started"          # an own event of a drain type: /readyz answers 503 from now
DRAIN_ENDED = "drain_ended"              # that event left the document without taking the VM: 200 again
API_VERSION = "api_version"              # `--api-version latest`: the version IMDS serves that was chosen
# --kubernetes: the node drain (pipeline/kubernetes/drain.py)
KUBE_NODE = "kube_node"                  # which Kubernetes node this VM is, and how that was found
KUBE_NODE_NOT_FOUND = "kube_node_not_found"  # no node is this VM: nothing to drain
KUBE_CORDONED = "kube_cordoned"          # the node is cordoned and tainted
KUBE_PODS_SKIPPED = "kube_pods_skipped"  # DaemonSet and mirror pods, left alone
KUBE_EVICTED = "kube_evicted"            # one pod's eviction was accepted
KUBE_EVICTION_REFUSED = "kube_eviction_refused"  # 429 (a PodDisruptionBudget): retried with backoff
KUBE_EVICTION_FAILED = "kube_eviction_failed"    # refused for good (403, 4xx): not retried
KUBE_DRAINED = "kube_drained"            # every evicted pod is gone
KUBE_NOT_DRAINED = "kube_not_drained"    # deadline or failures: pods named that stayed
KUBE_UNCORDONED = "kube_uncordoned"      # the Terminate was cancelled: what this agent did is undone
KUBE_ERROR = "kube_error"                # a Kubernetes API failure (retried, or the drain stopped)

# -- what each kind carries in `Decision.data` (subscribers read it through `Decision.view`) --------


class EventData(TypedDict, total=False):
    """The event a decision is about (`report(..., event=...)` fills these) and whether it is ours."""

    event_type: str
    status: str
    not_before: str
    resources: List[str]
    event_source: Optional[str]
    duration_in_seconds: Optional[int]
    not_before_in: float
    ours: bool
    others: List[str]


class HookData(EventData, total=False):
    """HOOK_*: which step, how it ended, how long it took."""

    hook: Optional[str]
    outcome: str
    exit_code: Optional[int]
    duration: float
    previous: Any
    current: List[str]


class ApprovalData(EventData, total=False):
    """APPROVAL_SENT: the hooks' result and how long the drain (/readyz 503) lasted."""

    hooks_result: Optional[str]
    drain_seconds: float


class DrainData(EventData, total=False):
    """DRAIN_STARTED: since when (journalled: a restart keeps it) and the delay before approval."""

    since: float
    drain_delay: float


class KubeData(TypedDict, total=False):
    """KUBE_*: the node, a pod, and a drain's outcome (KUBE_DRAINED / KUBE_NOT_DRAINED)."""

    node: str
    vm: str
    by_us: bool
    heir: str
    pod: str
    status: int
    attempt: int
    skipped: Dict[str, str]
    evicted: int
    not_evicted: List[str]
    still_terminating: List[str]
    refused: int
    seconds: float


class VersionData(TypedDict, total=False):
    """API_VERSION: the version chosen and those IMDS offered."""

    api_version: str
    offered: List[str]


DATA: Dict[str, Type[Any]] = {
    **{kind: EventData for kind in (EVENT_SEEN, EVENT_CHANGED, EVENT_STARTED, EVENT_GONE, EVENT_LOST, NOT_OURS, OBSERVED,
                                    APPROVAL_WITHHELD, SHARED_NOT_APPROVED, APPROVAL_FAILED, DRAIN_ENDED)},
    **{kind: HookData for kind in (HOOK_STARTED, HOOK_FINISHED, HOOK_FAILED, HOOK_RERUN, HOOK_SKIPPED,
                                   HOOKS_CHANGED)},
    APPROVAL_SENT: ApprovalData, DRAIN_STARTED: DrainData, API_VERSION: VersionData,
    **{kind: KubeData for kind in (KUBE_NODE, KUBE_NODE_NOT_FOUND, KUBE_CORDONED, KUBE_PODS_SKIPPED, KUBE_EVICTED,
                                   KUBE_EVICTION_REFUSED, KUBE_EVICTION_FAILED, KUBE_DRAINED, KUBE_NOT_DRAINED,
                                   KUBE_UNCORDONED, KUBE_ERROR)},
}
"""The payload type of each kind (kinds not listed carry no data: VM_NAME, EVENT_UNREADABLE, IMDS_*, STOPPING)."""

T = TypeVar("T")

_WARNING_KINDS = {EVENT_LOST, EVENT_UNREADABLE, HOOK_FAILED, HOOKS_CHANGED, APPROVAL_FAILED, SHARED_NOT_APPROVED, IMDS_ERROR,
                  KUBE_NODE_NOT_FOUND, KUBE_EVICTION_FAILED, KUBE_NOT_DRAINED, KUBE_ERROR}


@dataclass(frozen=True)
class Decision:
    kind: str
    event_id: Optional[str]
    vm_name: Optional[str]
    message: str
    at: float
    data: Dict[str, Any] = field(default_factory=dict)

    def view(self, shape: Type[T]) -> T:
        """`data` as the TypedDict its kind carries (`DATA[kind]`), so a subscriber's keys are checked."""
        return cast(T, self.data)

    def to_json(self) -> Dict[str, Any]:
        return {"kind": self.kind, "event_id": self.event_id, "vm_name": self.vm_name,
                "message": self.message, "at": self.at, **({"data": self.data} if self.data else {})}


Subscriber = Callable[[Decision], None]


class DecisionBus:
    """Fan a Decision out to the log and to every subscriber; a failing subscriber is logged, not fatal."""

    def __init__(self) -> None:
        self._subscribers: List[Subscriber] = []
        self._lock = threading.Lock()

    def subscribe(self, fn: Subscriber) -> Callable[[], None]:
        """Register `fn(decision)`; returns a function that unsubscribes it."""
        with self._lock:
            self._subscribers.append(fn)

        def unsubscribe() -> None:
            with self._lock:
                if fn in self._subscribers:
                    self._subscribers.remove(fn)

        return unsubscribe

    def publish(self, decision: Decision) -> None:
        level = logging.WARNING if decision.kind in _WARNING_KINDS else logging.INFO
        log.log(level, "%s", decision.message, extra={"decision": decision})
        with self._lock:
            subscribers = list(self._subscribers)
        for fn in subscribers:
            try:
                fn(decision)
            except Exception:
                log.exception("decision subscriber failed")
