"""Scheduled events as Event Grid sends them, for the queue tests (built with the product's writers,
checked here against Learn's example payload so the writers cannot drift from it)."""

from __future__ import annotations

import uuid
from typing import Any, Dict, Optional

from vmss_terminate.scheduled_events import format_not_before

SUB = "00000000-0000-0000-0000-000000000000"


def event_id() -> str:
    return str(uuid.uuid4())


def resource_id(eid: str, scale_set: str = "web", group: str = "rg") -> str:
    return (f"/subscriptions/{SUB}/resourceGroups/{group}/providers/Microsoft.Compute/virtualMachineScaleSets/"
            f"{scale_set}/providers/microsoft.maintenance/scheduledevents/{eid}")


def properties(eid: str, *, status: str = "Scheduled", event_type: str = "Terminate",
               resources: Optional[list] = None, not_before: float = 4102444800.0) -> Dict[str, Any]:
    return {
        "DurationInSeconds": -1, "Description": "Virtual machine is being deleted.", "EventId": eid,
        "EventSource": "Platform", "EventStatus": status, "EventType": event_type,
        "NotBefore": format_not_before(not_before) if status == "Scheduled" else "",
        "Resources": resources if resources is not None else ["web_1"], "ResourceType": "VirtualMachine",
    }


# Learn's example (MicrosoftDocs/azure-compute-docs, articles/virtual-machines/scheduled-events-event-grid.md),
# with the placeholders filled in.
LEARN_EXAMPLE = {
    "id": "3da1b9aa-5204-4335-8c33-c54e315dcffe",
    "topic": f"/subscriptions/{SUB}",
    "subject": resource_id("3da1b9aa-5204-4335-8c33-c54e315dcffe", "myvmss"),
    "data": {
        "resourceInfo": {
            "id": resource_id("3da1b9aa-5204-4335-8c33-c54e315dcffe", "myvmss"),
            "name": "3da1b9aa-5204-4335-8c33-c54e315dcffe",
            "type": "microsoft.maintenance/scheduledEvents",
            "location": "eastus",
            "properties": {
                "DurationInSeconds": 5,
                "Description": "Virtual machine is being paused because of a memory-preserving Live Migration operation.",
                "EventId": "3da1b9aa-5204-4335-8c33-c54e315dcffe",
                "EventSource": "Platform",
                "EventStatus": "Started",
                "EventType": "Freeze",
                "NotBefore": "Mon, 19 Sep 2025 18:29:47 GMT",
                "Resources": ["myvmss_1", "myvmss_2"],
                "ResourceType": "VirtualMachine",
            },
        },
        "apiVersion": "2024-07-01",
    },
    "eventType": "Microsoft.ResourceNotifications.MaintenanceResources.ScheduledEventEmitted",
    "dataVersion": "3.0",
    "metadataVersion": "1",
    "eventTime": "2017-06-26T18:41:00.9584103Z",
}
