"""The API server's rules the emulator keeps on writes: defaults filled in, the few field checks
clients trip over (422 Invalid like the API server; not the whole validation), and DELETE/eviction
preconditions (409 Conflict)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from vmss_terminate_sim.emulator.kube.kinds import DAEMON_SETS, NAMESPACES, NEW_EVENTS, NODES, PDBS, PODS, Kind
from vmss_terminate_sim.emulator.kube.selectors import label_selector_matcher
from vmss_terminate_sim.emulator.kube.status import conflict, invalid

Obj = Dict[str, Any]
DEFAULT_GRACE = 30  # terminationGracePeriodSeconds when a pod says none


def check_preconditions(kind: Kind, current: Obj, preconditions: Optional[Dict[str, Any]]) -> None:
    if not preconditions:
        return
    name = current["metadata"]["name"]
    uid, version = preconditions.get("uid"), preconditions.get("resourceVersion")
    if uid and uid != current["metadata"]["uid"]:
        raise conflict(kind.plural, name, f"Precondition failed: UID in precondition: {uid}, UID in object meta: "
                       f"{current['metadata']['uid']}", kind.group)
    if version and version != current["metadata"]["resourceVersion"]:
        raise conflict(kind.plural, name, f"Precondition failed: ResourceVersion in precondition: {version}, "
                       f"ResourceVersion in object meta: {current['metadata']['resourceVersion']}", kind.group)


def defaults(kind: Kind, obj: Obj) -> None:
    if kind is PODS:
        spec = obj.setdefault("spec", {})
        spec.setdefault("terminationGracePeriodSeconds", DEFAULT_GRACE)
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("schedulerName", "default-scheduler")
        obj.setdefault("status", {"phase": "Pending"})
    elif kind is NAMESPACES:
        obj["spec"] = {"finalizers": ["kubernetes"]}
        obj["status"] = {"phase": "Active"}
        obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = obj["metadata"]["name"]
    elif kind is NODES:
        obj.setdefault("spec", {})
        obj.setdefault("status", {})


def validate(kind: Kind, obj: Obj) -> None:
    """The few field rules clients trip over (422 like the API server), not the whole validation."""
    name = obj["metadata"].get("name", "")
    causes: List[Dict[str, str]] = []
    spec = obj.get("spec") or {}
    if kind is PDBS and "minAvailable" in spec and "maxUnavailable" in spec:
        causes.append({"field": "spec", "message": "Invalid value: minAvailable and maxUnavailable cannot be both set"})
    if kind is NEW_EVENTS:
        for field in ("eventTime", "reportingController", "reportingInstance", "action", "reason"):
            if not obj.get(field):
                causes.append({"field": field, "reason": "FieldValueRequired", "message": "Required value"})
        if obj.get("type") not in ("Normal", "Warning"):
            causes.append({"field": "type", "reason": "FieldValueNotSupported",
                           "message": f'Unsupported value: "{obj.get("type", "")}": supported values: "Normal", '
                                      f'"Warning"'})
        if len(str(obj.get("note", ""))) > 1024:
            causes.append({"field": "note", "reason": "FieldValueTooLong", "message": "Too long: may not be more "
                           "than 1024 bytes"})
    if kind is NODES:
        for taint in spec.get("taints") or []:
            if taint.get("effect") not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
                causes.append({"field": "spec.taints[0].effect", "reason": "FieldValueNotSupported",
                               "message": f'Unsupported value: "{taint.get("effect")}": supported values: '
                                          f'"NoSchedule", "PreferNoSchedule", "NoExecute"'})
            if not taint.get("key"):
                causes.append({"field": "spec.taints[0].key", "reason": "FieldValueRequired",
                               "message": "Required value"})
    if kind is DAEMON_SETS:
        selector = spec.get("selector")
        labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
        if selector is None:
            causes.append({"field": "spec.selector", "reason": "FieldValueRequired", "message": "Required value"})
        elif not label_selector_matcher(selector)(labels):
            causes.append({"field": "spec.template.metadata.labels", "message":
                           "Invalid value: `selector` does not match template `labels`"})
    if causes:
        raise invalid(kind.kind, name, causes, kind.group)
