"""A local managed-identity token endpoint (App Service style), so the real azure-identity
`DefaultAzureCredential` chain runs unchanged against the local ARM emulator.

Why App Service style: `ManagedIdentityCredential` (inside `DefaultAzureCredential`) uses it when
`IDENTITY_ENDPOINT` and `IDENTITY_HEADER` are set -- no code path in the product has to know it is
talking to an emulator. What azure-identity 1.27 (through MSAL) sends and expects:

    GET {IDENTITY_ENDPOINT}?api-version=2019-08-01&resource=https://management.azure.com
        X-IDENTITY-HEADER: {IDENTITY_HEADER}
    200 {"access_token": "...", "expires_on": "<epoch seconds>", "resource": "...", "token_type": "Bearer"}

Tokens are JWTs shaped like Entra ID's managed-identity access tokens (header; claims `aud`,
`iss`, `tid`, `oid`, `sub`, `appid`, `iat`, `nbf`, `exp`, `jti`), because real clients read them:
`az login --identity` decodes the token to find its tenant (`tid`). They are signed HS256 with a
key only this endpoint holds (stdlib hmac), so the ARM emulator accepts exactly the tokens it
issued, for an ARM audience, inside `nbf`..`exp` on the injected clock. `revoke_all()` changes
the key. Expiry defaults to real wall-clock time (the system clock) because clients compute their
refresh time from `time.time()`. The endpoint is plain http on loopback, like the real App Service
endpoint (`http://localhost:PORT/msi/token`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import threading
import uuid
from collections import deque
from typing import Any, Deque, Dict, Iterable, Optional, Set, Tuple
from urllib.parse import urlsplit

from vmss_terminate.clock import SYSTEM_CLOCK, Clock
from vmss_terminate_sim.emulator.arm.inventory import DEFAULT_TENANT
from vmss_terminate_sim.emulator.server import EmulatorServer, Request, Response

TOKEN_PATH = "/msi/token"
# The audiences ARM accepts in the cloud the emulator impersonates (AzureCloud): the resource
# manager URL and the classic management URL, each with or without a trailing slash.
ARM_AUDIENCES = ("https://management.azure.com", "https://management.core.windows.net")
# Resources the token endpoint knows besides the emulator's own endpoint: the ARM audiences of the
# clouds azure-identity and az know (a --cloud mistake is then refused by ARM with
# InvalidAuthenticationTokenAudience, the step where a user can see which audience was wrong).
KNOWN_RESOURCES = ARM_AUDIENCES + (
    "https://management.chinacloudapi.cn", "https://management.core.chinacloudapi.cn",
    "https://management.usgovcloudapi.net", "https://management.core.usgovcloudapi.net",
)
# What App Service's identity endpoint answers for a resource Entra ID does not know (it wraps
# AADSTS500011 into a vague 500; MSAL's managed_identity.py notes "wrong resource ends up with a
# vague statusCode=500"; body as quoted in azure-sdk-for-net#44685).
UNKNOWN_RESOURCE_MESSAGE = "An unexpected error occured while fetching the AAD Token."


IDENTITY_CLIENT_ID = "00000000-0000-0000-0000-00000000c1d0"


def normalise_audience(value: str) -> str:
    """An audience as ARM compares it: case-insensitive, with or without a trailing slash."""
    return value.strip().rstrip("/").lower()


def endpoint_aliases(url: str) -> Tuple[str, ...]:
    """The emulator's own endpoint URL as a token audience, under each loopback host name a client
    may have been given (127.0.0.1, localhost)."""
    parts = urlsplit(url)
    port = f":{parts.port}" if parts.port else ""
    hosts = {parts.hostname or ""}
    if hosts & {"127.0.0.1", "localhost"}:
        hosts |= {"127.0.0.1", "localhost"}
    return tuple(sorted(f"{parts.scheme}://{host}{port}" for host in hosts))


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def decode_claims(token: str) -> Dict[str, Any]:
    """The claims of a JWT, unverified (what a client such as az reads); ValueError if not a JWT."""
    parts = token.split(".")
    if len(parts) != 3:
        raise ValueError("not a JWT: expected header.claims.signature")
    try:
        claims = json.loads(_unb64(parts[1]))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"not a JWT: {exc}") from None
    if not isinstance(claims, dict):
        raise ValueError("not a JWT: the claims are not an object")
    return claims


class TokenEndpoint:
    """The app: issues signed bearer tokens to callers that present the identity header secret."""

    def __init__(self, secret: Optional[str] = None, lifetime: float = 3600.0, clock: Clock = SYSTEM_CLOCK,
                 tenant_id: str = DEFAULT_TENANT) -> None:
        self.secret = secret or secrets.token_urlsafe(24)
        self.lifetime = lifetime
        self.clock = clock
        self.tenant_id = tenant_id
        self.object_id = str(uuid.uuid4())  # the managed identity's principal (oid)
        self._key = secrets.token_bytes(32)
        self._lock = threading.Lock()
        self.recently_issued: Deque[str] = deque(maxlen=256)  # tests check tokens never reach output
        # Resources a token is issued for (normalised); others get App Service's 500, as a real
        # managed identity refuses a resource Entra ID does not know.
        self.resources: Set[str] = {normalise_audience(r) for r in KNOWN_RESOURCES}

    def allow_resources(self, resources: Iterable[str]) -> None:
        """Issue tokens for these resources too (the ARM emulator's own URL, once it listens)."""
        with self._lock:
            self.resources |= {normalise_audience(r) for r in resources}

    def knows(self, resource: str) -> bool:
        with self._lock:
            return normalise_audience(resource) in self.resources

    @property
    def issuer(self) -> str:
        return f"https://sts.windows.net/{self.tenant_id}/"

    def issue(self, resource: str = ARM_AUDIENCES[0]) -> str:
        """Mint a token directly (for tests of the ARM emulator that do not go through azure-identity)."""
        now = int(self.clock.now())
        header = {"typ": "JWT", "alg": "HS256", "kid": "vmss-terminate-emulator"}
        claims = {
            "aud": resource, "iss": self.issuer, "iat": now, "nbf": now, "exp": now + int(self.lifetime),
            "tid": self.tenant_id, "oid": self.object_id, "sub": self.object_id, "appid": IDENTITY_CLIENT_ID,
            "idtyp": "app", "ver": "1.0", "jti": secrets.token_urlsafe(12),
        }
        signing_input = _b64(json.dumps(header, separators=(",", ":")).encode()) + "." + \
            _b64(json.dumps(claims, separators=(",", ":")).encode())
        with self._lock:
            token = signing_input + "." + _b64(self._sign(signing_input))
            self.recently_issued.append(token)
        return token

    def _sign(self, signing_input: str) -> bytes:
        return hmac.new(self._key, signing_input.encode("ascii"), hashlib.sha256).digest()

    def revoke_all(self) -> None:
        """Change the signing key: the ARM emulator answers 401 to every token issued so far."""
        with self._lock:
            self._key = secrets.token_bytes(32)

    def check(self, token: str, audiences: Tuple[str, ...] = ARM_AUDIENCES) -> Optional[str]:
        """None if `token` is one we signed, in its validity window, for one of `audiences`; else
        the ARM error code why not."""
        signing_input, _, signature = token.rpartition(".")
        try:
            valid = signing_input.isascii() and hmac.compare_digest(self._signature_of(signing_input),
                                                                    _unb64(signature))
            claims = decode_claims(token) if valid else {}
        except ValueError:  # bad base64 or JSON
            valid = False
        if not valid:
            return "InvalidAuthenticationToken"
        now = self.clock.now()
        if not isinstance(claims.get("exp"), int) or claims["exp"] <= now:
            return "ExpiredAuthenticationToken"
        if not isinstance(claims.get("nbf"), int) or claims["nbf"] > now:
            return "InvalidAuthenticationToken"
        audience = str(claims.get("aud", ""))
        if normalise_audience(audience) not in {normalise_audience(a) for a in audiences}:
            return "InvalidAuthenticationTokenAudience"
        return None

    def _signature_of(self, signing_input: str) -> bytes:
        with self._lock:
            return self._sign(signing_input)

    def handle(self, request: Request) -> Response:
        if request.method != "GET" or request.path.rstrip("/") != TOKEN_PATH:
            return Response.json(404, {"statusCode": 404, "message": "Not found."})
        if request.header("X-IDENTITY-HEADER") != self.secret:
            return Response.json(401, {"statusCode": 401, "message": "X-IDENTITY-HEADER is missing or wrong."})
        if request.param("api-version") != "2019-08-01":
            return Response.json(400, {"statusCode": 400, "message": "api-version must be 2019-08-01."})
        resource = request.param("resource")
        if not resource:
            return Response.json(400, {"statusCode": 400, "message": "resource is required."})
        if not self.knows(resource):
            return Response.json(500, {"statusCode": 500, "message": UNKNOWN_RESOURCE_MESSAGE,
                                       "correlationId": str(uuid.uuid4())})
        token = self.issue(resource)
        return Response.json(200, {
            "access_token": token,
            "expires_on": str(decode_claims(token)["exp"]),
            "resource": resource,
            "token_type": "Bearer",
            "client_id": IDENTITY_CLIENT_ID,
        })


def identity_endpoint(server: EmulatorServer) -> str:
    """The IDENTITY_ENDPOINT URL of a served TokenEndpoint."""
    return server.url + TOKEN_PATH


def credential_env(token_server: EmulatorServer) -> Dict[str, str]:
    """Environment that points `DefaultAzureCredential` (managed identity, App Service style) at
    `token_server`. Set it in the environment of the process that builds the credential."""
    app = token_server.app
    if not isinstance(app, TokenEndpoint):
        raise TypeError("credential_env needs an EmulatorServer serving a TokenEndpoint")
    return {"IDENTITY_ENDPOINT": identity_endpoint(token_server), "IDENTITY_HEADER": app.secret}
