"""IMDS api-versions and how each one shapes an answer.

Two version families exist (reference: instance-metadata-service excerpts, scheduled-events doc):
`/metadata/scheduledevents` has its own short list (in `vmss_terminate.scheduled_events`, shared
with the agent), `/metadata/instance` the long one. A scheduled
events payload depends on the version: 2019-01-01 (what the agent uses) has no Description,
EventSource or DurationInSeconds (azure-docs#58422), and older versions do not show event types
that did not exist yet.
"""

from __future__ import annotations

from typing import Any, Dict, List, Sequence

from vmss_terminate.scheduled_events import (
    EVENT_FIELD_SINCE,
    EVENT_TYPE_SINCE,
    SCHEDULED_EVENTS_VERSIONS,
    UNDERSCORE_UNTIL,
)

__all__ = [
    "SCHEDULED_EVENTS_VERSIONS", "INSTANCE_VERSIONS", "BAD_VERSION_MESSAGE", "newest_versions", "bad_version_body",
    "event_visible", "shape_event", "scheduled_events_document", "COMPUTE_FIELD_SINCE", "shape_compute",
]


INSTANCE_VERSIONS = (
    "2017-03-01", "2017-04-02", "2017-08-01", "2017-10-01", "2017-12-01", "2018-02-01", "2018-04-02",
    "2018-10-01", "2019-02-01", "2019-03-11", "2019-04-30", "2019-06-01", "2019-06-04", "2019-08-01",
    "2019-08-15", "2019-11-01", "2020-06-01", "2020-07-15", "2020-09-01", "2020-10-01", "2020-12-01",
    "2021-01-01", "2021-02-01", "2021-03-01", "2021-05-01", "2021-08-01", "2021-10-01", "2021-11-01",
    "2021-11-15", "2021-12-13", "2023-07-01", "2023-11-15", "2024-03-15", "2024-07-17", "2025-04-07",
)

BAD_VERSION_MESSAGE = (
    "Bad request. api-version is invalid or was not specified in the request. "
    "For more information refer to aka.ms/azureimds"
)



def newest_versions(versions: Sequence[str], count: int = 3) -> List[str]:
    """What IMDS lists under `newest-versions` in its bad-api-version answer."""
    return sorted(versions, reverse=True)[:count]


def bad_version_body(versions: Sequence[str]) -> Dict[str, Any]:
    return {"error": BAD_VERSION_MESSAGE, "newest-versions": newest_versions(versions)}


def event_visible(event_type: str, api_version: str) -> bool:
    """Whether a version knows this event type at all (Terminate needs 2019-01-01)."""
    since = EVENT_TYPE_SINCE.get(event_type)
    return since is None or api_version >= since


def shape_event(wire: Dict[str, Any], api_version: str) -> Dict[str, Any]:
    """Trim the newest wire shape of one event down to what `api_version` returns."""
    shaped = {k: v for k, v in wire.items() if api_version >= EVENT_FIELD_SINCE.get(k, "")}
    if api_version < UNDERSCORE_UNTIL:
        shaped["Resources"] = ["_" + name for name in shaped["Resources"]]
    return shaped


def scheduled_events_document(incarnation: int, events: Sequence[Dict[str, Any]], api_version: str) -> Dict[str, Any]:
    """The GET /metadata/scheduledevents body for `api_version`, from events in the newest wire shape."""
    return {
        "DocumentIncarnation": incarnation,
        "Events": [shape_event(e, api_version) for e in events if event_visible(e["EventType"], api_version)],
    }


# Instance metadata: fields of `compute` introduced after the first instance version
# (the "Version introduced" column of the IMDS doc's compute table; the rows the reference excerpt
# drops -- azEnvironment, provider, tags, tagsList -- are from the full table of the same doc).
COMPUTE_FIELD_SINCE = {
    "placementGroupId": "2017-08-01",
    "resourceGroupName": "2017-08-01",
    "subscriptionId": "2017-08-01",
    "tags": "2017-08-01",
    "vmScaleSetName": "2017-12-01",
    "zone": "2017-12-01",
    "azEnvironment": "2018-10-01",
    "provider": "2018-10-01",
    "resourceId": "2019-03-11",
    "tagsList": "2019-06-04",
    "osProfile": "2020-07-15",
    "virtualMachineScaleSet": "2021-03-01",
}


def shape_compute(compute: Dict[str, Any], api_version: str) -> Dict[str, Any]:
    return {k: v for k, v in compute.items() if api_version >= COMPUTE_FIELD_SINCE.get(k, "")}
