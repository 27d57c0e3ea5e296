"""The central handler: scheduled events of a whole scope, handled from outside the VMs.

Sources (`source.py`: the `EventSource` protocol) read scale sets' events -- Resource Graph's
`maintenanceresources` table, or an Event Grid -> Storage queue -- and the handler runs the action
pipeline for each, then acknowledges it through the Maintenance resource provider. For Windows and
locked-down images where no agent can run. Needs the `[control]` extra. docs/central.md.
"""

from vmss_terminate.central.source import (
    CANCELED,
    COMPLETED,
    CentralEvent,
    EventSource,
    ScaleSetRef,
    SourceBatch,
    event_from_fields,
    parse_not_before,
)

__all__ = [
    "CANCELED", "COMPLETED", "CentralEvent", "EventSource", "ScaleSetRef", "SourceBatch", "event_from_fields",
    "parse_not_before",
]
