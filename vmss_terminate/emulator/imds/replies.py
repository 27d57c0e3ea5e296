"""The two error answers both the IMDS routes and the admin routes give, written once."""

from __future__ import annotations

from typing import Any, Optional, Sequence

from vmss_terminate.emulator.server import Response


def error_reply(status: int, message: str, **extra: Any) -> Response:
    """IMDS errors are JSON objects with an `error` string (plus `newest-versions` for api-version)."""
    return Response.json(status, dict({"error": message}, **extra))


def method_not_allowed(method: str, allowed: Sequence[str]) -> Optional[Response]:
    """None when `method` is allowed, else the 405 answer with an `Allow` header."""
    if method in allowed:
        return None
    return Response.json(405, {"error": "Method not allowed"}, {"Allow": ", ".join(allowed)})
