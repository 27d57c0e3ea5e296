"""The emulators' one dispatch style: an explicit route table of (method, path pattern, handler).

Every operation an emulator serves is one `Route` line in its table, so a reader finds what is
served, and a new route is added, in one place. `match_route` picks the route for a request and,
when none serves it, says which methods serve the path (405) or that nothing does (404); each
emulator renders those answers in its own service's shape.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Optional, Sequence, Tuple

from vmss_terminate.emulator.server import Response


def path_pattern(pattern: str, ignore_case: bool = False) -> "re.Pattern[str]":
    """A whole-path regex; named groups become the handler's keyword arguments."""
    return re.compile("^" + pattern + "$", re.IGNORECASE if ignore_case else 0)


@dataclass(frozen=True)
class Route:
    """`method` on a path matching `pattern` is answered by `handler(..., **named groups)`."""

    method: str
    pattern: "re.Pattern[str]"
    handler: Callable[..., Response]


@dataclass(frozen=True)
class RouteMatch:
    """The outcome of `match_route`: a route and its match, or the methods that serve the path
    (empty when no route serves it at all)."""

    route: Optional[Route]
    match: Optional["re.Match[str]"]
    allowed: Tuple[str, ...] = ()


def match_route(routes: Sequence[Route], method: str, path: str) -> RouteMatch:
    allowed = []
    for route in routes:
        match = route.pattern.match(path)
        if match is None:
            continue
        if route.method == method:
            return RouteMatch(route, match)
        allowed.append(route.method)
    return RouteMatch(None, None, tuple(dict.fromkeys(allowed)))
