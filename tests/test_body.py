"""The PATCH body is the single source for what the control plane sends and `render` prints."""

from __future__ import annotations

import json

from vmss_terminate.control import body


def test_enable_body_carries_only_the_scheduled_events_profile() -> None:
    assert json.loads(body.patch_bytes(True, 10)) == {
        "properties": {"virtualMachineProfile": {"scheduledEventsProfile": {
            "terminateNotificationProfile": {"enable": True, "notBeforeTimeout": "PT10M"}}}}
    }


def test_timeout_can_be_omitted() -> None:
    profile = body.patch_body(False, None)["properties"]["virtualMachineProfile"]["scheduledEventsProfile"]
    assert profile == {"terminateNotificationProfile": {"enable": False}}


def test_serialisation_is_stable() -> None:
    assert body.patch_bytes(True, 5) == body.to_bytes(body.patch_body(True, 5))
    assert body.patch_bytes(True, 5).endswith(b"}\n")
