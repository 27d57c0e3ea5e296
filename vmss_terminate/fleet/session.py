"""One fleet run's connection to Azure: a single credential (one token for the whole run), one
per-subscription throttle shared by every client, and the clients built from them.

Why one session: a fleet touches hundreds of scale sets; building a credential per set would fetch
a token per set, and separate throttles could not slow a whole subscription down together.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import threading
from typing import Any, Callable, Dict, List, Optional, Set

from vmss_terminate.clock import SYSTEM_CLOCK, Clock
from vmss_terminate.control.arm_errors import arm_errors, json_object
from vmss_terminate.control.connection import Connection
from vmss_terminate.control.paging import MAX_PAGES
from vmss_terminate.control.pipeline import ArmClient, build_credential, quiet_sdk_logging, require_sdk
from vmss_terminate.control.scaleset import ComputeClient, raise_for_arm_status
from vmss_terminate.control.subscriptions import list_subscriptions
from vmss_terminate.errors import AzureError
from vmss_terminate.fleet.throttle import SubscriptionThrottle
from vmss_terminate.params import shown

GRAPH_API_VERSION = "2021-03-01"
"""Resource Graph's api-version: azure-mgmt-resourcegraph's default (its newest GA version)."""
MAX_GRAPH_PAGES = MAX_PAGES
"""Pages one Resource Graph query may take (1,000 rows each: a million scale sets); past it the
query fails instead of paging on."""


log = logging.getLogger(__name__)

MAX_GRAPH_QUOTA_WAIT = 60.0
"""Longest wait for Resource Graph's user quota to reset (its documented window is 5 s): a larger
`x-ms-user-quota-resets-after` is not trusted beyond this."""


def graph_quota_wait(headers: Any) -> Optional[float]:
    """Seconds to wait before the next Resource Graph query: `x-ms-user-quota-resets-after` (hh:mm:ss)
    when `x-ms-user-quota-remaining` is 0, bounded by MAX_GRAPH_QUOTA_WAIT; None when quota remains
    or the headers are absent or unreadable."""
    remaining, resets = headers.get("x-ms-user-quota-remaining"), headers.get("x-ms-user-quota-resets-after")
    if remaining is None or resets is None or str(remaining).strip() != "0":
        return None
    parts = str(resets).strip().split(":")
    try:
        hours, minutes, secs = (float(p) for p in parts) if len(parts) == 3 else (0.0, 0.0, float("nan"))
    except ValueError:
        return None
    seconds = hours * 3600 + minutes * 60 + secs
    if not math.isfinite(seconds) or seconds < 0:
        return None
    return min(seconds, MAX_GRAPH_QUOTA_WAIT)


@dataclasses.dataclass
class GraphResult:
    """The distinct rows of one Resource Graph query and what reading them took."""

    rows: List[Dict[str, Any]] = dataclasses.field(default_factory=list)
    pages: int = 0
    duplicates: int = 0  # rows answered again (same id, any case), dropped


def _digest(row: Dict[str, Any], key: str) -> bytes:
    """What a row says, in 16 bytes (its id as ARM compares ids, case-insensitively): a repeat of
    the row is checked against this instead of against a kept copy of the first row."""
    text = json.dumps(dict(row, id=key), sort_keys=True, separators=(",", ":"), default=repr)
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()


def _short(token: str) -> str:
    return repr(token if len(token) <= 24 else token[:20] + "...")


class FleetSession:
    """Credential, throttle and clients for one audit or rollout. Use as a context manager."""

    def __init__(self, connection: Optional[Connection] = None, clock: Clock = SYSTEM_CLOCK,
                 throttle: Optional[SubscriptionThrottle] = None) -> None:
        require_sdk("vmss_terminate.fleet")
        connection = connection or Connection()
        self.throttle = throttle or SubscriptionThrottle(clock)
        self.clock = clock
        self._owns_credential = connection.credential is None
        self._base = dataclasses.replace(
            connection, policy_factories=tuple(connection.policy_factories) + (self.throttle.policy,))
        # resolved once for the run (validates endpoint/api-version early); each subscription's
        # connection is derived from it, never re-read from the environment
        self.resolved = self._base.resolve(require_subscription=False)
        self._graph: Optional[ArmClient] = None
        self._computes: Dict[str, ComputeClient] = {}
        self._lock = threading.Lock()
        self._graph_resets_at: Optional[float] = None  # monotonic: when a spent Resource Graph quota resets
        self.graph_quota_waits = 0  # queries held back until the user quota reset (not sent to be 429ed)

    @property
    def credential(self) -> Any:
        with self._lock:
            if self._base.credential is None:
                quiet_sdk_logging()
                self._base = dataclasses.replace(self._base, credential=build_credential(self._base.cloud))
            return self._base.credential

    def compute(self, subscription_id: str) -> ComputeClient:
        """The subscription's one compute client (one SDK client and connection pool), shared by every
        scale set and thread of the run: shared credential and throttle. Closed with the session."""
        key = subscription_id.lower()
        credential = self.credential
        with self._lock:
            client = self._computes.get(key)
            if client is None:
                client = ComputeClient(self.resolved.for_subscription(subscription_id), credential=credential)
                self._computes[key] = client
            return client

    def graph(self) -> ArmClient:
        """The tenant-level ARM pipeline (`control.pipeline.ArmClient`): Resource Graph queries and
        the subscription list."""
        credential = self.credential
        with self._lock:
            if self._graph is None:
                self._graph = ArmClient(self.resolved, credential, "resourcegraph")
            return self._graph

    def list_subscriptions(self) -> List[Dict[str, Any]]:
        """`GET /subscriptions` (every page): what the credential can see, with display names."""
        with arm_errors("listing subscriptions", "subscriptions"):
            return list_subscriptions(self.graph())

    def query_rows(self, query: str, subscriptions: List[str], management_groups: List[str],
                   on_row: Optional[Callable[[Dict[str, Any]], None]] = None) -> "GraphResult":
        """Every row of `query` (objectArray), following `$skipToken` to the end, or AzureError:
        an answer that is incomplete (fewer distinct rows than its `totalRecords`, a truncated
        page with no `$skipToken`) or pages in a loop (a `$skipToken` answered twice, more than
        MAX_GRAPH_PAGES pages) never passes for the estate. Rows are de-duplicated by resource id,
        case-insensitively as ARM compares ids (Resource Graph repeats rows when the estate
        changes between pages): a repeat with the same contents is counted (`duplicates`; it is one
        of `totalRecords`, so completeness counts every row answered), a repeat that disagrees with
        the first copy fails the answer (which one is current cannot be told).

        With `on_row`, each distinct row is handed to it as its page is read and not kept
        (`rows` stays empty): a 10,000-set audit holds its records, not the rows too. Only each
        row's id and a digest of its contents are kept, for the repeat check."""
        result = GraphResult()
        seen_ids: Dict[str, bytes] = {}
        distinct = 0
        seen_tokens: Set[str] = set()
        skip_token: Optional[str] = None
        total: Optional[int] = None
        while True:
            if result.pages >= MAX_GRAPH_PAGES:
                raise AzureError(f"Azure Resource Graph paging did not end after {MAX_GRAPH_PAGES} pages "
                                 f"({distinct} rows): refusing an incomplete audit. Narrow the scope "
                                 "(--subscription, -g, --name) and re-run")
            options: Dict[str, Any] = {"$top": 1000, "resultFormat": "objectArray"}
            if skip_token:
                options["$skipToken"] = skip_token
            request: Dict[str, Any] = {"query": query, "options": options}
            if subscriptions:
                request["subscriptions"] = subscriptions
            if management_groups:
                request["managementGroups"] = management_groups
            self._await_graph_quota()
            with arm_errors("querying Azure Resource Graph", "resources"):
                response = self._graph_page(request)
            result.pages += 1
            data = response.pop("data", None)  # the page's rows go with this loop turn, not held to the end
            if not isinstance(data, list):
                raise AzureError(f"Azure Resource Graph answered page {result.pages} with data that is not a "
                                 f"list of rows ({type(data).__name__}): refusing an incomplete audit")
            for row in data:
                if not isinstance(row, dict):
                    raise AzureError(f"Azure Resource Graph answered a row that is not an object "
                                     f"({type(row).__name__}) on page {result.pages}: refusing an incomplete audit")
                key = str(row.get("id") or "").lower()
                digest = _digest(row, key)
                if key and key in seen_ids:
                    if seen_ids[key] != digest:
                        raise AzureError(f"Azure Resource Graph answered {row.get('id')} twice with different contents "
                                         "(the estate changed while it was read): which copy is current cannot be "
                                         "told; refusing the answer -- re-run")
                    result.duplicates += 1
                    continue
                seen_ids[key] = digest
                distinct += 1
                if on_row is None:
                    result.rows.append(row)
                else:
                    on_row(row)
            del data
            records = response.get("totalRecords")
            if isinstance(records, bool) or not isinstance(records, int):
                raise AzureError(f"Azure Resource Graph answered page {result.pages} without totalRecords "
                                 f"({shown(records)}): its completeness cannot be checked; "
                                 "refusing an incomplete audit")
            total = records
            token = response.get("$skipToken")
            skip_token = str(token) if token else None
            if skip_token and skip_token in seen_tokens:
                raise AzureError(f"Azure Resource Graph paging loop: $skipToken {_short(skip_token)} was answered "
                                 f"again on page {result.pages} ({distinct} rows read): refusing an "
                                 "incomplete audit")
            if not skip_token:
                break
            seen_tokens.add(skip_token)
        truncated = str(response.get("resultTruncated") or "").lower() == "true"
        answered = distinct + result.duplicates  # totalRecords counts the repeats too
        missing = total - answered if total is not None and answered < total else 0
        if truncated:
            raise AzureError(
                f"Azure Resource Graph truncated the result ({distinct} of {total if total is not None else '?'} "
                "rows) and gave no $skipToken to read the rest: refusing an incomplete audit. Narrow the scope "
                "(--subscription, -g, --name) and re-run")
        if missing:
            raise AzureError(
                f"Azure Resource Graph answered {answered} of {total} rows (totalRecords {total}) with no "
                f"$skipToken to read the other {missing}: refusing an incomplete audit; re-run (Resource Graph may "
                "have been updating), or narrow the scope (--subscription, -g, --name)")
        return result

    def _await_graph_quota(self) -> None:
        """The last answer said the user quota is spent (`x-ms-user-quota-remaining: 0`): wait on the
        session's clock until it resets (at most MAX_GRAPH_QUOTA_WAIT; a stopped run stops waiting)
        instead of sending a query Resource Graph answers 429."""
        with self._lock:
            resets_at, self._graph_resets_at = self._graph_resets_at, None
        pause = 0.0 if resets_at is None else resets_at - self.clock.monotonic()
        if pause <= 0:
            return
        self.graph_quota_waits += 1
        log.info("Resource Graph user quota spent: next query in %.1f s (x-ms-user-quota-resets-after)", pause)
        if self.throttle.stop is not None:
            self.clock.wait(self.throttle.stop, pause)
        else:
            self.clock.sleep(pause)

    def _graph_page(self, request: Dict[str, Any]) -> Dict[str, Any]:
        """One Resource Graph page as the JSON object ARM answered, parsed once: the request goes
        through the session's ARM pipeline (credential, origin rule, retries, the throttle's
        headers), but its answer is not turned into the SDK's models (a generic object per value
        of every row, which the audit then read again: ~60 % of an audit's CPU)."""
        from azure.core.rest import HttpRequest

        body = json.dumps(request, separators=(",", ":")).encode("utf-8")
        answer = self.graph().send_request(HttpRequest(
            "POST", f"/providers/Microsoft.ResourceGraph/resources?api-version={GRAPH_API_VERSION}", content=body,
            headers={"Content-Type": "application/json", "Accept": "application/json"}), stream=True)
        answer.read()
        wait = graph_quota_wait(answer.headers)
        with self._lock:
            self._graph_resets_at = None if wait is None else self.clock.monotonic() + wait
        if answer.status_code >= 400:
            raise_for_arm_status(answer)
        return json_object(answer.content, f"Azure Resource Graph answered {answer.status_code}")

    def close(self) -> None:
        for client in self._computes.values():
            client.close()
        self._computes.clear()
        if self._graph is not None:
            self._graph.close()
            self._graph = None
        if self._owns_credential and self._base.credential is not None:
            close = getattr(self._base.credential, "close", None)
            if close is not None:
                close()

    def __enter__(self) -> "FleetSession":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

