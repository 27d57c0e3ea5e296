"""What the node drain decides, without I/O: which node is this VM, which pods are evicted, the
taint, the patches and the Kubernetes Events. Pure functions of API objects (dicts), tested
directly (tests/agent/kubernetes/test_rules.py); `drain.py` makes the calls.

- Which node: `--node-name` / NODE_NAME, else the node whose `spec.providerID` is
  `azure://` + this VM's IMDS `compute.resourceId` (compared case-insensitively: Azure resource IDs
  are), else the node named like IMDS `osProfile.computerName` in lower case (Kubernetes node names
  are lower-case DNS names; kubeadm and k3s name nodes after the hostname) -- only when that node has
  no providerID: a node whose providerID names another VM is that VM, never this one.
- Which pods: every pod bound to the node except those a DaemonSet owns (the DaemonSet controller
  ignores cordons and would recreate them) and mirror pods (static pods, annotation
  `kubernetes.io/config.mirror`, which the API cannot delete) -- `kubectl drain
  --ignore-daemonsets --delete-emptydir-data`. Pods with emptyDir volumes are evicted: their data
  goes with the VM anyway. Pods already terminating (deletionTimestamp set) are waited for, not evicted.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Any, Dict, Iterable, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from vmss_terminate.errors import UsageError

DEFAULT_TAINT = "vmss-terminate/terminating:NoSchedule"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
CORDONED_BY = "vmss-terminate.io/cordoned-for"  # annotation: the EventId whose drain cordoned the node
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
REPORTING_CONTROLLER = "vmss-terminate.io/agent"
_QUALIFIED = r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"


class Taint(NamedTuple):
    key: str
    value: str
    effect: str

    def to_json(self) -> Dict[str, str]:
        return {"key": self.key, "effect": self.effect, **({"value": self.value} if self.value else {})}

    def __str__(self) -> str:
        return f"{self.key}{'=' + self.value if self.value else ''}:{self.effect}"


def parse_taint(text: str) -> Taint:
    """`KEY[=VALUE]:EFFECT`, as `kubectl taint` writes it; UsageError (exit 2) otherwise."""
    spec, colon, effect = str(text).strip().rpartition(":")
    key, _, value = spec.partition("=")
    if (not colon or effect not in TAINT_EFFECTS or not re.fullmatch(_QUALIFIED, key) or len(key) > 316
            or (value and not re.fullmatch(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?", value))):
        raise UsageError(f"invalid --taint {text!r}: expected KEY[=VALUE]:EFFECT with EFFECT one of "
                         f"{', '.join(TAINT_EFFECTS)}, e.g. {DEFAULT_TAINT}")
    return Taint(key, value, effect)


# -- which node ----------------------------------------------------------------------------------

def provider_id_names(provider_id: str, resource_id: str) -> bool:
    """`spec.providerID` (`azure:///subscriptions/.../virtualMachines/3`) is the VM `resourceId` names."""
    if not provider_id or not resource_id:
        return False
    prefix = "azure://"
    if not provider_id.lower().startswith(prefix):
        return False
    return provider_id[len(prefix):].rstrip("/").lower() == "/" + resource_id.strip("/").lower()


def match_node(nodes: Iterable[Mapping[str, Any]], resource_id: str, computer_name: str) -> Optional[Tuple[str, str]]:
    """(node name, how it was found) for this VM among `nodes`, or None."""
    listed = list(nodes)
    for node in listed:
        if provider_id_names(str((node.get("spec") or {}).get("providerID") or ""), resource_id):
            return str(node["metadata"]["name"]), f"spec.providerID names {resource_id}"
    wanted = computer_name.strip().lower()
    for node in listed:
        provider_id = str((node.get("spec") or {}).get("providerID") or "")
        if wanted and str(node.get("metadata", {}).get("name", "")) == wanted and not provider_id:
            # a node whose providerID names another VM is that VM, whatever its name
            return wanted, f"named like the computer name {computer_name}"
    return None


# -- which pods ----------------------------------------------------------------------------------

def pod_key(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def pod_uid(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("uid") or "")


def skip_reason(pod: Mapping[str, Any]) -> Optional[str]:
    """Why the drain leaves `pod` alone ("daemonset", "mirror"), or None: it is evicted."""
    meta = pod.get("metadata") or {}
    if MIRROR_ANNOTATION in (meta.get("annotations") or {}):
        return "mirror"
    for owner in meta.get("ownerReferences") or ():
        if isinstance(owner, dict) and owner.get("kind") == "DaemonSet" and owner.get("controller", True):
            return "daemonset"
    return None


def terminating(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


class PodPlan(NamedTuple):
    evict: List[Mapping[str, Any]]      # to evict now
    wait: Dict[str, str]                # uid -> ns/name: terminating already, waited for
    skipped: Dict[str, str]             # ns/name -> why left alone


def plan_pods(pods: Iterable[Mapping[str, Any]], evicted: Mapping[str, str]) -> PodPlan:
    """Sort the node's pods: evict, wait for (already terminating, or evicted before a restart:
    `evicted` uid -> ns/name), or leave alone (DaemonSet, mirror)."""
    evict: List[Mapping[str, Any]] = []
    wait: Dict[str, str] = {}
    skipped: Dict[str, str] = {}
    for pod in pods:
        why = skip_reason(pod)
        if why is not None:
            skipped[pod_key(pod)] = why
        elif terminating(pod) or pod_uid(pod) in evicted:
            wait[pod_uid(pod)] = pod_key(pod)
        else:
            evict.append(pod)
    return PodPlan(evict, wait, skipped)


def still_there(uids: Mapping[str, str], pods: Iterable[Mapping[str, Any]]) -> Dict[str, str]:
    """The pods of `uids` (uid -> ns/name) still in `pods`. By UID: a pod recreated under the same
    name (a StatefulSet's) is another pod."""
    present = {pod_uid(p) for p in pods}
    return {uid: key for uid, key in uids.items() if uid in present}


# -- patches and events --------------------------------------------------------------------------

def _has_taint(node: Mapping[str, Any], taint: Taint) -> bool:
    return any(isinstance(t, dict) and t.get("key") == taint.key and t.get("effect") == taint.effect
               for t in (node.get("spec") or {}).get("taints") or ())


def done_for(node: Mapping[str, Any], taint: Taint, event_id: str) -> Tuple[bool, bool]:
    """(cordoned, tainted) by a vmss-terminate agent for this very event, as the node itself says:
    unschedulable with the `CORDONED_BY` annotation naming `event_id`, and the taint. What an agent
    whose journal was lost (a DaemonSet pod replaced mid-drain) knows it did."""
    meta = node.get("metadata") or {}
    cordoned = bool((node.get("spec") or {}).get("unschedulable")) and \
        (meta.get("annotations") or {}).get(CORDONED_BY) == event_id
    return cordoned, _has_taint(node, taint)


def cordoned_for(node: Mapping[str, Any]) -> str:
    """The EventId whose drain cordoned the node (the `CORDONED_BY` annotation), or ""."""
    if not (node.get("spec") or {}).get("unschedulable"):
        return ""
    return str(((node.get("metadata") or {}).get("annotations") or {}).get(CORDONED_BY) or "")


def take_over_patch(node: Mapping[str, Any], event_id: str) -> Dict[str, Any]:
    """The merge patch that makes a cordon left by another event's drain this event's (the annotation)."""
    patch = _versioned(node, {})
    patch.pop("spec")
    patch["metadata"]["annotations"] = {CORDONED_BY: event_id}
    return patch


def cordon_patch(node: Mapping[str, Any], taint: Taint, event_id: str) -> Tuple[Optional[Dict[str, Any]], bool, bool]:
    """(merge patch or None, cordons, taints): set `spec.unschedulable` (and the `CORDONED_BY`
    annotation naming the event) and add the taint, whichever is missing. The patch carries the
    node's resourceVersion, so a concurrent change of the taints is a 409 to retry instead of lost."""
    spec = node.get("spec") or {}
    cordon = not spec.get("unschedulable")
    add = not _has_taint(node, taint)
    if not cordon and not add:
        return None, False, False
    patch_spec: Dict[str, Any] = {}
    if cordon:
        patch_spec["unschedulable"] = True
    if add:
        patch_spec["taints"] = [t for t in spec.get("taints") or () if isinstance(t, dict)] + [taint.to_json()]
    patch = _versioned(node, patch_spec)
    if cordon:
        patch["metadata"]["annotations"] = {CORDONED_BY: event_id}
    return patch, cordon, add


def uncordon_patch(node: Mapping[str, Any], taint: Taint, uncordon: bool, untaint: bool) -> Optional[Dict[str, Any]]:
    """The merge patch that undoes what this agent did (only that), or None if nothing is left to undo."""
    spec = node.get("spec") or {}
    patch_spec: Dict[str, Any] = {}
    if uncordon and spec.get("unschedulable"):
        patch_spec["unschedulable"] = None  # merge patch: remove the field (false is its default)
    taints = [t for t in spec.get("taints") or () if isinstance(t, dict)]
    kept = [t for t in taints if not (t.get("key") == taint.key and t.get("effect") == taint.effect)]
    if untaint and len(kept) != len(taints):
        patch_spec["taints"] = kept or None
    if not patch_spec:
        return None
    patch = _versioned(node, patch_spec)
    if CORDONED_BY in ((node.get("metadata") or {}).get("annotations") or {}):
        patch["metadata"]["annotations"] = {CORDONED_BY: None}
    return patch


def _versioned(node: Mapping[str, Any], spec: Dict[str, Any]) -> Dict[str, Any]:
    version = (node.get("metadata") or {}).get("resourceVersion")
    return {"metadata": {"resourceVersion": version} if version else {}, "spec": spec}


def eviction(pod: Mapping[str, Any]) -> Dict[str, Any]:
    """The policy/v1 Eviction for `pod` (the pod's own grace period applies), for this very pod: a
    pod recreated under the same name (on another node) has another UID and answers 409 Conflict."""
    meta = pod.get("metadata") or {}
    body: Dict[str, Any] = {"apiVersion": "policy/v1", "kind": "Eviction",
                            "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace")}}
    if meta.get("uid"):
        body["deleteOptions"] = {"preconditions": {"uid": meta["uid"]}}
    return body


def micro_time(epoch: float) -> str:
    """A Kubernetes MicroTime: RFC 3339 with microseconds, UTC."""
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def node_event(node: Mapping[str, Any], reason: str, note: str, now: float, vm_name: str,
               warning: bool = False, action: str = "Drain") -> Dict[str, Any]:
    """An events.k8s.io/v1 Event about `node` (in namespace default, where node events live)."""
    meta = node.get("metadata") or {}
    name = str(meta.get("name", ""))
    return {
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"generateName": f"{name}.vmss-terminate.", "namespace": "default"},
        "eventTime": micro_time(now),
        "reportingController": REPORTING_CONTROLLER,
        "reportingInstance": f"vmss-terminate-{vm_name}"[:128],
        "action": action, "reason": reason, "type": "Warning" if warning else "Normal",
        "note": note[:1024],
        "regarding": {"apiVersion": "v1", "kind": "Node", "name": name,
                      **({"uid": meta["uid"]} if meta.get("uid") else {})},
    }


def names(keys: Sequence[str], limit: int = 10) -> str:
    """`a, b, c and 4 more` for logs."""
    shown = ", ".join(keys[:limit])
    return shown + (f" and {len(keys) - limit} more" if len(keys) > limit else "")
