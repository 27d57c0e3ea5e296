"""The Maintenance resource provider's acknowledge operations (preview), through the product's own
ARM pipeline: fleet's session gives each subscription one compute client whose pipeline carries the
origin rule (the token goes only to the ARM endpoint's origin), the capped retries and the
per-subscription throttle. Not the beta azure-mgmt-maintenance: the stable package has no
scheduled-events operations (docs/central.md).

* one event: `POST {scale set}/providers/Microsoft.Maintenance/scheduledevents/{EventId}/acknowledge
  ?api-version=2023-10-01-preview`, no body; 200 `{"value": "Successfully Approved"}`.
* several: `POST {scale set}/providers/Microsoft.Maintenance/scheduledevents
  ?api-version=2025-10-01-preview` with `{"value": [ids]}`; a partial failure answers
  `{"error": {"code": "MultiStatusResponse", "details": [{"target", "code", "message"}]}}`
  (azure-rest-api-specs, Microsoft.Maintenance 2025-10-01-preview, ScheduledEvents_AcknowledgeList).
  Where the batch form is refused without per-target details (a cloud or region without that
  api-version), each id is acknowledged alone.

Azure treats an acknowledgement exactly like the VM's own IMDS approval: it releases the event for
every VM in its Resources. Callers acknowledge only events of scale sets in their scope.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple
from urllib.parse import quote

from vmss_terminate.central.source import ScaleSetRef
from vmss_terminate.control.arm_errors import arm_errors
from vmss_terminate.fleet.session import FleetSession

ACKNOWLEDGE_API = "2023-10-01-preview"
BATCH_API = "2025-10-01-preview"
APPROVED = "Successfully Approved"
_PER_EVENT_STATUSES = (400, 404, 409, 412, 422)
"""Answers about one event (unknown, already gone, refused): reported per event. Anything else
(401/403, throttling past the retries, 5xx, no answer) fails the call: nothing was acknowledged."""


@dataclass(frozen=True)
class AckResult:
    """What Azure answered for one EventId."""

    scale_set: ScaleSetRef
    event_id: str
    ok: bool
    status: int
    message: str
    batch: bool = False

    def to_dict(self) -> Dict[str, Any]:
        return {"scale_set_id": self.scale_set.id, "event_id": self.event_id, "acknowledged": self.ok,
                "status": self.status, "answer": self.message, "batch": self.batch}


def _error_body(response: Any) -> Dict[str, Any]:
    try:
        body = json.loads(response.text() if callable(getattr(response, "text", None)) else response.text)
    except (ValueError, TypeError, AttributeError):
        return {}
    error = body.get("error") if isinstance(body, dict) else None
    return error if isinstance(error, dict) else {}


def _describe(error: Dict[str, Any], fallback: str) -> str:
    code, message = error.get("code"), error.get("message")
    return f"{code}: {message}" if code and message else str(code or message or fallback)


class MaintenanceClient:
    """Acknowledge scheduled events of scale sets through a fleet session's clients."""

    def __init__(self, session: FleetSession) -> None:
        self.session = session
        self.requests = 0

    def acknowledge(self, scale_set: ScaleSetRef, event_ids: Sequence[str]) -> List[AckResult]:
        """Acknowledge these events of one scale set: the single form for one, the batch form for
        several. Per-event refusals are results (ok False); a failure of the call itself raises
        AzureError (nothing can be assumed acknowledged)."""
        ids = list(dict.fromkeys(event_ids))
        if len(ids) == 1:
            return [self._single(scale_set, ids[0])]
        results = self._batch(scale_set, ids)
        return results if results is not None else [self._single(scale_set, i) for i in ids]

    def _post(self, scale_set: ScaleSetRef, suffix: str, body: Optional[bytes]) -> Tuple[int, Dict[str, Any], Any]:
        """(status, error object, parsed body) of one POST; raises AzureError for call failures."""
        from azure.core.exceptions import HttpResponseError

        compute = self.session.compute(scale_set.subscription)
        action = f"acknowledging scheduled events of scale set {scale_set}"
        with arm_errors(action, str(scale_set), scale_set.subscription):
            self.requests += 1
            try:
                answer = compute.send("POST", scale_set.id + suffix, body)
            except HttpResponseError as exc:
                status = int(getattr(exc, "status_code", 0) or 0)
                error = _error_body(exc.response) if exc.response is not None else {}
                if status in _PER_EVENT_STATUSES or error.get("details"):
                    return status, error, None
                raise
        try:
            parsed = json.loads(answer.text() or "{}")
        except ValueError:
            parsed = {}
        found = parsed.get("error") if isinstance(parsed, dict) else None
        error = found if isinstance(found, dict) else {}
        return answer.status_code, error, parsed

    def _single(self, scale_set: ScaleSetRef, event_id: str) -> AckResult:
        suffix = (f"/providers/Microsoft.Maintenance/scheduledevents/{quote(event_id, safe='')}/acknowledge"
                  f"?api-version={ACKNOWLEDGE_API}")
        status, error, parsed = self._post(scale_set, suffix, None)
        ok = status == 200 and not error
        message = str(parsed.get("value") or APPROVED) if ok and isinstance(parsed, dict) else _describe(error, str(status))
        return AckResult(scale_set, event_id, ok, status, message)

    def _batch(self, scale_set: ScaleSetRef, event_ids: List[str]) -> Optional[List[AckResult]]:
        suffix = f"/providers/Microsoft.Maintenance/scheduledevents?api-version={BATCH_API}"
        status, error, parsed = self._post(scale_set, suffix, json.dumps({"value": event_ids}).encode())
        if status == 200 and not error:
            message = str(parsed.get("value") or APPROVED) if isinstance(parsed, dict) else APPROVED
            return [AckResult(scale_set, i, True, status, message, batch=True) for i in event_ids]
        details = error.get("details")
        if not isinstance(details, list) or not details:
            return None  # the batch form itself was refused: one by one
        by_target: Dict[str, Dict[str, Any]] = {}
        for detail in details:
            if isinstance(detail, dict) and isinstance(detail.get("target"), str):
                by_target[detail["target"].lower()] = detail
        results = []
        for event_id in event_ids:
            detail = by_target.get(event_id.lower())
            if detail is None:  # not named: Azure said nothing about it, so it is not known acknowledged
                results.append(AckResult(scale_set, event_id, False, status, "no answer for this id in the batch",
                                         batch=True))
                continue
            code = str(detail.get("code") or "")
            ok = code in ("200", "OK", "Succeeded", "Success")
            results.append(AckResult(scale_set, event_id, ok, int(code) if code.isdigit() else status,
                                     str(detail.get("message") or code), batch=True))
        return results
