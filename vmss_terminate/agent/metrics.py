"""What the agent is doing, as Prometheus metrics and two probes (`/healthz`, `/readyz`).

`AgentMetrics` is a DecisionBus subscriber plus an IMDS request observer: it only counts what the
agent reports and renders it, so it cannot change what the agent decides. The pipeline's decisions
(steps, approvals, the node drain) are counted by the table the central handler shares
(`pipeline/metrics.py`); what is here is the agent's own: IMDS requests, own and foreign events,
the drain probe and the own events' NotBefore. `probes.py` serves it
over HTTP (`agent run --listen`). Time comes from the agent's clock. No secret is ever a label:
labels are event types, EventIds, VM names, versions and outcomes.

Health (`/healthz`): 200 while the poll loop runs and IMDS answered within `stale_after` seconds
(default: the larger of 60 s and 3 poll intervals), 503 with the reason otherwise.
Readiness (`/readyz`, the drain probe): 200, or 503 from the moment an own event of a drain type
(`--hook-events`, always Terminate) is seen until the drain ends (see `policy.drain_ends_when_gone`).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

from vmss_terminate import __version__
from vmss_terminate.clock import Clock
from vmss_terminate.pipeline import decisions as D
from vmss_terminate.pipeline.decisions import Decision
from vmss_terminate.pipeline.events import parse_not_before
from vmss_terminate.pipeline.metrics import Labels, PipelineMetrics, family

if TYPE_CHECKING:
    from vmss_terminate.agent.agent import Agent



class AgentMetrics:
    """Counters and gauges of one agent; `render()` is the Prometheus text exposition (0.0.4)."""

    def __init__(self, agent: "Agent", stale_after: Optional[float] = None) -> None:
        self.agent = agent
        self.clock: Clock = agent.clock
        self.stale_after = stale_after if stale_after is not None else max(60.0, 3 * agent.config.poll_interval)
        self._lock = threading.Lock()
        self._counters: Dict[str, Dict[Labels, float]] = {}
        self.pipeline = PipelineMetrics()  # steps, approvals, the node drain: the table central shares
        self._own_pending: Dict[str, Dict[str, Any]] = {}  # EventId -> type, not_before, duration
        self._draining: Dict[str, Tuple[str, float]] = {}  # EventId -> (type, since)
        self.last_poll: Optional[float] = None    # last successful Scheduled Events GET
        self.last_answer: Optional[float] = None  # last successful IMDS request of any kind
        self.last_error = ""

    def attach(self) -> "AgentMetrics":
        """Subscribe to the agent's decisions and IMDS requests."""
        self.agent.subscribe(self)
        self.agent.client.observers.append(self.imds_request)
        return self

    # -- inputs --------------------------------------------------------------------------------------

    def imds_request(self, method: str, endpoint: str, outcome: str) -> None:
        now = self.clock.now()
        with self._lock:
            self._count("imds_requests_total", (("method", method), ("endpoint", endpoint), ("outcome", outcome)))
            if outcome == "ok":
                self.last_answer = now
                if endpoint == "scheduledevents" and method == "GET":
                    self.last_poll = now

    def __call__(self, decision: Decision) -> None:
        self.pipeline(decision)
        handler = _HANDLERS.get(decision.kind)
        if handler is not None:
            with self._lock:
                handler(self, decision)

    # -- one handler per decision kind (`_HANDLERS`), each reading its kind's typed payload ----------

    def _seen(self, decision: Decision) -> None:
        data = decision.view(D.EventData)
        self._count("events_seen_total", (("event_type", str(data.get("event_type", ""))),
                                          ("owner", "own" if data.get("ours") else "foreign"),
                                          ("event_source", str(data.get("event_source") or ""))))
        if data.get("ours"):
            self._track_own(decision.event_id or "", data)

    def _changed(self, decision: Decision) -> None:
        self._track_own(decision.event_id or "", decision.view(D.EventData))

    def _gone(self, decision: Decision) -> None:
        self._own_pending.pop(decision.event_id or "", None)

    def _drain_started(self, decision: Decision) -> None:
        data = decision.view(D.DrainData)
        since = data.get("since")
        self._draining[decision.event_id or ""] = (str(data.get("event_type", "")),
                                                   float(since) if isinstance(since, (int, float)) else decision.at)

    def _drain_ended(self, decision: Decision) -> None:
        self._draining.pop(decision.event_id or "", None)

    def _imds_error(self, decision: Decision) -> None:
        self.last_error = decision.message

    def _count(self, name: str, labels: Labels, by: float = 1.0) -> None:
        series = self._counters.setdefault(name, {})
        series[labels] = series.get(labels, 0.0) + by

    def _track_own(self, eid: str, data: D.EventData) -> None:
        if data.get("status") != "Scheduled":
            self._own_pending.pop(eid, None)
            return
        self._own_pending[eid] = {"event_type": str(data.get("event_type", "")),
                                  "not_before": parse_not_before(data.get("not_before")),
                                  "duration": data.get("duration_in_seconds")}

    # -- probes --------------------------------------------------------------------------------------

    def health(self) -> Tuple[bool, str]:
        """(healthy, reason): the poll loop runs and IMDS answered recently."""
        if not self.agent.running.is_set():
            return False, "the poll loop is not running"
        problem = getattr(self.agent, "cluster_problem", None)
        if problem:
            return False, f"--kubernetes: {problem}"
        now = self.clock.now()
        with self._lock:
            last, error = self.last_answer, self.last_error
        since = last if last is not None else self.agent.started_at
        if since is not None and now - since > self.stale_after:
            what = "since the agent started" if last is None else f"for {now - last:.0f} s"
            return False, f"no answer from IMDS {what} (limit {self.stale_after:g} s)" + (
                f"; last error: {error}" if error else "")
        return True, "ok" if last is not None else "starting: waiting for the first IMDS answer"

    def readiness(self) -> Tuple[bool, str]:
        """(ready, reason): not ready from the moment an own drain event is seen."""
        with self._lock:
            draining = sorted(self._draining.items(), key=lambda item: item[1][1])
        if not draining:
            return True, "ok"
        now = self.clock.now()
        parts = [f"{kind} {eid} (for {now - since:.0f} s)" for eid, (kind, since) in draining]
        return False, "draining: " + ", ".join(parts)

    # -- exposition ----------------------------------------------------------------------------------

    def render(self) -> str:
        """The Prometheus text format, version 0.0.4."""
        now = self.clock.now()
        healthy, _ = self.health()
        ready, _ = self.readiness()
        out: List[str] = []
        with self._lock:
            info = (("version", __version__), ("vm_name", self.agent.vm_name or ""),
                    ("api_version", self.agent.client.api_version))
            family(out, "agent_info", "gauge", "The agent's version, VM name and Scheduled Events api-version.",
                   [(info, 1.0)])
            for name, kind_help in _COUNTERS.items():
                family(out, name, "counter", kind_help, sorted(self._counters.get(name, {}).items()))
        self.pipeline.render(out, kubernetes=self.agent.drain is not None)
        with self._lock:
            family(out, "last_successful_poll_timestamp_seconds", "gauge",
                   "Unix time of the last successful Scheduled Events GET (0: none yet).",
                   [((), self.last_poll or 0.0)])
            pending = sorted(self._own_pending.items())
            family(out, "not_before_seconds", "gauge",
                   "Seconds left until NotBefore of each own Scheduled event (negative: past).",
                   [((("event_id", eid), ("event_type", e["event_type"])), e["not_before"] - now)
                    for eid, e in pending if e["not_before"] is not None])
            family(out, "event_duration_seconds", "gauge",
                   "DurationInSeconds of each own Scheduled event, as IMDS gives it (api-version 2020-07-01 and later).",
                   [((("event_id", eid), ("event_type", e["event_type"])), float(e["duration"]))
                    for eid, e in pending if isinstance(e["duration"], (int, float))])
            family(out, "draining", "gauge", "1 from the moment an own drain event is seen (/readyz 503).",
                   [((), 0.0 if ready else 1.0)])
        family(out, "healthy", "gauge", "1 while the poll loop runs and IMDS answered recently (/healthz).",
               [((), 1.0 if healthy else 0.0)])
        return "\n".join(out) + "\n"


_COUNTERS = {
    "events_seen_total": "Scheduled events seen, by type, own or foreign, and EventSource (2019-08-01 and later).",
    "imds_requests_total": "IMDS requests by method, endpoint and outcome.",
}


_HANDLERS: Dict[str, Callable[[AgentMetrics, Decision], None]] = {
    D.EVENT_SEEN: AgentMetrics._seen,
    D.EVENT_CHANGED: AgentMetrics._changed,
    D.EVENT_STARTED: AgentMetrics._changed,
    D.EVENT_GONE: AgentMetrics._gone,
    D.DRAIN_STARTED: AgentMetrics._drain_started,
    D.DRAIN_ENDED: AgentMetrics._drain_ended,
    D.IMDS_ERROR: AgentMetrics._imds_error,
}
"""What each decision kind of the agent's own changes in the metrics; the pipeline's kinds (steps,
approvals, the node drain) are `pipeline.metrics.TABLE`'s."""
