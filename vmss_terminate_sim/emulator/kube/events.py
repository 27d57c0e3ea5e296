"""Events are one resource served in two shapes, as on a real API server: core `v1` Event
(`kubectl get events`, `kubectl describe`) and `events.k8s.io/v1` Event (what the agent writes).
The emulator stores the core shape and converts, with Kubernetes' own field mapping:

    events.k8s.io/v1            core v1
    regarding                   involvedObject
    note                        message
    reportingController         reportingComponent (and source.component when absent)
    deprecatedSource            source
    deprecatedFirstTimestamp    firstTimestamp
    deprecatedLastTimestamp     lastTimestamp
    deprecatedCount             count
    eventTime, series, action, reason, related, reportingInstance, type: the same
"""

from __future__ import annotations

import copy
from typing import Any, Dict

Obj = Dict[str, Any]

# events.k8s.io/v1 name -> core v1 name
_RENAMED = {
    "regarding": "involvedObject",
    "note": "message",
    "reportingController": "reportingComponent",
    "deprecatedSource": "source",
    "deprecatedFirstTimestamp": "firstTimestamp",
    "deprecatedLastTimestamp": "lastTimestamp",
    "deprecatedCount": "count",
}
_BACK = {core: new for new, core in _RENAMED.items()}


def to_core(event: Obj) -> Obj:
    """An events.k8s.io/v1 Event (without apiVersion/kind) in core v1 shape."""
    core = {_RENAMED.get(key, key): copy.deepcopy(value) for key, value in event.items()
            if key not in ("apiVersion", "kind")}
    if "source" not in core and core.get("reportingComponent"):
        core["source"] = {"component": core["reportingComponent"]}
    return core


def to_new(event: Obj) -> Obj:
    """A stored core v1 Event in events.k8s.io/v1 shape."""
    new = {_BACK.get(key, key): copy.deepcopy(value) for key, value in event.items()
           if key not in ("apiVersion", "kind")}
    if new.get("deprecatedSource") and new.get("reportingController") == new["deprecatedSource"].get("component") \
            and set(new["deprecatedSource"]) == {"component"}:
        del new["deprecatedSource"]  # filled from reportingController on the way in
    return new
