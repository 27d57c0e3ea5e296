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
    | order by id asc                        (optional; rows are always returned in id order)

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
import zlib
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from vmss_terminate.emulator.arm import shapes
from vmss_terminate.emulator.arm.inventory import ArmState, ScaleSetRecord
from vmss_terminate.emulator.server import Response

API_VERSIONS = ("2021-03-01", "2022-10-01", "2024-04-01")
SCALE_SET_TYPE = "microsoft.compute/virtualmachinescalesets"
PROJECTED = ("id", "name", "type", "subscriptionId", "resourceGroup", "location", "tags", "sku", "properties")
MAX_SUBSCRIPTIONS = 1000
MAX_TOP = 1000
ROW_API_VERSION = "2024-11-01"  # the shape Resource Graph serves: the latest properties

_TOKEN = re.compile(r"""\s*(?:(?P<str>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")|(?P<op>=~|==|in~|\||\(|\)|\[|\]|,)|(?P<word>[A-Za-z_][A-Za-z0-9_]*))""")


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

    def matches(self, ss: ScaleSetRecord) -> bool:
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


def parse_query(text: str) -> Query:
    """Parse one of the served query forms (module docstring); QueryError otherwise."""
    p = _Parser(text)
    query = Query()
    p.take("resources")
    p.take("|")
    p.take("where")
    p.take("type")
    p.take("=~")
    if p.string().lower() != SCALE_SET_TYPE:
        raise QueryError(f"only type =~ '{SCALE_SET_TYPE}' is served by the emulator", 0, "type")
    projected = False
    while p.peek() is not None:
        p.take("|")
        verb = p.take(kind="word")
        if projected and verb != "order":
            raise QueryError(f"'{verb}' after project is not served", p.items[p.index - 1][2], verb)
        if verb == "where":
            _where(p, query)
        elif verb == "project" and not projected:
            columns = [p.take(kind="word")]
            while p.peek() is not None and p.peek()[1] == ",":  # type: ignore[index]
                p.take(",")
                columns.append(p.take(kind="word"))
            if tuple(columns) != PROJECTED:
                raise QueryError(f"project must list exactly: {', '.join(PROJECTED)}", 0, "project")
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


def _where(p: _Parser, query: Query) -> None:
    column = p.take(kind="word")
    if column == "resourceGroup":
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
                                             "forms in vmss_terminate/emulator/arm/resourcegraph.py)",
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
    with state.lock:
        selected = sorted((ss for ss in state.scale_sets()
                           if (not subscriptions and not groups or ss.subscription.lower() in scope)
                           and query.matches(ss)), key=lambda ss: ss.resource_id.lower())
        rows = [row(ss) for ss in selected]
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
    page = rows[start:start + top]
    payload: Dict[str, Any] = {"totalRecords": len(rows), "count": len(page),
                               "data": page, "facets": [], "resultTruncated": "false"}
    if start + top < len(rows):
        if state.rg_truncated:
            payload["resultTruncated"] = "true"
        else:
            payload["$skipToken"] = _skip_token(start + top, body["query"])
    return Response.json(200, payload)
