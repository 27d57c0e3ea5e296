"""One-shot operations behind `vmss-terminate agent events` and `agent approve` (Python API first)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from vmss_terminate.agent.imds import ForeignEventError, ImdsClient
from vmss_terminate.errors import UsageError
from vmss_terminate.pipeline.events import Event, EventsDocument
from vmss_terminate.scheduled_events import DEFAULT_API_VERSION, vm_name_problem


@dataclass(frozen=True)
class EventsView:
    """The current document plus which events name this VM."""

    vm_name: str
    document: EventsDocument

    @property
    def own(self) -> List[Event]:
        return self.document.ours(self.vm_name)

    def to_json(self) -> Dict[str, Any]:
        return {
            "VmName": self.vm_name,
            "DocumentIncarnation": self.document.incarnation,
            "Events": [dict(e.to_json(), Ours=e.names(self.vm_name)) for e in self.document.events],
        }


def check_retry_for(seconds: float) -> float:
    """UsageError unless 0 <= seconds <= 1 day (NaN included: it would retry forever)."""
    if not 0 <= seconds <= 86400:
        raise UsageError(f"invalid --retry-for {seconds!r}: expected 0 <= seconds <= 86400")
    return seconds


def _client(imds_url: Optional[str], api_version: str, client: Optional[ImdsClient]) -> ImdsClient:
    return client or ImdsClient(imds_url, api_version=api_version)


def list_events(imds_url: Optional[str] = None, api_version: str = DEFAULT_API_VERSION,
                vm_name: Optional[str] = None, client: Optional[ImdsClient] = None,
                retry_for: float = 70.0) -> EventsView:
    """Fetch this VM's name and the current Scheduled Events document."""
    check_retry_for(retry_for)
    if vm_name is not None and not vm_name.strip():
        raise UsageError("empty --vm-name: leave it out to learn the name from instance metadata")
    problem = vm_name_problem(vm_name.strip()) if vm_name is not None else None
    if problem:  # as `agent run` refuses it: no VM of a scale set has this name
        raise UsageError(f"invalid --vm-name {vm_name!r}: {problem}")
    imds = _client(imds_url, api_version, client)
    name = vm_name.strip() if vm_name else imds.vm_name(retry_for=retry_for)
    return EventsView(name, imds.get_events(retry_for=retry_for))


def approve_event(event_id: str, imds_url: Optional[str] = None, api_version: str = DEFAULT_API_VERSION,
                  force: bool = False, vm_name: Optional[str] = None, client: Optional[ImdsClient] = None,
                  retry_for: float = 70.0) -> Event:
    """Approve one event by hand. Refuses (UsageError, exit 2) an event that is absent, not this
    VM's, or shared with other VMs, unless `force` -- approving releases every VM in Resources."""
    if not event_id or not event_id.strip():
        raise UsageError("empty EVENT_ID")
    check_retry_for(retry_for)
    imds = _client(imds_url, api_version, client)
    view = list_events(vm_name=vm_name, client=imds, retry_for=retry_for)
    event = view.document.get(event_id.strip())
    if event is None:
        known = ", ".join(e.event_id for e in view.document.events) or "none"
        raise UsageError(f"no event {event_id} in the scheduled events document (current: {known})")
    if not force:  # the client's own guard, checked now so a refusal is bad input (exit 2), not a failure
        try:
            imds.guard_approval(event.event_id, view.vm_name)
        except ForeignEventError as exc:
            raise UsageError(f"{exc} (--force to do it anyway)") from None
    imds.approve(event.event_id, view.vm_name, allow_foreign=force, retry_for=retry_for)
    return event
