"""The one place the control plane talks HTTP: an Azure SDK client for one scale set.

Everything that reaches ARM goes through `ScaleSetClient`, built from a `Connection`:

* endpoint and token scope come from `--cloud` / `--arm-endpoint` (`resolve_endpoint`);
* bearer tokens go over https only, except to a loopback address (the local emulator), which a
  per-call policy allows for loopback URLs alone, so a redirected LRO poll elsewhere stays refused;
* `api_version`, when pinned, is passed to *every* operation call (the client constructor's
  `api_version` is ignored by azure-mgmt-compute);
* Azure SDK exceptions become one-line `AzureError` / `UsageError` messages (`arm_errors`).

Azure packages are imported inside functions so that importing this module stays cheap.
"""

from __future__ import annotations

import io
import json
import logging
import re
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple
from urllib.parse import urlsplit

from vmss_terminate.errors import AzureError, UsageError
from vmss_terminate.net import is_loopback_host, is_loopback_http, is_loopback_url

MIN_COMPUTE_API_VERSION = "2019-03-01"
OLD_API_REASON = "Could not find member 'scheduledEventsProfile' on object of type 'VirtualMachineProfile'"

# name -> (resource manager endpoint, token audience, Entra authority host)
CLOUDS: Dict[str, Tuple[str, str, str]] = {
    "AzureCloud": ("https://management.azure.com", "https://management.azure.com", "login.microsoftonline.com"),
    "AzureChinaCloud": (
        "https://management.chinacloudapi.cn",
        "https://management.chinacloudapi.cn",
        "login.chinacloudapi.cn",
    ),
    "AzureUSGovernment": (
        "https://management.usgovcloudapi.net",
        "https://management.usgovcloudapi.net",
        "login.microsoftonline.us",
    ),
}
DEFAULT_CLOUD = "AzureCloud"

LOOPBACK_POLL_SECONDS = 0.05
"""LRO poll interval for a loopback endpoint when the server sends no Retry-After (the SDK's 30 s
default is meant for real Azure, which always sends Retry-After on async operations)."""

CREDENTIAL_HELP = (
    "configure an Azure credential: run `az login`, or set AZURE_CLIENT_ID, AZURE_CLIENT_SECRET and "
    "AZURE_TENANT_ID (service principal), or run where a managed identity is available"
)

_API_VERSION = re.compile(r"^(\d{4}-\d{2}-\d{2})(-preview)?$")


def check_compute_api_version(api_version: Optional[str]) -> Optional[str]:
    """Validate a pinned compute api-version; None keeps the SDK's own (its newest)."""
    if api_version is None:
        return None
    text = api_version.strip()
    match = _API_VERSION.match(text)
    if not match:
        raise UsageError(f"invalid --api-version {api_version!r}: expected YYYY-MM-DD (e.g. {MIN_COMPUTE_API_VERSION})")
    if match.group(1) < MIN_COMPUTE_API_VERSION:
        raise UsageError(
            f"--api-version {text} is too old: terminate notifications need compute API >= {MIN_COMPUTE_API_VERSION} "
            f"(Azure answers \"{OLD_API_REASON}\")"
        )
    return text


def resolve_endpoint(arm_endpoint: Optional[str], cloud: Optional[str], scope: Optional[str] = None) -> Tuple[str, str]:
    """Return (base URL, token scope). A custom endpoint keeps the cloud's scope unless `scope` is given.

    Plain http is accepted only for loopback hosts: a bearer token must never cross a network in clear.
    """
    cloud = cloud or DEFAULT_CLOUD
    if cloud not in CLOUDS:
        raise UsageError(f"unknown --cloud {cloud!r}: choose one of {', '.join(CLOUDS)}")
    base_url, audience, _ = CLOUDS[cloud]
    if arm_endpoint:
        parts = urlsplit(arm_endpoint.strip())
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https") or not parts.hostname:
            raise UsageError(f"invalid --arm-endpoint {arm_endpoint!r}: expected an https:// URL")
        if scheme == "http" and not is_loopback_host(parts.hostname):
            raise UsageError(
                f"refusing --arm-endpoint {arm_endpoint!r}: plain http would send the bearer token in clear; "
                "use https (http is allowed only for loopback: 127.0.0.1, localhost, [::1])"
            )
        base_url = arm_endpoint.strip().rstrip("/")
    if scope:
        token_scope = scope.strip()
    else:
        token_scope = audience.rstrip("/") + "/.default"
    return base_url, token_scope


@dataclass(frozen=True)
class Connection:
    """Where and as whom to talk to ARM. Validated by `resolve()` before any request is sent.

    `retry_total` / `retry_backoff_factor` go to the SDK's RetryPolicy (None keeps the SDK defaults:
    10 retries, exponential backoff, `Retry-After` honoured). `polling_interval` is the LRO wait
    when the server sends no Retry-After (None: the SDK's 30 s, or 0.05 s for a loopback endpoint).
    `credential` is any azure-core TokenCredential; None builds a DefaultAzureCredential.
    """

    subscription_id: Optional[str] = None
    arm_endpoint: Optional[str] = None
    cloud: str = DEFAULT_CLOUD
    scope: Optional[str] = None
    api_version: Optional[str] = None
    polling_interval: Optional[float] = None
    retry_total: Optional[int] = None
    retry_backoff_factor: Optional[float] = None
    credential: Any = None

    def resolve(self) -> "ResolvedConnection":
        api_version = check_compute_api_version(self.api_version)
        base_url, scope = resolve_endpoint(self.arm_endpoint, self.cloud, self.scope)
        subscription = (self.subscription_id or "").strip()
        if not subscription:
            raise UsageError("no subscription: pass --subscription ID or set AZURE_SUBSCRIPTION_ID")
        if "/" in subscription or " " in subscription:
            raise UsageError(f"invalid subscription id {subscription!r}")
        polling = self.polling_interval
        if polling is None and is_loopback_url(base_url):
            polling = LOOPBACK_POLL_SECONDS
        return ResolvedConnection(self, subscription, base_url, scope, api_version, polling)


@dataclass(frozen=True)
class ResolvedConnection:
    source: Connection
    subscription_id: str
    base_url: str
    scope: str
    api_version: Optional[str]
    polling_interval: Optional[float]

    def resource_path(self, resource_group: str, name: str) -> str:
        return (
            f"/subscriptions/{self.subscription_id}/resourceGroups/{resource_group}"
            f"/providers/Microsoft.Compute/virtualMachineScaleSets/{name}"
        )

    def effective_api_version(self) -> str:
        """The api-version that goes on the wire (the pinned one, else the SDK's own default)."""
        return self.api_version or sdk_default_api_version()


def sdk_default_api_version() -> str:
    """The compute api-version azure-mgmt-compute sends when none is pinned (for display only)."""
    try:
        from azure.mgmt.compute.operations._operations import (  # noqa: PLC0415 - lazy by design
            build_virtual_machine_scale_sets_update_request,
        )

        request = build_virtual_machine_scale_sets_update_request("rg", "name", "sub")
        found = re.search(r"api-version=([\w-]+)", request.url)
        if found:
            return found.group(1)
    except Exception:  # private SDK helper moved: the value is informative only
        pass
    return "sdk-default"


class ArmRequestError(AzureError):
    """ARM answered with an error; `code` (e.g. ResourceNotFound) and `status` kept for callers."""

    def __init__(self, message: str, code: Optional[str] = None, status: Optional[int] = None) -> None:
        super().__init__(message)
        self.code = code
        self.status = status


def arm_error_code(exc: BaseException) -> Tuple[Optional[str], Optional[str]]:
    """(code, message) of an azure-core HttpResponseError, LRO failures included."""
    code = message = None
    error = getattr(exc, "error", None)
    if error is not None and getattr(error, "code", None):
        code, message = error.code, getattr(error, "message", None)
    response = getattr(exc, "response", None)
    if code is None and response is not None:
        code, message = _error_from_body(response)
    return code, message


def describe_arm_error(exc: BaseException) -> str:
    """One line `Code: message (HTTP n)` from an azure-core HttpResponseError."""
    code, message = arm_error_code(exc)
    status = getattr(exc, "status_code", None)
    if code is None:
        message = message or getattr(exc, "message", None) or str(exc)
    text = f"{code}: {message}" if code else str(message)
    lro_status = _lro_status(getattr(exc, "response", None))
    if lro_status:
        text += f" (long-running operation {lro_status})"  # the poll itself answered 200
    elif status:
        text += f" (HTTP {status})"
    return _one_line(text)


def _lro_status(response: Any) -> Optional[str]:
    body = _json_body(response)
    status = body.get("status") if isinstance(body, dict) else None
    return status if status in ("Failed", "Canceled") else None


def _json_body(response: Any) -> Any:
    if response is None:
        return None
    try:
        return json.loads(response.text())
    except Exception:
        return None


def _error_from_body(response: Any) -> Tuple[Optional[str], Optional[str]]:
    body = _json_body(response)
    if not isinstance(body, dict):
        return None, None
    error = body.get("error") if isinstance(body.get("error"), dict) else None
    if error is None and body.get("status") in ("Failed", "Canceled"):
        return body.get("status"), "the long-running operation ended " + str(body.get("status"))
    if error is None:
        return None, None
    return error.get("code"), error.get("message")


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _not_found(code: Optional[str], resource: str, subscription: Optional[str]) -> str:
    """Which part of `resource` ("RG/NAME") is missing: a 404 names the first missing level."""
    if code == "SubscriptionNotFound":
        return f"subscription {subscription or '?'} not found (or not visible to this credential)"
    if code == "ResourceGroupNotFound":
        where = f" in subscription {subscription}" if subscription else ""
        return f"resource group {resource.split('/')[0]} not found{where}"
    return f"scale set {resource} not found"


@contextmanager
def arm_errors(action: str, resource: str, subscription: Optional[str] = None) -> Iterator[None]:
    """Turn Azure SDK failures during `action` on `resource` into one-line project errors."""
    from azure.core.exceptions import (  # noqa: PLC0415
        ClientAuthenticationError,
        HttpResponseError,
        ResourceNotFoundError,
        ServiceRequestError,
        ServiceResponseError,
    )

    try:
        yield
    except ClientAuthenticationError as exc:
        # CredentialUnavailableError is a subclass; its text lists every credential tried (multi-line).
        if getattr(exc, "status_code", None) in (401, 403):
            raise AzureError(f"{action}: ARM rejected the credential: {describe_arm_error(exc)}; {CREDENTIAL_HELP}") from None
        raise AzureError(f"{action}: authentication failed, no usable Azure credential; {CREDENTIAL_HELP}") from None
    except ResourceNotFoundError as exc:
        code = arm_error_code(exc)[0]
        raise ArmRequestError(
            f"{action}: {_not_found(code, resource, subscription)} ({describe_arm_error(exc)})", code, 404
        ) from None
    except HttpResponseError as exc:
        status = getattr(exc, "status_code", None)
        hint = (
            "; the identity lacks permission: grant it a role allowing Microsoft.Compute/virtualMachineScaleSets "
            "read/write and manualupgrade (e.g. Virtual Machine Contributor) on the scale set"
            if status == 403
            else ""
        )
        raise ArmRequestError(f"{action}: {describe_arm_error(exc)}{hint}", arm_error_code(exc)[0], status) from None
    except ServiceRequestError as exc:
        if "non-TLS" in str(exc):
            raise AzureError(f"{action}: refusing to send a bearer token over plain http (non-loopback URL)") from None
        raise AzureError(f"{action}: cannot reach ARM: {_one_line(str(exc))[:300]}") from None
    except ServiceResponseError as exc:
        raise AzureError(f"{action}: ARM connection failed: {_one_line(str(exc))[:300]}") from None


def allow_loopback_http_policy() -> Any:
    """A per-call pipeline policy that lifts azure-core's https-only bearer rule for loopback URLs only."""
    from azure.core.pipeline.policies import SansIOHTTPPolicy  # noqa: PLC0415

    class AllowLoopbackHttp(SansIOHTTPPolicy):  # type: ignore[misc, type-arg]
        def on_request(self, request: Any) -> None:
            if is_loopback_http(request.http_request.url):
                request.context["enforce_https"] = False

    return AllowLoopbackHttp()


def quiet_sdk_logging() -> None:
    """Keep the Azure SDK's own warnings off stderr unless the application configured logging.

    Why: when no credential works, azure-identity logs the whole DefaultAzureCredential chain (a
    dozen lines) as a WARNING, and with no logging configured Python's last-resort handler prints
    it -- around our one-line error (`arm_errors` reports the same failure, with what to configure).
    A NullHandler on the "azure" logger stops only that last-resort print: records still propagate
    to any handler the application installed (e.g. `logging.basicConfig`).
    """
    logger = logging.getLogger("azure")
    if not any(isinstance(handler, logging.NullHandler) for handler in logger.handlers):
        logger.addHandler(logging.NullHandler())


def build_credential(cloud: str = DEFAULT_CLOUD) -> Any:
    """DefaultAzureCredential for the cloud's Entra authority (env, workload/managed identity, az CLI, ...)."""
    from azure.identity import DefaultAzureCredential  # noqa: PLC0415

    authority = CLOUDS.get(cloud or DEFAULT_CLOUD, CLOUDS[DEFAULT_CLOUD])[2]
    return DefaultAzureCredential(authority=authority)


def build_compute_client(resolved: ResolvedConnection, credential: Any) -> Any:
    """The ComputeManagementClient: endpoint, scope, retry, polling and loopback policy in one place."""
    from azure.mgmt.compute import ComputeManagementClient  # noqa: PLC0415

    source = resolved.source
    kwargs: Dict[str, Any] = {
        "credential_scopes": [resolved.scope],
        "per_call_policies": [allow_loopback_http_policy()],
    }
    if resolved.polling_interval is not None:
        kwargs["polling_interval"] = resolved.polling_interval
    if source.retry_total is not None:
        kwargs["retry_total"] = source.retry_total
    if source.retry_backoff_factor is not None:
        kwargs["retry_backoff_factor"] = source.retry_backoff_factor
    return ComputeManagementClient(credential, resolved.subscription_id, base_url=resolved.base_url, **kwargs)


class ScaleSetClient:
    """ARM operations on one scale set, returning plain wire-form dicts (camelCase keys).

    Plain dicts rather than SDK models: the parser must tolerate what old api-versions and
    half-configured scale sets return (no `scheduledEventsProfile`, `{}`, no `enable`).
    """

    def __init__(self, connection: Connection, resource_group: str, name: str) -> None:
        self.resolved = connection.resolve()
        self.resource_group = resource_group
        self.name = name
        self._credential = connection.credential
        self._owns_credential = connection.credential is None
        self._client: Any = None

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

    def _sdk(self) -> Any:
        if self._client is None:
            quiet_sdk_logging()
            if self._credential is None:
                self._credential = build_credential(self.resolved.source.cloud)
            self._client = build_compute_client(self.resolved, self._credential)
        return self._client

    def _call_kwargs(self) -> Dict[str, Any]:
        if self.resolved.api_version:
            return {"api_version": self.resolved.api_version}
        return {}

    def get(self) -> Dict[str, Any]:
        with self._errors(f"reading scale set {self.resource}"):
            model = self._sdk().virtual_machine_scale_sets.get(self.resource_group, self.name, **self._call_kwargs())
            return dict(model.as_dict())

    def patch(self, body: bytes) -> Dict[str, Any]:
        """PATCH these exact bytes (a VirtualMachineScaleSetUpdate) and wait for the LRO."""
        with self._errors(f"updating scale set {self.resource}"):
            result = self._send_raw("begin_update", body).result()
            return dict(result.as_dict()) if result is not None else {}

    def list_instances(self) -> List[Dict[str, Any]]:
        """Every VM of the scale set (all pages)."""
        with self._errors(f"listing instances of {self.resource}"):
            pages = self._sdk().virtual_machine_scale_set_vms.list(
                self.resource_group, self.name, **self._call_kwargs()
            )
            return [dict(vm.as_dict()) for vm in pages]

    def list_flexible_members(self, scale_set_id: str) -> List[Dict[str, Any]]:
        """Flexible members are standalone VMs: list the resource group's VMs that belong to the set."""
        with self._errors(f"listing member VMs of {self.resource}"):
            pages = self._sdk().virtual_machines.list(
                self.resource_group, filter=f"'virtualMachineScaleSet/id' eq '{scale_set_id}'", **self._call_kwargs()
            )
            wanted = scale_set_id.lower()
            members = []
            for vm in pages:
                data = dict(vm.as_dict())
                owner = ((data.get("properties") or {}).get("virtualMachineScaleSet") or {}).get("id") or ""
                if owner.lower() == wanted:
                    members.append(data)
            return members

    def manual_upgrade(self, instance_ids: Sequence[str]) -> None:
        """POST manualupgrade for these instances and wait for the LRO."""
        body = json.dumps({"instanceIds": list(instance_ids)}).encode("utf-8")
        with self._errors(f"upgrading instances {_id_range(instance_ids)} of {self.resource}"):
            self._send_raw("begin_update_instances", body).result()

    def _send_raw(self, operation: str, body: bytes) -> Any:
        """Start a scale-set LRO with these exact JSON bytes (a raw IO body, so the SDK re-serialises
        nothing and a retry re-reads the same bytes); returns the poller."""
        begin = getattr(self._sdk().virtual_machine_scale_sets, operation)
        return begin(
            self.resource_group, self.name, io.BytesIO(body), content_type="application/json", **self._call_kwargs()
        )

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._owns_credential and self._credential is not None:
            close = getattr(self._credential, "close", None)
            if close is not None:
                close()
            self._credential = None

    def __enter__(self) -> "ScaleSetClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _id_range(ids: Sequence[str]) -> str:
    ids = list(ids)
    if len(ids) <= 3:
        return ",".join(ids)
    return f"{ids[0]}..{ids[-1]} ({len(ids)})"
