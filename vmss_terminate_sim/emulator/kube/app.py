"""`KubeEmulator`: the HTTP face of a `KubeState`, answering the REST paths kubectl and client
libraries use. One explicit route table; every error is a `Status` body (`status.py`).

What is served:

* discovery: `/api`, `/api/v1`, `/apis`, `/apis/{group}`, `/apis/{group}/{version}` (legacy format;
  see `discovery.py`), `/version`, and `/healthz`, `/livez`, `/readyz` (these four without a token,
  as anonymous access allows on a real cluster);
* every kind in `kinds.py`, at `/api/v1[/namespaces/{ns}]/{plural}[/{name}[/{sub}]]` and
  `/apis/{group}/{version}/...`: list (`labelSelector`, `fieldSelector`, `limit` + `continue`),
  get, create (POST), replace (PUT, optimistic concurrency on `metadata.resourceVersion`), patch
  (JSON merge, strategic merge, JSON patch; `application/apply-patch+yaml` is 415), delete (pods
  terminate gracefully), the `status` subresource, `?dryRun=All` on writes;
* `POST /api/v1/namespaces/{ns}/pods/{name}/eviction` (policy/v1 or v1beta1 Eviction): 200 + Status
  Success, 429 TooManyRequests while a PodDisruptionBudget allows no disruption, 500 when several
  budgets select the pod, 404 for an unknown pod;
* `Accept: application/json;as=Table;...` (what `kubectl get` asks for): a meta.k8s.io/v1 Table
  with the columns kubectl prints for nodes and pods, NAME/AGE for the rest (`table.py`).

Watch (`?watch=true` on a collection) streams: the changes after `resourceVersion` (the current
objects as ADDED without one), then each change as it happens, one JSON object a line in a chunked
answer open until `timeoutSeconds` (default WATCH_DEFAULT, at most WATCH_MAX) or the server stops,
and ended at once when the client hangs up (`EmulatorServer`). The timeout is real seconds, as a
user's `kubectl get -w` expects also of a sandbox whose cluster time runs fast (counted on
`watch_clock`, which a test may replace). A BOOKMARK follows the first batch when
`allowWatchBookmarks` is asked; too old a resourceVersion is an ERROR event with a 410 Expired
Status, so the client lists again. A watch that asks for a Table (`kubectl get -w`) gets each
object as a one-row Table, the column definitions in the first only, as the API server's watch
encoder sends them (kubectl prints one header, then a row per change).

Not served: server-side apply,
protobuf, OpenAPI documents (`/openapi/v2`, `/openapi/v3` are 404: use `kubectl --validate=false`).

Authentication: when the emulator has a token, every other request needs `Authorization: Bearer
<token>` -- that token (cluster-admin), or the token of a service-account-token Secret (the
emulator fills them like the token controller) -- else 401 Unauthorized. A service account's
requests go through RBAC (`rbac.py`): 403 Forbidden unless a bound Role or ClusterRole allows them.
"""

from __future__ import annotations

import base64
import hmac
import json
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from vmss_terminate.clock import SYSTEM_CLOCK, Clock
from vmss_terminate_sim.emulator.kube import discovery, protobuf, table
from vmss_terminate_sim.emulator.kube.kinds import GROUPS, NODES, PODS, Kind, find_kind
from vmss_terminate_sim.emulator.kube.patch import PATCH_TYPES
from vmss_terminate_sim.emulator.kube.rbac import Account, username
from vmss_terminate_sim.emulator.kube.selectors import SelectorError, parse_field_selector, parse_label_selector
from vmss_terminate_sim.emulator.kube.state import KubeState
from vmss_terminate_sim.emulator.kube.status import (
    ApiError,
    bad_request,
    method_not_allowed,
    success,
    unauthorized,
    unsupported_media_type,
)
from vmss_terminate_sim.emulator.routes import Route, match_route, path_params, path_pattern
from vmss_terminate_sim.emulator.server import STREAM_SLICE, Request, Response

__all__ = ["KubeEmulator"]

_OPEN = ("/healthz", "/livez", "/readyz", "/version")
_VERBS = {"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
_COLLECTION_VERBS = {"GET": "list", "POST": "create", "DELETE": "deletecollection"}
WATCH_DEFAULT = 300.0  # real seconds a watch stays open without timeoutSeconds (or with 0), as the API server's
WATCH_MAX = 1800.0     # default request timeout; and the most a watch may ask for (its --min-request-timeout)
_RESOURCE = r"(?P<rest>(?:/[^/]+){1,5})"
CORE = path_pattern(r"/api/(?P<version>v1)" + _RESOURCE + "/?")
GROUPED = path_pattern(r"/apis/(?P<group>[^/]+)/(?P<version>[^/]+)" + _RESOURCE + "/?")
Target = Tuple[Kind, str, Optional[str], Optional[str]]  # kind, namespace, name, subresource


class KubeEmulator:
    """Serves `state`; `token` (None: no authentication) is what the kubeconfig carries."""

    def __init__(self, state: KubeState, token: Optional[str] = None, watch_clock: Clock = SYSTEM_CLOCK) -> None:
        self.state = state
        self.token = token
        self.watch_clock = watch_clock  # how long watches stay open (timeoutSeconds): real time unless a test says
        self.server_address = ""  # host:port, for /api's serverAddressByClientCIDRs
        resource = (self._list_or_get, self._create, self._replace, self._patch, self._delete)
        self.routes: Tuple[Route, ...] = (
            Route("GET", path_pattern("/version/?"), lambda r: Response.json(200, discovery.SERVER_VERSION)),
            Route("GET", path_pattern("/(?:healthz|livez|readyz)/?"), lambda r: Response.text(200, "ok")),
            Route("GET", path_pattern("/api/?"), lambda r: _json(discovery.api_versions(self.server_address))),
            Route("GET", path_pattern("/api/v1/?"), lambda r: _json(discovery.resource_list("", "v1"))),
            Route("GET", path_pattern("/apis/?"), lambda r: _json(discovery.api_group_list())),
            Route("GET", path_pattern("/apis/(?P<group>[^/]+)/?"), lambda r, group: _json(discovery.api_group(group))),
            Route("GET", path_pattern("/apis/(?P<group>[^/]+)/(?P<version>[^/]+)/?"),
                  lambda r, group, version: _json(discovery.resource_list(group, version))),
        ) + tuple(
            Route(method, pattern, handler)
            for pattern in (CORE, GROUPED)
            for method, handler in zip(("GET", "POST", "PUT", "PATCH", "DELETE"), resource)
        )

    def handle(self, request: Request) -> Response:
        try:
            if self.token is not None and request.path.rstrip("/") not in _OPEN:
                self._authenticate(request)
            found = match_route(self.routes, request.method, request.path)
            if found.route is None or found.match is None:
                if found.allowed:
                    raise method_not_allowed()
                raise ApiError(404, "NotFound", "the server could not find the requested resource",
                               {"causes": [{"reason": "UnexpectedServerResponse", "message": "404 page not found"}]})
            return found.route.handler(request, **path_params(found.match))
        except ApiError as error:
            return error.response()

    def admin_refusal(self, request: Request) -> Optional[Response]:
        """The emulator's admin routes (`/emulator/faults`) need what every API request needs: with a
        token, 401 without it; a service account's token is 403 (the routes are no Kubernetes resource
        RBAC could grant, so only the emulator's own, cluster-admin, token opens them)."""
        if self.token is None:
            return None
        try:
            account = self._authenticate(request)
        except ApiError as error:
            return error.response()
        if account is not None:
            return ApiError(403, "Forbidden", f'User "{username(account)}" cannot use the emulator\'s '
                            "admin routes: only the emulator's own token can").response()
        return None

    def _authenticate(self, request: Request) -> Optional[Account]:
        """None for the emulator's own token (cluster-admin), the ServiceAccount for one of its tokens;
        401 for anything else."""
        header = request.header("Authorization") or ""
        scheme, _, credential = header.partition(" ")
        credential = credential.strip()
        if scheme.lower() != "bearer" or not credential:
            raise unauthorized()
        if hmac.compare_digest(credential, self.token or ""):
            return None
        account = self.state.account_of(credential)
        if account is None:
            raise unauthorized()
        return account

    # -- resources ------------------------------------------------------------------------

    def _target(self, version: str, rest: str, group: str = "") -> Target:
        parts = [p for p in rest.split("/") if p]
        namespace = ""
        inner = find_kind(group, version, parts[2]) if len(parts) >= 3 and parts[0] == "namespaces" else None
        if inner is not None and inner.namespaced:  # /namespaces/{ns}/{plural}/...
            namespace, parts = parts[1], parts[2:]
        if not parts or len(parts) > 3:
            raise not_found_path()
        kind = find_kind(group, version, parts[0])
        if kind is None:
            raise not_found_path()
        if kind.namespaced and not namespace and len(parts) > 1:
            raise not_found_path()  # a named namespaced object needs its namespace
        name = parts[1] if len(parts) > 1 else None
        sub = parts[2] if len(parts) > 2 else None
        if sub is not None and sub not in {s.name for s in kind.subresources}:
            raise not_found_path()
        return kind, namespace, name, sub

    def _resolve(self, request: Request, version: str, rest: str, group: str = "") -> Target:
        """The request's target, once RBAC allows a service account's request for it."""
        if group and group not in GROUPS:
            raise not_found_path()
        kind, namespace, name, sub = self._target(version, rest, group)
        if self.token is not None:
            account = self._authenticate(request)
            if account is not None:
                verb = _VERBS[request.method] if name is not None else _COLLECTION_VERBS.get(request.method, "")
                if verb == "list" and request.param("watch") in ("true", "1"):
                    verb = "watch"
                resource = f"{kind.plural}/{sub}" if sub else kind.plural
                self.state.authorize(account, verb, kind, resource, namespace, name)
        return kind, namespace, name, sub

    def _list_or_get(self, request: Request, version: str, rest: str, group: str = "") -> Response:
        kind, namespace, name, sub = self._resolve(request, version, rest, group)
        if request.param("watch") in ("true", "1"):
            if name is not None:
                raise method_not_allowed("watch a collection (fieldSelector=metadata.name=NAME), not one object")
            return self._watch(request, kind, namespace)
        if name is None:
            return self._list(request, kind, namespace)
        if sub not in (None, "status"):
            raise method_not_allowed()
        obj = self.state.get(kind, namespace, name)
        if table.wants_table(request.header("Accept")):
            return Response.json(200, table.render(kind, [obj], self.state.clock.now(), self.state.resource_version))
        return Response.json(200, obj)

    def _watch(self, request: Request, kind: Kind, namespace: str) -> Response:
        """A watch: the changes after `resourceVersion` (the current objects as ADDED without one), then
        every later change as it happens, newline-delimited in one chunked answer that stays open
        until `timeoutSeconds` (WATCH_DEFAULT when absent or 0, at most WATCH_MAX; on `watch_clock`)
        or the server stops (or the client hangs up: `EmulatorServer`); a BOOKMARK after the
        first batch when `allowWatchBookmarks` is asked. Objects as Tables when the client asks
        (`table.wants_table`), the column definitions in the first event's only."""
        try:
            asked = float(request.param("timeoutSeconds") or 0)
        except ValueError:
            raise bad_request("timeoutSeconds must be a number") from None
        if not asked >= 0:  # negative or nan
            raise bad_request("timeoutSeconds must not be negative")
        timeout = min(asked or WATCH_DEFAULT, WATCH_MAX)
        state = self.state
        clock = self.watch_clock
        deadline = clock.monotonic() + timeout
        where = _selection(request, kind)
        tables = table.wants_table(request.header("Accept"))
        headers = [True]  # the first Table carries the column definitions, the later ones none

        def event(change: str, obj: Dict[str, Any]) -> Dict[str, Any]:
            if not tables:
                return {"type": change, "object": obj}
            rendered = table.render(kind, [obj], state.clock.now(), str(obj["metadata"].get("resourceVersion", "")))
            if not headers[0]:
                rendered["columnDefinitions"] = []
            headers[0] = False
            return {"type": change, "object": rendered}

        bookmarks = request.param("allowWatchBookmarks") in ("true", "1")
        try:
            changes, version = state.watch(kind, namespace or None, request.param("resourceVersion"), where, 0.0)
        except ApiError as error:
            if error.code != 410:
                raise
            return Response(200, _lines([{"type": "ERROR", "object": error.body()}]),
                            {"Content-Type": "application/json"})

        def stream() -> Iterator[bytes]:
            since = version
            lines = [event(change, obj) for change, obj in changes]
            if bookmarks:
                lines.append({"type": "BOOKMARK", "object": {"kind": kind.kind, "apiVersion": kind.api_version,
                                                             "metadata": {"resourceVersion": since}}})
            yield _lines(lines)
            while True:
                remaining = deadline - clock.monotonic()
                if remaining <= 0:
                    return
                try:
                    found, since_next = state.watch(kind, namespace or None, since, where,
                                                    min(remaining / clock.speed, STREAM_SLICE),
                                                    over=lambda: clock.monotonic() >= deadline)
                except ApiError as error:  # fell behind the changes kept: the client lists again
                    yield _lines([{"type": "ERROR", "object": error.body()}])
                    return
                since = since_next
                yield _lines([event(change, obj) for change, obj in found])

        return Response(200, headers={"Content-Type": "application/json"}, stream=stream())

    def _list(self, request: Request, kind: Kind, namespace: str) -> Response:
        items = self.state.list(kind, namespace or None, _selection(request, kind))
        version = self.state.resource_version
        start, limit = _page(request)
        page = items[start:start + limit] if limit else items[start:]
        more = bool(limit) and start + limit < len(items)
        metadata: Dict[str, Any] = {"resourceVersion": version}
        if more:
            metadata["continue"] = base64.urlsafe_b64encode(json.dumps({"start": start + limit}).encode()).decode()
            metadata["remainingItemCount"] = len(items) - start - limit
        if table.wants_table(request.header("Accept")):
            document = table.render(kind, page, self.state.clock.now(), version)
            document["metadata"].update({k: v for k, v in metadata.items() if k != "resourceVersion"})
            return Response.json(200, document)
        for item in page:  # list items carry no apiVersion/kind, as the API server sends them
            item.pop("apiVersion", None)
            item.pop("kind", None)
        return Response.json(200, {"kind": kind.list_kind, "apiVersion": kind.api_version, "metadata": metadata,
                                   "items": page})

    def _create(self, request: Request, version: str, rest: str, group: str = "") -> Response:
        kind, namespace, name, sub = self._resolve(request, version, rest, group)
        body = _body(request)
        if kind is PODS and sub == "eviction" and name is not None:
            return self._evict(request, namespace, name, body)
        if name is not None:
            raise method_not_allowed()
        _check_body_kind(kind, body)
        if kind.namespaced and not namespace:  # /api/v1/pods lists and watches; creating is per namespace
            raise method_not_allowed()
        created = self.state.create(kind, namespace, body, dry_run=_dry_run(request))
        return Response.json(201, created)

    def _evict(self, request: Request, namespace: str, name: str, body: Dict[str, Any]) -> Response:
        if body.get("kind") not in (None, "Eviction") or body.get("apiVersion") not in (
                None, "policy/v1", "policy/v1beta1"):
            raise bad_request(f"the body of an eviction must be a policy/v1 Eviction, not "
                              f"{body.get('apiVersion')} {body.get('kind')}")
        named = (body.get("metadata") or {}).get("name")
        if named and named != name:
            raise bad_request("name in URL does not match name in Eviction object")
        options = body.get("deleteOptions")
        if options is not None and not isinstance(options, dict):
            raise bad_request("deleteOptions of an Eviction must be a DeleteOptions object")
        # kubectl drain --dry-run=server sends dryRun in the Eviction's deleteOptions, not the query
        self.state.evict(namespace, name, body, dry_run=_dry_run(request, (options or {}).get("dryRun")))
        return Response.json(200, success(200))

    def _replace(self, request: Request, version: str, rest: str, group: str = "") -> Response:
        kind, namespace, name, sub = self._resolve(request, version, rest, group)
        if name is None or sub not in (None, "status"):
            raise method_not_allowed()
        body = _body(request)
        _check_body_kind(kind, body)
        return Response.json(200, self.state.replace(kind, namespace, name, body, _dry_run(request), sub))

    def _patch(self, request: Request, version: str, rest: str, group: str = "") -> Response:
        kind, namespace, name, sub = self._resolve(request, version, rest, group)
        if name is None or sub not in (None, "status"):
            raise method_not_allowed()
        media = (request.header("Content-Type") or "").split(";")[0].strip().lower()
        if media not in PATCH_TYPES:
            raise unsupported_media_type(media)
        try:
            patch = json.loads(request.body or b"null")
        except ValueError as exc:
            raise bad_request(f"the patch is not valid JSON: {exc}") from None
        return Response.json(200, self.state.patch(kind, namespace, name, request.header("Content-Type"),
                                                   patch, _dry_run(request), sub))

    def _delete(self, request: Request, version: str, rest: str, group: str = "") -> Response:
        kind, namespace, name, sub = self._resolve(request, version, rest, group)
        if name is None or sub is not None:
            raise method_not_allowed()
        options = _delete_options(request)
        grace = request.param("gracePeriodSeconds")
        if grace is None and options.get("gracePeriodSeconds") is not None:
            grace = str(options["gracePeriodSeconds"])
        try:
            seconds = None if grace is None else int(grace)
        except ValueError:
            raise bad_request(f"invalid gracePeriodSeconds {grace!r}") from None
        obj = self.state.delete(kind, namespace, name, seconds, options.get("preconditions"),
                                _dry_run(request, options.get("dryRun")))
        if kind is PODS or kind is NODES:
            return Response.json(200, obj)  # the API server answers a delete with the object
        return Response.json(200, success(200, {"name": name, "group": kind.group, "kind": kind.plural,
                                                "uid": obj["metadata"]["uid"]}))


def _lines(events: List[Dict[str, Any]]) -> bytes:
    return "".join(json.dumps(event) + "\n" for event in events).encode("utf-8")


def _selection(request: Request, kind: Kind) -> Callable[[Dict[str, Any]], bool]:
    """The list's `labelSelector` and `fieldSelector` as one predicate (400 when unreadable)."""
    try:
        labels = parse_label_selector(request.param("labelSelector"))
        fields = parse_field_selector(request.param("fieldSelector"), kind.fields)
    except SelectorError as exc:
        raise bad_request(str(exc)) from None
    return lambda obj: labels(obj["metadata"].get("labels") or {}) and fields(obj)


def not_found_path() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource")


def _json(document: Optional[Dict[str, Any]]) -> Response:
    if document is None:
        raise not_found_path()
    return Response.json(200, document)


def _body(request: Request) -> Dict[str, Any]:
    media = (request.header("Content-Type") or "application/json").split(";")[0].strip().lower()
    if media not in ("application/json", "*/*", ""):
        raise ApiError(415, "UnsupportedMediaType", f'the body of the request was in an unknown format - accepted '
                       f'media types include: application/json (got "{media}")')
    try:
        body = json.loads(request.body or b"{}")
    except ValueError as exc:
        raise bad_request(f"the request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    return body


def _delete_options(request: Request) -> Dict[str, Any]:
    """DeleteOptions from a DELETE's body: JSON, or the protobuf kubectl's typed clients send."""
    if not request.body:
        return {}
    media = (request.header("Content-Type") or "").split(";")[0].strip().lower()
    if media != protobuf.MEDIA_TYPE:
        return _body(request)
    try:
        return protobuf.delete_options(request.body)
    except (protobuf.ProtobufError, UnicodeDecodeError) as exc:
        raise bad_request(f"unreadable protobuf DeleteOptions: {exc}") from None


def _check_body_kind(kind: Kind, body: Dict[str, Any]) -> None:
    sent_kind, sent_version = body.get("kind"), body.get("apiVersion")
    if sent_kind not in (None, kind.kind) or sent_version not in (None, kind.api_version):
        raise bad_request(f"the API version in the data ({sent_version}) does not match the expected API version "
                          f"({kind.api_version})" if sent_kind == kind.kind else
                          f"{sent_version}, Kind={sent_kind} is not the kind served at this path ({kind.kind})")


def _dry_run(request: Request, sent: Any = None) -> bool:
    """`dryRun` from the query and, for deletes and evictions, from the body's DeleteOptions (where
    kubectl's `--dry-run=server` puts it): either one makes the request change nothing."""
    values = list(request.query.get("dryRun") or [])
    if sent is not None:
        if not isinstance(sent, list) or not all(isinstance(value, str) for value in sent):
            raise bad_request(f"Invalid dryRun value {sent!r}: a list of strings, supported value: \"All\"")
        values += sent
    if any(value != "All" for value in values):
        raise bad_request(f"Invalid dryRun value {values!r}: supported value: \"All\"")
    return bool(values)


def _page(request: Request) -> Tuple[int, int]:
    try:
        limit = int(request.param("limit") or 0)
    except ValueError:
        raise bad_request("limit must be a whole number") from None
    token = request.param("continue")
    if not token:
        return 0, max(limit, 0)
    try:
        start = int(json.loads(base64.urlsafe_b64decode(token.encode()))["start"])
    except (ValueError, KeyError, TypeError):
        raise ApiError(400, "BadRequest", "continue key is not valid") from None
    return start, max(limit, 0)

