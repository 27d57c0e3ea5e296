"""A local managed-identity token endpoint (App Service style), so the real azure-identity
`DefaultAzureCredential` chain runs unchanged against the local ARM emulator.

Why App Service style: `ManagedIdentityCredential` (inside `DefaultAzureCredential`) uses it when
`IDENTITY_ENDPOINT` and `IDENTITY_HEADER` are set -- no code path in the product has to know it is
talking to an emulator. What azure-identity 1.27 (through MSAL) sends and expects:

    GET {IDENTITY_ENDPOINT}?api-version=2019-08-01&resource=https://management.azure.com
        X-IDENTITY-HEADER: {IDENTITY_HEADER}
    200 {"access_token": "...", "expires_on": "<epoch seconds>", "resource": "...", "token_type": "Bearer"}

Tokens are opaque random strings; the ARM emulator accepts only tokens this endpoint issued, for an
ARM audience, not expired. Expiry is on real wall-clock time (the default clock) because the client
computes its refresh time from `time.time()`. The endpoint is plain http on loopback, like the real
App Service endpoint (`http://localhost:PORT/msi/token`).
"""

from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass
from typing import Dict, Optional

from vmss_terminate.clock import SYSTEM_CLOCK, Clock
from vmss_terminate.emulator.server import EmulatorServer, Request, Response

TOKEN_PATH = "/msi/token"
ARM_AUDIENCES = ("https://management.azure.com", "https://management.core.windows.net")


@dataclass(frozen=True)
class IssuedToken:
    resource: str
    expires_on: float


class TokenEndpoint:
    """The app: issues bearer tokens to callers that present the identity header secret."""

    def __init__(self, secret: Optional[str] = None, lifetime: float = 3600.0, clock: Clock = SYSTEM_CLOCK) -> None:
        self.secret = secret or secrets.token_urlsafe(24)
        self.lifetime = lifetime
        self.clock = clock
        self._tokens: Dict[str, IssuedToken] = {}
        self._lock = threading.Lock()

    def issue(self, resource: str = ARM_AUDIENCES[0]) -> str:
        """Mint a token directly (for tests of the ARM emulator that do not go through azure-identity)."""
        token = "emu." + secrets.token_urlsafe(32)
        with self._lock:
            self._tokens[token] = IssuedToken(resource, self.clock.now() + self.lifetime)
        return token

    def revoke_all(self) -> None:
        """Forget every issued token: the ARM emulator answers 401 to them from now on."""
        with self._lock:
            self._tokens.clear()

    def check(self, token: str, audiences: tuple = ARM_AUDIENCES) -> Optional[str]:
        """None if `token` is valid for one of `audiences`, else the ARM error code why not."""
        with self._lock:
            issued = self._tokens.get(token)
        if issued is None:
            return "InvalidAuthenticationToken"
        if issued.expires_on <= self.clock.now():
            return "ExpiredAuthenticationToken"
        if issued.resource.rstrip("/").lower() not in {a.rstrip("/").lower() for a in audiences}:
            return "InvalidAuthenticationTokenAudience"
        return None

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
        token = self.issue(resource)
        with self._lock:
            expires_on = self._tokens[token].expires_on
        return Response.json(200, {
            "access_token": token,
            "expires_on": str(int(expires_on)),
            "resource": resource,
            "token_type": "Bearer",
            "client_id": "00000000-0000-0000-0000-00000000c1d0",
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
