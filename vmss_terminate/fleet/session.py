"""One fleet run's connection to Azure: a single credential (one token for the whole run), one
per-subscription throttle shared by every client, and the clients built from them.

Why one session: a fleet touches hundreds of scale sets; building a credential per set would fetch
a token per set, and separate throttles could not slow a whole subscription down together.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any, Dict, Iterator, List, Optional

from vmss_terminate.clock import SYSTEM_CLOCK, Clock
from vmss_terminate.control.arm_errors import arm_errors
from vmss_terminate.control.connection import Connection
from vmss_terminate.control.pipeline import build_credential, quiet_sdk_logging, require_sdk, sdk_client_kwargs
from vmss_terminate.control.scaleset import ComputeClient
from vmss_terminate.control.subscriptions import list_subscriptions
from vmss_terminate.errors import AzureError
from vmss_terminate.fleet.throttle import SubscriptionThrottle


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
        self._graph: Any = None
        self._computes: Dict[str, ComputeClient] = {}
        self._lock = threading.Lock()

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

    def graph(self) -> Any:
        """The ResourceGraphClient (also used for the tenant-level subscription list)."""
        credential = self.credential
        with self._lock:
            if self._graph is None:
                from azure.mgmt.resourcegraph import ResourceGraphClient  # noqa: PLC0415

                kwargs = sdk_client_kwargs(self.resolved)
                kwargs.pop("polling_interval", None)
                self._graph = ResourceGraphClient(credential, **kwargs)
            return self._graph

    def list_subscriptions(self) -> List[Dict[str, Any]]:
        """`GET /subscriptions` (every page): what the credential can see, with display names."""
        with arm_errors("listing subscriptions", "subscriptions"):
            return list_subscriptions(self.graph())

    def query_pages(self, query: str, subscriptions: List[str], management_groups: List[str]) -> Iterator[List[Dict[str, Any]]]:
        """Resource Graph pages of `query` (objectArray rows), following `$skipToken` to the end."""
        from azure.mgmt.resourcegraph.models import QueryRequest, QueryRequestOptions  # noqa: PLC0415

        skip_token: Optional[str] = None
        while True:
            request = QueryRequest(
                query=query,
                subscriptions=subscriptions or None,
                management_groups=management_groups or None,
                options=QueryRequestOptions(top=1000, skip_token=skip_token, result_format="objectArray"),
            )
            with arm_errors("querying Azure Resource Graph", "resources"):
                response = self.graph().resources(request)
            data = response.data if isinstance(response.data, list) else []
            skip_token = response.skip_token
            if not skip_token and str(getattr(response, "result_truncated", "") or "").lower() == "true":
                raise AzureError(
                    f"Azure Resource Graph truncated the result ({len(data)} of {response.total_records} rows) and "
                    "gave no $skipToken to read the rest: refusing an incomplete audit. Narrow the scope "
                    "(--subscription, -g, --name) and re-run")
            yield [row for row in data if isinstance(row, dict)]
            if not skip_token:
                return

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

