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
import os
import re
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple
from urllib.parse import urlsplit

from vmss_terminate import extras
from vmss_terminate.control.names import check_resource_group, check_scale_set_name
from vmss_terminate.errors import AzureError, InvalidValue, UsageError, VmssTerminateError
from vmss_terminate.net import is_local_host, is_loopback_host, is_loopback_http, is_loopback_url

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
        raise InvalidValue("api_version", api_version, f"expected YYYY-MM-DD (e.g. {MIN_COMPUTE_API_VERSION})")
    if match.group(1) < MIN_COMPUTE_API_VERSION:
        raise InvalidValue(
            "api_version", text, f"too old: terminate notifications need compute API >= {MIN_COMPUTE_API_VERSION} "
            f"(Azure answers \"{OLD_API_REASON}\")"
        )
    return text


def resolve_endpoint(arm_endpoint: Optional[str], cloud: Optional[str], scope: Optional[str] = None) -> Tuple[str, str]:
    """Return (base URL, token scope). A custom endpoint keeps the cloud's scope unless `scope` is given.

    Plain http is accepted only for loopback hosts: a bearer token must never cross a network in clear.
    """
    cloud = cloud or DEFAULT_CLOUD
    if cloud not in CLOUDS:
        raise InvalidValue("cloud", cloud, f"choose one of {', '.join(CLOUDS)}")
    base_url, audience, _ = CLOUDS[cloud]
    if arm_endpoint is not None and not arm_endpoint.strip():
        raise InvalidValue("arm_endpoint", arm_endpoint, "empty: leave it unset for the cloud's endpoint")
    if arm_endpoint:
        parts = urlsplit(arm_endpoint.strip())
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https") or not parts.hostname:
            raise InvalidValue("arm_endpoint", arm_endpoint, "expected an https:// URL")
        if scheme == "http" and not is_loopback_host(parts.hostname):
            raise InvalidValue(
                "arm_endpoint", arm_endpoint, "plain http would send the bearer token in clear; "
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
    # Extra azure-core per-retry policies, as factories: a pipeline chains its policy objects, so
    # every client needs its own instances (fleet: the per-subscription throttle).
    policy_factories: Tuple[Callable[[], Any], ...] = ()

    def resolve(self, require_subscription: bool = True) -> "ResolvedConnection":
        """Validate, filling what was not given from the environment the CLI documents
        (AZURE_SUBSCRIPTION_ID, VMSS_TERMINATE_ARM_ENDPOINT, VMSS_TERMINATE_ARM_SCOPE). Tenant-wide
        clients (Resource Graph, the subscription list) pass `require_subscription=False`."""
        api_version = check_compute_api_version(self.api_version)
        base_url, scope = resolve_endpoint(_or_env(self.arm_endpoint, ENV_ARM_ENDPOINT), self.cloud,
                                           _or_env(self.scope, ENV_ARM_SCOPE))
        subscription, name = "", None
        if require_subscription:
            subscription, name = check_subscription(_or_env(self.subscription_id, ENV_SUBSCRIPTION))
        polling = self.polling_interval
        if polling is None and is_loopback_url(base_url):
            polling = LOOPBACK_POLL_SECONDS
        return ResolvedConnection(self, subscription, base_url, scope, api_version, polling, name)


ENV_SUBSCRIPTION = "AZURE_SUBSCRIPTION_ID"
ENV_ARM_ENDPOINT = "VMSS_TERMINATE_ARM_ENDPOINT"
ENV_ARM_SCOPE = "VMSS_TERMINATE_ARM_SCOPE"
_GUID = re.compile(r"^[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}$")
_GUID_LIKE = re.compile(r"^[0-9a-fA-F-]{30,}$")
_NAME_FORBIDDEN = re.compile(r"[/\\?#<>%&\x00-\x1f\x7f]")
NAME_PLACEHOLDER = "00000000-0000-0000-0000-000000000000"


def _or_env(value: Optional[str], variable: str) -> Optional[str]:
    return value if value is not None else os.environ.get(variable)


def check_subscription(value: Optional[str]) -> Tuple[str, Optional[str]]:
    """(subscription id, None) for an id, (placeholder, display name) for a name to look up;
    an empty or malformed value is refused before any request."""
    text = (value or "").strip()
    if not text:
        raise UsageError(
            f"no subscription: pass Connection(subscription_id=...) or set {ENV_SUBSCRIPTION}",
            cli_message=f"no subscription: pass --subscription (an id or a name) or set {ENV_SUBSCRIPTION}",
        )
    if _GUID.match(text):
        return text.lower(), None
    if _GUID_LIKE.match(text):
        raise InvalidValue("subscription_id", text, "not a subscription id (expected "
                           "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx) nor a display name", option="--subscription")
    if len(text) > 64 or _NAME_FORBIDDEN.search(text):
        raise InvalidValue("subscription_id", text, "not a subscription id (a GUID) nor a display name "
                           "(at most 64 characters, no / \\ ? # < > % &)", option="--subscription")
    return NAME_PLACEHOLDER, text


@dataclass(frozen=True)
class ResolvedConnection:
    source: Connection
    subscription_id: str
    base_url: str
    scope: str
    api_version: Optional[str]
    polling_interval: Optional[float]
    subscription_name: Optional[str] = None
    """A display name still to be looked up (`subscription_id` is then a placeholder)."""

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
        tried = credentials_tried(str(exc))
        raise AzureError(f"{action}: authentication failed, no usable Azure credential"
                         f"{f' (tried: {tried})' if tried else ''}; {CREDENTIAL_HELP}") from None
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
        raise AzureError(f"{action}: {transport_failure(exc, 'cannot reach ARM')}") from None
    except ServiceResponseError as exc:
        raise AzureError(f"{action}: {transport_failure(exc, 'ARM connection failed')}") from None
    except VmssTerminateError:
        raise
    except OSError as exc:  # e.g. REQUESTS_CA_BUNDLE names a missing file: requests raises a bare OSError
        raise AzureError(f"{action}: {_one_line(str(exc))[:300]}") from None
    except Exception as exc:  # noqa: BLE001 - an SDK/transport surprise (odd body, deserializer) is one line
        raise AzureError(f"{action}: unexpected answer ({type(exc).__name__}: {_one_line(str(exc))[:200]})") from None


def credentials_tried(message: str) -> str:
    """The credential names azure-identity lists in a chain failure ("\tEnvironmentCredential: ...")."""
    return ", ".join(re.findall(r"^\s+(\w+Credential):", message, re.MULTILINE))


def transport_failure(exc: BaseException, fallback: str) -> str:
    """What went wrong on the wire, named from the root cause (azure-core's class alone conflates a
    reset of an open connection with a refused one)."""
    seen = set()
    stack = [exc]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, ConnectionResetError) or "Connection reset" in str(current):
            return "the connection to ARM was reset while the request was in progress"
        if isinstance(current, ConnectionRefusedError):
            return f"cannot connect to ARM: connection refused ({_one_line(str(exc))[:200]})"
        if isinstance(current, TimeoutError) or "timed out" in str(current).lower():
            return f"ARM did not answer in time ({_one_line(str(current))[:200]})"
        stack.extend(item for item in (current.__cause__, current.__context__,
                                       getattr(current, "inner_exception", None), *getattr(current, "args", ()))
                     if isinstance(item, BaseException))
    return f"{fallback}: {_one_line(str(exc))[:300]}"


def allow_loopback_http_policy() -> Any:
    """A per-call pipeline policy that lifts azure-core's https-only bearer rule for loopback URLs only."""
    from azure.core.pipeline.policies import SansIOHTTPPolicy  # noqa: PLC0415

    class AllowLoopbackHttp(SansIOHTTPPolicy[Any, Any]):
        def on_request(self, request: Any) -> None:
            if is_loopback_http(request.http_request.url):
                request.context["enforce_https"] = False

    return AllowLoopbackHttp()


def require_sdk(what: str) -> None:
    """MissingExtraError (exit 2, naming `pip install 'vmss-terminate[control]'`) when the Azure SDK
    is not installed: called where a library entry point first needs it (the scale-set client, the
    fleet session), so a Python caller on the lean install gets the CLI's message, not a raw
    `ModuleNotFoundError: No module named 'azure'`."""
    extras.require(extras.CONTROL, what)


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
    """DefaultAzureCredential for the cloud's Entra authority (env, workload/managed identity, az CLI, ...),
    over a transport that never sends a request for a local endpoint through a proxy.

    Why: the managed-identity endpoints are local (IMDS at 169.254.169.254, App Service/Arc on
    loopback). Through HTTP_PROXY, the chain's one-second IMDS probe reached the proxy, whose error
    page made azure-identity believe IMDS answered and retry the token request with backoff (7
    requests, ~25 s) before "no credential". Direct, the probe fails in a second off Azure.
    Entra (login.microsoftonline.com) still goes through the configured proxy.
    """
    from azure.identity import DefaultAzureCredential  # noqa: PLC0415

    authority = CLOUDS.get(cloud or DEFAULT_CLOUD, CLOUDS[DEFAULT_CLOUD])[2]
    return DefaultAzureCredential(authority=authority, transport=local_endpoints_bypass_proxies())


def local_endpoints_bypass_proxies() -> Any:
    """An azure-core requests transport that sends loopback and link-local requests without a proxy
    (`proxies={"http": None, "https": None}` is what stops requests from reading HTTP_PROXY)."""
    from azure.core.pipeline.transport import RequestsTransport  # noqa: PLC0415

    class LocalEndpointsBypassProxies(RequestsTransport):  # type: ignore[misc]
        def send(self, request: Any, **kwargs: Any) -> Any:
            if is_local_host(urlsplit(request.url).hostname):
                kwargs["proxies"] = {"http": None, "https": None}
            return super().send(request, **kwargs)

    return LocalEndpointsBypassProxies()


SUBSCRIPTIONS_API_VERSION = "2022-12-01"


def lookup_subscription(compute: Any, name: str) -> str:
    """The id of the one subscription whose display name is `name`, read from `GET /subscriptions`
    through the compute client's own pipeline (same credential, retry and loopback rules)."""
    with arm_errors(f"looking up subscription {name!r}", name):
        seen = list_subscriptions(compute)
    return match_subscription(seen, name)


def match_subscription(visible: List[Dict[str, Any]], name: str) -> str:
    """The id of the one subscription in `visible` (a `GET /subscriptions` list) whose display name
    is `name` (case-insensitive). The one resolver of `--subscription NAME` for every command: none
    or several matches are bad input (exit 2) that list what the credential can see."""
    matches = [s for s in visible if str(s.get("displayName", "")).lower() == name.lower()]
    if len(matches) == 1 and matches[0].get("subscriptionId"):
        return str(matches[0]["subscriptionId"])
    if matches:
        ids = ", ".join(str(s.get("subscriptionId")) for s in matches)
        raise InvalidValue("subscription_id", name, f"{len(matches)} subscriptions have this name ({ids}): "
                           "pass the id", option="--subscription")
    shown = ", ".join(f"{s.get('displayName')} ({s.get('subscriptionId')})" for s in visible[:10]) or "none"
    raise InvalidValue("subscription_id", name, f"no subscription named {name!r} is visible to this credential "
                       f"(visible: {shown})", option="--subscription")


def list_subscriptions(client: Any) -> List[Dict[str, Any]]:
    """Every subscription the credential sees (`GET /subscriptions`, all pages), through `client`'s
    own pipeline (any management client: same credential, retry and loopback rules). Call inside
    `arm_errors`."""
    from azure.core.rest import HttpRequest  # noqa: PLC0415

    # ComputeManagementClient has only send_request, ResourceGraphClient only _send_request
    send = getattr(client, "send_request", None) or client._send_request
    seen: List[Dict[str, Any]] = []
    url: Optional[str] = f"/subscriptions?api-version={SUBSCRIPTIONS_API_VERSION}"
    while url and len(seen) < 10000:
        response = send(HttpRequest("GET", url))
        response.raise_for_status()
        page = _json_object(response.text(), f"GET /subscriptions answered {response.status_code}")
        seen.extend(item for item in page.get("value") or [] if isinstance(item, dict))
        url = page.get("nextLink")
    return seen


def _json_object(text: str, what: str) -> Dict[str, Any]:
    """A JSON object body, or AzureError: ARM bodies that are empty, not JSON or not an object
    (a string, a list, a number) are one-line failures, never a traceback."""
    try:
        data = json.loads(text) if text and text.strip() else None
    except ValueError:
        data = None
    if not isinstance(data, dict):
        shown = _one_line(text or "")[:80] or "an empty body"
        raise AzureError(f"{what} with {shown!r}, not a JSON object")
    return data


def sdk_client_kwargs(resolved: ResolvedConnection) -> Dict[str, Any]:
    """Keyword arguments every management client we build shares: endpoint, scope, retry, polling,
    the loopback policy and the connection's extra policies."""
    source = resolved.source
    kwargs: Dict[str, Any] = {
        "base_url": resolved.base_url,
        "credential_scopes": [resolved.scope],
        "per_call_policies": [allow_loopback_http_policy()],
    }
    if source.policy_factories:
        kwargs["per_retry_policies"] = [make() for make in source.policy_factories]
    if resolved.polling_interval is not None:
        kwargs["polling_interval"] = resolved.polling_interval
    if source.retry_total is not None:
        kwargs["retry_total"] = source.retry_total
    if source.retry_backoff_factor is not None:
        kwargs["retry_backoff_factor"] = source.retry_backoff_factor
    return kwargs


def build_compute_client(resolved: ResolvedConnection, credential: Any) -> Any:
    """The ComputeManagementClient, configured by `sdk_client_kwargs`."""
    from azure.mgmt.compute import ComputeManagementClient  # noqa: PLC0415

    return ComputeManagementClient(credential, resolved.subscription_id, **sdk_client_kwargs(resolved))


class ScaleSetClient:
    """ARM operations on one scale set, returning plain wire-form dicts (camelCase keys).

    Plain dicts rather than SDK models: the parser must tolerate what old api-versions and
    half-configured scale sets return (no `scheduledEventsProfile`, `{}`, no `enable`).
    """

    def __init__(self, connection: Connection, resource_group: str, name: str) -> None:
        require_sdk("vmss_terminate.control")
        self.resource_group = check_resource_group(resource_group)
        self.name = check_scale_set_name(name)
        self.resolved = connection.resolve()
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
            if self.resolved.subscription_name is not None:
                found = lookup_subscription(self._client, self.resolved.subscription_name)
                self._client.close()
                self.resolved = replace(self.resolved, subscription_id=found, subscription_name=None)
                self._client = build_compute_client(self.resolved, self._credential)
        return self._client

    def _call_kwargs(self) -> Dict[str, Any]:
        if self.resolved.api_version:
            return {"api_version": self.resolved.api_version}
        return {}

    def get(self) -> Dict[str, Any]:
        action = f"reading scale set {self.resource}"
        with self._errors(action):
            model = self._sdk().virtual_machine_scale_sets.get(self.resource_group, self.name, **self._call_kwargs())
            return _model_dict(model, action)

    def patch(self, body: bytes) -> Dict[str, Any]:
        """PATCH these exact bytes (a VirtualMachineScaleSetUpdate) and wait for the LRO. A failure
        after ARM accepted the PATCH is `PatchUnconfirmed`: the change may well be applied."""
        action = f"updating scale set {self.resource}"
        with self._errors(action):
            poller = self._send_raw("begin_update", body)
        try:
            with self._errors(f"confirming the update of {self.resource}"):
                result = poller.result()
                return _model_dict(result, action) if result is not None else {}
        except AzureError as exc:
            raise PatchUnconfirmed(str(exc)) from None

    def patch_no_wait(self, body: bytes) -> None:
        """PATCH these exact bytes and return once ARM accepted them (`--no-wait`): no LRO polling."""
        with self._errors(f"updating scale set {self.resource}"):
            self._send_raw("begin_update", body, polling=False)

    def list_instances(self) -> List[Dict[str, Any]]:
        """Every VM of the scale set (all pages)."""
        with self._errors(f"listing instances of {self.resource}"):
            pages = self._sdk().virtual_machine_scale_set_vms.list(
                self.resource_group, self.name, **self._call_kwargs()
            )
            return [_model_dict(vm, "listing instances") for vm in pages]

    def list_flexible_members(self, scale_set_id: str) -> List[Dict[str, Any]]:
        """Flexible members are standalone VMs: list the resource group's VMs that belong to the set."""
        with self._errors(f"listing member VMs of {self.resource}"):
            pages = self._sdk().virtual_machines.list(
                self.resource_group, filter=f"'virtualMachineScaleSet/id' eq '{scale_set_id}'", **self._call_kwargs()
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
            self._send_raw("begin_update_instances", body).result()

    def _send_raw(self, operation: str, body: bytes, **kwargs: Any) -> Any:
        """Start a scale-set LRO with these exact JSON bytes (a raw IO body, so the SDK re-serialises
        nothing and a retry re-reads the same bytes); returns the poller."""
        begin = getattr(self._sdk().virtual_machine_scale_sets, operation)
        return begin(
            self.resource_group, self.name, io.BytesIO(body), content_type="application/json", **self._call_kwargs(),
            **kwargs,
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


class PatchUnconfirmed(AzureError):
    """ARM accepted the PATCH, but following its long-running operation failed."""


def _model_dict(model: Any, action: str) -> Dict[str, Any]:
    """An SDK model as a wire-form dict; a body ARM sent that is not a JSON object (a string, a
    list, a number, nothing) is a one-line AzureError, not an AttributeError traceback."""
    as_dict = getattr(model, "as_dict", None)
    if as_dict is None:
        shown = _one_line(model if isinstance(model, str) else repr(model))[:80]
        raise AzureError(f"{action}: ARM answered with {shown!r}, not a JSON object")
    return dict(as_dict())


def _id_range(ids: Sequence[str]) -> str:
    ids = list(ids)
    if len(ids) <= 3:
        return ",".join(ids)
    return f"{ids[0]}..{ids[-1]} ({len(ids)})"
