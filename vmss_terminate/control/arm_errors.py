"""ARM failures as one-line project errors: what Azure answered, never a Python exception name.

`arm_errors(action, resource)` wraps every call into the Azure SDK: a token the managed identity
refused (the scope and the endpoint's answer), a rejected credential, a 404
(naming the first missing level: subscription, resource group or scale set), any other error answer
(`ArmRequestError`, keeping ARM's code and HTTP status for callers), a transport failure (named from
its root cause) and an answer that is not the JSON the SDK expected each become one line.
"""

from __future__ import annotations

import json
import os
import re
from contextlib import contextmanager
from typing import Any, Dict, Iterator, Optional, Tuple, Union

from vmss_terminate.control.token_answers import CREDENTIAL_HELP, TokenEndpointUnreachable, TokenRequestRefused
from vmss_terminate.errors import AzureError, VmssTerminateError

TOKEN_REJECTED_HELP = (
    "the credential issued a token ARM does not accept: expired (clock skew), for another audience (check --cloud "
    "and --arm-scope, or VMSS_TERMINATE_ARM_SCOPE) or another tenant (check the subscription's tenant and the "
    "credential's), or revoked -- then check which identity the credential chain picked"
)


class ArmRequestError(AzureError):
    """ARM answered with an error; `code` (e.g. ResourceNotFound) and `status` kept for callers."""

    def __init__(self, message: str, code: Optional[str] = None, status: Optional[int] = None) -> None:
        super().__init__(message)
        self.code = code
        self.status = status


class CredentialRejected(ArmRequestError):
    """ARM answered 401 to the token sent: every further request with this credential will be
    refused the same way (a fleet rollout stops starting sets on it)."""


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
        if status and str(message).startswith("Operation returned an invalid status"):
            # azure-core's words for an error answer without ARM's error body: say it in ARM's
            reason = getattr(getattr(exc, "response", None), "reason", None) or ""
            return one_line(f"ARM answered HTTP {status}{f' {reason}' if reason else ''} with no error details")
    text = f"{code}: {message}" if code else str(message)
    lro_status = _lro_status(getattr(exc, "response", None))
    if lro_status:
        text += f" (long-running operation {lro_status})"  # the poll itself answered 200
    elif status:
        text += f" (HTTP {status})"
    return one_line(text)


GONE_HELP = ("what ARM answered for is gone (an operation or page link that expired, or a resource deleted "
             "meanwhile): running the command again reads everything afresh; if it repeats, check that the scale "
             "set still exists")
"""The hint for a 410: ARM documents no 410 for scale sets, so say what it can mean and what to do."""


def _lro_status(response: Any) -> Optional[str]:
    body = _json_body(response)
    status = body.get("status") if isinstance(body, dict) else None
    return status if status in ("Failed", "Canceled") else None


def _text(response: Any) -> str:
    try:
        return str(response.text()) if response is not None else ""
    except Exception:  # a body that cannot be read is described as empty
        return ""


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


def one_line(text: str) -> str:
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
    from azure.core.exceptions import (
        ClientAuthenticationError,
        DecodeError,
        HttpResponseError,
        ResourceNotFoundError,
        ServiceRequestError,
        ServiceResponseError,
    )

    try:
        yield
    except (TokenRequestRefused, TokenEndpointUnreachable) as exc:
        if exc.action:  # said already, by an inner arm_errors
            raise
        raise exc.during(action) from None
    except ClientAuthenticationError as exc:
        # CredentialUnavailableError is a subclass; its text lists every credential tried (multi-line).
        if getattr(exc, "status_code", None) in (401, 403):
            # a token was issued and sent: logging in again is not the fix for an audience or tenant mismatch
            raise CredentialRejected(f"{action}: ARM rejected the token: {describe_arm_error(exc)}; {TOKEN_REJECTED_HELP}",
                                     None, getattr(exc, "status_code", None)) from None
        tried = credentials_tried(str(exc))
        raise AzureError(f"{action}: authentication failed, no usable Azure credential"
                         f"{f' (tried: {tried})' if tried else ''}; {CREDENTIAL_HELP}") from None
    except ResourceNotFoundError as exc:
        code = arm_error_code(exc)[0]
        raise ArmRequestError(
            f"{action}: {_not_found(code, resource, subscription)} ({describe_arm_error(exc)})", code, 404
        ) from None
    except DecodeError as exc:  # azure-core could not parse a JSON answer: say what ARM sent instead
        response = getattr(exc, "response", None)
        text = _text(response)
        status = getattr(response, "status_code", None)
        raise AzureError(f"{action}: ARM answered {status or 'with'} {'with ' if status else ''}"
                         f"{describe_json(text=text)} where JSON was expected") from None
    except HttpResponseError as exc:
        status = getattr(exc, "status_code", None)
        hint = (
            "; the identity lacks permission: grant it a role allowing Microsoft.Compute/virtualMachineScaleSets "
            "read/write and manualupgrade (e.g. Virtual Machine Contributor) on the scale set"
            if status == 403
            else f"; {GONE_HELP}" if status == 410 else ""
        )
        raise ArmRequestError(f"{action}: {describe_arm_error(exc)}{hint}", arm_error_code(exc)[0], status) from None
    except ServiceRequestError as exc:
        if "non-TLS" in str(exc):
            raise AzureError(f"{action}: refusing to send a bearer token over plain http (non-loopback URL)") from None
        raise AzureError(f"{action}: {proxy_failure(exc) or transport_failure(exc, 'cannot reach ARM')}") from None
    except ServiceResponseError as exc:
        raise AzureError(f"{action}: {proxy_failure(exc) or transport_failure(exc, 'ARM connection failed')}") from None
    except VmssTerminateError:
        raise
    except OSError as exc:  # e.g. REQUESTS_CA_BUNDLE names a missing file: requests raises a bare OSError
        raise AzureError(f"{action}: {ca_bundle_problem(exc) or one_line(str(exc))[:300]}") from None
    except Exception as exc:  # an SDK/transport surprise (odd body, deserializer) is one line
        raise AzureError(f"{action}: ARM's answer could not be read ({one_line(str(exc))[:200]})") from None


CA_BUNDLE_VARIABLES = ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")
"""Where requests (under the Azure SDK) reads the CA certificates for https, first one set wins."""


def ca_bundle_problem(exc: OSError) -> Optional[str]:
    """requests' "Could not find a suitable TLS CA certificate bundle, invalid path: X" said with
    the variable that named X, and what to do (None when it is not that)."""
    if "CA certificate bundle" not in str(exc):
        return None
    for variable in CA_BUNDLE_VARIABLES:
        path = os.environ.get(variable)
        if path:
            return (f"{variable}={path} names no usable CA certificate bundle (no such file); point "
                    f"{variable} at a PEM file of CA certificates, or unset it")
    return one_line(str(exc))[:300]


def credentials_tried(message: str) -> str:
    """The credential names azure-identity lists in a chain failure ("\tEnvironmentCredential: ...")."""
    return ", ".join(re.findall(r"^\s+(\w+Credential):", message, re.MULTILINE))


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """`exc` and every exception it wraps (causes, contexts, azure-core's inner exception, args)."""
    seen = set()
    stack = [exc]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        stack.extend(item for item in (current.__cause__, current.__context__,
                                       getattr(current, "inner_exception", None), *getattr(current, "args", ()))
                     if isinstance(item, BaseException))


def proxy_failure(exc: BaseException) -> Optional[str]:
    """A proxy that could not carry the request, named with the variable that set it and what went
    wrong (refused, no answer, unknown name, credentials asked), instead of urllib3's nested repr;
    None when the failure was not the proxy's."""
    failed = False
    address: Optional[Tuple[str, int]] = None
    for current in _chain(exc):
        if type(current).__name__ == "ProxyError" or "Unable to connect to proxy" in str(current) \
                or "Tunnel connection failed" in str(current):
            failed = True
        connection = getattr(current, "conn", None)  # urllib3's NewConnectionError: the proxy's socket
        host = getattr(connection, "host", None)
        if address is None and isinstance(host, str):
            address = (host, int(getattr(connection, "port", 0) or 0))
    if not failed:
        return None
    proxy, variable = _proxy_named(address)
    text = " ".join(f"{type(current).__name__} {current}" for current in _chain(exc)).lower()
    if "407" in text:
        reason = "the proxy asked for credentials (HTTP 407 Proxy Authentication Required)"
    elif "refused" in text:
        reason = "connection refused (nothing listens there)"
    elif "timed out" in text or "timeout" in text:
        reason = "the proxy did not answer in time"
    elif "name or service not known" in text or "nameresolution" in text or "getaddrinfo" in text:
        reason = "its host name does not resolve"
    elif "reset" in text:
        reason = "the proxy reset the connection"
    else:
        reason = "the proxy could not carry the request"
    where = f" {proxy}" if proxy else ""
    set_by = f" (set by {variable})" if variable else ""
    fix = f"fix or unset {variable}" if variable else "fix the proxy settings"
    return (f"cannot reach ARM through the proxy{where}{set_by}: {reason}; check that the proxy runs, or {fix} "
            "(NO_PROXY lists hosts reached directly)")


PROXY_VARIABLES = ("https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY")


def _proxy_named(address: Optional[Tuple[str, int]]) -> Tuple[Optional[str], Optional[str]]:
    """(the proxy, credentials left out; the environment variable naming it) for the proxy at
    `address` (host, port), or the only proxy the environment names when the address is unknown."""
    from urllib.parse import urlsplit

    found: Dict[str, str] = {}
    for name in PROXY_VARIABLES:
        value = os.environ.get(name)
        if not value:
            continue
        try:
            parts = urlsplit(value if "://" in value else f"http://{value}")
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            continue
        shown = f"{parts.scheme}://{parts.hostname or ''}:{port}"
        if address is None or ((parts.hostname or "").lower(), port) == (address[0].lower(), address[1]):
            found.setdefault(shown, name)
    if len(found) != 1:
        return (f"{address[0]}:{address[1]}" if address else None), None
    ((shown, name),) = found.items()
    return shown, name


def transport_failure(exc: BaseException, fallback: str) -> str:
    """What went wrong on the wire, named from the root cause (azure-core's class alone conflates a
    reset of an open connection with a refused one)."""
    for current in _chain(exc):
        if isinstance(current, ConnectionResetError) or "Connection reset" in str(current):
            return "the connection to ARM was reset while the request was in progress"
        if isinstance(current, ConnectionRefusedError):
            return f"cannot connect to ARM: connection refused ({one_line(str(exc))[:200]})"
        if isinstance(current, TimeoutError) or "timed out" in str(current).lower():
            return f"ARM did not answer in time ({one_line(str(current))[:200]})"
    return f"{fallback}: {one_line(str(exc))[:300]}"


_MISSING = object()


def describe_json(value: Any = _MISSING, text: Optional[str] = None) -> str:
    """What an answer was, in Azure's terms rather than Python's: "a JSON list", "a JSON string",
    "JSON null", "an empty body", "text that is not JSON ('<html>...')"."""
    if value is _MISSING:
        if not text or not text.strip():
            return "an empty body"
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):
            return f"text that is not JSON ({one_line(text)[:60]!r})"
    if value is None:
        return "JSON null"
    if isinstance(value, bool):
        return f"JSON {str(value).lower()}"
    for kind, name in ((dict, "object"), (list, "list"), (str, "string"), ((int, float), "number")):
        if isinstance(value, kind):
            return f"a JSON {name}"
    return "a JSON value"


def json_object(text: Union[str, bytes], what: str) -> Dict[str, Any]:
    """A JSON object body, or AzureError naming what it was instead: ARM bodies that are empty, not
    JSON or not an object (a string, a list, a number) are one-line failures, never a traceback.
    `text` may be the body's bytes (parsed as they are: no decoded copy of a large page)."""
    try:
        data = json.loads(text) if text and text.strip() else None
    except (ValueError, RecursionError):
        data = None
    if not isinstance(data, dict):
        shown = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
        raise AzureError(f"{what} with {describe_json(text=shown)} where a JSON object was expected")
    return data

