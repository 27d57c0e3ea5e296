"""The Azure SDK pipeline every ARM client of the control plane and the fleet is built with.

* every request stays on the ARM endpoint's origin (`control/origin.py`): a link an answer points
  elsewhere is refused before anything is sent to it;
* bearer tokens go over https only, except to a loopback address (the local emulator), which a
  per-call policy allows for loopback URLs alone, so a redirected poll elsewhere stays refused;
* endpoint, token scope, retries, LRO polling interval and the connection's extra per-retry
  policies (the fleet's per-subscription throttle) come from one `ResolvedConnection`
  (`sdk_client_kwargs`);
* the credential is DefaultAzureCredential for the cloud's authority, over a transport that sends
  requests for local endpoints (managed identity) without a proxy and waits on an injectable clock;
  a token its managed identity refuses is named (`control/token_answers.py`).

Azure packages are imported inside functions so that importing this module stays cheap.
"""

from __future__ import annotations

import contextvars
import logging
import math
import os
from typing import Any, Dict, Optional
from urllib.parse import urlsplit

from vmss_terminate import extras
from vmss_terminate.clock import SYSTEM_CLOCK, Clock
from vmss_terminate.control.connection import CLOUDS, DEFAULT_CLOUD, ResolvedConnection
from vmss_terminate.control.origin import arm_origin_policy, origin_text
from vmss_terminate.control.token_answers import ExplainedCredential, TokenAnswers
from vmss_terminate.errors import AzureError
from vmss_terminate.net import is_local_host, is_loopback_http


def allow_loopback_http_policy() -> Any:
    """A per-call pipeline policy that lifts azure-core's https-only bearer rule for loopback URLs only.
    The answer is remembered per origin (`scheme://host:port`, as written): a client sends to one
    or two origins, and parsing every request's URL again was per-request work with one answer."""
    from azure.core.pipeline.policies import SansIOHTTPPolicy

    class AllowLoopbackHttp(SansIOHTTPPolicy[Any, Any]):
        def __init__(self) -> None:
            self._loopback: Dict[str, bool] = {}

        def on_request(self, request: Any) -> None:
            url = request.http_request.url
            origin = origin_text(url)
            loopback = self._loopback.get(origin) if origin is not None else None
            if loopback is None:
                loopback = is_loopback_http(url)
                if origin is not None and len(self._loopback) < 256:  # bounded: a link elsewhere is refused anyway
                    self._loopback[origin] = loopback
            if loopback:
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


TOKEN_ENDPOINT_TIMEOUT = 10.0
"""Seconds a local (managed-identity) token endpoint has to accept a connection and to answer each
read: one that accepted the connection and never answered held every command for 20 minutes
(azure-core's 300 s read timeout per attempt, four attempts), past --wait-timeout, then said only
"no usable Azure credential". A local token endpoint answers in milliseconds; IMDS within seconds."""


def build_credential(cloud: str = DEFAULT_CLOUD, clock: Clock = SYSTEM_CLOCK,
                     token_timeout: float = TOKEN_ENDPOINT_TIMEOUT) -> Any:
    """DefaultAzureCredential for the cloud's Entra authority (env, workload/managed identity, az CLI, ...),
    over a transport that never sends a request for a local endpoint through a proxy, wrapped so that
    a token the managed identity refuses is named with the endpoint's answer (`ExplainedCredential`).

    Why the transport: the managed-identity endpoints are local (IMDS at 169.254.169.254, App
    Service/Arc on loopback). Through HTTP_PROXY, the chain's one-second IMDS probe reached the proxy,
    whose error page made azure-identity believe IMDS answered and retry the token request with
    backoff (7 requests, ~25 s) before "no credential". Direct, the probe fails in a second off Azure.
    Entra (login.microsoftonline.com) still goes through the configured proxy. azure-identity's own
    retries are kept (App Service: 3 retries after 0, 1.6 and 3.2 s; IMDS: its longer policy); their
    backoff waits on `clock`. Each request to a local token endpoint is bounded by `token_timeout`
    seconds (connect, and each read); when the chain then fails, the error names the endpoint.
    """
    from azure.identity import DefaultAzureCredential

    name = cloud if cloud in CLOUDS else DEFAULT_CLOUD
    _, audience, authority = CLOUDS[name]
    answers = TokenAnswers()
    credential = DefaultAzureCredential(authority=authority,
                                        transport=local_endpoints_bypass_proxies(clock, answers, token_timeout),
                                        raw_response_hook=answers)
    return ExplainedCredential(credential, answers, name, audience.rstrip("/") + "/.default")


def environment_once_transport() -> Any:
    """azure-core's RequestsTransport, reading the environment's proxy settings once per origin
    (scheme, host, port) and its CA bundle once, instead of on every request.

    Why: requests with `trust_env` scans all of os.environ twice per request (getproxies and the
    no_proxy check) and looks for ~/.netrc: ~0.2 ms of a ~1 ms request, the largest share of
    client CPU per request a rollout can save. The rules are requests' own
    (`get_environ_proxies`: HTTP(S)_PROXY, NO_PROXY; REQUESTS_CA_BUNDLE, else CURL_CA_BUNDLE, for
    the default verification), applied once; an explicit `proxies` or `connection_verify` wins.
    .netrc is not read: ARM requests carry their bearer token, which a netrc login must not replace."""
    import requests.utils
    from azure.core.pipeline.transport import RequestsTransport

    from vmss_terminate.control.lean_session import LeanSession

    class EnvironmentOnce(RequestsTransport):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._proxies: Dict[str, Dict[str, Any]] = {}
            self._bundle = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE")

        def open(self) -> None:
            if self.session is None and self._session_owner and not self._has_been_opened:  # type: ignore[has-type]
                self.session = LeanSession()  # nothing to merge per request: see control/lean_session.py
                self._init_session(self.session)
            super().open()

        def _init_session(self, session: Any) -> None:
            super()._init_session(session)
            session.trust_env = False  # the environment is read here, once per origin

        def send(self, request: Any, **kwargs: Any) -> Any:
            if kwargs.get("proxies") is None:
                parts = urlsplit(request.url)
                origin = f"{parts.scheme}://{parts.netloc}"
                proxies = self._proxies.get(origin)
                if proxies is None:
                    proxies = self._proxies[origin] = dict(requests.utils.get_environ_proxies(request.url))
                kwargs["proxies"] = proxies
            if self._bundle and "connection_verify" not in kwargs and self.connection_config.verify is True:
                kwargs["connection_verify"] = self._bundle
            return super().send(request, **kwargs)

    return EnvironmentOnce


def local_endpoints_bypass_proxies(clock: Clock = SYSTEM_CLOCK, answers: Optional[TokenAnswers] = None,
                                   timeout: float = TOKEN_ENDPOINT_TIMEOUT) -> Any:
    """An azure-core requests transport that sends loopback and link-local requests without a proxy
    (`proxies={"http": None, "https": None}` is what stops requests from reading HTTP_PROXY) and
    within `timeout` seconds (connect, and each read; a shorter one the caller asks for stands, as
    the IMDS probe's), and whose retry backoff (`sleep`, which azure-core's RetryPolicy calls) waits
    on `clock`. A local endpoint that cannot be reached or does not answer is told to `answers`,
    so the chain's failure can name it."""
    class LocalEndpointsBypassProxies(environment_once_transport()):  # type: ignore[misc]
        def send(self, request: Any, **kwargs: Any) -> Any:
            if not is_local_host(urlsplit(request.url).hostname):
                return super().send(request, **kwargs)
            kwargs["proxies"] = {"http": None, "https": None}
            for name in ("connection_timeout", "read_timeout"):
                given = kwargs.get(name)
                kwargs[name] = min(given, timeout) if isinstance(given, (int, float)) else timeout
            try:
                return super().send(request, **kwargs)
            except Exception as exc:
                if answers is not None:
                    answers.unreachable(request.url, exc, timeout)
                raise

        def sleep(self, duration: float) -> None:
            clock.sleep(duration)

    return LocalEndpointsBypassProxies()


def sdk_client_kwargs(resolved: ResolvedConnection) -> Dict[str, Any]:
    """Keyword arguments every management client we build shares: endpoint, scope, retry, polling,
    the origin rule, the loopback policy and the connection's extra policies."""
    source = resolved.source
    kwargs: Dict[str, Any] = {
        "base_url": resolved.base_url,
        "credential_scopes": [resolved.scope],
        "per_call_policies": [allow_loopback_http_policy()],
        "transport": pooled_transport(),
        "retry_policy": capped_retry_policy(retry_total=source.retry_total,
                                            retry_backoff_factor=source.retry_backoff_factor),
        # the origin rule first: nothing, not even a throttle's pause, for a request it refuses
        "per_retry_policies": [arm_origin_policy(resolved.base_url)] + [make() for make in source.policy_factories],
    }
    if resolved.polling_interval is not None:
        kwargs["polling_interval"] = resolved.polling_interval
    return kwargs


THROTTLE_GAVE_UP: "contextvars.ContextVar[bool]" = contextvars.ContextVar("throttle_gave_up", default=False)
"""Set by the fleet throttle when it answers a request with its 429 after its own retries: the
pipeline's retry policy must not start over on it."""

RETRY_AFTER_MAX = 300.0
"""Seconds: the longest Retry-After the SDK's retry waits for. A longer one (ARM's 503 with
`Retry-After: 86400`) is refused at once with exit 1 naming it, instead of a command that sleeps
for a day where neither Ctrl-C's report nor --wait-timeout can bound it."""


class RetryAfterRefused(AzureError):
    """An answer asked us to wait longer than RETRY_AFTER_MAX (or a value that is not a number)."""


def capped_retry_policy(retry_total: Optional[int] = None, retry_backoff_factor: Optional[float] = None) -> Any:
    """azure-core's RetryPolicy, whose wait for a Retry-After is refused past `RETRY_AFTER_MAX`
    (RetryAfterRefused, exit 1) and whose backoff never exceeds it either."""
    from azure.core.pipeline.policies import RetryPolicy

    class CappedRetryPolicy(RetryPolicy):  # type: ignore[type-arg]
        def _is_method_retryable(self, settings: Any, request: Any, response: Any = None) -> bool:
            # a 429 is a request ARM refused before doing anything: resending is safe for every method
            # (azure-core resends a PATCH/POST only after 500/503/504, so a single-set command failed on
            # the first 429 without Retry-After); not after a fleet throttle already gave up on it
            if response is not None and response.status_code == 429:
                return not THROTTLE_GAVE_UP.get()
            return bool(super()._is_method_retryable(settings, request, response=response))

        def _sleep_for_retry(self, response: Any, transport: Any) -> bool:
            header = response.http_response.headers.get("Retry-After") if response.http_response else None
            retry_after = self.get_retry_after(response)
            if retry_after is None:
                return False
            if not math.isfinite(retry_after) or retry_after > RETRY_AFTER_MAX:
                request = response.http_request
                raise RetryAfterRefused(
                    f"ARM answered {request.method} {urlsplit(request.url).path} with HTTP "
                    f"{response.http_response.status_code} and Retry-After: {header}; refused to wait "
                    f"longer than {RETRY_AFTER_MAX:g} s -- run the command again later")
            transport.sleep(retry_after)
            return True

    settings: Dict[str, Any] = {"retry_backoff_max": RETRY_AFTER_MAX}
    if retry_total is not None:
        settings["retry_total"] = retry_total
    if retry_backoff_factor is not None:
        settings["retry_backoff_factor"] = retry_backoff_factor
    return CappedRetryPolicy(**settings)


POOL_SIZE = 256
"""Connections kept open per host by one client: a fleet shares one client per subscription between
up to 256 worker threads (its concurrency bound), and requests' default of 10 would discard and
re-open connections beyond the tenth (with a warning on stderr)."""


def pooled_transport() -> Any:
    """azure-core's requests transport with a `POOL_SIZE` connection pool, opened now: the SDK
    opens its transport lazily on first send, which two threads sharing a client could race."""
    class PooledTransport(environment_once_transport()):  # type: ignore[misc]
        def _init_session(self, session: Any) -> None:
            super()._init_session(session)
            for prefix in ("http://", "https://"):
                adapter = session.get_adapter(prefix)
                adapter.init_poolmanager(POOL_SIZE, POOL_SIZE)

    transport = PooledTransport()
    transport.open()
    return transport


class ArmClient:
    """One ARM pipeline, built once per subscription (and one for Resource Graph) and shared by
    every request and thread: azure-core's pipeline with azure-mgmt-core's ARM policies -- the
    policy list the generated management clients build (request id, user agent, content decoding,
    resource-provider registration, redirect, our capped retry, ARM's challenge authentication,
    tracing, sensitive-header cleanup, HTTP logging; less the four that act only on options never
    given here) plus `sdk_client_kwargs`' policies and pooled transport.

    Why not the generated ComputeManagementClient / ResourceGraphClient: every request here is
    sent raw (`control/scaleset.py`, `fleet/session.py`), so their operation classes and models
    were only imported (azure.mgmt.compute: ~0.5 s of start-up, ~30 MB), and their
    `send_request` deep-copies each request before formatting its URL: per-request work with
    nothing to do for a URL that is already a path or a link."""

    def __init__(self, resolved: ResolvedConnection, credential: Any, moniker: str) -> None:
        from azure.core.pipeline import policies
        from azure.mgmt.core import ARMPipelineClient
        from azure.mgmt.core.policies import (
            ARMAutoResourceProviderRegistrationPolicy,
            ARMChallengeAuthenticationPolicy,
            ARMHttpLoggingPolicy,
        )

        from vmss_terminate import __version__

        kwargs = sdk_client_kwargs(resolved)
        base_url = kwargs.pop("base_url")
        scopes = kwargs.pop("credential_scopes")
        kwargs.pop("polling_interval", None)  # operations are awaited by control/operations.py
        kwargs["sdk_moniker"] = f"{moniker} vmss-terminate/{__version__}"
        # the generated clients' list less the policies that can only act on an option this client
        # is never given (HeadersPolicy: `headers`; ProxyPolicy: `proxies`, which the transport reads
        # from the environment itself; CustomHookPolicy: `raw_request_hook`/`raw_response_hook`;
        # NetworkTraceLoggingPolicy: `logging_enable`): each cost a pass through the pipeline per
        # request, for nothing. ContentDecodePolicy stays: an unstreamed answer that is not JSON
        # (GET /subscriptions) is named by it; a streamed one (every other request) it leaves alone
        chain = [
            policies.RequestIdPolicy(**kwargs),
            policies.UserAgentPolicy(**kwargs),
            policies.ContentDecodePolicy(**kwargs),
            ARMAutoResourceProviderRegistrationPolicy(),
            policies.RedirectPolicy(**kwargs),
            kwargs["retry_policy"],
            ARMChallengeAuthenticationPolicy(credential, *scopes, **kwargs),
            policies.DistributedTracingPolicy(**kwargs),
            policies.SensitiveHeaderCleanupPolicy(**kwargs),
            ARMHttpLoggingPolicy(**kwargs),
        ]
        self.base_url = base_url.rstrip("/")
        self._client: Any = ARMPipelineClient(base_url=base_url, policies=chain, **kwargs)

    def send_request(self, request: Any, *, stream: bool = False) -> Any:
        """Run `request` (an azure.core.rest.HttpRequest whose URL is a path on the endpoint or an
        absolute link) through the pipeline; no error handling (the caller reads the status)."""
        if request.url.startswith("/"):
            request.url = self.base_url + request.url
        return self._client.send_request(request, stream=stream)

    def close(self) -> None:
        self._client.close()


def build_compute_client(resolved: ResolvedConnection, credential: Any) -> Any:
    """azure-mgmt-compute's ComputeManagementClient configured by `sdk_client_kwargs`, for callers
    that want the SDK's operations (the control plane itself sends through an `ArmClient`)."""
    from azure.mgmt.compute import ComputeManagementClient

    return ComputeManagementClient(credential, resolved.subscription_id, **sdk_client_kwargs(resolved))
