"""The two error answers both the IMDS routes and the admin routes give, written once."""

from __future__ import annotations

from typing import Any, Sequence

from vmss_terminate_sim.emulator.server import Response


def error_reply(status: int, message: str, **extra: Any) -> Response:
    """IMDS errors are JSON objects with an `error` string (plus `newest-versions` for api-version)."""
    return Response.json(status, dict({"error": message}, **extra))


def no_route(allowed: Sequence[str], **not_found: Any) -> Response:
    """The answer when no route serves a request: 405 with an `Allow` header when other methods
    serve its path (`RouteMatch.allowed`), else 404 (with `not_found`'s extra keys)."""
    if allowed:
        return Response.json(405, {"error": "Method not allowed"}, {"Allow": ", ".join(allowed)})
    return error_reply(404, "Not found", **not_found)
