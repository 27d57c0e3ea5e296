"""The action pipeline's metrics: one decision -> metric table, whichever source runs the pipeline.

`PipelineMetrics` is a DecisionBus subscriber: it counts what the pipeline reports -- steps started
and failed (and how long they ran), approvals sent and failed, the node drain's evictions and
cordons -- and renders them as Prometheus text (0.0.4). The in-VM agent (`agent/metrics.py`) and the
central handler (`central/metrics.py`) both subscribe one, so a step or an approval is counted by
the same rule under the same name whichever source fed the pipeline; what only a source knows (the
agent's IMDS requests, own events and drain probe; the central handler's polls and acknowledgement
latency) stays with the source. Labels are bounded: outcome and event type, never an EventId or a
VM name (the per-node cordon gauge is rendered only for the agent, whose one node it is).
"""

from __future__ import annotations

import threading
from typing import Callable, Dict, List, Sequence, Tuple

from vmss_terminate.pipeline import decisions as D
from vmss_terminate.pipeline.decisions import Decision

PREFIX = "vmss_terminate_"
HOOK_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0)
Labels = Tuple[Tuple[str, str], ...]


class Histogram:
    """Cumulative counts per upper bound (`bounds`), count and sum of observed seconds: constant
    memory however many are observed."""

    def __init__(self, bounds: Sequence[float] = HOOK_BUCKETS) -> None:
        self.bounds = tuple(bounds)
        self.buckets = [0] * len(self.bounds)
        self.count = 0
        self.total = 0.0

    def __repr__(self) -> str:
        return f"Histogram(buckets={self.buckets}, count={self.count}, total={self.total})"

    def observe(self, seconds: float) -> None:
        for i, bound in enumerate(self.bounds):
            if seconds <= bound:
                self.buckets[i] += 1
        self.count += 1
        self.total += seconds


class PipelineMetrics:
    """The pipeline's counters and histograms; call it with each Decision (`bus.subscribe(metrics)`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters: Dict[str, Dict[Labels, float]] = {}
        self._hooks = Histogram()  # step durations
        self._drains = Histogram()  # --kubernetes: node drain durations
        self._cordoned: Dict[str, float] = {}  # node -> 1 while cordoned by this process

    def __call__(self, decision: Decision) -> None:
        handler = TABLE.get(decision.kind)
        if handler is not None:
            with self._lock:
                handler(self, decision)

    # -- one handler per decision kind (`TABLE`), each reading its kind's typed payload -------------

    def _hook_started(self, decision: Decision) -> None:
        self._count("hooks_run_total", ())

    def _hook_ended(self, decision: Decision) -> None:
        data = decision.view(D.HookData)
        if decision.kind == D.HOOK_FAILED:
            self._count("hooks_failed_total", (("outcome", str(data.get("outcome", "failed"))),))
        duration = data.get("duration")
        if isinstance(duration, (int, float)):
            self._hooks.observe(float(duration))

    def _approval_sent(self, decision: Decision) -> None:
        self._count("approvals_sent_total", (("event_type", str(decision.view(D.ApprovalData).get("event_type", ""))),))

    def _approval_failed(self, decision: Decision) -> None:
        self._count("approvals_failed_total", ())

    def _kube_evicted(self, decision: Decision) -> None:
        self._count("kubernetes_pods_evicted_total", ())

    def _kube_refused(self, decision: Decision) -> None:
        self._count("kubernetes_evictions_refused_total", ())

    def _kube_cordoned(self, decision: Decision) -> None:
        data = decision.view(D.KubeData)
        if data.get("by_us"):
            self._cordoned[str(data.get("node", ""))] = 1.0

    def _kube_uncordoned(self, decision: Decision) -> None:
        self._cordoned[str(decision.view(D.KubeData).get("node", ""))] = 0.0

    def _kube_drain_ended(self, decision: Decision) -> None:
        data = decision.view(D.KubeData)
        seconds = data.get("seconds")
        if isinstance(seconds, (int, float)):
            self._drains.observe(float(seconds))
            stayed = len(data.get("not_evicted") or ()) + len(data.get("still_terminating") or ())
            self._count("kubernetes_pods_not_drained_total", (), stayed)

    def _count(self, name: str, labels: Labels, by: float = 1.0) -> None:
        series = self._counters.setdefault(name, {})
        series[labels] = series.get(labels, 0.0) + by

    # -- exposition ----------------------------------------------------------------------------------

    def render(self, out: List[str], kubernetes: bool, per_node: bool = True) -> None:
        """Append the pipeline's families to `out`: the counters, the step-duration histogram and,
        with `kubernetes`, the drain histogram (and the per-node cordon gauge with `per_node`)."""
        with self._lock:
            for name, help_text in COUNTERS.items():
                family(out, name, "counter", help_text, sorted(self._counters.get(name, {}).items()))
            histogram(out, "hook_duration_seconds", "Clock seconds each hook ran (finished or failed).", self._hooks)
            if kubernetes:
                histogram(out, "kubernetes_drain_seconds", "Clock seconds from the node drain's start to its "
                          "end (drained, or the deadline).", self._drains)
                if per_node:
                    family(out, "kubernetes_node_cordoned", "gauge", "1 while this agent has the node cordoned "
                           "(0 after it uncordoned it).", sorted(((("node", n),), v) for n, v in self._cordoned.items()))


COUNTERS = {
    "hooks_run_total": "Hooks started.",
    "hooks_failed_total": "Hooks that failed, by outcome (failed, deadline, cancelled, lost).",
    "approvals_sent_total": "Approvals the source's approval accepted (IMDS StartRequests, Maintenance RP "
                            "acknowledgements), by event type.",
    "approvals_failed_total": "Approvals that failed (retried on the next poll).",
    "kubernetes_pods_evicted_total": "--kubernetes: pod evictions the API server accepted.",
    "kubernetes_evictions_refused_total": "--kubernetes: evictions refused with 429 (a PodDisruptionBudget), retried.",
    "kubernetes_pods_not_drained_total": "--kubernetes: pods a drain left on its node (not evicted, or evicted and "
                                         "still terminating, at the deadline).",
}

TABLE: Dict[str, Callable[[PipelineMetrics, Decision], None]] = {
    D.HOOK_STARTED: PipelineMetrics._hook_started,
    D.HOOK_FINISHED: PipelineMetrics._hook_ended,
    D.HOOK_FAILED: PipelineMetrics._hook_ended,
    D.APPROVAL_SENT: PipelineMetrics._approval_sent,
    D.APPROVAL_FAILED: PipelineMetrics._approval_failed,
    D.KUBE_EVICTED: PipelineMetrics._kube_evicted,
    D.KUBE_EVICTION_REFUSED: PipelineMetrics._kube_refused,
    D.KUBE_CORDONED: PipelineMetrics._kube_cordoned,
    D.KUBE_UNCORDONED: PipelineMetrics._kube_uncordoned,
    D.KUBE_DRAINED: PipelineMetrics._kube_drain_ended,
    D.KUBE_NOT_DRAINED: PipelineMetrics._kube_drain_ended,
}
"""What each pipeline decision kind changes in the metrics (a kind not here changes nothing)."""


def family(out: List[str], name: str, kind: str, help_text: str, samples: Sequence[Tuple[Labels, float]]) -> None:
    out.append(f"# HELP {PREFIX}{name} {help_text}")
    out.append(f"# TYPE {PREFIX}{name} {kind}")
    for labels, value in samples:
        out.append(f"{PREFIX}{name}{_labels(labels)} {number(value)}")


def histogram(out: List[str], name: str, help_text: str, data: Histogram) -> None:
    out.append(f"# HELP {PREFIX}{name} {help_text}")
    out.append(f"# TYPE {PREFIX}{name} histogram")
    for bound, in_bucket in zip(data.bounds, data.buckets):
        out.append(f'{PREFIX}{name}_bucket{{le="{number(bound)}"}} {in_bucket}')
    out.append(f'{PREFIX}{name}_bucket{{le="+Inf"}} {data.count}')
    out.append(f"{PREFIX}{name}_sum {number(data.total)}")
    out.append(f"{PREFIX}{name}_count {data.count}")


def _labels(labels: Labels) -> str:
    if not labels:
        return ""
    escaped = (f'{k}="{_escape(v)}"' for k, v in labels)
    return "{" + ",".join(escaped) + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def number(value: float) -> str:
    return repr(float(value)) if value != int(value) else f"{int(value)}"
