"""The `Status` error bodies the API server answers with, and the one exception that carries them.

Every failure the emulator reports is an `ApiError(code, reason, message, details)`, rendered as
`{"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message", "reason",
"details", "code"}` -- the shape client-go's `apierrors.IsNotFound` / `IsTooManyRequests` read.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from vmss_terminate_sim.emulator.server import Response


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, details: Optional[Dict[str, Any]] = None,
                 headers: Optional[Dict[str, str]] = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message
        self.details = details
        self.headers = headers or {}

    def body(self) -> Dict[str, Any]:
        return status_body(self.code, self.reason, self.message, self.details)

    def response(self) -> Response:
        return Response.json(self.code, self.body(), self.headers)


def status_body(code: int, reason: str, message: str, details: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    body: Dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                            "message": message, "reason": reason}
    if details:
        body["details"] = details
    body["code"] = code
    return body


def success(code: int = 200, details: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    body: Dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
    if details:
        body["details"] = details
    body["code"] = code
    return body


def _details(plural: str, name: str, group: str = "") -> Dict[str, Any]:
    details: Dict[str, Any] = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = plural
    return details


def _qualified(plural: str, group: str) -> str:
    return f"{plural}.{group}" if group else plural


def not_found(plural: str, name: str, group: str = "") -> ApiError:
    return ApiError(404, "NotFound", f'{_qualified(plural, group)} "{name}" not found', _details(plural, name, group))


def already_exists(plural: str, name: str, group: str = "") -> ApiError:
    return ApiError(409, "AlreadyExists", f'{_qualified(plural, group)} "{name}" already exists',
                    _details(plural, name, group))


def conflict(plural: str, name: str, why: str, group: str = "") -> ApiError:
    return ApiError(409, "Conflict", f'Operation cannot be fulfilled on {_qualified(plural, group)} "{name}": {why}',
                    _details(plural, name, group))


def invalid(kind: str, name: str, causes: List[Dict[str, str]], group: str = "") -> ApiError:
    """422: `Kind "name" is invalid: field: message`."""
    summary = ", ".join(f"{c['field']}: {c['message']}" for c in causes)
    details: Dict[str, Any] = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = kind
    details["causes"] = [{"reason": c.get("reason", "FieldValueInvalid"), "message": c["message"],
                          "field": c["field"]} for c in causes]
    return ApiError(422, "Invalid", f'{kind}{"." + group if group else ""} "{name}" is invalid: {summary}', details)


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def method_not_allowed(message: str = "the server does not allow this method on the requested resource") -> ApiError:
    return ApiError(405, "MethodNotAllowed", message)


def unsupported_media_type(media: str) -> ApiError:
    return ApiError(415, "UnsupportedMediaType", f'the body of the request was in an unknown format - accepted media '
                    f'types include: application/json-patch+json, application/merge-patch+json, '
                    f'application/strategic-merge-patch+json (got "{media}")')


def unauthorized() -> ApiError:
    return ApiError(401, "Unauthorized", "Unauthorized")
