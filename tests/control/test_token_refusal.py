"""A token the managed identity refuses is named: the scope asked for and what the token endpoint
answered (status and message, never a token), exit 1 -- not "no usable Azure credential".

The real DefaultAzureCredential chain (App Service managed identity env) against the emulator's
token endpoint, which refuses an unknown resource the way App Service does (500, "An unexpected
error occured while fetching the AAD Token."). azure-identity retries that 500 (3 retries, backoff
0, 1.6, 3.2 s): its waits run on an injected clock here, and a 500 that passes is still retried.
"""

from __future__ import annotations

import http.server
import json
import threading
from pathlib import Path
from typing import Any, Iterator, List

import pytest
from helpers import recording_clock

from vmss_terminate.control import Connection, status
from vmss_terminate.control.pipeline import build_credential
from vmss_terminate.control.token_answers import TokenRequestRefused, endpoint_message
from vmss_terminate_sim.emulator.arm.app import ArmServers, ArmState
from vmss_terminate_sim.emulator.arm.token import ARM_AUDIENCES, UNKNOWN_RESOURCE_MESSAGE, normalise_audience

from .conftest import RG, SUB, run

WRONG = "https://wrong.example/.default"


@pytest.fixture
def clock() -> Any:
    """A ManualClock recording each wait (`.waits`): azure-identity's backoff passes instantly."""
    return recording_clock()


@pytest.fixture
def credential(clock: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[object]:
    monkeypatch.setenv("AZURE_CONFIG_DIR", str(tmp_path))  # no az login to fall back on
    with build_credential(clock=clock) as built:
        yield built


def _token_requests(arm: ArmServers) -> List[str]:
    return [r.path for r in arm.token_server.log.all()]


def test_a_refused_scope_names_the_scope_and_the_endpoints_answer(arm: ArmServers, state: ArmState,
                                                                  clock: Any, credential: object) -> None:
    state.add_scale_set(SUB, RG, "web", capacity=2)
    connection = Connection(subscription_id=SUB, arm_endpoint=arm.arm_url, scope=WRONG, credential=credential)
    with pytest.raises(TokenRequestRefused) as caught:
        status(RG, "web", connection=connection)
    error = caught.value
    message = str(error)
    assert message.startswith(f"reading scale set {RG}/web: the managed identity token endpoint refused a token "
                              f"for scope {WRONG}: HTTP 500 \"{UNKNOWN_RESOURCE_MESSAGE}\" after 4 attempts;")
    assert "no usable Azure credential" not in message and "\n" not in message
    assert "Connection(scope=...) or VMSS_TERMINATE_ARM_SCOPE" in message
    assert "--arm-scope or VMSS_TERMINATE_ARM_SCOPE" in (error.cli_message or "")
    assert "AzureCloud's ARM scope is https://management.azure.com/.default" in message
    assert error.exit_code == 1
    assert error.details() == {"scope": WRONG, "token_endpoint_status": 500,
                               "token_endpoint_message": UNKNOWN_RESOURCE_MESSAGE, "attempts": 4}
    # azure-identity's own retries, on the injected clock: 4 requests, backoff 0 (not waited), 1.6, 3.2 s
    assert len(_token_requests(arm)) == 4
    assert clock.waits == [pytest.approx(1.6), pytest.approx(3.2)]
    assert arm.arm_server.log.all() == [], "no token, so nothing may reach ARM"


def test_a_transient_500_for_the_clouds_own_scope_is_still_retried(arm: ArmServers, state: ArmState,
                                                                   clock: Any, credential: object) -> None:
    """Real Azure: a managed identity's 500 may be a blip of its token service. azure-identity's
    retry is kept: the endpoint refuses the ARM audience until the first backoff, then issues."""
    state.add_scale_set(SUB, RG, "web", capacity=2)
    audiences = {normalise_audience(a) for a in ARM_AUDIENCES}
    arm.tokens.resources -= audiences
    recorded_sleep = clock.sleep

    def recover(seconds: float) -> None:
        arm.tokens.allow_resources(audiences)
        recorded_sleep(seconds)

    clock.sleep = recover
    try:
        result = status(RG, "web", connection=Connection(subscription_id=SUB, arm_endpoint=arm.arm_url,
                                                         credential=credential))
    finally:
        arm.tokens.allow_resources(audiences)
    assert result.to_dict()["name"] == "web"
    assert len(_token_requests(arm)) == 3  # refused, refused at once (no backoff), issued after 1.6 s
    assert clock.waits == [pytest.approx(1.6)]


def test_the_clouds_own_scope_refused_says_the_endpoint_failed(arm: ArmServers, state: ArmState,
                                                                credential: object) -> None:
    """The default scope cannot be the mistake: the message says to run again / check the identity,
    not to change a scope the user never set."""
    audiences = {normalise_audience(a) for a in ARM_AUDIENCES}
    arm.tokens.resources -= audiences
    try:
        with pytest.raises(TokenRequestRefused) as caught:
            status(RG, "web", connection=Connection(subscription_id=SUB, arm_endpoint=arm.arm_url,
                                                    credential=credential))
    finally:
        arm.tokens.allow_resources(audiences)
    message = str(caught.value)
    assert "for scope https://management.azure.com/.default: HTTP 500" in message
    assert "the identity endpoint failed on its side: run the command again" in message
    assert "--arm-scope" not in message and caught.value.cli_message is None


def test_a_refused_identity_header_names_the_answer_and_what_to_configure(arm: ArmServers, state: ArmState,
                                                                         monkeypatch: pytest.MonkeyPatch,
                                                                         tmp_path: Path) -> None:
    """401 is about the identity, not the scope: the hint is the credential help (not retried)."""
    monkeypatch.setenv("AZURE_CONFIG_DIR", str(tmp_path))
    monkeypatch.setenv("IDENTITY_HEADER", "wrong-secret")
    with build_credential() as built:  # the App Service credential reads IDENTITY_HEADER when built
        with pytest.raises(TokenRequestRefused) as caught:
            status(RG, "web", connection=Connection(subscription_id=SUB, arm_endpoint=arm.arm_url, credential=built))
    message = str(caught.value)
    assert "scope https://management.azure.com/.default: HTTP 401 \"X-IDENTITY-HEADER is missing or wrong.\";" \
        in message
    assert "check the managed identity of this host, or configure an Azure credential: run `az login`" in message
    assert "wrong-secret" not in message and len(_token_requests(arm)) == 1


class _ImdsRefusingTheResource(http.server.BaseHTTPRequestHandler):
    """Azure IMDS's identity endpoint as it answers a resource Entra ID does not know (the IMDS
    emulator serves instance metadata, not identity tokens)."""

    seen: List[str] = []
    BODY = {"error": "invalid_resource", "error_description": "AADSTS500011: The resource principal named "
            "https://wrong.example was not found in the tenant."}

    def do_GET(self) -> None:
        self.seen.append(self.path)
        body = json.dumps(self.BODY).encode()
        self.send_response(400)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_imds_refusing_the_resource_is_named_too(arm: ArmServers, clock: Any, monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Path) -> None:
    """On a VM the managed identity is IMDS (azure-identity's own retry policy; 400 is not retried):
    its `error: error_description` is the message."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _ImdsRefusingTheResource)
    _ImdsRefusingTheResource.seen = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    for name in ("IDENTITY_ENDPOINT", "IDENTITY_HEADER"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AZURE_POD_IDENTITY_AUTHORITY_HOST", f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.setenv("AZURE_CONFIG_DIR", str(tmp_path))
    try:
        with build_credential(clock=clock) as built:
            with pytest.raises(TokenRequestRefused) as caught:
                status(RG, "web", connection=Connection(subscription_id=SUB, arm_endpoint=arm.arm_url, scope=WRONG,
                                                        credential=built))
    finally:
        server.shutdown()
        server.server_close()
    assert f"scope {WRONG}: HTTP 400 \"invalid_resource: AADSTS500011: The resource principal named " \
           "https://wrong.example was not found in the tenant.\"; a managed identity answers so for a resource " \
           "Entra ID does not know" in str(caught.value)
    assert _ImdsRefusingTheResource.seen == ["/metadata/identity/oauth2/token?api-version=2018-02-01"
                                             "&resource=https://wrong.example"]
    assert arm.arm_server.log.all() == []


@pytest.mark.slow  # the CLI builds its own credential: azure-identity's 4.8 real seconds of backoff
def test_cli_wrong_arm_scope_is_one_line_naming_the_scope_and_the_answer(arm: ArmServers, state: ArmState,
                                                                         monkeypatch: pytest.MonkeyPatch,
                                                                         tmp_path: Path) -> None:
    monkeypatch.setenv("AZURE_CONFIG_DIR", str(tmp_path))
    state.add_scale_set(SUB, RG, "web", capacity=2)
    result = run("status", "-g", RG, "-n", "web", "--arm-endpoint", arm.arm_url, "--arm-scope", WRONG, "-o", "json")
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()  # the error line, then the -o json error object
    assert len(lines) == 2 and "Traceback" not in result.output, result.stderr
    assert lines[0] == (f"error: reading scale set {RG}/web: the managed identity token endpoint refused a token for "
                        f"scope {WRONG}: HTTP 500 \"{UNKNOWN_RESOURCE_MESSAGE}\" after 4 attempts; a managed identity "
                        "answers so for a resource Entra ID does not know: check the scope (--arm-scope or "
                        "VMSS_TERMINATE_ARM_SCOPE; AzureCloud's ARM scope is https://management.azure.com/.default)")
    error = json.loads(lines[1])["error"]
    assert error["exit_code"] == 1 and error["scope"] == WRONG and error["token_endpoint_status"] == 500
    assert not arm.tokens.recently_issued, "a token was issued"


@pytest.mark.parametrize("body, said", [
    ({"statusCode": 500, "message": UNKNOWN_RESOURCE_MESSAGE, "correlationId": "c"}, UNKNOWN_RESOURCE_MESSAGE),
    ({"error": "invalid_resource", "error_description": "AADSTS500011: The resource principal named "
      "https://wrong.example was not found."},
     "invalid_resource: AADSTS500011: The resource principal named https://wrong.example was not found."),
    ({"error": "invalid_request"}, "invalid_request"),
    ({"access_token": "eyJ.secret.sig"}, ""),
    (["not", "an", "object"], ""),
])
def test_the_endpoints_message_is_read_from_named_fields_only(body: Any, said: str) -> None:
    """App Service says `message`; IMDS, Arc and Entra `error` / `error_description`; nothing else
    of a body (a token least of all) is repeated."""
    assert endpoint_message(body) == said
