"""A fleet run whose token the managed identity refuses fails naming the scope and the token
endpoint's answer (the credential the product builds, azure-identity's backoff on an injected clock)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import recording_clock

from vmss_terminate.control import Connection
from vmss_terminate.control.pipeline import build_credential
from vmss_terminate.control.token_answers import TokenRequestRefused
from vmss_terminate.fleet import Scope, audit
from vmss_terminate_sim.emulator.arm.app import ArmServers
from vmss_terminate_sim.emulator.arm.token import UNKNOWN_RESOURCE_MESSAGE

from .conftest import PROD, STAGING

WRONG = "https://wrong.example/.default"


def test_audit_with_a_refused_scope_names_it_and_nothing_reaches_arm(arm: ArmServers, monkeypatch: pytest.MonkeyPatch,
                                                                      tmp_path: Path) -> None:
    monkeypatch.setenv("AZURE_CONFIG_DIR", str(tmp_path))  # no az login to fall back on
    with build_credential(clock=recording_clock()) as credential:
        connection = Connection(arm_endpoint=arm.arm_url, scope=WRONG, credential=credential)
        with pytest.raises(TokenRequestRefused) as caught:
            audit(Scope.build(subscriptions=[PROD, STAGING]), connection=connection)
    message = str(caught.value)
    assert f"the managed identity token endpoint refused a token for scope {WRONG}: HTTP 500 " \
           f"\"{UNKNOWN_RESOURCE_MESSAGE}\"" in message
    assert caught.value.exit_code == 1 and "no usable Azure credential" not in message
    assert arm.arm_server.log.all() == []
