"""PodDisruptionBudget arithmetic, as the disruption controller and the eviction subresource do it.

For one PDB over the pods its selector matches (in its namespace):

* `currentHealthy`: matched pods that are Ready and not terminating.
* `minAvailable: N` -> expectedPods = matched pods, desiredHealthy = N.
* `minAvailable: P%` -> expectedPods = the scale of the pods' controllers, desiredHealthy = ceil(P% of it).
* `maxUnavailable: N|P%` -> expectedPods = the controllers' scale, desiredHealthy = expected - N
  (a percentage rounded up, as `GetScaledValueFromIntOrPercent(..., true)`).
* `disruptionsAllowed = max(0, currentHealthy - desiredHealthy)`, and 0 when expectedPods is 0 or a
  percentage/maxUnavailable budget covers a pod without a controller (the controller cannot
  compute the scale; the real one reports an error and allows nothing).

A controller's scale is its `spec.replicas` when the emulator holds the object (ReplicaSet,
StatefulSet, Deployment, ReplicationController); for an owner the emulator does not hold, the
number of matched pods it owns (an emulator leniency, so seeds need not spell out every ReplicaSet).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from vmss_terminate_sim.emulator.kube.selectors import label_selector_matcher

OwnerKey = Tuple[str, str]  # (kind, name) of a controller in the PDB's namespace
ScaleOf = Callable[[str, str, str], Optional[int]]  # (namespace, kind, name) -> replicas or None

_PERCENT = re.compile(r"^\s*(\d+)\s*%\s*$")


@dataclass(frozen=True)
class Budget:
    expected: int
    desired: int
    current: int
    allowed: int
    matched: Tuple[str, ...]  # names of the matched pods

    def status(self, observed_generation: int, terminating: Dict[str, str]) -> Dict[str, Any]:
        """The PDB's `status`, as `kubectl get pdb -o yaml` shows it."""
        return {
            "observedGeneration": observed_generation,
            "disruptionsAllowed": self.allowed,
            "currentHealthy": self.current,
            "desiredHealthy": self.desired,
            "expectedPods": self.expected,
            **({"disruptedPods": terminating} if terminating else {}),
            "conditions": [{
                "type": "DisruptionAllowed",
                "status": "True" if self.allowed > 0 else "False",
                "reason": "SufficientPods" if self.allowed > 0 else "InsufficientPods",
                "message": "",
                "observedGeneration": observed_generation,
            }],
        }


def is_ready(pod: Dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def is_healthy(pod: Dict[str, Any]) -> bool:
    return is_ready(pod) and not pod["metadata"].get("deletionTimestamp")


def controller_of(pod: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The ownerReference with `controller: true`, if any."""
    for ref in pod["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return dict(ref)
    return None


def selects(pdb: Dict[str, Any], pod: Dict[str, Any]) -> bool:
    if pdb["metadata"].get("namespace") != pod["metadata"].get("namespace"):
        return False
    selector = (pdb.get("spec") or {}).get("selector")
    return label_selector_matcher(selector)(pod["metadata"].get("labels") or {})


def scaled(value: Any, total: int) -> Optional[int]:
    """An IntOrString: N, or P% of `total` rounded up; None when unreadable."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    match = _PERCENT.match(str(value))
    if match:
        return math.ceil(int(match.group(1)) * total / 100)
    if str(value).strip().isdigit():
        return int(str(value).strip())
    return None


def budget(pdb: Dict[str, Any], pods: Sequence[Dict[str, Any]], scale_of: ScaleOf) -> Budget:
    spec = pdb.get("spec") or {}
    matched = [pod for pod in pods if selects(pdb, pod)]
    current = sum(1 for pod in matched if is_healthy(pod))
    names = tuple(pod["metadata"]["name"] for pod in matched)
    max_unavailable, min_available = spec.get("maxUnavailable"), spec.get("minAvailable")
    needs_scale = max_unavailable is not None or (
        min_available is not None and not isinstance(min_available, int))
    if needs_scale:
        expected = _controllers_scale(matched, scale_of)
        if expected is None:
            return Budget(0, 0, current, 0, names)
    else:
        expected = len(matched)
    if max_unavailable is not None:
        unavailable = scaled(max_unavailable, expected)
        desired = max(0, expected - (unavailable or 0))
    elif min_available is not None:
        desired = scaled(min_available, expected) or 0
    else:
        desired = 0
    allowed = current - desired
    if expected <= 0 or allowed <= 0:
        allowed = 0
    return Budget(expected, desired, current, allowed, names)


def _controllers_scale(pods: List[Dict[str, Any]], scale_of: ScaleOf) -> Optional[int]:
    """Sum of the scale of the controllers of `pods`; None if one has no controller."""
    owners: Dict[OwnerKey, int] = {}
    for pod in pods:
        ref = controller_of(pod)
        if ref is None:
            return None
        key = (str(ref.get("kind")), str(ref.get("name")))
        owners[key] = owners.get(key, 0) + 1
    total = 0
    for (kind, name), owned in owners.items():
        namespace = pods[0]["metadata"].get("namespace", "")
        replicas = scale_of(namespace, kind, name)
        total += owned if replicas is None else replicas
    return total
