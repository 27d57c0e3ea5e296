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

import io
import json
import threading
from dataclasses import replace
from typing import Any, Dict, List, Optional, Sequence, Union

from vmss_terminate.control.arm_errors import arm_errors, one_line
from vmss_terminate.control.connection import Connection, ResolvedConnection
from vmss_terminate.control.names import check_resource_group, check_scale_set_name
from vmss_terminate.control.pipeline import build_compute_client, build_credential, quiet_sdk_logging, require_sdk
from vmss_terminate.control.subscriptions import lookup_subscription
from vmss_terminate.errors import AzureError


class ComputeClient:
    """One subscription's azure-mgmt-compute client, built on first use and shared by every scale set.

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

    @property
    def subscription_id(self) -> str:
        return self.resolved.subscription_id

    def scale_set(self, resource_group: str, name: str) -> "ScaleSetClient":
        """One scale set of this subscription, over this client (closing it leaves this open)."""
        return ScaleSetClient(self, resource_group, name)

    def call_kwargs(self) -> Dict[str, Any]:
        """What every operation call takes: the pinned api-version (the client constructor's
        `api_version` is ignored by azure-mgmt-compute, so it goes on every call)."""
        return {"api_version": self.resolved.api_version} if self.resolved.api_version else {}

    def sdk(self) -> Any:
        """The ComputeManagementClient, built (and the subscription name looked up) on first use."""
        with self._lock:
            if self._client is None:
                quiet_sdk_logging()
                if self._credential is None:
                    self._credential = build_credential(self.resolved.source.cloud)
                client = build_compute_client(self.resolved, self._credential)
                if self.resolved.subscription_name is not None:
                    found = lookup_subscription(client, self.resolved.subscription_name)
                    client.close()
                    self.resolved = replace(self.resolved, subscription_id=found, subscription_name=None)
                    client = build_compute_client(self.resolved, self._credential)
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

    def _errors(self, action: str) -> Any:
        return arm_errors(action, self.resource, self.resolved.subscription_id)

    def get(self) -> Dict[str, Any]:
        action = f"reading scale set {self.resource}"
        with self._errors(action):
            model = self.compute.sdk().virtual_machine_scale_sets.get(
                self.resource_group, self.name, **self.compute.call_kwargs())
            return _model_dict(model, action)

    def patch(self, body: bytes) -> Dict[str, Any]:
        """PATCH these exact bytes (a VirtualMachineScaleSetUpdate) and wait for the LRO. A failure
        after ARM accepted the PATCH is `PatchUnconfirmed`: the change may well be applied."""
        action = f"updating scale set {self.resource}"
        with self._errors(action):
            poller = self._begin_update(body)
        try:
            with self._errors(f"confirming the update of {self.resource}"):
                result = poller.result()
                return _model_dict(result, action) if result is not None else {}
        except AzureError as exc:
            raise PatchUnconfirmed(str(exc)) from None

    def patch_no_wait(self, body: bytes) -> None:
        """PATCH these exact bytes and return once ARM accepted them (`--no-wait`): no LRO polling."""
        with self._errors(f"updating scale set {self.resource}"):
            self._begin_update(body, polling=False)

    def list_instances(self) -> List[Dict[str, Any]]:
        """Every VM of the scale set (all pages)."""
        with self._errors(f"listing instances of {self.resource}"):
            pages = self.compute.sdk().virtual_machine_scale_set_vms.list(
                self.resource_group, self.name, **self.compute.call_kwargs()
            )
            return [_model_dict(vm, "listing instances") for vm in pages]

    def list_flexible_members(self, scale_set_id: str) -> List[Dict[str, Any]]:
        """Flexible members are standalone VMs: list the resource group's VMs that belong to the set."""
        with self._errors(f"listing member VMs of {self.resource}"):
            pages = self.compute.sdk().virtual_machines.list(
                self.resource_group, filter=f"'virtualMachineScaleSet/id' eq '{scale_set_id}'",
                **self.compute.call_kwargs()
            )
            wanted = scale_set_id.lower()
            members = []
            for vm in pages:
                data = _model_dict(vm, "listing member VMs")
                owner = ((data.get("properties") or {}).get("virtualMachineScaleSet") or {}).get("id") or ""
                if owner.lower() == wanted:
                    members.append(data)
            return members

    def manual_upgrade(self, instance_ids: Sequence[str]) -> None:
        """POST manualupgrade for these instances and wait for the LRO."""
        body = json.dumps({"instanceIds": list(instance_ids)}).encode("utf-8")
        with self._errors(f"upgrading instances {_id_range(instance_ids)} of {self.resource}"):
            self._begin_manual_upgrade(body).result()

    def _begin_update(self, body: bytes, polling: Optional[bool] = None) -> Any:
        """Start the PATCH (`virtual_machine_scale_sets.begin_update`); returns the poller."""
        extra = {} if polling is None else {"polling": polling}
        return self.compute.sdk().virtual_machine_scale_sets.begin_update(
            self.resource_group, self.name, io.BytesIO(body), **_raw_json(), **self.compute.call_kwargs(), **extra)

    def _begin_manual_upgrade(self, body: bytes) -> Any:
        """Start manualupgrade (`virtual_machine_scale_sets.begin_update_instances`); returns the poller."""
        return self.compute.sdk().virtual_machine_scale_sets.begin_update_instances(
            self.resource_group, self.name, io.BytesIO(body), **_raw_json(), **self.compute.call_kwargs())

    def close(self) -> None:
        if self._owns_compute:
            self.compute.close()

    def __enter__(self) -> "ScaleSetClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class PatchUnconfirmed(AzureError):
    """ARM accepted the PATCH, but following its long-running operation failed."""


def _raw_json() -> Dict[str, Any]:
    """A body sent as raw JSON bytes (an IO body): the SDK re-serialises nothing, and a retry
    re-reads the same bytes."""
    return {"content_type": "application/json"}


def _model_dict(model: Any, action: str) -> Dict[str, Any]:
    """An SDK model as a wire-form dict; a body ARM sent that is not a JSON object (a string, a
    list, a number, nothing) is a one-line AzureError, not an AttributeError traceback."""
    as_dict = getattr(model, "as_dict", None)
    if as_dict is None:
        shown = one_line(model if isinstance(model, str) else repr(model))[:80]
        raise AzureError(f"{action}: ARM answered with {shown!r}, not a JSON object")
    return dict(as_dict())


def _id_range(ids: Sequence[str]) -> str:
    ids = list(ids)
    if len(ids) <= 3:
        return ",".join(ids)
    return f"{ids[0]}..{ids[-1]} ({len(ids)})"
