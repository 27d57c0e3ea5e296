"""The scale-set client: ARM operations on scale sets, as plain wire-form dicts.

`ComputeClient` is one subscription's ARM compute client: its connection resolved once, one
credential and one SDK client (one connection pool), safe to share between threads. A command
builds one; a fleet run builds one per subscription and hands it to every scale set there.
`ScaleSetClient` is one scale set seen through it (`compute.scale_set(rg, name)`), or, built from
a `Connection`, through a `ComputeClient` of its own.

Plain dicts rather than SDK models: the parser must tolerate what old api-versions and
half-configured scale sets return (no `scheduledEventsProfile`, `{}`, no `enable`).
"""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from typing import Any, Dict, List, Optional, Sequence, Union
from urllib.parse import urlsplit

from vmss_terminate.control.arm_errors import ArmRequestError, arm_errors, describe_json, json_object
from vmss_terminate.control.connection import Connection, ResolvedConnection
from vmss_terminate.control.events_policy import FEATURES_API_VERSION
from vmss_terminate.control.names import check_resource_group, check_scale_set_name
from vmss_terminate.control.operations import DEFAULT_WAIT, OperationWait, await_operation
from vmss_terminate.control.origin import OriginGuard
from vmss_terminate.control.paging import PageGuard
from vmss_terminate.control.pipeline import ArmClient, build_credential, quiet_sdk_logging, require_sdk
from vmss_terminate.control.profile import etag_of
from vmss_terminate.control.subscriptions import lookup_subscription
from vmss_terminate.errors import AzureError

FALLBACK_API_VERSION = "2024-11-01"
"""Sent when the SDK's own default cannot be read (its private request builder moved)."""
STALE_FILTER = "properties/latestModelApplied eq false"


class ComputeClient:
    """One subscription's ARM pipeline (`control.pipeline.ArmClient`), built on first use and shared
    by every scale set.

    `connection` is resolved here once (a `Connection`), or was resolved by the caller (a
    `ResolvedConnection`, e.g. `FleetSession` for each subscription). A subscription given by display
    name is looked up on first use, once. `credential` (else the connection's, else a
    DefaultAzureCredential built here and closed by `close()`).
    """

    def __init__(self, connection: Union[Connection, ResolvedConnection], credential: Any = None) -> None:
        require_sdk("vmss_terminate.control")
        self.resolved = connection.resolve() if isinstance(connection, Connection) else connection
        self._credential = credential if credential is not None else self.resolved.source.credential
        self._owns_credential = self._credential is None
        self._client: Any = None
        self._lock = threading.Lock()
        self.guard = OriginGuard(self.resolved.base_url)
        self._api_version: Optional[str] = None
        self._features: Dict[str, str] = {}

    @property
    def subscription_id(self) -> str:
        return self.resolved.subscription_id

    def scale_set(self, resource_group: str, name: str) -> "ScaleSetClient":
        """One scale set of this subscription, over this client (closing it leaves this open)."""
        return ScaleSetClient(self, resource_group, name)

    def send(self, method: str, url: str, body: Optional[bytes] = None,
             params: Optional[Dict[str, str]] = None, headers: Optional[Dict[str, str]] = None) -> Any:
        """One request through the subscription's pipeline (credential, retries, origin rule), with
        the api-version that goes on the wire; an error answer raises the SDK's exception for it
        (404 ResourceNotFoundError, 401 ClientAuthenticationError, else HttpResponseError), which
        `arm_errors` turns into one line. `url` is a path on the endpoint or a link ARM gave."""
        from azure.core.rest import HttpRequest

        headers = {**({"Content-Type": "application/json"} if body is not None else {}), **(headers or {})}
        params = dict(params or {})
        if "api-version=" not in url:
            params["api-version"] = self.api_version
        # streamed, then read here: azure-core would otherwise decode a JSON body itself and fail on
        # one ARM answered badly before we could say what it was (the SDK's own writes do the same)
        client = self._client or self.sdk()  # built once: no lock per request after that
        response = client.send_request(HttpRequest(method, url, params=params, content=body, headers=headers),
                                       stream=True)
        response.read()
        if response.status_code >= 400:
            raise_for_arm_status(response)
        return response

    def feature_state(self, namespace: str, name: str) -> str:
        """A subscription feature's registration state (`Registered`, `NotRegistered`, ...), read
        with Microsoft.Features' Features_Get once per client: a fleet run asks once per subscription."""
        key = f"{namespace}/{name}".lower()
        with self._lock:
            if key in self._features:
                return self._features[key]
        what = f"reading the registration of feature {namespace}/{name}"
        with arm_errors(what, f"subscription {self.resolved.subscription_id}", self.resolved.subscription_id):
            self.sdk()
            answer = self.send("GET", f"/subscriptions/{self.resolved.subscription_id}/providers/Microsoft.Features"
                                      f"/providers/{namespace}/features/{name}?api-version={FEATURES_API_VERSION}")
        body = json_object(answer.content, f"{what}: ARM answered {answer.status_code}")
        state = (body.get("properties") or {}).get("state") if isinstance(body.get("properties"), dict) else None
        if not isinstance(state, str) or not state:
            raise AzureError(f"{what}: Microsoft.Features answered without properties.state "
                             f"({describe_json(body)})")
        with self._lock:
            self._features[key] = state
        return state

    @property
    def api_version(self) -> str:
        """The compute api-version on the wire: the pinned one, else the SDK's own default."""
        if self._api_version is None:
            version = self.resolved.effective_api_version()
            self._api_version = version if version[:1].isdigit() else FALLBACK_API_VERSION
        return self._api_version

    def sdk(self) -> Any:
        """The subscription's ArmClient, built (and the subscription name looked up) on first use."""
        with self._lock:
            if self._client is None:
                quiet_sdk_logging()
                if self._credential is None:
                    self._credential = build_credential(self.resolved.source.cloud)
                client = ArmClient(self.resolved, self._credential, "compute")
                if self.resolved.subscription_name is not None:
                    # every path is built here from `resolved`, so the same client serves the id found
                    found = lookup_subscription(client, self.resolved.subscription_name)
                    self.resolved = replace(self.resolved, subscription_id=found, subscription_name=None)
                self._client = client
            return self._client

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None
            if self._owns_credential and self._credential is not None:
                close = getattr(self._credential, "close", None)
                if close is not None:
                    close()
                self._credential = None

    def __enter__(self) -> "ComputeClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class ScaleSetClient:
    """ARM operations on one scale set, returning plain wire-form dicts (camelCase keys).

    Built from a `Connection` it owns a `ComputeClient` (closed with it); built from a
    `ComputeClient` it borrows that one (a fleet's per-subscription client).
    """

    def __init__(self, connection: Union[Connection, ComputeClient], resource_group: str, name: str) -> None:
        require_sdk("vmss_terminate.control")
        self.resource_group = check_resource_group(resource_group)
        self.name = check_scale_set_name(name)
        self._owns_compute = not isinstance(connection, ComputeClient)
        self.compute = connection if isinstance(connection, ComputeClient) else ComputeClient(connection)

    @property
    def resolved(self) -> ResolvedConnection:
        return self.compute.resolved

    @property
    def resource(self) -> str:
        return f"{self.resource_group}/{self.name}"

    @property
    def resource_path(self) -> str:
        return self.resolved.resource_path(self.resource_group, self.name)

    @property
    def target(self) -> Dict[str, str]:
        """subscription_id / resource_group / name: how every result names its scale set."""
        return {"subscription_id": self.resolved.subscription_id, "resource_group": self.resource_group,
                "name": self.name}

    def _path(self, suffix: str = "") -> str:
        """The scale set's path (+ suffix), once its subscription is known (a name looked up first)."""
        self.compute.sdk()
        return self.resource_path + suffix

    def _errors(self, action: str) -> Any:
        return arm_errors(action, self.resource, self.resolved.subscription_id)

    def get(self) -> Dict[str, Any]:
        action = f"reading scale set {self.resource}"
        with self._errors(action):
            answer = self.compute.send("GET", self._path())
            return json_object(answer.content, f"{action}: ARM answered {answer.status_code}")

    def patch(self, body: bytes, wait: OperationWait = DEFAULT_WAIT, if_match: Optional[str] = None) -> Optional[str]:
        """PATCH these exact bytes (a VirtualMachineScaleSetUpdate) and wait for its operation,
        bounded by `wait`; `if_match`: the etag the change was planned on (ARM answers 412 when the
        set changed since: `ConcurrentWrite`). Returns the etag ARM's answer carries (None when it
        has none). A failure after ARM accepted the PATCH (the operation failed, ran past the wait,
        or pointed elsewhere) is `PatchUnconfirmed`: the change may well be applied."""
        answer = self._send_patch(body, if_match)
        try:
            with self._errors(f"confirming the update of {self.resource}"):
                self._await(answer, "PATCH", f"the update of {self.resource}", wait)
        except AzureError as exc:
            raise PatchUnconfirmed(str(exc)) from None
        return _answer_etag(answer)

    def patch_no_wait(self, body: bytes, if_match: Optional[str] = None) -> None:
        """PATCH these exact bytes and return once ARM accepted them (`--no-wait`): no LRO polling."""
        self._send_patch(body, if_match)

    def _send_patch(self, body: bytes, if_match: Optional[str]) -> Any:
        try:
            with self._errors(f"updating scale set {self.resource}"):
                return self.compute.send("PATCH", self._path(), body, headers={"If-Match": if_match} if if_match else None)
        except ArmRequestError as exc:
            if exc.status == 412 and if_match:
                raise ConcurrentWrite(f"{self.resource} was changed by another writer after it was read (ARM refused "
                                      f"the PATCH: its etag is no longer {if_match}, HTTP 412 PreconditionFailed)") from None
            raise

    def list_instances(self, stale_only: bool = False) -> List[Dict[str, Any]]:
        """Every VM of the scale set (all pages, each page link followed once); `stale_only`: only
        those on an older model (the list's documented `$filter=properties/latestModelApplied eq
        false`: fewer, smaller pages)."""
        params = {"$filter": STALE_FILTER} if stale_only else None
        what = f"listing instances of {self.resource}"
        with self._errors(what):
            return self._list(self._path("/virtualMachines"), what, params)

    def list_flexible_members(self, scale_set_id: str) -> List[Dict[str, Any]]:
        """Flexible members are standalone VMs: list the resource group's VMs that belong to the set."""
        what = f"listing member VMs of {self.resource}"
        with self._errors(what):
            self.compute.sdk()
            path = (f"/subscriptions/{self.resolved.subscription_id}/resourceGroups/{self.resource_group}"
                    "/providers/Microsoft.Compute/virtualMachines")
            found = self._list(path, what, {"$filter": f"'virtualMachineScaleSet/id' eq '{scale_set_id}'"})
        wanted = scale_set_id.lower()
        return [vm for vm in found
                if str(((vm.get("properties") or {}).get("virtualMachineScaleSet") or {}).get("id") or "").lower()
                == wanted]

    def _list(self, path: str, what: str, params: Optional[Dict[str, str]] = None) -> List[Dict[str, Any]]:
        """Every item of an ARM list (`value`, then `nextLink` under a PageGuard); an answer of another
        shape is an error saying what it was."""
        guard = PageGuard(what, origin=self.compute.guard)
        items: List[Dict[str, Any]] = []
        url: Optional[str] = path
        while url:
            with guard.reading():
                answer = self.compute.send("GET", url, params=params if url == path else None)
            page = json_object(answer.content, f"{what}: ARM answered {answer.status_code}")
            value = page.get("value", [])
            if not isinstance(value, list):
                raise AzureError(f"{what}: ARM answered {describe_json(value)} for 'value' where a JSON list "
                                 "was expected")
            for item in value:
                if not isinstance(item, dict):
                    raise AzureError(f"{what}: ARM answered {describe_json(item)} in 'value' where a JSON "
                                     "object was expected")
            items.extend(value)
            link = page.get("nextLink")
            url = guard.next_link(link if isinstance(link, str) else None,
                                  f"GET {urlsplit(answer.request.url).path} (HTTP {answer.status_code})")
        return items

    def manual_upgrade(self, instance_ids: Sequence[str], wait: OperationWait = DEFAULT_WAIT) -> None:
        """POST manualupgrade for these instances and wait for its operation, bounded by `wait`."""
        body = json.dumps({"instanceIds": list(instance_ids)}).encode("utf-8")
        batch = _id_range(instance_ids)
        with self._errors(f"upgrading instances {batch} of {self.resource}"):
            answer = self.compute.send("POST", self._path("/manualupgrade"), body)
            self._await(answer, "POST", f"the manualupgrade of instances {batch} of {self.resource}", wait)

    def _await(self, answer: Any, method: str, what: str, wait: OperationWait) -> None:
        await_operation(lambda url: self.compute.send("GET", url), answer, method=method,
                        url=answer.request.url, what=what, guard=self.compute.guard,
                        first_interval=self.resolved.polling_interval, wait=wait)

    def close(self) -> None:
        if self._owns_compute:
            self.compute.close()

    def __enter__(self) -> "ScaleSetClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class PatchUnconfirmed(AzureError):
    """ARM accepted the PATCH, but following its long-running operation failed."""


class ConcurrentWrite(AzureError):
    """The scale set changed between the read a write was planned on and the write (If-Match
    refused it): nothing was written."""


def _answer_etag(answer: Any) -> Optional[str]:
    """The etag in a PATCH answer's body (best effort: an answer without a readable one is None)."""
    try:
        return etag_of(json.loads(answer.content or b"null"))
    except (ValueError, RecursionError, AttributeError):
        return None


def raise_for_arm_status(response: Any) -> None:
    """Raise what the SDK's own operations raise for an error answer (ARM's error format)."""
    from azure.core.exceptions import (
        ClientAuthenticationError,
        HttpResponseError,
        ResourceExistsError,
        ResourceNotFoundError,
        map_error,
    )
    from azure.mgmt.core.exceptions import ARMErrorFormat

    error_map = {401: ClientAuthenticationError, 404: ResourceNotFoundError, 409: ResourceExistsError}
    map_error(status_code=response.status_code, response=response, error_map=error_map)
    raise HttpResponseError(response=response, error_format=ARMErrorFormat)


def _id_range(ids: Sequence[str]) -> str:
    ids = list(ids)
    if len(ids) <= 3:
        return ",".join(ids)
    return f"{ids[0]}..{ids[-1]} ({len(ids)})"
