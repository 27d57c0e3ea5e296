"""The exact JSON the control plane PATCHes onto a scale set.

`render --format rest` prints these bytes and the control plane sends these same bytes (the SDK
accepts a raw `IO[bytes]` body), so what a user reviews is byte-for-byte what goes on the wire.
Only `scheduledEventsProfile` and (when asked) the top-level `scheduledEventsPolicy` are carried: a
PATCH never touches the rest of the model, and it carries each of the two only when it changes it.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Optional

from vmss_terminate.timeout import to_iso


def profile(enable: bool, timeout_minutes: Optional[int]) -> Dict[str, Any]:
    """`terminateNotificationProfile` content; the timeout is omitted when None."""
    terminate: Dict[str, Any] = {"enable": bool(enable)}
    if timeout_minutes is not None:
        terminate["notBeforeTimeout"] = to_iso(timeout_minutes)
    return terminate


def patch_body(enable: Optional[bool], timeout_minutes: Optional[int],
               events_policy: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """The VirtualMachineScaleSetUpdate body as a plain dict: `scheduledEventsProfile` unless
    `enable` is None, `scheduledEventsPolicy` when `events_policy` (its value) is given."""
    properties: Dict[str, Any] = {}
    if enable is not None:
        properties["virtualMachineProfile"] = {
            "scheduledEventsProfile": {"terminateNotificationProfile": profile(enable, timeout_minutes)}
        }
    if events_policy:
        properties["scheduledEventsPolicy"] = events_policy
    return {"properties": properties}


def to_bytes(body: Dict[str, Any]) -> bytes:
    """Canonical serialisation: what is printed is what is sent."""
    return json.dumps(body, indent=2, sort_keys=False).encode("utf-8") + b"\n"


def patch_bytes(enable: Optional[bool], timeout_minutes: Optional[int],
                events_policy: Optional[Dict[str, Any]] = None) -> bytes:
    return to_bytes(patch_body(enable, timeout_minutes, events_policy))
