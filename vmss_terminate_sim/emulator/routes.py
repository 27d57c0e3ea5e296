"""The emulators' one dispatch style: an explicit route table of (method, path pattern, handler).

Every operation an emulator serves is one `Route` line in its table, so a reader finds what is
served, and a new route is added, in one place. `match_route` picks the route for a request and,
when none serves it, says which methods serve the path (405) or that nothing does (404); each
emulator renders those answers in its own service's shape.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Sequence, Tuple
from urllib.parse import unquote

from vmss_terminate_sim.emulator.server import Response


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


def path_params(match: "re.Match[str]") -> Dict[str, Optional[str]]:
    """The named path segments, percent-decoded: clients quote names (the Azure SDK sends a
    resource group `rg_(prod)` as `rg_%28prod%29`), and the emulator must see the name itself."""
    return {name: None if value is None else unquote(value) for name, value in match.groupdict().items()}


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
