"""Azure Resource Graph for the local ARM emulator: `POST /providers/Microsoft.ResourceGraph/resources`
(api-version 2021-03-01), serving exactly the query forms `vmss_terminate.fleet` sends.

Why a strict subset rather than a KQL engine: an emulator that half-understands a query returns
wrong data silently. Every query outside the grammar below gets Resource Graph's own error shape
(400 BadRequest with InvalidQuery / ParserFailure details), so a client change that the emulator
does not serve fails loudly in the tests instead of passing on invented rows.

Understood (whitespace free, keywords and operators case-sensitive as in KQL, strings in '...' or
"..." with backslash escapes)::

    resources
    | where type =~ 'microsoft.compute/virtualmachinescalesets'      (required, first)
    | where resourceGroup =~ 'RG'            or  resourceGroup in~ ('RG1', 'RG2')
    | where tags['KEY'] =~ 'VALUE'           (repeatable: all must match; or `==`)

    KQL semantics, so the emulator stays an honest oracle: `tags['KEY']` looks the name up exactly
    (KQL property access is case-sensitive, though Azure treats tag names case-insensitively: the
    fleet client therefore matches `--tag` on the rows itself), `=~` compares the value
    case-insensitively and `==` exactly.
    | where name matches regex '(?i)^...$'   (a Python-compatible RE2 subset)
    | project id, name, type, subscriptionId, resourceGroup, location, tags, sku, properties
      or any list of row fields and `column = field.path.to.value` (KQL's dynamic property access:
      `capacity = sku.capacity, upgradeMode = properties.upgradePolicy.mode`); a path that is not
      there projects null, as in Resource Graph; `id` must be projected (paging needs it)
    | order by id asc                        (optional; rows are always returned in id order)

And one summary over `computeresources` (the scale-set VMs of Uniform sets: their model view),
with the same optional `resourceGroup` filters; the rest of the query must be exactly
`COMPUTE_SUMMARY` (whitespace aside)::

    computeresources
    | where type =~ 'microsoft.compute/virtualmachinescalesets/virtualmachines'
    | where resourceGroup =~ 'RG' ...                                  (optional, as above)
    | extend scaleSetId = tolower(extract('(?i)^(.*)/virtualmachines/[^/]+$', 1, id))
    | extend latestModelApplied = tobool(properties.latestModelApplied)
    | summarize instances = count(), reported = countif(isnotnull(latestModelApplied)),
        stale = countif(latestModelApplied == false) by id = scaleSetId
    | order by id asc

    one row per Uniform scale set with instances: {"id" (lower case), "instances", "reported", "stale"}.
    `state.rg_compute_resources = False` (seed `"resourceGraphComputeResources": false`) answers it
    400 as a cloud without the table would; `state.rg_model_reported = False` (seed
    `"resourceGraphModelReported": false`) serves rows whose VMs carry no latestModelApplied
    (`reported` 0), as the property's absence would look.

And the scheduled events of scale sets (emulator/arm/maintenance.py: rows only of sets whose
scheduledEventsPolicy publishes to Event Grid and Resource Graph)::

    maintenanceresources
    | where type =~ 'microsoft.maintenance/scheduledevents'
    | where resourceGroup =~ 'RG' ...                                  (optional, as above)
    | project id, name, type, subscriptionId, resourceGroup, location, properties
    | order by id asc                                                  (optional)

The scale-set query also takes `| where id in~ ('ID1', 'ID2')` (resource ids, case-insensitive):
the central handler reads only the sets that have events.

Request body: `subscriptions` (at most 1,000) and/or `managementGroups` (subscriptions from the
seed's `managementGroups`); neither = every subscription the emulator knows. `options`:
`resultFormat` objectArray (the default; `table` is refused), `$top` (<= 1,000; default and cap
`state.rg_page_size`), `$skip`, `$skipToken` (opaque; from the previous page). Answer:
`{"totalRecords", "count", "data", "facets": [], "resultTruncated": "false", "$skipToken"?}`.
Rows: lower-case `type` and `resourceGroup` (as Resource Graph normalises them), the latest
api-version's `properties` (orchestrationMode included).
"""

from __future__ import annotations

import base64
import json
import re
import time
import uuid
import weakref
import zlib
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

from vmss_terminate_sim.emulator.arm import maintenance, shapes
from vmss_terminate_sim.emulator.arm.inventory import ArmState, ScaleSetRecord
from vmss_terminate_sim.emulator.server import Response

API_VERSIONS = ("2021-03-01", "2022-10-01", "2024-04-01")
SCALE_SET_TYPE = "microsoft.compute/virtualmachinescalesets"
VM_TYPE = "microsoft.compute/virtualmachinescalesets/virtualmachines"
COMPUTE_SUMMARY = (
    "| extend scaleSetId = tolower(extract('(?i)^(.*)/virtualmachines/[^/]+$', 1, id)) "
    "| extend latestModelApplied = tobool(properties.latestModelApplied) "
    "| summarize instances = count(), reported = countif(isnotnull(latestModelApplied)), "
    "stale = countif(latestModelApplied == false) by id = scaleSetId "
    "| order by id asc"
)
PROJECTED = ("id", "name", "type", "subscriptionId", "resourceGroup", "location", "tags", "sku", "properties")
MAINTENANCE_PROJECTED = ("id", "name", "type", "subscriptionId", "resourceGroup", "location", "properties")
MAX_SUBSCRIPTIONS = 1000
MAX_TOP = 1000
ROW_API_VERSION = "2025-04-01"  # the shape Resource Graph serves: the latest properties (scheduledEventsPolicy whole)
CACHED_RESULTS = 4  # ordered results kept per emulator for the pages after the first (the last few queries)

_TOKEN = re.compile(r"""\s*(?:(?P<str>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")|(?P<op>=~|==|in~|=|\.|\||\(|\)|\[|\]|,)|(?P<word>[A-Za-z_][A-Za-z0-9_]*))""")


class QueryError(Exception):
    """A query outside the served grammar; `position` is the character offset of the problem."""

    def __init__(self, message: str, position: int = 0, token: str = "") -> None:
        super().__init__(message)
        self.position = position
        self.token = token


@dataclass
class Query:
    """A parsed query: the filters the grammar allows."""

    resource_groups: List[str] = field(default_factory=list)
    tags: List[Tuple[str, str, bool]] = field(default_factory=list)  # (name, value, exact `==`)
    name_pattern: Optional["re.Pattern[str]"] = None
    summary: bool = False  # the computeresources summary (stale instances per scale set)
    maintenance: bool = False  # maintenanceresources: the scheduled events of the sets selected
    ids: Optional[List[str]] = None  # `where id in~ (...)`: scale sets by resource id
    columns: Optional[List[Tuple[str, Tuple[str, ...]]]] = None  # (name, path in the row); None: PROJECTED

    def matches(self, ss: ScaleSetRecord) -> bool:
        if self.ids is not None and ss.resource_id.lower() not in {i.lower() for i in self.ids}:
            return False
        if self.resource_groups and ss.resource_group.lower() not in {g.lower() for g in self.resource_groups}:
            return False
        for key, value, exact in self.tags:
            if key not in ss.tags:
                return False
            have = str(ss.tags[key])
            if (have != value) if exact else (have.lower() != value.lower()):
                return False
        return not (self.name_pattern is not None and not self.name_pattern.search(ss.name))


def _unquote(token: str) -> str:
    body = token[1:-1]
    return re.sub(r"\\(.)", r"\1", body)


def _tokens(text: str) -> List[Tuple[str, str, int]]:
    out, pos = [], 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        match = _TOKEN.match(text, pos)
        if not match or match.end() == pos:
            raise QueryError("unexpected character", pos, text[pos:pos + 1])
        kind = match.lastgroup or ""
        start = match.start(kind)
        out.append((kind, match.group(kind), start))
        pos = match.end()
    return out


class _Parser:
    def __init__(self, text: str) -> None:
        self.items = _tokens(text)
        self.index = 0
        self.end = len(text)

    def peek(self) -> Optional[Tuple[str, str, int]]:
        return self.items[self.index] if self.index < len(self.items) else None

    def take(self, value: Optional[str] = None, kind: Optional[str] = None) -> str:
        item = self.peek()
        if item is None:
            raise QueryError(f"expected {value or kind} at the end of the query", self.end, "<EOF>")
        if (value is not None and item[1] != value) or (kind is not None and item[0] != kind):
            raise QueryError(f"expected {value or kind}, found {item[1]!r}", item[2], item[1])
        self.index += 1
        return item[1]

    def string(self) -> str:
        return _unquote(self.take(kind="str"))


def _table_and_type(p: _Parser, table: str, resource_type: str) -> None:
    """`TABLE | where type =~ 'TYPE'`, the start of every served query."""
    p.take(table)
    p.take("|")
    p.take("where")
    p.take("type")
    p.take("=~")
    if p.string().lower() != resource_type:
        raise QueryError(f"only type =~ '{resource_type}' is served from {table} by the emulator", 0, "type")


def _summary_query(text: str) -> Query:
    """The computeresources summary: the type filter, optional resourceGroup filters, then exactly
    COMPUTE_SUMMARY."""
    at = text.find("| extend")
    if at < 0 or " ".join(text[at:].split()) != " ".join(COMPUTE_SUMMARY.split()):
        raise QueryError("computeresources is served only for the stale-instance summary "
                         "(resourcegraph.COMPUTE_SUMMARY)", max(at, 0), "computeresources")
    p = _Parser(text[:at])
    query = Query(summary=True)
    _table_and_type(p, "computeresources", VM_TYPE)
    while p.peek() is not None:
        p.take("|")
        p.take("where")
        if p.peek() is None or p.peek()[1] != "resourceGroup":  # type: ignore[index]
            raise QueryError("only resourceGroup filters are served before the summary", at, "where")
        _where(p, query)
    return query


def _maintenance_query(text: str) -> Query:
    """maintenanceresources: the type filter, optional resourceGroup filters, exactly
    MAINTENANCE_PROJECTED, optional `order by id asc`."""
    p = _Parser(text)
    query = Query(maintenance=True)
    _table_and_type(p, "maintenanceresources", maintenance.TYPE)
    projected = False
    while p.peek() is not None:
        p.take("|")
        verb = p.take(kind="word")
        if verb == "where" and not projected:
            item = p.peek()
            if item is None or item[1] != "resourceGroup":
                raise QueryError("only resourceGroup filters are served on maintenanceresources",
                                 item[2] if item else p.end, item[1] if item else "<EOF>")
            _where(p, query)
        elif verb == "project" and not projected:
            columns = [p.take(kind="word")]
            while p.peek() is not None and p.peek()[1] == ",":  # type: ignore[index]
                p.take(",")
                columns.append(p.take(kind="word"))
            if tuple(columns) != MAINTENANCE_PROJECTED:
                raise QueryError(f"project must list exactly: {', '.join(MAINTENANCE_PROJECTED)}", 0, "project")
            projected = True
        elif verb == "order" and projected:
            p.take("by")
            p.take("id")
            p.take("asc")
        else:
            raise QueryError(f"'{verb}' is not served here by the emulator", p.items[p.index - 1][2], verb)
    if not projected:
        raise QueryError("the query must project the maintenance row fields", p.end, "<EOF>")
    return query


def parse_query(text: str) -> Query:
    """Parse one of the served query forms (module docstring); QueryError otherwise."""
    if text.lstrip().startswith("computeresources"):
        return _summary_query(text)
    if text.lstrip().startswith("maintenanceresources"):
        return _maintenance_query(text)
    p = _Parser(text)
    query = Query()
    _table_and_type(p, "resources", SCALE_SET_TYPE)
    projected = False
    while p.peek() is not None:
        p.take("|")
        verb = p.take(kind="word")
        if projected and verb != "order":
            raise QueryError(f"'{verb}' after project is not served", p.items[p.index - 1][2], verb)
        if verb == "where":
            _where(p, query)
        elif verb == "project" and not projected:
            columns = [_column(p)]
            while p.peek() is not None and p.peek()[1] == ",":  # type: ignore[index]
                p.take(",")
                columns.append(_column(p))
            if tuple(name for name, _ in columns) == PROJECTED and all(len(path) == 1 for _, path in columns):
                query.columns = None  # the whole ARM fields, as before
            elif ("id", ("id",)) not in columns:
                raise QueryError("project must include id (paging sorts by it)", 0, "project")
            else:
                query.columns = columns
            projected = True
        elif verb == "order":
            p.take("by")
            p.take("id")
            p.take("asc")
            if p.peek() is not None:
                item = p.peek()
                assert item is not None
                raise QueryError("order by id asc must be the last clause", item[2], item[1])
        else:
            raise QueryError(f"'{verb}' is not served by the emulator", p.items[p.index - 1][2], verb)
    if not projected:
        raise QueryError("the query must project the ARM resource fields", p.end, "<EOF>")
    return query


def _column(p: _Parser) -> Tuple[str, Tuple[str, ...]]:
    """`field` or `name = field.path.to.value` (the field one of PROJECTED)."""
    name = p.take(kind="word")
    path = [name]
    if p.peek() is not None and p.peek()[1] == "=":  # type: ignore[index]
        p.take("=")
        path = [p.take(kind="word")]
        while p.peek() is not None and p.peek()[1] == ".":  # type: ignore[index]
            p.take(".")
            path.append(p.take(kind="word"))
    if path[0] not in PROJECTED:
        raise QueryError(f"project: '{path[0]}' is not a column of resources (served: {', '.join(PROJECTED)})",
                         p.items[p.index - 1][2], path[0])
    return name, tuple(path)


def projected(full: Dict[str, Any], columns: List[Tuple[str, Tuple[str, ...]]]) -> Dict[str, Any]:
    """The row with only `columns`, each its path's value or null (KQL: a missing property is null)."""
    out: Dict[str, Any] = {}
    for name, path in columns:
        value: Any = full
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        out[name] = value
    return out


def _where(p: _Parser, query: Query) -> None:
    column = p.take(kind="word")
    if column == "id":
        p.take("in~")
        p.take("(")
        ids = [p.string()]
        while p.peek() is not None and p.peek()[1] == ",":  # type: ignore[index]
            p.take(",")
            ids.append(p.string())
        p.take(")")
        query.ids = (query.ids or []) + ids
    elif column == "resourceGroup":
        op = p.take(kind="op")
        if op == "=~":
            query.resource_groups.append(p.string())
        elif op == "in~":
            p.take("(")
            query.resource_groups.append(p.string())
            while p.peek() is not None and p.peek()[1] == ",":  # type: ignore[index]
                p.take(",")
                query.resource_groups.append(p.string())
            p.take(")")
        else:
            raise QueryError(f"resourceGroup {op} is not served (use =~ or in~)", p.items[p.index - 1][2], op)
    elif column == "tags":
        p.take("[")
        key = p.string()
        p.take("]")
        op = p.take(kind="op")
        if op not in ("=~", "=="):
            raise QueryError(f"tags[...] {op} is not served (use =~ or ==)", p.items[p.index - 1][2], op)
        query.tags.append((key, p.string(), op == "=="))
    elif column == "name":
        p.take("matches")
        p.take("regex")
        try:
            query.name_pattern = re.compile(p.string())
        except re.error as exc:
            raise QueryError(f"invalid regex: {exc}", p.items[p.index - 1][2], "regex") from None
    else:
        raise QueryError(f"where on '{column}' is not served", p.items[p.index - 1][2], column)


def row(ss: ScaleSetRecord) -> Dict[str, Any]:
    """A scale set as a Resource Graph row (the projected ARM fields)."""
    arm = shapes.scale_set(ss, ROW_API_VERSION)
    return {
        "id": arm["id"],
        "name": arm["name"],
        "type": SCALE_SET_TYPE,
        "subscriptionId": ss.subscription,
        "resourceGroup": ss.resource_group.lower(),
        "location": arm["location"],
        "tags": arm.get("tags") or {},
        "sku": arm["sku"],
        "properties": arm["properties"],
    }


def _shape(query: Query, reported: bool) -> Callable[[ScaleSetRecord], Dict[str, Any]]:
    """How the query renders one scale set: a summary row, the projected columns, or the ARM fields."""
    columns = query.columns
    if query.summary:
        return lambda ss: summary_row(ss, reported)
    if columns is not None:
        return lambda ss: projected(row(ss), columns)
    return row


def _has_vms(ss: ScaleSetRecord) -> bool:
    return ss.orchestration == "Uniform" and bool(ss.live_instances())


def summary_row(ss: ScaleSetRecord, reported: bool = True) -> Dict[str, Any]:
    """A Uniform scale set's row of the computeresources summary (its live instances)."""
    live = ss.live_instances()
    told = [inst for inst in live if inst.model_reported] if reported else []
    return {"id": ss.resource_id.lower(), "instances": len(live), "reported": len(told),
            "stale": sum(1 for inst in told if not inst.latest_model_applied)}


def error(status: int, message: str, details: List[Dict[str, Any]]) -> Response:
    """Resource Graph's error body: a BadRequest with the real problem in `details`."""
    return Response.json(status, {"error": {
        "code": "BadRequest",
        "message": f"Please provide below info when asking for support: timestamp = {shapes.iso_time(time.time())}, "
                   f"correlationId = {uuid.uuid4()}. {message}",
        "details": details,
    }})


def _query_error(exc: QueryError) -> Response:
    return error(400, str(exc), [
        {"code": "InvalidQuery", "message": "Query is invalid. Please refer to the documentation for the Azure "
                                            "Resource Graph service and fix the error before retrying."},
        {"code": "ParserFailure", "message": f"ParserFailure: {exc} (the local emulator serves only the query "
                                             "forms in vmss_terminate_sim/emulator/arm/resourcegraph.py)",
         "line": 1, "characterPositionInLine": exc.position, "token": exc.token},
    ])


def _bad_request(message: str, code: str = "InvalidRequest") -> Response:
    return error(400, message, [{"code": code, "message": message}])


def _skip_token(offset: int, query: str) -> str:
    raw = json.dumps({"o": offset, "q": zlib.crc32(query.encode())}).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _read_skip_token(token: str, query: str) -> Optional[int]:
    try:
        data = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        if data["q"] != zlib.crc32(query.encode()):
            return None
        return int(data["o"])
    except (ValueError, KeyError, TypeError):
        return None


_RESULTS: "weakref.WeakKeyDictionary[ArmState, OrderedDict[Any, List[ScaleSetRecord]]]" = \
    weakref.WeakKeyDictionary()


def _results(state: ArmState) -> "OrderedDict[Any, List[ScaleSetRecord]]":
    """The emulator's last few ordered query results (lock held), keyed by query, scope, the
    rg_model_reported knob and the estate's generation.

    Why: a 10,000-set audit reads 10 pages; filtering, sorting (and, for the stale summary,
    walking every set's instances) once per page made the emulator, not the client, the cost of
    `fleet audit` (issue 29). A first page (no $skipToken) always selects afresh; a page after
    it is served from the selection the first computed while the estate is unchanged. Any change
    (ArmState.changed(): every write request, every mutation of the inventory) starts a new
    generation, and the next page is cut from the current estate at the token's offset, as
    before: Azure Resource Graph documents no snapshot across pages (its data is refreshed as
    resources change, and a paged result read while they change may skip or repeat rows), so
    the emulator keeps that behaviour for tests that change the estate between pages.
    Rows are rendered from the live records per page, so their contents are always current."""
    found = _RESULTS.get(state)
    if found is None:
        found = _RESULTS[state] = OrderedDict()
    return found


def answer(state: ArmState, body: Any) -> Response:
    """One Resource Graph page for a request body (already JSON-decoded)."""
    if not isinstance(body, dict) or not isinstance(body.get("query"), str):
        return _bad_request("The request content must be a JSON object with a 'query' string.")
    subscriptions = body.get("subscriptions") or []
    groups = body.get("managementGroups") or []
    if not isinstance(subscriptions, list) or not isinstance(groups, list):
        return _bad_request("'subscriptions' and 'managementGroups' must be lists.")
    if len(subscriptions) > MAX_SUBSCRIPTIONS:
        return _bad_request(f"A query may name at most {MAX_SUBSCRIPTIONS} subscriptions; {len(subscriptions)} "
                            "were given. Split the request.", "TooManySubscriptions")
    options = body.get("options") or {}
    if not isinstance(options, dict):
        return _bad_request("'options' must be an object.")
    if str(options.get("resultFormat", "objectArray")) != "objectArray":
        return _bad_request("The local emulator serves resultFormat objectArray only.", "UnsupportedResultFormat")
    try:
        query = parse_query(body["query"])
    except QueryError as exc:
        return _query_error(exc)
    scope = {s.lower() for s in subscriptions if isinstance(s, str)}
    for group in groups:
        members = state.management_group_subscriptions(str(group))
        if members is None:
            return error(400, f"Management group '{group}' was not found or is not accessible.",
                         [{"code": "ManagementGroupNotFound", "message": f"Management group '{group}' was not found."}])
        scope.update(s.lower() for s in members)
    if query.summary and not state.rg_compute_resources:
        return error(400, "Table 'computeresources' is not available in this cloud.", [
            {"code": "InvalidQuery", "message": "Query is invalid."},
            {"code": "UnknownTable", "message": "Unknown table 'computeresources' (emulator: "
                                                "state.rg_compute_resources is False)"}])
    with state.lock:
        key = (body["query"], tuple(sorted(scope)), not subscriptions and not groups,
               state.rg_model_reported, state.generation)
        results = _results(state)
        cached = results.get(key) if options.get("$skipToken") else None
        if cached is None:
            selected = sorted((ss for ss in state.scale_sets()
                               if (not subscriptions and not groups or ss.subscription.lower() in scope)
                               and query.matches(ss) and (not query.summary or _has_vms(ss))),
                              key=lambda ss: ss.resource_id.lower())
            results[key] = selected
            while len(results) > CACHED_RESULTS:
                results.popitem(last=False)
        else:
            selected = cached
            results.move_to_end(key)
        shape: Callable[[Any], Dict[str, Any]] = _shape(query, state.rg_model_reported)
    records: List[Any] = selected
    if query.maintenance:  # one row per event of the selected sets, not one per set
        records = state.maintenance.rows(selected)
        shape = dict
    try:
        top = int(options.get("$top") or min(MAX_TOP, state.rg_page_size))
        skip = int(options.get("$skip") or 0)
    except (TypeError, ValueError):
        return _bad_request("$top and $skip must be integers.")
    if not 1 <= top <= MAX_TOP or skip < 0:
        return _bad_request(f"$top must be 1..{MAX_TOP} and $skip >= 0.")
    top = min(top, state.rg_page_size)
    start = skip
    if options.get("$skipToken"):
        offset = _read_skip_token(str(options["$skipToken"]), body["query"])
        if offset is None:
            return _bad_request("The $skipToken is invalid for this query.", "InvalidSkipToken")
        start = offset
    with state.lock:  # only the page's rows are rendered: a big estate is paged, not re-rendered
        page = [shape(item) for item in records[start:start + top]]
    payload: Dict[str, Any] = {"totalRecords": len(records), "count": len(page),
                               "data": page, "facets": [], "resultTruncated": "false"}
    if start + top < len(records):
        if state.rg_truncated:
            payload["resultTruncated"] = "true"
        else:
            payload["$skipToken"] = _skip_token(start + top, body["query"])
    return Response.json(200, payload)
