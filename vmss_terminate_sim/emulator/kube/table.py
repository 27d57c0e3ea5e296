"""`kubectl get` asks for a server-side Table (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`);
the columns here are the ones the API server prints for nodes, pods and PodDisruptionBudgets
(NAME/AGE for other kinds), so `kubectl get nodes` reads as it does on a cluster
(`node-1   Ready,SchedulingDisabled   <none>   5m   v1.32.0`).
"""

from __future__ import annotations

import calendar
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from vmss_terminate_sim.emulator.kube.kinds import EVENTS, NODES, PDBS, PODS, Kind

Obj = Dict[str, Any]
Column = Tuple[str, str, int, Callable[[Obj, float], Any]]  # name, type, priority, cell


def wants_table(accept: Optional[str]) -> bool:
    """True when the client lists a Table first-or-only among what it accepts (kubectl get)."""
    if not accept:
        return False
    first = accept.split(",")[0].replace(" ", "")
    return "as=Table" in first and "g=meta.k8s.io" in first


def _parse_time(stamp: str) -> float:
    return float(calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S")))


def human_duration(seconds: float) -> str:
    """k8s.io/apimachinery duration.HumanDuration."""
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 10:
        return f"{minutes}m{seconds % 60}s" if seconds % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    days = hours // 24
    if hours < 24 * 8:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    if days < 365 * 2:
        return f"{days}d"
    return f"{days // 365}y{days % 365}d" if days < 365 * 8 else f"{days // 365}y"


def _age(obj: Obj, now: float) -> str:
    stamp = obj["metadata"].get("creationTimestamp")
    return human_duration(now - _parse_time(stamp)) if stamp else "<unknown>"


def _node_status(node: Obj, now: float) -> str:
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = next((c for c in conditions if c.get("type") == "Ready"), None)
    text = "Ready" if ready and ready.get("status") == "True" else "NotReady" if ready else "Unknown"
    if (node.get("spec") or {}).get("unschedulable"):
        text += ",SchedulingDisabled"
    return text


def _roles(node: Obj, now: float) -> str:
    labels = node["metadata"].get("labels") or {}
    roles = sorted(key.split("/", 1)[1] for key in labels if key.startswith("node-role.kubernetes.io/"))
    return ",".join(role for role in roles if role) or "<none>"


def _pod_ready(pod: Obj, now: float) -> str:
    spec_containers = (pod.get("spec") or {}).get("containers") or []
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return f"{sum(1 for s in statuses if s.get('ready'))}/{len(spec_containers)}"


def _pod_status(pod: Obj, now: float) -> str:
    if pod["metadata"].get("deletionTimestamp"):
        return "Terminating"
    return str((pod.get("status") or {}).get("reason") or (pod.get("status") or {}).get("phase") or "Unknown")


def _restarts(pod: Obj, now: float) -> int:
    return sum(int(s.get("restartCount", 0)) for s in (pod.get("status") or {}).get("containerStatuses") or [])


def _spec(field: str, absent: str = "N/A") -> Callable[[Obj, float], Any]:
    return lambda obj, now: (obj.get("spec") or {}).get(field, absent)


def _event_seen(event: Obj, now: float) -> str:
    stamp = event.get("lastTimestamp") or event.get("deprecatedLastTimestamp") or event.get("eventTime") \
        or event["metadata"].get("creationTimestamp")
    return human_duration(now - _parse_time(stamp)) if stamp else "<unknown>"


def _event_object(event: Obj, now: float) -> str:
    about = event.get("involvedObject") or event.get("regarding") or {}
    return f"{str(about.get('kind', '')).lower()}/{about.get('name', '')}"


def _node_info(field: str) -> Callable[[Obj, float], Any]:
    return lambda node, now: ((node.get("status") or {}).get("nodeInfo") or {}).get(field, "")


def _address(kind_of: str) -> Callable[[Obj, float], Any]:
    def cell(node: Obj, now: float) -> str:
        for address in (node.get("status") or {}).get("addresses") or []:
            if address.get("type") == kind_of:
                return str(address.get("address", ""))
        return "<none>"

    return cell


_NAME: Column = ("Name", "string", 0, lambda obj, now: obj["metadata"]["name"])
_AGE: Column = ("Age", "string", 0, _age)
COLUMNS: Dict[Tuple[str, str], Sequence[Column]] = {
    NODES.key: (_NAME, ("Status", "string", 0, _node_status), ("Roles", "string", 0, _roles), _AGE,
                ("Version", "string", 0, _node_info("kubeletVersion")),
                ("Internal-IP", "string", 1, _address("InternalIP")),
                ("External-IP", "string", 1, _address("ExternalIP")),
                ("OS-Image", "string", 1, _node_info("osImage")),
                ("Kernel-Version", "string", 1, _node_info("kernelVersion")),
                ("Container-Runtime", "string", 1, _node_info("containerRuntimeVersion"))),
    PODS.key: (_NAME, ("Ready", "string", 0, _pod_ready), ("Status", "string", 0, _pod_status),
               ("Restarts", "string", 0, _restarts), _AGE,
               ("IP", "string", 1, lambda obj, now: (obj.get("status") or {}).get("podIP") or "<none>"),
               ("Node", "string", 1, lambda obj, now: (obj.get("spec") or {}).get("nodeName") or "<none>"),
               ("Nominated Node", "string", 1,
                lambda obj, now: (obj.get("status") or {}).get("nominatedNodeName") or "<none>"),
               ("Readiness Gates", "string", 1, lambda obj, now: "<none>")),
    EVENTS.key: (("Last Seen", "string", 0, _event_seen), ("Type", "string", 0, lambda e, now: e.get("type", "")),
                 ("Reason", "string", 0, lambda e, now: e.get("reason", "")), ("Object", "string", 0, _event_object),
                 ("Message", "string", 0, lambda e, now: e.get("message", e.get("note", "")))),
    PDBS.key: (_NAME, ("Min Available", "string", 0, _spec("minAvailable")),
               ("Max Unavailable", "string", 0, _spec("maxUnavailable")),
               ("Allowed Disruptions", "integer", 0,
                lambda obj, now: (obj.get("status") or {}).get("disruptionsAllowed", 0)), _AGE),
}


def render(kind: Kind, objects: List[Obj], now: float, resource_version: str) -> Dict[str, Any]:
    columns = COLUMNS.get(kind.key, (_NAME, _AGE))
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": [
            {"name": name, "type": kind_of, "format": "name" if name == "Name" else "", "description": name,
             "priority": priority}
            for name, kind_of, priority, _ in columns
        ],
        "rows": [
            {"cells": [cell(obj, now) for _, _, _, cell in columns],
             "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                        "metadata": obj["metadata"]}}
            for obj in objects
        ],
    }
