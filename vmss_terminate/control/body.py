"""The exact JSON the control plane PATCHes onto a scale set.

`render --format rest` prints these bytes and the control plane sends these same bytes (the SDK
accepts a raw `IO[bytes]` body), so what a user reviews is byte-for-byte what goes on the wire.
Only `scheduledEventsProfile` is carried: a PATCH never touches the rest of the model.
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


def patch_body(enable: bool, timeout_minutes: Optional[int]) -> Dict[str, Any]:
    """The VirtualMachineScaleSetUpdate body as a plain dict."""
    return {
        "properties": {
            "virtualMachineProfile": {
                "scheduledEventsProfile": {
                    "terminateNotificationProfile": profile(enable, timeout_minutes)
                }
            }
        }
    }


def to_bytes(body: Dict[str, Any]) -> bytes:
    """Canonical serialisation: what is printed is what is sent."""
    return json.dumps(body, indent=2, sort_keys=False).encode("utf-8") + b"\n"


def patch_bytes(enable: bool, timeout_minutes: Optional[int]) -> bytes:
    return to_bytes(patch_body(enable, timeout_minutes))
