"""The emulators' shared route matching: one route per (method, path), 405 vs 404 told apart."""

from __future__ import annotations

from vmss_terminate_sim.emulator.routes import Route, match_route, path_pattern
from vmss_terminate_sim.emulator.server import Response


def _ok(**groups: str) -> Response:
    return Response.json(200, groups)


ROUTES = [
    Route("GET", path_pattern("/things"), _ok),
    Route("POST", path_pattern("/things"), _ok),
    Route("GET", path_pattern("/things/(?P<tid>[^/]+)"), _ok),
    Route("DELETE", path_pattern("/things/(?P<tid>[^/]+)"), _ok),
    Route("GET", path_pattern("/CaseFree", ignore_case=True), _ok),
]


def test_the_route_for_method_and_path_with_its_named_groups() -> None:
    found = match_route(ROUTES, "DELETE", "/things/t1")
    assert found.route is ROUTES[3] and found.match is not None
    assert found.match.groupdict() == {"tid": "t1"}


def test_other_methods_on_a_served_path_are_listed_for_405() -> None:
    found = match_route(ROUTES, "PUT", "/things")
    assert found.route is None and found.allowed == ("GET", "POST")


def test_an_unserved_path_has_no_allowed_methods_for_404() -> None:
    for path in ("/things/t1/more", "/thingsx", "/casefree/x"):
        found = match_route(ROUTES, "GET", path)
        assert found.route is None and found.allowed == ()


def test_patterns_match_the_whole_path_and_case_only_when_asked() -> None:
    assert match_route(ROUTES, "GET", "/casefree").route is ROUTES[4]
    assert match_route(ROUTES, "GET", "/THINGS").route is None
