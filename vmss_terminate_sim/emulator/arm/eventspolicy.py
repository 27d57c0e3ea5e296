"""A scale set's `properties.scheduledEventsPolicy` as Compute stores, gates and returns it.

Members by compute api-version (azure-rest-api-specs, Microsoft.Compute ComputeRP, the
`ScheduledEventsPolicy` definitions of 2024-03-01 and 2025-04-01; docs/control-plane.md):

* 2024-03-01: `userInitiatedRedeploy`, `userInitiatedReboot` (`automaticallyApprove`),
  `scheduledEventsAdditionalPublishingTargets.eventGridAndResourceGraph.enable`;
* 2025-04-01: `allInstancesDown` (`automaticallyApprove`) and
  `eventGridAndResourceGraph.scheduledEventsApiVersion`.

A body carrying a member its api-version does not know is refused with the 400 shape the
emulator gives `scheduledEventsProfile` below 2019-03-01 ("Could not find member 'X' on object of
type 'T'. Path '...'."); a GET at such a version leaves the member out. Emulator's choice where
the reference is silent: a full PUT at an older api-version keeps what that version cannot express
(it could not have sent it), as `az vmss update` (GET, then PUT at 2024-11-01) would otherwise
reset an `allInstancesDown` set at 2025-04-01.
"""

from __future__ import annotations

import copy
from typing import Any, Dict, Optional, Tuple

from vmss_terminate_sim.emulator.arm.inventory import ArmStateError

POLICY = "scheduledEventsPolicy"
TARGETS = "scheduledEventsAdditionalPublishingTargets"
EVENT_GRID = "eventGridAndResourceGraph"
POLICY_MIN_API = "2024-03-01"
NEWER_MIN_API = "2025-04-01"
FEATURE = "Microsoft.Compute/SendScheduledEventsPolicy"
"""The subscription feature Event Grid and Resource Graph publishing needs (preview)."""

# member -> (api-version that has it, type name in Compute's messages, nested members or None for
# an {"automaticallyApprove": bool} object)
_APPROVAL = {"automaticallyApprove": (POLICY_MIN_API, bool)}
_MEMBERS: Dict[str, Tuple[str, str]] = {
    "userInitiatedRedeploy": (POLICY_MIN_API, "UserInitiatedRedeploy"),
    "userInitiatedReboot": (POLICY_MIN_API, "UserInitiatedReboot"),
    TARGETS: (POLICY_MIN_API, "ScheduledEventsAdditionalPublishingTargets"),
    "allInstancesDown": (NEWER_MIN_API, "AllInstancesDown"),
}
_GRID_MEMBERS: Dict[str, Tuple[str, type]] = {"enable": (POLICY_MIN_API, bool),
                                                "scheduledEventsApiVersion": (NEWER_MIN_API, str)}


def _member_not_found(member: str, owner: str, path: str) -> ArmStateError:
    return ArmStateError(400, "BadRequest", f"Could not find member '{member}' on object of type '{owner}'. "
                                            f"Path '{path}'.")


def _object(value: Any, path: str) -> Optional[Dict[str, Any]]:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ArmStateError(400, "InvalidRequestContent",
                            f"The request content was invalid and could not be deserialized: '{path}' must be an "
                            f"object.")
    return value


def _typed(value: Any, kind: type, path: str) -> None:
    if value is None or isinstance(value, kind):
        return
    what = "a boolean" if kind is bool else "a string"
    raise ArmStateError(400, "InvalidParameter", f"The value '{value}' of {path.rsplit('.', 1)[-1]} is not {what}.",
                        path)


def check(properties: Dict[str, Any], api_version: str) -> None:
    """400 for a policy (or a member of it) the api-version does not have, an unknown member or a
    value of the wrong type."""
    if POLICY not in properties:
        return
    base = f"properties.{POLICY}"
    if api_version[:10] < POLICY_MIN_API:
        raise _member_not_found(POLICY, "VirtualMachineScaleSetProperties", base)
    policy = _object(properties[POLICY], base)
    if policy is None:
        return
    for member, value in policy.items():
        path = f"{base}.{member}"
        if member not in _MEMBERS or api_version[:10] < _MEMBERS[member][0]:
            raise _member_not_found(member, "ScheduledEventsPolicy", path)
        inner = _object(value, path)
        if inner is None:
            continue
        if member == TARGETS:
            for key, grid in inner.items():
                if key != EVENT_GRID:
                    raise _member_not_found(key, _MEMBERS[TARGETS][1], f"{path}.{key}")
                _check_grid(_object(grid, f"{path}.{key}"), f"{path}.{key}", api_version)
            continue
        for key, flag in inner.items():
            if key not in _APPROVAL:
                raise _member_not_found(key, _MEMBERS[member][1], f"{path}.{key}")
            _typed(flag, bool, f"{path}.{key}")


def _check_grid(grid: Optional[Dict[str, Any]], path: str, api_version: str) -> None:
    for key, value in (grid or {}).items():
        if key not in _GRID_MEMBERS or api_version[:10] < _GRID_MEMBERS[key][0]:
            raise _member_not_found(key, "EventGridAndResourceGraph", f"{path}.{key}")
        _typed(value, _GRID_MEMBERS[key][1], f"{path}.{key}")


def shaped(policy: Any, api_version: str) -> Optional[Dict[str, Any]]:
    """The stored policy as a GET at `api_version` returns it (None: the version has no policy)."""
    if not isinstance(policy, dict) or api_version[:10] < POLICY_MIN_API:
        return None
    if api_version[:10] >= NEWER_MIN_API:
        return copy.deepcopy(policy)
    out = {key: copy.deepcopy(value) for key, value in policy.items() if key != "allInstancesDown"}
    grid = out.get(TARGETS, {}).get(EVENT_GRID) if isinstance(out.get(TARGETS), dict) else None
    if isinstance(grid, dict):
        grid.pop("scheduledEventsApiVersion", None)
    return out


def kept_on_put(sent: Any, stored: Any, api_version: str) -> Any:
    """The policy a full PUT leaves: what it sent, plus what its api-version could not express."""
    if not isinstance(stored, dict) or api_version[:10] >= NEWER_MIN_API:
        return sent
    if api_version[:10] < POLICY_MIN_API:
        return copy.deepcopy(stored)
    out = copy.deepcopy(sent) if isinstance(sent, dict) else {}
    if isinstance(stored.get("allInstancesDown"), dict):
        out["allInstancesDown"] = copy.deepcopy(stored["allInstancesDown"])
    version = ((stored.get(TARGETS) or {}).get(EVENT_GRID) or {}).get("scheduledEventsApiVersion") \
        if isinstance(stored.get(TARGETS), dict) else None
    if version is not None:
        targets = out.setdefault(TARGETS, {})
        if isinstance(targets, dict):
            grid = targets.setdefault(EVENT_GRID, {})
            if isinstance(grid, dict):
                grid["scheduledEventsApiVersion"] = version
    return out or None
