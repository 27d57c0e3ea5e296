"""The objects tests, seeds and the sandbox add -- nodes, pods, budgets, controllers -- built the way
a cluster holds them (a Ready node with capacity and node info, a Running pod with its conditions),
and the scheduling rule the emulator's controllers place replacement pods by."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Dict, Optional, Sequence

Obj = Dict[str, Any]
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
PAUSE = "registry.k8s.io/pause:3.10"
NODE_CAPACITY = {"cpu": "2", "memory": "8145492Ki", "pods": "110", "ephemeral-storage": "30308240Ki"}
OWNER_API_VERSIONS = {"ReplicaSet": "apps/v1", "DaemonSet": "apps/v1", "StatefulSet": "apps/v1",
                      "Deployment": "apps/v1", "ReplicationController": "v1", "Job": "batch/v1", "Node": "v1"}


def rfc3339(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def node(name: str, now: float, provider_id: Optional[str] = None, labels: Optional[Dict[str, str]] = None,
         unschedulable: bool = False, taints: Sequence[Obj] = (), ready: bool = True) -> Obj:
    spec: Obj = {}
    if provider_id:
        spec["providerID"] = provider_id
    if unschedulable:
        spec["unschedulable"] = True
    if taints:
        spec["taints"] = [dict(t) for t in taints]
    node_labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}
    node_labels.update(labels or {})
    stamp = rfc3339(now)
    status = {"conditions": [{"type": "Ready", "status": "True" if ready else "False",
                              "reason": "KubeletReady" if ready else "KubeletNotReady",
                              "message": "kubelet is posting ready status", "lastHeartbeatTime": stamp,
                              "lastTransitionTime": stamp}],
              "nodeInfo": {"kubeletVersion": "v1.32.0", "kubeProxyVersion": "v1.32.0", "osImage": "Ubuntu 22.04",
                           "operatingSystem": "linux", "architecture": "amd64",
                           "containerRuntimeVersion": "containerd://1.7.0", "kernelVersion": "6.5.0",
                           "machineID": "", "systemUUID": "", "bootID": ""},
              "addresses": [{"type": "Hostname", "address": name}],
              "capacity": dict(NODE_CAPACITY), "allocatable": dict(NODE_CAPACITY)}
    return {"metadata": {"name": name, "labels": node_labels}, "spec": spec, "status": status}


@dataclass(frozen=True)
class PodShape:
    """What a test pod looks like besides its name, node and owner: its labels, grace period,
    readiness and phase, whether it is a static pod's mirror (the kubelet's annotation), whether
    it has an emptyDir volume, and its tolerations (`KubeState.add_pod`'s keywords)."""

    labels: Optional[Dict[str, str]] = None
    grace: Optional[int] = None
    ready: bool = True
    phase: str = "Running"
    mirror: bool = False
    empty_dir: bool = False
    tolerations: Sequence[Obj] = ()


def pod(name: str, node_name: Optional[str], now: float, owner: Optional[Obj] = None,
        shape: PodShape = PodShape()) -> Obj:
    """`owner` is an ownerReference (`owner_reference`); a `mirror` pod carries the kubelet's annotation."""
    labels, grace, ready, phase = shape.labels, shape.grace, shape.ready, shape.phase
    mirror, empty_dir, tolerations = shape.mirror, shape.empty_dir, shape.tolerations
    metadata: Obj = {"name": name, "labels": dict(labels or {})}
    if owner is not None:
        metadata["ownerReferences"] = [owner]
    if mirror:
        metadata["annotations"] = {MIRROR_ANNOTATION: name}
    spec: Obj = {"containers": [{"name": "main", "image": PAUSE}]}
    if node_name:
        spec["nodeName"] = node_name
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    if empty_dir:
        spec["volumes"] = [{"name": "scratch", "emptyDir": {}}]
    if tolerations:
        spec["tolerations"] = [dict(t) for t in tolerations]
    status = running_status(now, ready) if phase == "Running" else {"phase": phase}
    return {"metadata": metadata, "spec": spec, "status": status}


def owner_reference(kind_name: str, name: str, uid: str) -> Obj:
    return {"apiVersion": OWNER_API_VERSIONS.get(kind_name, "v1"), "kind": kind_name, "name": name, "uid": uid,
            "controller": True, "blockOwnerDeletion": True}


def pdb(name: str, selector: Optional[Dict[str, str]], min_available: Any = None, max_unavailable: Any = None) -> Obj:
    spec: Obj = {"selector": {"matchLabels": dict(selector or {})}}
    if min_available is not None:
        spec["minAvailable"] = min_available
    if max_unavailable is not None:
        spec["maxUnavailable"] = max_unavailable
    return {"metadata": {"name": name}, "spec": spec}


def workload(name: str, labels: Dict[str, str], replicas: Optional[int] = None) -> Obj:
    """A DaemonSet (no `replicas`) or ReplicaSet body selecting `labels`."""
    spec: Obj = {} if replicas is None else {"replicas": replicas}
    spec["selector"] = {"matchLabels": dict(labels)}
    spec["template"] = {"metadata": {"labels": dict(labels)},
                        "spec": {"containers": [{"name": "main", "image": PAUSE}]}}
    return {"metadata": {"name": name}, "spec": spec}


def running_status(now: float, ready: bool = True) -> Obj:
    stamp = rfc3339(now)
    flag = "True" if ready else "False"
    return {"phase": "Running", "startTime": stamp, "conditions": [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": stamp},
        {"type": "Initialized", "status": "True", "lastTransitionTime": stamp},
        {"type": "ContainersReady", "status": flag, "lastTransitionTime": stamp},
        {"type": "Ready", "status": flag, "lastTransitionTime": stamp}],
        "containerStatuses": [{"name": "main", "ready": ready, "restartCount": 0, "started": True,
                               "image": "registry.k8s.io/pause:3.10", "imageID": "",
                               "state": {"running": {"startedAt": stamp}}}]}


def mark_ready(status: Obj, now: float) -> None:
    """A started pod's readiness turns True at `now` (ContainersReady, Ready and the containers)."""
    stamp = rfc3339(now)
    for condition in status.get("conditions") or []:
        if condition.get("type") in ("ContainersReady", "Ready") and condition.get("status") != "True":
            condition.update(status="True", lastTransitionTime=stamp)
    for container in status.get("containerStatuses") or []:
        container["ready"] = True


def tolerated(taint: Obj, tolerations: Sequence[Obj]) -> bool:
    for toleration in tolerations:
        if toleration.get("effect") not in (None, "", taint.get("effect")):
            continue
        if toleration.get("operator") == "Exists":
            if not toleration.get("key") or toleration.get("key") == taint.get("key"):
                return True
        elif toleration.get("key") == taint.get("key") and toleration.get("value", "") == taint.get("value", ""):
            return True
    return False


def schedulable(node_obj: Obj, pod_obj: Obj) -> bool:
    """The scheduler's first two filters: not cordoned, and every NoSchedule/NoExecute taint tolerated."""
    spec = node_obj.get("spec") or {}
    if spec.get("unschedulable"):
        return False
    tolerations = (pod_obj.get("spec") or {}).get("tolerations") or []
    taints = [t for t in spec.get("taints") or [] if t.get("effect") in ("NoSchedule", "NoExecute")]
    return all(tolerated(taint, tolerations) for taint in taints)
