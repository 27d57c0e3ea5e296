"""`central run --listen`: Prometheus metrics, `/healthz` and `/readyz` of the handler.

Labels are bounded: event type, action, outcome -- never an EventId, VM or scale set name. The
pipeline's own families (steps, approvals, the node drain: `vmss_terminate_hooks_run_total`, ...)
are counted by the table the agent uses (`pipeline/metrics.py`), fed with the handler's decisions.
`/healthz` is 200 while the poll loop is alive (a poll ended within three intervals plus a
minute); `/readyz` is 200 once a poll read a complete answer and the last one did (an incomplete
or failed source answer turns it 503 until the next complete one). Listens on loopback unless told.
"""

from __future__ import annotations

import copy
import threading
import time
from collections import Counter
from typing import Any, Callable, List, Optional, Tuple

from vmss_terminate.pipeline import probes
from vmss_terminate.pipeline.metrics import Histogram, PipelineMetrics, histogram

BUCKETS = (1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0)


class CentralMetrics:
    """The handler's `observe(kind, **data)` sink and the text /metrics serves."""

    def __init__(self, poll_interval: float = 5.0) -> None:
        self.poll_interval = poll_interval
        self._lock = threading.Lock()
        self.counters: "Counter[Tuple[str, Tuple[Tuple[str, str], ...]]]" = Counter()
        self.to_acknowledge = Histogram(BUCKETS)  # event -> acknowledge seconds
        self.last_poll: Optional[float] = None
        self.last_complete: Optional[bool] = None
        self.started = time.monotonic()
        self.sections: List[Callable[[], str]] = []  # a source's own metrics (the queue's), appended to text()
        self.pipeline = PipelineMetrics()  # steps, approvals, the node drain: the agent's table, shared

    def observe(self, kind: str, **data: Any) -> None:
        if kind == "decision":  # the pipeline's decisions: its own table (pipeline/metrics.py)
            self.pipeline(data["decision"])
            return
        with self._lock:
            if kind == "poll":
                self.last_poll = time.monotonic()
                self.last_complete = bool(data.get("complete"))
                self.counters[("vmss_terminate_central_polls_total",
                               (("complete", "true" if data.get("complete") else "false"),))] += 1
                self.counters[("vmss_terminate_central_source_requests_total", ())] += int(data.get("requests") or 0)
                self.counters[("vmss_terminate_central_source_throttled_total", ())] += int(data.get("throttled") or 0)
                self.counters[("vmss_terminate_central_source_quota_waits_total", ())] += \
                    int(data.get("quota_waits") or 0)
            elif kind == "action":
                self.counters[("vmss_terminate_central_actions_total",
                               (("action", str(data.get("action"))), ("outcome", str(data.get("outcome")))))] += 1
            elif kind == "acknowledged":
                self.counters[("vmss_terminate_central_events_acknowledged_total",
                               (("type", str(data.get("event_type"))),))] += 1
                self.to_acknowledge.observe(float(data.get("seconds") or 0.0))
            else:  # seen, out_of_scope, acknowledge_refused
                self.counters[(f"vmss_terminate_central_events_{kind}_total",
                               (("type", str(data.get("event_type"))),))] += 1

    def healthy(self) -> bool:
        with self._lock:
            since = self.last_poll if self.last_poll is not None else self.started
            return time.monotonic() - since <= 3 * self.poll_interval + 60

    def ready(self) -> bool:
        with self._lock:
            return bool(self.last_complete)

    def text(self) -> str:
        with self._lock:
            counters = sorted(self.counters.items())
            to_acknowledge = copy.deepcopy(self.to_acknowledge)
        lines: List[str] = []
        names = sorted({name for (name, _), _ in counters})
        for name in names:
            lines.append(f"# TYPE {name} counter")
            for (metric, labels), value in counters:
                if metric == name:
                    label = ",".join(f'{k}="{v}"' for k, v in labels)
                    lines.append(f"{name}{{{label}}} {value}" if label else f"{name} {value}")
        histogram(lines, "central_event_to_acknowledge_seconds", "Seconds from an event's first sighting to its "
                  "acknowledgement.", to_acknowledge)
        self.pipeline.render(lines, kubernetes=True, per_node=False)  # no node (a VM's) name as a label
        return "\n".join(lines) + "\n" + "".join(section() for section in self.sections)


def parse_listen(text: str, allow_remote: bool = False) -> Tuple[str, int]:
    """`--listen` as the agent reads it (`pipeline.probes.parse_listen`); a non-loopback host needs `--listen-any`."""
    return probes.parse_listen(text, loopback_only=None if allow_remote else "--listen-any")


class _CentralProbes:
    """`CentralMetrics` as the pipeline listener's `Probes`: the same paths and answers as before."""

    def __init__(self, metrics: CentralMetrics) -> None:
        self.metrics = metrics

    def render(self) -> str:
        return self.metrics.text()

    def health(self) -> Tuple[bool, str]:
        return (True, "ok") if self.metrics.healthy() else (False, "poll loop stalled")

    def readiness(self) -> Tuple[bool, str]:
        return (True, "ok") if self.metrics.ready() else (False, "no complete answer from the source yet")


def serve(metrics: CentralMetrics, host: str, port: int) -> probes.ProbeServer:
    """Serve /metrics, /healthz, /readyz with the pipeline's probe listener (its connection limits,
    one daemon thread); `.close()` stops it."""
    return probes.ProbeServer(_CentralProbes(metrics), host, port).start()
