"""A refused managed-identity token, named: the scope asked for and what the token endpoint
answered (HTTP status and its own message, never a token).

Why: a managed identity refuses a resource Entra ID does not know (App Service answers a vague
`500 {"message": "An unexpected error occured while fetching the AAD Token."}`, IMDS `400
invalid_resource`), azure-identity calls that "unavailable", DefaultAzureCredential moves on, and
the chain ends in "no usable Azure credential": the one answer that says what went wrong is lost.

`TokenAnswers` is the credential's `raw_response_hook` (azure-core's public per-answer callback,
called for every attempt, retries included): it keeps, per resource, the last error answer to a
managed-identity token request (a GET with a `resource` parameter) and forgets it when one
succeeds. Bodies of successful answers are never read. `ExplainedCredential` wraps the chain: when
it fails for a scope whose token request was answered with an error, it raises
`TokenRequestRefused`, which `arm_errors` prefixes with the action (exit 1: the endpoint answered,
and its answer does not tell a wrong scope from a failure on its side).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple
from urllib.parse import parse_qs, urlsplit

from vmss_terminate.errors import AzureError

DEFAULT_SUFFIX = "/.default"
IMDS_HOST = "169.254.169.254"
UNKNOWN_RESOURCE_STATUSES = (400, 500)
"""How managed identities answer a resource Entra ID does not know: App Service a vague 500, IMDS
400 invalid_resource (AADSTS500011). Other refusals are about the identity, not the scope."""
CREDENTIAL_HELP = (
    "configure an Azure credential: run `az login`, or set AZURE_CLIENT_ID, AZURE_CLIENT_SECRET and "
    "AZURE_TENANT_ID (service principal), or run where a managed identity is available"
)


@dataclass(frozen=True)
class TokenAnswer:
    """One error answer of a token endpoint: status, its own message ('' when the body is not a
    JSON error) and how many error answers the resource has had since its last success."""

    status: int
    message: str
    attempts: int


def resource_of_scope(scope: str) -> str:
    """The resource a managed identity is asked for (azure-identity drops `/.default`)."""
    return scope[: -len(DEFAULT_SUFFIX)] if scope.endswith(DEFAULT_SUFFIX) else scope


def endpoint_message(body: Any) -> str:
    """The message of a token endpoint's JSON error body: App Service `message`; IMDS, Arc and
    Entra `error: error_description`. Named fields only, so nothing else of a body is repeated."""
    if not isinstance(body, dict):
        return ""
    message, error, description = (body.get(k) for k in ("message", "error", "error_description"))
    if isinstance(message, str) and message.strip():
        text = message
    elif isinstance(description, str) and description.strip():
        text = f"{error}: {description}" if isinstance(error, str) and error else description
    else:
        text = error if isinstance(error, str) else ""
    return " ".join(text.split())[:300]


class TokenAnswers:
    """Per resource, the last error answer to a managed-identity token request (thread-safe); and
    the last local token endpoint that could not be reached or did not answer."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._failed: Dict[str, TokenAnswer] = {}
        self._unreachable: Optional[Tuple[str, str, int]] = None  # (endpoint, what happened, attempts)

    def unreachable(self, url: str, exc: BaseException, timeout: float) -> None:
        """A request to a local token endpoint failed before any answer (the transport's report)."""
        parts = urlsplit(url)
        if not parse_qs(parts.query).get("resource") and "/token" not in parts.path.lower():
            return  # not a token request (the chain's other local calls)
        if parts.hostname == IMDS_HOST and type(exc).__name__ != "ServiceResponseError":
            return  # off Azure the IMDS probe cannot connect: that is "no managed identity here", not a failure
        endpoint = f"{parts.scheme}://{parts.netloc}{parts.path}"  # never the query
        text = f"{type(exc).__name__} {exc}".lower()
        if "timed out" in text or "timeout" in text:
            what = f"accepted the connection but did not answer within {timeout:g} s"
        elif "refused" in text:
            what = "refused the connection (nothing listens there)"
        else:
            what = f"could not be reached ({type(exc).__name__})"
        with self._lock:
            attempts = self._unreachable[2] + 1 if self._unreachable and self._unreachable[0] == endpoint else 1
            self._unreachable = (endpoint, what, attempts)

    def unreachable_endpoint(self) -> Optional[Tuple[str, str, int]]:
        with self._lock:
            return self._unreachable

    def __call__(self, response: Any) -> None:
        """azure-core `raw_response_hook`: `response` is a PipelineResponse."""
        request, answer = response.http_request, response.http_response
        resource = parse_qs(urlsplit(request.url).query).get("resource")
        if request.method != "GET" or not resource:
            return  # not a managed-identity token request (Entra's are POSTs)
        key = resource[0].rstrip("/")
        if answer.status_code < 400:
            with self._lock:
                self._failed.pop(key, None)
                self._unreachable = None
            return
        try:
            message = endpoint_message(json.loads(answer.text()))
        except Exception:  # not JSON, or not text: the status alone is named
            message = ""
        with self._lock:
            seen = self._failed.get(key)
            self._failed[key] = TokenAnswer(answer.status_code, message, (seen.attempts if seen else 0) + 1)

    def refused(self, scope: str) -> Optional[TokenAnswer]:
        """The last error answer for `scope`'s resource since its last success, if any."""
        with self._lock:
            return self._failed.get(resource_of_scope(scope).rstrip("/"))


class TokenRequestRefused(AzureError):
    """The managed identity's token endpoint refused a token for `scope` (exit 1). The message
    names the scope, the endpoint's status and message, and what to check; never a token."""

    def __init__(self, scope: str, answer: TokenAnswer, attempts: int, cloud: str, cloud_scope: str,
                 action: str = "") -> None:
        self.scope, self.answer, self.attempts = scope, answer, attempts
        self.cloud, self.cloud_scope, self.action = cloud, cloud_scope, action
        said = f' "{answer.message}"' if answer.message else ""
        tries = f" after {attempts} attempts" if attempts > 1 else ""
        head = (f"{action + ': ' if action else ''}the managed identity token endpoint refused a token for scope "
                f"{scope}: HTTP {answer.status}{said}{tries}")
        if answer.status in UNKNOWN_RESOURCE_STATUSES and scope.rstrip("/").lower() != cloud_scope.lower():
            where = (f"a managed identity answers so for a resource Entra ID does not know: check the scope ({{}}; "
                     f"{cloud}'s ARM scope is {cloud_scope})")
            super().__init__(f"{head}; {where.format('Connection(scope=...) or VMSS_TERMINATE_ARM_SCOPE')}",
                             cli_message=f"{head}; {where.format('--arm-scope or VMSS_TERMINATE_ARM_SCOPE')}")
        elif answer.status >= 500:
            super().__init__(f"{head}; the identity endpoint failed on its side: run the command again, and if "
                             "it persists check the managed identity of this host")
        else:  # refused who asked (a wrong identity header, no identity assigned): the configuration
            super().__init__(f"{head}; check the managed identity of this host, or {CREDENTIAL_HELP}")

    def during(self, action: str) -> "TokenRequestRefused":
        """The same refusal, said as the failure of `action` (e.g. "reading scale set rg/web")."""
        return TokenRequestRefused(self.scope, self.answer, self.attempts, self.cloud, self.cloud_scope, action)

    def details(self) -> Dict[str, Any]:
        return {"scope": self.scope, "token_endpoint_status": self.answer.status,
                "token_endpoint_message": self.answer.message, "attempts": self.attempts}


class TokenEndpointUnreachable(AzureError):
    """The managed identity's token endpoint could not be reached or never answered (exit 1),
    named (without its query), with what to check."""

    def __init__(self, endpoint: str, what: str, attempts: int, action: str = "") -> None:
        self.endpoint, self.what, self.attempts, self.action = endpoint, what, attempts, action
        tries = f" ({attempts} attempts)" if attempts > 1 else ""
        super().__init__(f"{action + ': ' if action else ''}the managed identity token endpoint {endpoint} {what}"
                         f"{tries}; check the identity endpoint of this host (IDENTITY_ENDPOINT / MSI_ENDPOINT), "
                         f"or {CREDENTIAL_HELP}")

    def during(self, action: str) -> "TokenEndpointUnreachable":
        return TokenEndpointUnreachable(self.endpoint, self.what, self.attempts, action)


class ExplainedCredential:
    """A TokenCredential around DefaultAzureCredential that raises `TokenRequestRefused` when the
    chain fails for a scope the managed identity's endpoint answered with an error."""

    def __init__(self, credential: Any, answers: TokenAnswers, cloud: str, cloud_scope: str) -> None:
        self.credential, self.answers = credential, answers
        self._cloud, self._cloud_scope = cloud, cloud_scope

    def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        return self._explained(self.credential.get_token, scopes, kwargs)

    def get_token_info(self, *scopes: str, **kwargs: Any) -> Any:
        return self._explained(self.credential.get_token_info, scopes, kwargs)

    def _explained(self, get: Any, scopes: Any, kwargs: Dict[str, Any]) -> Any:
        from azure.core.exceptions import ClientAuthenticationError

        scope = scopes[0] if len(scopes) == 1 else None
        before = self.answers.refused(scope) if scope else None
        try:
            return get(*scopes, **kwargs)
        except ClientAuthenticationError:
            answer = self.answers.refused(scope) if scope else None
            if scope is None or answer is None:
                gone = self.answers.unreachable_endpoint()
                if gone is not None:
                    raise TokenEndpointUnreachable(*gone) from None
                raise
            attempts = answer.attempts - (before.attempts if before else 0)
            raise TokenRequestRefused(scope, answer, attempts, self._cloud, self._cloud_scope) from None

    def close(self) -> None:
        self.credential.close()

    def __enter__(self) -> "ExplainedCredential":
        self.credential.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.credential.__exit__(*exc)
