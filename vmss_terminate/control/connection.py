"""Where and as whom to talk to ARM: `Connection` and its validated form, `ResolvedConnection`.

Everything here is checked before any request is sent: the cloud and its endpoint
(`--cloud` / `--arm-endpoint`; plain http only to loopback, so a bearer token never crosses a
network in clear), the token scope, a pinned compute api-version and the subscription (an id, or a
display name looked up later by `control/subscriptions.py`). A command resolves its connection
once (`Connection.resolve`); a fleet run resolves the endpoint once and each subscription from it
(`ResolvedConnection.for_subscription`). No Azure SDK import: this module is cheap.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass, replace
from typing import Any, Callable, Dict, Optional, Tuple
from urllib.parse import urlsplit

from vmss_terminate.errors import InvalidValue, UsageError
from vmss_terminate.net import is_loopback_host, is_loopback_url

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
        try:
            parts = urlsplit(arm_endpoint.strip())
            port = parts.port  # ValueError: not a number, or not 0..65535
        except ValueError as exc:
            raise InvalidValue("arm_endpoint", arm_endpoint, f"not a URL ({exc})") from None
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https") or not parts.hostname:
            raise InvalidValue("arm_endpoint", arm_endpoint, "expected an https:// URL")
        if port == 0:
            raise InvalidValue("arm_endpoint", arm_endpoint, "port 0 is no server's port: name the port (1..65535) "
                                                             "or leave it out for the scheme's")
        if scheme == "http" and not is_loopback_host(parts.hostname):
            raise InvalidValue(
                "arm_endpoint", arm_endpoint, "plain http would send the bearer token in clear; "
                "use https (http is allowed only for loopback: 127.0.0.1, localhost, [::1])"
            )
        base_url = arm_endpoint.strip().rstrip("/")
    if scope is not None and not scope.strip():
        raise InvalidValue("scope", scope, "empty: leave it unset for the cloud's audience", option="--arm-scope")
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
_GUID_PART = re.compile(r"^[0-9a-fA-F]{4,}(?:-[0-9a-fA-F]{4,})+$")  # 0000-1111-2222: a cut-off id
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
    if _GUID_LIKE.match(text) or (_GUID_PART.match(text) and re.search(r"[0-9]", text)):
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

    def for_subscription(self, subscription: str) -> "ResolvedConnection":
        """This connection for one subscription (an id or a display name still to be looked up),
        without reading the environment again: how a fleet run resolves once per subscription."""
        subscription_id, name = check_subscription(subscription)
        return replace(self, subscription_id=subscription_id, subscription_name=name)

    def resource_path(self, resource_group: str, name: str) -> str:
        return (
            f"/subscriptions/{self.subscription_id}/resourceGroups/{resource_group}"
            f"/providers/Microsoft.Compute/virtualMachineScaleSets/{name}"
        )

    def effective_api_version(self) -> str:
        """The api-version that goes on the wire (the pinned one, else the SDK's own default)."""
        return self.api_version or sdk_default_api_version()


@functools.lru_cache(maxsize=1)
def sdk_default_api_version() -> str:
    """The compute api-version azure-mgmt-compute sends when none is pinned: the default of its
    scale-set update request builder, read from that module's source rather than by importing it
    (the module is 2.5 MB of generated operations: ~0.8 s to import on a busy machine, for one
    string); the import is the fallback if the source does not read as expected."""
    try:
        import importlib.util
        from pathlib import Path

        spec = importlib.util.find_spec("azure.mgmt.compute")
        if spec is not None and spec.origin:
            source = (Path(spec.origin).parent / "operations" / "_operations.py").read_bytes()
            start = source.find(b"def build_virtual_machine_scale_sets_update_request(")
            builder = source[start:start + 4000].decode("utf-8", "replace") if start >= 0 else ""
            found = re.search(r'_params\.pop\("api-version", "(\d{4}-\d{2}-\d{2}[\w-]*)"\)', builder)
            if found:
                return found.group(1)
    except (ImportError, OSError, ValueError):
        pass
    try:
        from azure.mgmt.compute.operations._operations import (  # lazy by design
            build_virtual_machine_scale_sets_update_request,
        )

        request = build_virtual_machine_scale_sets_update_request("rg", "name", "sub")
        found = re.search(r"api-version=([\w-]+)", request.url)
        if found:
            return found.group(1)
    except Exception:  # private SDK helper moved: the value is informative only
        pass
    return "sdk-default"
